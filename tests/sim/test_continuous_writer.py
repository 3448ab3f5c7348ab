"""The continuous backup's writer in the simulated world (tests/sim/continuous_writer.py):
operator restarts mid-chain (between a segment's body and its manifest too), lock sessions
whose lease is granted, used and revoked inside one segment, a store that loses its answer
to a PUT that landed, and a LeaseTimeToLive that fails. Each schedule ends with every
revision the writers uploaded reachable and replayed to what the clients saw, and no chain
with two manifests under one sequence number. Before their fixes, the lease schedules
failed with `LeaseUnknown` and the restart schedules with `revision N is in no stored
segment` (issue 41, items 7 and 8).

With skewed clocks, each writer started reads a wall clock up to five minutes off, either way:
a writer resuming a chain after a restart, or starting the next chain, disagrees with the
one before by minutes. A restore to a time then still holds no revision seen after it, by the
stamps of any segment (its manifest's and its body's, revision by revision: seed 2 found a base
of the new chain holding a revision the old chain's segment stamped after the time inside it),
and every uploaded revision stays reachable by revision."""

from __future__ import annotations

import dataclasses
import functools
import itertools

import pytest

from etcd_operator.core import hibernation as h
from etcd_operator.core import prerequisites
from etcd_operator.core.backup import chain, continuous_status
from etcd_operator.core.backup import continuous as cb
from etcd_operator.core.backup import planner as backup_planner
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.segment_cutting import SeenClock, SegmentCutter
from etcd_operator.core.backup.segments import chain_id
from etcd_operator.core.cluster import hibernation as cluster_hibernation
from tests.sim import continuous_writer as sim

SEEDS = range(10)
SKEWED = sim.Faults(clock_skew=300.0)
HIBERNATING = sim.Faults(hibernate_at=200)
AUTH_CHANGES = sim.Faults(auth_change=0.05)


@functools.cache
def simulated(seed: int) -> sim.World:
    return sim.run(seed, steps=300)


@functools.cache
def skewed(seed: int) -> sim.World:
    return sim.run(seed, steps=300, faults=SKEWED)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_uploaded_revision_stays_reachable_through_restarts_sessions_and_lost_answers(seed):
    world = simulated(seed)  # run() checked the invariants already; this says how much it checked
    assert sim.every_uploaded_revision_is_reachable(world) > 40
    assert not world.breaks  # nothing here may break a chain


def test_the_schedules_do_what_they_say():
    """Across the seeds, each fault happened: lock sessions revoked before the writer asked
    (leases recorded as gone), restarts that resumed a chain after a newer full snapshot,
    lost answers."""
    gone = resumed_behind = lost = 0
    for seed in SEEDS:
        world = simulated(seed)
        gone += sum(len(sim.decode(v).gone_leases) for k, v in world.bucket.objects.items() if k.endswith(".segment"))
        lost += world.bucket.landed_unanswered
        resumed_behind += world.resumed_behind_newer_base
    assert gone > 50 and lost > 20 and resumed_behind > 10


@pytest.mark.parametrize("seed", SEEDS)
def test_writers_whose_clocks_differ_by_minutes_never_make_a_time_hold_a_revision_seen_after_it(seed):
    world = skewed(seed)  # run() checked both invariants; this says how much they covered
    assert sim.no_time_target_holds_a_revision_seen_after_it(world) > 5
    assert sim.every_uploaded_revision_is_reachable(world) > 40
    assert not world.breaks


def test_the_skewed_schedules_hand_chains_over_between_clocks_minutes_apart():
    """Across the seeds: writers that followed one another with clocks more than a minute
    apart, and writers that found their clock more than a minute behind the chain's last
    stamp when they resumed it (they stamped with that stamp until their clock caught up)."""
    apart = behind = 0
    for seed in SEEDS:
        world = skewed(seed)
        apart += sum(abs(a - b) > 60 for a, b in itertools.pairwise(world.skews))
        behind += sum(writer.seen.behind > 60 for writer in world.writers)
    assert apart > 50 and behind > 20


@functools.cache
def hibernated(seed: int) -> sim.World:
    return sim.run(seed, steps=600, faults=HIBERNATING)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_cluster_going_to_sleep_keeps_every_acknowledged_revision_in_the_chain(seed):
    """Issue 41, item 12b: the writer runs on while the members stop, and the real cluster
    planner stops the last of them only once the chain holds what they hold."""
    world = hibernated(seed)  # run() checked the invariant at every step
    cluster = world.cluster
    assert cluster is not None and cluster.record.state == h.HIBERNATED and world.writer is None
    assert not cluster.without_chain  # the chain got there before spec.hibernation.snapshotTimeout
    assert sim.every_uploaded_revision_is_reachable(world) > 20


def test_the_hibernation_schedules_acknowledge_writes_while_the_members_stop():
    assert sum(hibernated(seed).acknowledged_while_stopping for seed in SEEDS) > 20


@pytest.mark.parametrize("seed", range(4))
def test_a_lease_the_writer_cannot_learn_breaks_the_chain_and_a_full_snapshot_follows(seed):
    world = sim.run(seed, steps=300, faults=sim.Faults(lease_unanswered=0.3))
    assert world.breaks, "no break recorded"
    assert world.status["continuous"]["lastBreak"]["reason"] == cb.LEASE_UNKNOWN
    assert sim.every_uploaded_revision_is_reachable(world) > 0


def test_the_invariants_catch_a_duplicate_sequence_and_a_missing_segment():
    world = sim.run(0, steps=300)
    manifests = sorted(world.bucket.manifests(), key=lambda m: (m.chain, m.sequence))
    middle = manifests[len(manifests) // 2]
    other = dataclasses.replace(
        middle,
        segment_key=middle.segment_key.replace(f"-{middle.last_revision:020d}.", f"-{middle.last_revision + 1:020d}."),
        last_revision=middle.last_revision + 1,
    )
    world.bucket.objects[other.key] = other.to_json()
    with pytest.raises(sim.Violation, match="two manifests"):
        sim.no_duplicate_sequences(world.bucket)
    del world.bucket.objects[other.key]
    del world.bucket.objects[middle.key]
    with pytest.raises(sim.Violation, match="not reachable"):
        sim.every_uploaded_revision_is_reachable(world)


# --- each guard removed in turn, the invariants catch it --------------------------------

_take = SegmentCutter.take


def _take_leaving_gone_leases_out(self, known_leases, reported_leases):
    """Item 7 before its fix: a lease gone when the writer asked is left out of the segment."""
    cut = _take(self, known_leases, reported_leases)
    return dataclasses.replace(cut, body=dataclasses.replace(cut.body, gone_leases=()))


def _hand_over_by_the_running_writer_only(state, base, stream):
    """Item 8 before its fix: with no writer in this process, a newer base starts its chain at once."""
    current = state.continuous.current
    newer = cb.ChainStart(chain_id(base.cluster_id, base.revision), base.cluster_id, base.key, base.revision)
    if current is None or current.chain == newer.chain:
        return newer
    if base.cluster_id != current.cluster_id or base.revision <= current.base_revision:
        return current
    if stream is not None and stream.chain == current.chain and stream.last_revision < base.revision:
        return current
    return newer


def _seen_order_by_raw_stamps(self, segments):
    """SeenOrder without its monotonic envelope: each revision counts as seen at its own
    segment's stamp, so a writer whose clock ran slow makes a later revision look seen
    before an earlier one."""
    points: dict[str, list[tuple[int, float]]] = {}
    self._segments = {}
    for m in segments:
        self._segments.setdefault(m.cluster_id, []).append(m)
        points.setdefault(m.cluster_id, []).extend(
            [(m.first_revision, m.first_seen_at), (m.last_revision, m.last_seen_at)]
        )
    self._revisions, self._seen = {}, {}
    for cluster, found in points.items():
        found.sort()
        self._revisions[cluster] = [revision for revision, _ in found]
        self._seen[cluster] = [stamp for _, stamp in found]


def _other_segments_by_their_ends_only(self, cluster_id, moment, replayed):
    """SeenOrder's rule for another chain's segment removed: its revisions count as seen by
    the stamps of its ends only, so a base inside it may hold one it stamped after the time."""
    return None


@pytest.mark.parametrize(
    ("target", "attribute", "replacement", "faults", "caught"),
    [
        (SegmentCutter, "take", _take_leaving_gone_leases_out, None, "LeaseUnknown"),
        (backup_planner, "_wanted_chain", _hand_over_by_the_running_writer_only, None, "is in no stored segment"),
        (chain.SeenOrder, "__init__", _seen_order_by_raw_stamps, SKEWED, "after the time"),
        (
            chain.SeenOrder,
            "first_maybe_seen_after_inside",
            _other_segments_by_their_ends_only,
            SKEWED,
            "after the time",
        ),
    ],
    ids=["gone-leases-left-out", "hand-over-without-status", "seen-order-not-monotonic", "other-segment-by-its-ends"],
)
def test_each_guard_removed_is_caught(monkeypatch, target, attribute, replacement, faults, caught):
    monkeypatch.setattr(target, attribute, replacement)
    with pytest.raises(sim.Violation, match=caught):
        for seed in SEEDS:
            sim.run(seed, steps=300, faults=faults)


def test_the_writers_own_monotonic_stamps_are_a_survivor_under_seen_order(monkeypatch):
    """SeenClock removed (a writer stamps with its own clock even when it is behind the
    chain's last stamp) survives these schedules: SeenOrder's envelope makes the stamps
    monotonic again where a restore reads them, so no time target changes. The writer's
    guard is kept as depth (stamps in the store follow revision order within a chain, for
    any reader of the format); should a schedule ever catch it, it moves to the table above."""
    monkeypatch.setattr(SeenClock, "stamp", lambda self, now: now)
    for seed in SEEDS:
        sim.run(seed, steps=300, faults=SKEWED)


def _writer_stopped_as_the_members_stop(state, observed, cluster):
    """Item 12b before its fix: the writer stops as soon as the members start stopping."""
    return backup_planner._stopping(observed, s.WaitForPrerequisite(reason=prerequisites.CLUSTER_HIBERNATED))


def _no_wait_for_the_chains(spec, record, observed, running):
    """Item 12b's other half removed: the last members stop whatever the chains hold."""
    return ()


@pytest.mark.parametrize(
    ("target", "attribute", "replacement"),
    [
        (backup_planner, "_write_to_the_end", _writer_stopped_as_the_members_stop),
        (cluster_hibernation, "_wait_for_chains", _no_wait_for_the_chains),
    ],
    ids=["writer-stopped-while-a-quorum-acknowledges", "last-members-stop-without-the-chain"],
)
def test_each_hibernation_guard_removed_is_caught(monkeypatch, target, attribute, replacement):
    monkeypatch.setattr(target, attribute, replacement)
    with pytest.raises(sim.Violation, match="acknowledged before the members stopped, is in no segment"):
        for seed in SEEDS:
            sim.run(seed, steps=600, faults=HIBERNATING)


@functools.cache
def with_auth_changes(seed: int) -> sim.World:
    return sim.run(seed, steps=300, faults=AUTH_CHANGES)


def test_user_and_role_changes_get_a_new_base_and_a_restore_never_claims_an_auth_state_it_lacks():
    """Auth changes make no KV revision. run() checked that a restore saying its auth state is
    the target's (AuthStateAtTarget True) has a base holding what etcd had at that revision;
    across the seeds, the planner took full snapshots because the auth revision moved, and
    restores after an auth change found a base with it."""
    bases = after_a_change = 0
    for seed in SEEDS:
        world = with_auth_changes(seed)
        assert world.etcd.auth_revision > 1
        assert sim.every_uploaded_revision_is_reachable(world) > 40
        bases += world.bases_for_auth
        after_a_change += sim.a_restore_says_when_its_auth_state_is_not_the_targets(world)
    assert bases > 10 and after_a_change > 100, (bases, after_a_change)


def test_a_restore_to_a_time_never_claims_an_auth_state_the_time_lacked():
    """run() restored to times around every stamp and checked that one saying its auth state
    is the point's has a base holding what etcd had at that time: judged by a reading taken
    after the time, never by a segment cut before it (an auth change can come between)."""
    after_a_change = sum(
        sim.a_time_restore_says_when_its_auth_state_is_not_the_times(with_auth_changes(seed)) for seed in SEEDS
    )
    assert after_a_change > 100, after_a_change


AUTH_RESTARTS = sim.Faults(auth_change=0.1, restart=0.1)
AUTH_RESTART_SEEDS = range(20)


@functools.cache
def with_auth_changes_and_restarts(seed: int) -> sim.World:
    return sim.run(seed, steps=300, faults=AUTH_RESTARTS)


def test_an_auth_change_read_before_a_restart_still_gets_a_new_base():
    """run() checked at every pass that the planner never streams on in the newest snapshot's
    chain while a writer's earlier report says the auth revision moved past it; across the
    seeds, status.continuous.authRead alone (the writer running had not read it) made the
    planner take a full snapshot, some of them after an operator restart."""
    restarts = [n for seed in AUTH_RESTART_SEEDS for n in with_auth_changes_and_restarts(seed).bases_for_recorded_auth]
    assert len(restarts) >= 5 and any(n > 0 for n in restarts), restarts


def _reading_not_kept(before, view):
    return None


def _recorded_reading_not_compared(original):
    return lambda base, stream, recorded: original(base, stream, None)


@pytest.mark.parametrize(
    ("target", "attribute", "replacement"),
    [
        (continuous_status, "_auth_read", lambda original: _reading_not_kept),
        (backup_planner, "_auth_moved_since", _recorded_reading_not_compared),
    ],
    ids=["reading-not-kept-in-status", "recorded-reading-not-compared"],
)
def test_each_auth_reading_guard_removed_is_caught_after_a_restart(monkeypatch, target, attribute, replacement):
    monkeypatch.setattr(target, attribute, replacement(getattr(target, attribute)))
    found = []
    for seed in AUTH_RESTART_SEEDS:
        try:
            sim.run(seed, steps=300, faults=AUTH_RESTARTS)
        except sim.Violation as e:
            found.append(str(e))
    assert any("none of those writers read it" in v and " 0 operator restarts" not in v for v in found), found
