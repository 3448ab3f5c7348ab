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
class ScheduleSpec:
    schedule: str | None  # None: a one-shot backup
    suspend: bool = False

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> "ScheduleSpec":
        return cls(spec.get("schedule") or None, bool(spec.get("suspend")))


@dataclasses.dataclass(frozen=True)
class RunState:
    phase: str | None = None
    slot_in_progress: str | None = None   # recorded before its run started, cleared when it ends
    last_slot: datetime.datetime | None = None  # the cron slot last started
    observed_generation: int | None = None

    @classmethod
    def from_dict(cls, status: Mapping[str, Any]) -> "RunState":
        return cls(
            phase=status.get("phase"),
            slot_in_progress=(status.get("progress") or {}).get("slot"),
            last_slot=_utc(status.get("lastScheduleTime")),
            observed_generation=status.get("observedGeneration"),
        )


@dataclasses.dataclass(frozen=True)
class Observed:
    created: datetime.datetime
    generation: int | None

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> "Observed":
        return cls(_utc(meta["creationTimestamp"]), meta.get("generation"))
