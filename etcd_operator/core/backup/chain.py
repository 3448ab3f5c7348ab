"""Which full snapshot and which segments a point-in-time restore replays. Pure: works on
manifests only.

Segments are grouped by chain and ordered by sequence. A run is a stretch of one chain's
segments with no gap: each starts at the previous one's last revision + 1. Of two segments
under one sequence number (writers that raced), the one that follows its predecessor and
leads furthest is taken (`runs`); a duplicate never blocks a chain, nor another chain. A point is
reachable from a full snapshot S of the same cluster when one run holds every revision
after S up to the point. Of the reachable ways, the one from the newest snapshot replays
least, and is chosen. A snapshot whose verification failed is never a base.

A time target goes by when the backup's watch saw each revision (SeenOrder): the stamps of
one cluster's segments, every chain's, taken in revision order and made monotonic, so a
writer whose clock ran slow never makes a revision look seen before one it follows. A
segment not replayed, whose stamps straddle the time, may have stamped any revision after its
first after the time: none of them is held. The replay cuts the segments it replays by each
revision's own stamp. The restore holds the revisions seen by then and none after; it needs evidence that the
backup saw past the time, else the point is not reachable: the chain may have missed writes
made before the time (its writer stopped, the chain broke, the time is still to come). The
evidence is a revision stamped after the time, the chain holding every revision before it,
or the writer's record that the chain held the cluster's every revision at or after the
time (CaughtUp: a quiet cluster writes no segment)."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.backup.segments import SegmentManifest


@dataclasses.dataclass(frozen=True)
class Target:
    """A revision, a time (seconds since the epoch, as the backup's watch saw revisions
    arrive), or neither: the newest revision backed up."""

    revision: int | None = None
    time: float | None = None

    def describe(self) -> str:
        if self.revision is not None:
            return f"revision {self.revision}"
        if self.time is not None:
            return f"time {self.time:.3f}"
        return "the latest revision"


@dataclasses.dataclass(frozen=True)
class ReplayPlan:
    base: Manifest
    segments: tuple[SegmentManifest, ...]  # in order; replay applies revisions after base.revision
    up_to_revision: int  # the last revision the segments may give (the target, or the run's end)
    until_time: float | None = None  # for a time target: only revisions seen at or before it
    # The segment whose auth revision (read when it was cut) was read at or after the point:
    # the one holding a revision target, or for a time one holding a revision after it. None
    # when no segment was cut after the point (a time the writer's heartbeat vouches for).
    auth_witness: SegmentManifest | None = None

    @property
    def replays(self) -> bool:
        return bool(self.segments)


@dataclasses.dataclass(frozen=True)
class Run:
    chain: str
    cluster_id: str
    segments: tuple[SegmentManifest, ...]

    @property
    def first(self) -> int:
        return self.segments[0].first_revision

    @property
    def last(self) -> int:
        return self.segments[-1].last_revision


class ChainProblem(Exception):
    pass


def follows(segment: SegmentManifest, before: SegmentManifest | None) -> bool:
    """`segment` takes the chain on where `before` (the segment numbered one lower; None
    for the first) left it: its first revision is the next one."""
    if before is None:
        return segment.sequence == 1 and segment.first_revision == segment.base_revision + 1
    return segment.sequence == before.sequence + 1 and segment.first_revision == before.last_revision + 1


def follows_one_of(candidates: Sequence[SegmentManifest], before: Sequence[SegmentManifest]) -> list[SegmentManifest]:
    """The `candidates` (one sequence number) that follow one of `before` (the one lower)."""
    if not before:
        return [c for c in candidates if follows(c, None)]
    return [c for c in candidates if any(follows(c, b) for b in before)]


@dataclasses.dataclass(frozen=True)
class CaughtUp:
    """A writer's record (status.continuous.caughtUp): a linearizable read sent at `time`
    found the cluster at `revision`, which `chain` held. Every revision committed before
    `time` is at or below `revision`."""

    chain: str
    revision: int
    time: float


def runs(segments: Sequence[SegmentManifest]) -> list[Run]:
    """Each chain's segments, cut where a sequence number or a revision is missing. Where one
    chain holds two different segments under one sequence number (two writers raced), the
    one that follows the segment before it and leads furthest is taken, the other left out:
    a duplicate never makes a chain, still less another chain, unusable."""
    by_chain: dict[str, dict[int, list[SegmentManifest]]] = {}
    for segment in segments:
        same_number = by_chain.setdefault(segment.chain, {}).setdefault(segment.sequence, [])
        if segment not in same_number:
            same_number.append(segment)
    found: list[Run] = []
    for chain, numbered in sorted(by_chain.items()):
        reach = _reaches(numbered)
        current: list[SegmentManifest] = []
        for sequence in sorted(numbered):
            candidates = numbered[sequence]
            linked = [c for c in candidates if current and follows(c, current[-1])]
            if not linked and current:
                found.append(Run(chain, current[0].cluster_id, tuple(current)))
                current = []
            current.append(max(linked or candidates, key=lambda c: (reach[_id(c)], follows(c, None), c.last_revision)))
        if current:
            found.append(Run(chain, current[0].cluster_id, tuple(current)))
    return found


def _id(segment: SegmentManifest) -> tuple[int, str]:
    return segment.sequence, segment.key


def _reaches(numbered: dict[int, list[SegmentManifest]]) -> dict[tuple[int, str], int]:
    """Per segment: the last revision of the longest stretch it starts (it and what follows it)."""
    reach: dict[tuple[int, str], int] = {}
    for sequence in sorted(numbered, reverse=True):
        for segment in numbered[sequence]:
            after = [reach[_id(n)] for n in numbered.get(sequence + 1, []) if follows(n, segment)]
            reach[_id(segment)] = max(after, default=segment.last_revision)
    return reach


def _bases(snapshots: Sequence[Manifest], cluster_id: str, low: int, high: int) -> list[Manifest]:
    """Snapshots of `cluster_id` with low <= revision <= high, newest first, usable as a base."""
    usable = [
        s for s in snapshots if s.cluster_id == cluster_id and low <= s.revision <= high and s.verified is not False
    ]
    return sorted(usable, key=lambda s: s.revision, reverse=True)


class SeenOrder:
    """When the backup's watch saw each revision of a cluster, by its segments' manifests:
    revision r counts as seen at the latest stamp (first_seen_at at a segment's first
    revision, last_seen_at at its last) of any revision up to r, in any chain. Monotonic in
    revision by construction, whatever the writers' clocks said."""

    def __init__(self, segments: Sequence[SegmentManifest]):
        points: dict[str, list[tuple[int, float]]] = {}
        self._segments: dict[str, list[SegmentManifest]] = {}
        for m in segments:
            self._segments.setdefault(m.cluster_id, []).append(m)
            found = points.setdefault(m.cluster_id, [])
            found += [(m.first_revision, m.first_seen_at), (m.last_revision, max(m.first_seen_at, m.last_seen_at))]
        self._revisions: dict[str, list[int]] = {}
        self._seen: dict[str, list[float]] = {}
        for cluster, found in points.items():
            found.sort()
            latest, envelope = float("-inf"), []
            for _, stamp in found:
                latest = max(latest, stamp)
                envelope.append(latest)
            self._revisions[cluster] = [revision for revision, _ in found]
            self._seen[cluster] = envelope

    def first_seen_after(self, cluster_id: str, moment: float) -> tuple[int, float] | None:
        """The lowest revision of `cluster_id` seen after `moment` and when (by the latest
        stamp up to it); None when no stamp is after it: nothing shows the backup saw past it."""
        envelope = self._seen.get(cluster_id, [])
        at = bisect.bisect_right(envelope, moment)
        if at == len(envelope):
            return None
        return self._revisions[cluster_id][at], envelope[at]

    def first_maybe_seen_after_inside(
        self, cluster_id: str, moment: float, replayed: Sequence[SegmentManifest]
    ) -> int | None:
        """The lowest revision that a segment not in `replayed` may stamp after `moment` inside
        it: its stamps are known at its ends only, so one stamped at or before the moment at
        its first revision and after it at its last may stamp any revision after the first
        after the moment (another chain's writer, on its own clock). The replay cuts the
        `replayed` segments by each revision's own stamp."""
        inside = [
            m.first_revision + 1
            for m in self._segments.get(cluster_id, [])
            if m.first_seen_at <= moment < m.last_seen_at and m.last_revision > m.first_revision and m not in replayed
        ]
        return min(inside, default=None)


def _time_cutoff(run: Run, moment: float, order: SeenOrder, caught_up: Sequence[CaughtUp]) -> int | None:
    """The last revision a restore to `moment` may hold from `run`, by the evidence that the
    backup saw past it; None without evidence within the run. A revision seen after the
    moment bounds it (the one before is the last), and so does one another segment may have
    stamped after it inside; so does a CaughtUp at or after the moment (what came after its
    revision was committed after it)."""
    bounds = []
    seen_after = order.first_seen_after(run.cluster_id, moment)
    # A segment stamped after the moment at its last revision is a point of the order too:
    # `inside` is only ever found with `seen_after`, and is the tighter bound.
    inside = order.first_maybe_seen_after_inside(run.cluster_id, moment, run.segments)
    after = None if seen_after is None else min(seen_after[0], inside or seen_after[0])
    if after is not None and run.first - 1 <= after - 1 <= run.last:
        bounds.append(after - 1)
    held = [c.revision for c in caught_up if c.chain == run.chain and c.time >= moment]
    bounds += [revision for revision in held if run.first - 1 <= revision <= run.last]
    if after is not None and after - 1 < run.first - 1:
        return None  # the run starts after a revision seen after the moment
    return min(bounds) if bounds else None


def _plan_in_run(
    run: Run, snapshots: Sequence[Manifest], target: Target, order: SeenOrder, caught_up: Sequence[CaughtUp]
) -> ReplayPlan | None:
    if target.time is not None:
        cutoff = _time_cutoff(run, target.time, order, caught_up)
        if cutoff is None:
            return None  # nothing shows the run holds every revision up to the time
        reached = [s for s in run.segments if s.first_revision <= cutoff]
        if not reached:
            return None
        last = reached[-1]
        # Every revision before `last` was seen by the time, by every stamp up to it; a base
        # inside `last` might hold one seen after it.
        bases = _bases(snapshots, run.cluster_id, run.first - 1, last.first_revision - 1)
        up_to, until = min(last.last_revision, cutoff), target.time
    else:
        up_to = run.last if target.revision is None else target.revision
        if not run.first - 1 <= up_to <= run.last:
            return None
        bases = _bases(snapshots, run.cluster_id, run.first - 1, up_to)
        until = None
    if not bases:
        return None
    base = bases[0]
    needed = tuple(s for s in run.segments if s.last_revision > base.revision and s.first_revision <= up_to)
    # A segment holding a revision after a time was cut once that revision was seen, after the time.
    past = up_to + 1 if target.time is not None else up_to
    witness = next((s for s in run.segments if s.last_revision >= past), None)
    return ReplayPlan(base, needed, up_to, until, witness)


def plan_replay(
    target: Target,
    snapshots: Sequence[Manifest],
    segments: Sequence[SegmentManifest],
    caught_up: Sequence[CaughtUp] = (),
) -> ReplayPlan:
    """The way to `target` that replays least. Raises ChainProblem saying why none exists.
    `caught_up`: the writers' records of holding the whole cluster (evidence for a time)."""
    candidates: list[ReplayPlan] = []
    if target.revision is not None:
        exact = [s for s in snapshots if s.revision == target.revision and s.verified is not False]
        candidates += [ReplayPlan(s, (), s.revision) for s in exact]
    found = runs(segments)
    order = SeenOrder(segments)
    for run in found:
        plan = _plan_in_run(run, snapshots, target, order, caught_up)
        if plan is not None:
            candidates.append(plan)
    if target.revision is None and target.time is None and candidates:
        # The latest: the plan that reaches furthest, then the one that replays least.
        return max(candidates, key=lambda p: (p.up_to_revision, p.base.revision))
    if candidates:
        return max(candidates, key=lambda p: (p.base.revision, p.up_to_revision))
    raise ChainProblem(_why_unreachable(target, snapshots, found, order))


def _why_unreachable(target: Target, snapshots: Sequence[Manifest], found: list[Run], order: SeenOrder) -> str:
    if not [s for s in snapshots if s.verified is not False]:
        return "there is no full snapshot to start from"
    if not found:
        return f"no segment of a continuous backup is stored, so {target.describe()} cannot be reached"
    newest = max(run.last for run in found)
    if target.revision is not None:
        if target.revision > newest:
            return f"revision {target.revision} is newer than the newest backed up, {newest}"
        covering = [r for r in found if r.first <= target.revision <= r.last]
        if not covering:
            return f"revision {target.revision} is in no stored segment: the chain is broken there"
        run = covering[0]
        before = [r.last for r in found if r.chain == run.chain and r.last < run.first]
        if before:
            return (
                f"revision {target.revision} is in chain {run.chain}, but the chain has a gap before it: no "
                f"segment holds revisions {max(before) + 1}..{run.first - 1}, and no usable full snapshot "
                "of that chain is after the gap and at or before the point"
            )
        return (
            f"revision {target.revision} is in chain {run.chain}, "
            "but no usable full snapshot of that chain is at or before it"
        )
    if target.time is not None:
        return _why_time_unreachable(target.time, found, order)
    return "no chain of segments starts from a usable full snapshot"


def _why_time_unreachable(moment: float, found: list[Run], order: SeenOrder) -> str:
    clusters = sorted({run.cluster_id for run in found})
    after = {cluster: order.first_seen_after(cluster, moment) for cluster in clusters}
    if all(seen is None for seen in after.values()):
        newest = max(run.last for run in found)
        return (
            f"no revision backed up was seen after that time: the backup holds revisions up to {newest}, and "
            "nothing shows that no write came between the last of them and the time (it is still to come, "
            "or the backup stopped before it; no record of its writer holding the whole cluster at or after "
            "it either). Restore the latest point or a revision instead"
        )
    for cluster in clusters:
        seen = after[cluster]
        if seen is None:
            continue
        holding = [run for run in found if run.cluster_id == cluster and run.first <= seen[0] - 1 <= run.last]
        if not holding:
            return (
                f"revision {seen[0] - 1}, the last seen by that time, is in no stored segment: the chain is "
                "broken there, or its writer stopped before the time"
            )
    return "no stored segment was started by that time from a usable full snapshot"
