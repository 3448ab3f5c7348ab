"""What one pass over an EtcdBackup can do, and what came of it. Pure data."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    message: str = ""  # for people: logs and condition messages

    @property
    def kind(self) -> str:
        return type(self).__name__


@dataclasses.dataclass(frozen=True, kw_only=True)
class Idle(Step):
    """A one-shot backup that finished: nothing to do until its spec changes."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class WaitForSlot(Step):
    next_slot: datetime.datetime


@dataclasses.dataclass(frozen=True, kw_only=True)
class Suspend(Step):
    """spec.suspend: start nothing, not even an interrupted slot."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefuseSchedule(Step):
    """A schedule the operator does not run (see schedule.problem); nothing runs."""

    reason: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class StartSlot(Step):
    """Record the slot in status before anything is uploaded, so that a restarted operator
    finishes this slot under the same key instead of starting another."""

    slot: str
    slot_time: datetime.datetime | None  # the cron slot; None for a one-shot backup
    next_slot: datetime.datetime | None  # the cron slot after it
    one_shot: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunBackup(Step):
    """Take and upload the snapshot of a slot already recorded in status."""

    slot: str
    one_shot: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyBackup(Step):
    """Restore the backup at `key` into a scratch member and compare it with the source."""

    key: str
    slot_time: datetime.datetime | None = None  # the verification schedule's slot, if it has one


ALL_STEPS: tuple[type[Step], ...] = (Idle, WaitForSlot, Suspend, RefuseSchedule, StartSlot, RunBackup,
                                     VerifyBackup)

Event = tuple[str, str, str]  # (type, reason, message)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outcome:
    """What carrying out a step did. Events are posted after the status is written."""

    events: tuple[Event, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOutcome(Outcome):
    """How a run ended. `pending_uploads` ({key, uploadId}) are multipart uploads not known
    to be finished or aborted; status keeps them, and the next run aborts them by key."""

    pending_uploads: tuple[Mapping[str, str], ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSucceeded(RunOutcome):
    record: Mapping[str, Any]  # the backup's entry for status.lastBackup / recentBackups
    completed_at: str
    deleted_keys: tuple[str, ...] = ()  # snapshots retention removed


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunFailed(RunOutcome):
    reason: str
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerificationDone(Outcome):
    """`verified`: True, False (the backup differs from its source: corrupt), or None (no
    verdict: the scratch member could not be compared, e.g. the source hash is missing)."""

    key: str
    verified: bool | None
    reason: str
    message: str
    at: str


NOTHING_DONE = Outcome()
