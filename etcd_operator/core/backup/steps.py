"""What one pass over an EtcdBackup can do, and what came of it (the shared Outcome,
etcd_operator/core/outcome.py, and the backup's own kinds of it). Pure data."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.backup.backoff import DEFAULT_BACKOFF_LIMIT
from etcd_operator.core.backup.continuous import ChainBreak, ChainStart, SegmentsWritten, StreamView
from etcd_operator.core.backup.object_lock import LockedBackup
from etcd_operator.core.outcome import NOTHING_DONE as NOTHING_DONE
from etcd_operator.core.outcome import Event as Event
from etcd_operator.core.outcome import Outcome as Outcome


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    message: str = ""  # for people: logs and condition messages

    @property
    def kind(self) -> str:
        return type(self).__name__


@dataclasses.dataclass(frozen=True, kw_only=True)
class Idle(Step):
    """A one-shot backup that finished: nothing to do until its spec changes, or until a
    verification retry is due (`recheck_at`)."""

    recheck_at: datetime.datetime | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class WaitForSlot(Step):
    next_slot: datetime.datetime
    recheck_at: datetime.datetime | None = None  # a verification retry due before the slot


@dataclasses.dataclass(frozen=True, kw_only=True)
class Suspend(Step):
    """spec.suspend: start nothing, not even an interrupted slot."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefuseSchedule(Step):
    """A schedule the operator does not run (see schedule.problem); nothing runs."""

    reason: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class WaitForPrerequisite(Step):
    """A run is due but cannot start yet: its cluster does not exist or has not served yet,
    or a Secret it reads does not exist (prerequisites.WAIT_REASONS). Phase Pending; looked
    at again every few seconds."""

    reason: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefuseCredentials(Step):
    """storage.s3 names no credentials Secret and the install does not allow ambient
    credentials in this namespace (storage_policy.py): nothing runs, nothing is verified."""

    reason: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class WaitForRetry(Step):
    """The last attempt of `slot` failed for a cause that may pass; it is tried again at
    `retry_at`, unless the next cron slot (`next_slot`) comes first and replaces it."""

    slot: str
    retry_at: datetime.datetime
    next_slot: datetime.datetime | None = None
    recheck_at: datetime.datetime | None = None  # a verification retry due before then


@dataclasses.dataclass(frozen=True, kw_only=True)
class StartSlot(Step):
    """Record the slot in status before anything is uploaded, so that a restarted operator
    finishes this slot under the same key instead of starting another."""

    slot: str
    slot_time: datetime.datetime | None  # the cron slot; None for a one-shot backup
    next_slot: datetime.datetime | None  # the cron slot after it
    one_shot: bool
    base_for: str | None = None  # a continuous backup waits for this snapshot: why (status.py)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetrySlot(Step):
    """Record in status that attempt `attempt` of a slot that failed starts now, under the
    slot's own name (so it cannot make a second backup), before it runs."""

    slot: str
    attempt: int
    one_shot: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunBackup(Step):
    """Take and upload the snapshot of a slot already recorded in status. A failure that may
    pass is retried while `attempt` <= `backoff_limit` (backup/backoff.py). Before anything
    else the run aborts `pending_uploads` ({key, uploadId}: uploads status recorded and not
    known finished) by their exact key and ID; retention orders this backup's lineages by
    `cluster_id_history`."""

    slot: str
    one_shot: bool
    attempt: int = 1
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    pending_uploads: tuple[Mapping[str, str], ...] = ()
    cluster_id_history: tuple[str, ...] = ()
    continuous_chain: str | None = None  # the chain being written: retention keeps its segments


@dataclasses.dataclass(frozen=True, kw_only=True)
class StartVerification(Step):
    """Record in status that an attempt at verifying `key` starts now (attempt number and
    start time), before its scratch pod exists; the start timeout counts from here."""

    key: str
    attempt: int
    slot_time: datetime.datetime | None = None  # the verification schedule's slot, if it has one


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateScratchPod(Step):
    """Create the scratch pod of the attempt recorded in status (no pod of that name exists)."""

    key: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeleteStrayScratchPod(Step):
    """A pod of this backup under the scratch pod's name whose uid is not the recorded one:
    never trusted, deleted by its uid."""

    key: str
    pod_name: str
    pod_uid: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class WaitForScratchPod(Step):
    """The recorded scratch pod has not finished its check yet; look again soon."""

    key: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinishVerification(Step):
    """End the attempt: the verdict the recorded pod gave (its check's exit code, or its
    snapshot refused), or none (timeout, pod failed or gone). Marks the manifest with a
    verdict and deletes the recorded pod by its uid. `complete`: the pod compared (a
    verdict, or an inconclusive comparison, never retried); otherwise retried."""

    key: str
    pod_name: str | None
    pod_uid: str | None
    verified: bool | None
    reason: str
    complete: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class StartStream(Step):
    """Run this backup's writer on chain `start` (stopping a writer of another chain first):
    it resumes after the chain's last segment in the store, or starts after its base."""

    start: ChainStart


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stream(Step):
    """The writer runs its chain: report what it uploaded since the last pass."""

    chain: str
    next_slot: datetime.datetime | None = None  # the schedule's next full snapshot, if any


@dataclasses.dataclass(frozen=True, kw_only=True)
class MarkChainBroken(Step):
    """The writer could not resume its chain: record the break (a full snapshot is then
    taken at once, and a new chain starts from it); the writer has already stopped."""

    chain_break: ChainBreak


@dataclasses.dataclass(frozen=True, kw_only=True)
class StopStream(Step):
    """A writer runs that should not (the backup is deleted, suspended, refused, or no
    longer continuous): stop it. `reason` is the Continuous condition's."""

    reason: str


STREAM_STEPS: tuple[type[Step], ...] = (StartStream, Stream, MarkChainBroken, StopStream)
VERIFICATION_STEPS: tuple[type[Step], ...] = (
    StartVerification,
    CreateScratchPod,
    DeleteStrayScratchPod,
    WaitForScratchPod,
    FinishVerification,
)
ALL_STEPS: tuple[type[Step], ...] = (
    Idle,
    WaitForSlot,
    Suspend,
    RefuseSchedule,
    RefuseCredentials,
    WaitForPrerequisite,
    WaitForRetry,
    StartSlot,
    RetrySlot,
    RunBackup,
    *VERIFICATION_STEPS,
    *STREAM_STEPS,
)


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
    locked: tuple[LockedBackup, ...] = ()  # expired backups S3 Object Lock keeps


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunFailed(RunOutcome):
    """`transient`: the cause may pass (failure.as_failure), so the slot may be retried;
    anything else ends the slot at once."""

    reason: str
    message: str
    transient: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunNotStarted(Outcome):
    """The executor's live fence refused the run (backup/fence.py): nothing started, so no
    attempt is spent; the next pass observes why."""

    done: bool = False
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScratchPodCreated(Outcome):
    pod_name: str
    pod_uid: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerificationDone(Outcome):
    """`verified`: True, False (the backup differs from its source: corrupt), or None (no
    verdict). Without a verdict, `complete` says whether the scratch member was compared
    (inconclusive, e.g. the source hash is missing: retrying cannot change it) or the attempt
    could not compare at all (incomplete: retried with backoff)."""

    key: str
    verified: bool | None
    reason: str
    message: str
    at: str
    complete: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class StreamReport(Outcome):
    """The writer as this pass left it (None: none runs), and what it uploaded since the
    last report."""

    view: StreamView | None
    written: SegmentsWritten = SegmentsWritten()
