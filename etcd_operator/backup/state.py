"""What the backup planner reads: the spec's schedule, the run state the operator recorded
in status, and the object's own metadata. Pure."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Mapping

from etcd_operator.timefmt import parse_time

UTC = datetime.timezone.utc


def _utc(text: str | None) -> datetime.datetime | None:
    ts = parse_time(text)
    return None if ts is None else datetime.datetime.fromtimestamp(ts, UTC)


@dataclasses.dataclass(frozen=True)
class VerificationPolicy:
    enabled: bool = False
    every_n: int = 1
    schedule: str | None = None  # set: verify on this schedule instead of every N backups

    @classmethod
    def from_dict(cls, verification: Mapping[str, Any], scheduled: bool) -> "VerificationPolicy":
        return cls(bool(verification.get("enabled", scheduled)), max(int(verification.get("everyN", 1)), 1),
                   verification.get("schedule") or None)


@dataclasses.dataclass(frozen=True)
class ScheduleSpec:
    schedule: str | None  # None: a one-shot backup
    suspend: bool = False
    verification: VerificationPolicy = VerificationPolicy()

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> "ScheduleSpec":
        schedule = spec.get("schedule") or None
        return cls(schedule, bool(spec.get("suspend")),
                   VerificationPolicy.from_dict(spec.get("verification") or {}, scheduled=schedule is not None))


@dataclasses.dataclass(frozen=True)
class RunState:
    phase: str | None = None
    slot_in_progress: str | None = None   # recorded before its run started, cleared when it ends
    last_slot: datetime.datetime | None = None  # the cron slot last started
    observed_generation: int | None = None
    last_backup_key: str | None = None
    last_verification_key: str | None = None      # the backup last verified (whatever the verdict)
    backups_since_verification: int = 0
    last_verification_slot: datetime.datetime | None = None

    @classmethod
    def from_dict(cls, status: Mapping[str, Any]) -> "RunState":
        return cls(
            phase=status.get("phase"),
            slot_in_progress=(status.get("progress") or {}).get("slot"),
            last_slot=_utc(status.get("lastScheduleTime")),
            observed_generation=status.get("observedGeneration"),
            last_backup_key=(status.get("lastBackup") or {}).get("key"),
            last_verification_key=(status.get("lastVerification") or {}).get("key"),
            backups_since_verification=int(status.get("backupsSinceVerification") or 0),
            last_verification_slot=_utc(status.get("lastVerificationSlot")),
        )


@dataclasses.dataclass(frozen=True)
class Observed:
    created: datetime.datetime
    generation: int | None

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> "Observed":
        return cls(_utc(meta["creationTimestamp"]), meta.get("generation"))
