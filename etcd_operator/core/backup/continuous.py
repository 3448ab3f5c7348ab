"""The continuous backup's spec (spec.continuous), what status recorded of its chain
(status.continuous), and what the controller's writer reports of it. Pure.

A chain starts at a full snapshot (its base) and runs for as long as the writer can resume
its watch where it left off. It ends in two ways:
- handed over: a newer full snapshot starts a new chain, once the running one has reached
  that snapshot's revision, so every revision stays reachable from some snapshot;
- broken: the watch cannot resume (the revision was compacted away, the cluster ID changed,
  a revision is missing) or a put's lease could not be learnt. A full snapshot is taken at
  once and a new chain starts from it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.timefmt import format_precise_time, parse_time

DEFAULT_SEGMENT_SECONDS = 1
DEFAULT_SEGMENT_BYTES = 2 << 20
DEFAULT_FULL_SNAPSHOT_AFTER_EVENTS = 250_000  # a point-in-time replay of ~1,500 revisions/s (make bench): under 3 min
DEFAULT_FULL_SNAPSHOT_AFTER_BYTES = 1 << 30
# A writer holds this many segments' worth of the memory budget: one filling, one uploading.
SEGMENTS_HELD = 2

# Why a chain broke (status.continuous.lastBreak.reason, the Warning event's message).
COMPACTED = "RevisionCompacted"
CLUSTER_ID_CHANGED = "ClusterIDChanged"
REVISION_GAP = "RevisionGap"
REVISION_WENT_BACK = "RevisionWentBack"
LEASE_UNKNOWN = "LeaseUnknown"  # a put's lease could not be learnt (segments.py, leases)
BREAK_REASONS = frozenset({COMPACTED, CLUSTER_ID_CHANGED, REVISION_GAP, REVISION_WENT_BACK, LEASE_UNKNOWN})


@dataclasses.dataclass(frozen=True)
class ContinuousSpec:
    segment_seconds: float = DEFAULT_SEGMENT_SECONDS
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    full_snapshot_after_events: int = DEFAULT_FULL_SNAPSHOT_AFTER_EVENTS
    full_snapshot_after_bytes: int = DEFAULT_FULL_SNAPSHOT_AFTER_BYTES

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> ContinuousSpec | None:
        """None when spec.continuous is absent or not enabled."""
        continuous = spec.get("continuous") or {}
        if not continuous.get("enabled"):
            return None
        after = continuous.get("fullSnapshotAfter") or {}
        return cls(
            float(continuous.get("segmentSeconds") or DEFAULT_SEGMENT_SECONDS),
            int(continuous.get("segmentBytes") or DEFAULT_SEGMENT_BYTES),
            int(after.get("events") or DEFAULT_FULL_SNAPSHOT_AFTER_EVENTS),
            int(after.get("bytes") or DEFAULT_FULL_SNAPSHOT_AFTER_BYTES),
        )

    @property
    def budget_bytes(self) -> int:
        """What one writer holds of the operator-wide memory budget while it runs."""
        return SEGMENTS_HELD * self.segment_bytes


@dataclasses.dataclass(frozen=True)
class ChainStart:
    """Where a chain starts: its base snapshot, of one cluster."""

    chain: str
    cluster_id: str
    base_key: str
    base_revision: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "chain": self.chain,
            "clusterID": self.cluster_id,
            "baseKey": self.base_key,
            "baseRevision": self.base_revision,
        }


@dataclasses.dataclass(frozen=True)
class ChainBreak:
    """Why the writer could not resume its watch where it left off."""

    chain: str
    reason: str  # one of BREAK_REASONS
    message: str
    last_revision: int  # the last revision the chain holds


@dataclasses.dataclass(frozen=True)
class AuthRead:
    """status.continuous.authRead: the newest etcd auth revision a writer of this backup read
    from cluster `cluster_id` (at a segment cut, and while caught up at most every
    AUTH_HEARTBEAT_SECONDS). Auth changes are in no watch: kept in status so that an operator
    restart (or a standby taking over) compares the next base with it at once, not only after
    its writer's first cut. It never goes back for one cluster. `time`: when the newest read
    of that revision was sent (the writer's clock), so the auth state was that revision's at
    that time too; None: recorded by an operator before this field."""

    cluster_id: str
    auth_revision: int
    time: float | None = None

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {"clusterID": self.cluster_id, "authRevision": self.auth_revision}
        if self.time is not None:
            record["time"] = format_precise_time(self.time)
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any] | None) -> AuthRead | None:
        record = record or {}
        if not record.get("clusterID") or record.get("authRevision") is None:
            return None
        try:
            time = parse_time(record.get("time"))
        except ValueError:
            time = None
        return cls(str(record["clusterID"]), int(record["authRevision"]), time)

    def newest(self, cluster_id: str, auth_revision: int | None, time: float | None = None) -> AuthRead | None:
        """This reading, with a writer's `auth_revision` of `cluster_id` read at `time` taken in
        (None: not read). A reading of another cluster (a restore gave it a new ID) replaces
        it; a later read of the same revision moves its time on."""
        if auth_revision is None or not cluster_id:
            return self
        if cluster_id != self.cluster_id or auth_revision > self.auth_revision:
            return AuthRead(cluster_id, auth_revision, time)
        if auth_revision == self.auth_revision and time is not None and (self.time is None or time > self.time):
            return AuthRead(cluster_id, auth_revision, time)
        return self

    def of(self, cluster_id: str) -> int | None:
        """The reading, when it is of `cluster_id`; auth revisions of two clusters do not compare."""
        return self.auth_revision if cluster_id == self.cluster_id else None


@dataclasses.dataclass(frozen=True)
class ContinuousRecord:
    """status.continuous as the last pass wrote it."""

    current: ChainStart | None = None  # the chain being written; None: none yet, or it broke
    last_revision: int = 0
    needs_base: bool = False  # the chain broke: a new full snapshot comes before a new chain
    segments_since_full: int = 0
    events_since_full: int = 0
    bytes_since_full: int = 0
    auth_read: AuthRead | None = None

    @classmethod
    def from_dict(cls, record: Mapping[str, Any] | None) -> ContinuousRecord:
        record = record or {}
        current = None
        if record.get("chain") and record.get("baseKey"):
            current = ChainStart(
                record["chain"], record.get("clusterID") or "", record["baseKey"], int(record.get("baseRevision") or 0)
            )
        return cls(
            current=current,
            last_revision=int(record.get("lastRevision") or 0),
            needs_base=bool(record.get("needsFullSnapshot")),
            segments_since_full=int(record.get("segmentsSinceFullSnapshot") or 0),
            events_since_full=int(record.get("eventsSinceFullSnapshot") or 0),
            bytes_since_full=int(record.get("bytesSinceFullSnapshot") or 0),
            auth_read=AuthRead.from_dict(record.get("authRead")),
        )


@dataclasses.dataclass(frozen=True)
class SegmentsWritten:
    """What the writer uploaded since the controller last asked."""

    segments: int = 0
    events: int = 0
    bytes: int = 0


@dataclasses.dataclass(frozen=True)
class StreamView:
    """The writer of one EtcdBackup as the controller's registry sees it in this pass."""

    chain: str
    last_revision: int  # the last revision uploaded (the base's, before the first segment)
    broken: ChainBreak | None = None  # the writer stopped: its chain cannot go on
    store_error: str | None = None  # the last upload failed; it is being retried
    cluster_revision: int | None = None  # the newest revision the watch has heard of
    last_segment_at: float | None = None  # seconds since the epoch: when the last segment was uploaded
    waiting: str | None = None  # why it is not watching right now (no member answers), for people
    # (revision, time): a linearizable read sent at that time (the writer's clock) found the
    # cluster at that revision, every revision up to which was uploaded: the chain held all
    # the cluster had then. A restore to a time at or before it may replay to that revision.
    caught_up: tuple[int, float] | None = None
    # Keys of the chain's manifests it passed over on resuming: they do not authenticate under
    # the backup's keys (someone else wrote them), so nothing it resumed from is theirs.
    ignored: tuple[str, ...] = ()
    # etcd's auth revision as last read for a segment of this chain (by this writer, or by the
    # one that cut the last segment it resumed after); None: not read yet. Auth changes are not
    # in the watch: one after the base asks for a new base (planner.py). status.continuous.authRead
    # keeps the newest across writers.
    auth_revision: int | None = None
    auth_read_at: float | None = None  # when the read that last gave `auth_revision` was sent
    cluster_id: str = ""  # the chain's cluster: whose auth revision `auth_revision` is


@dataclasses.dataclass(frozen=True)
class StreamLag:
    """How far a chain is behind its cluster."""

    revisions: int  # revisions the watch heard of that are not uploaded yet
    seconds: float  # 0 when none are; else since the chain last moved on or was last caught up


def stream_lag(view: StreamView, base_time: float | None, now: float) -> StreamLag | None:
    """The writer's lag, or None while it has not heard the cluster's revision yet. While
    behind, the seconds count from the latest of its last uploaded segment, the last read
    that found it caught up, and `base_time` (when the newest full snapshot was taken,
    which holds all the cluster had then)."""
    if view.cluster_revision is None:
        return None
    behind = max(view.cluster_revision - view.last_revision, 0)
    if behind == 0:
        return StreamLag(0, 0.0)
    caught_up_at = view.caught_up[1] if view.caught_up is not None else None
    moments = [t for t in (view.last_segment_at, caught_up_at, base_time) if t is not None]
    return StreamLag(behind, max(now - max(moments), 0.0) if moments else 0.0)
