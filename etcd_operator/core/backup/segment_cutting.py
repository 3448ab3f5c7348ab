"""Turning a watch's events into segments. Pure: the caller gives the clocks.

RevisionGrouper groups events by revision into RevisionRecords and checks that revisions
follow one another with no gap (every revision changes at least one key, so a watch on the
whole keyspace sees each one). A revision is closed once a later one arrives or the
response that carried it was not a fragment: etcd never splits a revision across
responses unless it fragments one.

SegmentCutter collects closed revisions and says when to cut a segment: when the oldest
revision it holds has waited `segment_seconds` (the RPO), or when it holds
`segment_bytes` (the memory bound). A revision is never split between two segments, so a
segment holding one revision larger than `segment_bytes` is cut as it is."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

from etcd_operator.core.backup.segments import KeyChange, RevisionRecord, SegmentBody

# Bytes one record takes in a segment body (segments.encode): its header, then per change.
REVISION_OVERHEAD = 1 + 8 + 8 + 4
CHANGE_OVERHEAD = 1 + 8 + 4 + 4
LEASE_OVERHEAD = 1 + 8 + 8
GONE_LEASE_OVERHEAD = 1 + 8


class LeaseNotLearnt(Exception):
    """A put uses a lease the writer has not recorded: the segment would not replay."""


class RevisionGap(Exception):
    """The watch skipped a revision, or went back: the chain cannot go on."""


def encoded_size(record: RevisionRecord) -> int:
    return REVISION_OVERHEAD + sum(
        CHANGE_OVERHEAD + len(c.key) + (0 if c.value is None else len(c.value)) for c in record.changes
    )


class SeenClock:
    """seen_at within one chain: the writer's wall clock, never earlier than the last stamp
    the chain holds. A writer taking a chain over with a clock behind the previous writer's
    stamps with that last stamp until its clock catches up, so stamps follow revision order
    across writers (a restore to a time goes by them: core/backup/chain.py)."""

    def __init__(self, floor: float = float("-inf")):
        self.floor = floor
        self.behind = 0.0  # the most seconds the clock was found behind the chain's stamps

    def stamp(self, now: float) -> float:
        self.behind = max(self.behind, self.floor - now)
        self.floor = max(self.floor, now)
        return self.floor


class RevisionGrouper:
    """Expects `next_revision` first, then every revision after it in order."""

    def __init__(self, next_revision: int):
        self.next_revision = next_revision  # the first revision not closed yet
        self._open: list[KeyChange] = []
        self._open_revision: int | None = None
        self._open_seen_at = 0.0

    @property
    def holds(self) -> bool:
        """A revision is open (its events may go on in the next response)."""
        return self._open_revision is not None

    def drop_open(self) -> None:
        """Forgets an open revision's events (the watch is started again from it)."""
        self._open, self._open_revision = [], None

    def feed(self, events: Iterable[tuple[int, KeyChange]], complete: bool, seen_at: float) -> list[RevisionRecord]:
        """The revisions `events` (revision, change), one response's worth, closed. `complete`:
        the response was not a fragment, so its last revision is whole. `seen_at`: when the
        response arrived, on the writer's clock (an open revision keeps its first time)."""
        closed: list[RevisionRecord] = []
        for revision, change in events:
            if revision != self._open_revision:
                expected = self.next_revision if self._open_revision is None else self._open_revision + 1
                if revision != expected:
                    raise RevisionGap(f"the watch gave revision {revision} where {expected} was due")
                if self._open_revision is not None:
                    closed.append(self._close())
                self._open_revision, self._open_seen_at = revision, seen_at
            self._open.append(change)
        if complete and self._open_revision is not None:
            closed.append(self._close())
        return closed

    def _close(self) -> RevisionRecord:
        assert self._open_revision is not None
        record = RevisionRecord(self._open_revision, self._open_seen_at, tuple(self._open))
        self.next_revision = self._open_revision + 1
        self._open, self._open_revision = [], None
        return record


@dataclasses.dataclass(frozen=True)
class Cut:
    """A segment's content, ready to encode."""

    body: SegmentBody
    size: int  # its encoded size, bar the magic and the end record


class SegmentCutter:
    def __init__(self, segment_seconds: float, segment_bytes: int):
        self.segment_seconds = segment_seconds
        self.segment_bytes = segment_bytes
        self._records: list[RevisionRecord] = []
        self._size = 0
        self._opened_at: float | None = None  # monotonic: when the oldest held revision came in

    @property
    def size(self) -> int:
        return self._size

    @property
    def empty(self) -> bool:
        return not self._records

    def add(self, record: RevisionRecord, now: float) -> None:
        """`now` is the monotonic clock."""
        if self._opened_at is None:
            self._opened_at = now
        self._records.append(record)
        self._size += encoded_size(record)

    def full(self) -> bool:
        return self._size >= self.segment_bytes

    def due(self, now: float) -> bool:
        return bool(self._records) and (self.full() or self.seconds_left(now) <= 0)

    def seconds_left(self, now: float) -> float:
        """Until the held revisions must be cut; infinite when none is held."""
        if self._opened_at is None:
            return math.inf
        return self._opened_at + self.segment_seconds - now

    def take(self, known_leases: Mapping[int, int | None], reported_leases: set[int]) -> Cut:
        """Everything held, as one segment. Each lease its puts use that is not yet in
        `reported_leases` goes with it, and is added there: its granted TTL from
        `known_leases` (ID: TTL), or as gone where that says None. A lease missing from
        `known_leases` is never left out: LeaseNotLearnt, and nothing is taken."""
        missing = sorted(self.leases_used() - known_leases.keys())
        if missing:
            raise LeaseNotLearnt(f"lease {missing[0]:x} used by a put was not learnt; the segment is not cut")
        leases: list[tuple[int, int]] = []
        gone: list[int] = []
        for record in self._records:
            for change in record.changes:
                lease = change.lease
                if not lease or change.deleted or lease in reported_leases:
                    continue
                reported_leases.add(lease)
                ttl = known_leases[lease]
                if ttl is None:
                    gone.append(lease)
                else:
                    leases.append((lease, ttl))
        size = self._size + LEASE_OVERHEAD * len(leases) + GONE_LEASE_OVERHEAD * len(gone)
        cut = Cut(SegmentBody(tuple(self._records), tuple(leases), tuple(gone)), size)
        self._records, self._size, self._opened_at = [], 0, None
        return cut

    def leases_used(self) -> set[int]:
        return {c.lease for r in self._records for c in r.changes if c.lease and c.value is not None}


class WatchProgress:
    """Tells a silent watch from a quiet cluster: the cluster's revision, read linearizably,
    against the last revision the watch gave. A revision the cluster holds that the watch has
    not given within `stall_seconds` means the watch stalled (its member was cut off from
    quorum, say), unless the writer itself holds the watch back (an upload it waits for)."""

    def __init__(self, stall_seconds: float):
        self.stall_seconds = stall_seconds
        self._awaited: tuple[int, float] | None = None  # a revision the watch owes, and since when

    def observe(self, cluster_revision: int, given: int, now: float, holding_back: bool = False) -> str | None:
        """Why the watch counts as stalled; None while it keeps up."""
        if given >= cluster_revision or holding_back:
            self._awaited = None
            return None
        if self._awaited is None or given >= self._awaited[0]:
            self._awaited = (cluster_revision, now)
            return None
        awaited, since = self._awaited
        if now - since > self.stall_seconds:
            return f"the watch has not given revision {awaited} in {now - since:.0f} s; it gave up to {given}"
        return None
