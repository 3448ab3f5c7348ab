"""memberUnhealthyTimeout is timed by the acting operator process on its own monotonic
clock, from what it saw itself: never from status.members[].unhealthySince, which may be
left from before the operator was down or written by a replica with another clock.

Each row drives one process (a ClusterObserver with a fake clock) through passes over a
3-member cluster whose c-2 stops answering, then asks the real decision what to do."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.decision import plan
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.timefmt import format_time
from tests.unit.fake_members import FakeCluster, cluster_body, member_id, observer_of

RAW_SPEC = {"size": 3, "version": "3.6.16", "recovery": {"memberUnhealthyTimeout": "120s"}}
WALL_START = 1_700_000_000.0  # the process's wall clock at its first pass
MONOTONIC_START = 5_000.0  # its monotonic clock then (any origin)
FLAPPING = "c-2"


def body(unhealthy_since: str | None) -> dict:
    """Status as an earlier process left it: c-2 unhealthy since `unhealthy_since`."""
    members = [{"name": f"c-{o}", "id": f"{member_id(o):x}", "healthy": o != 2} for o in range(3)]
    if unhealthy_since is not None:
        members[2]["unhealthySince"] = unhealthy_since
    return cluster_body(RAW_SPEC, members)


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    status_age: float | None  # how old status.members[c-2].unhealthySince looks to this process
    passes: tuple[tuple[float, bool], ...]  # (seconds on this process's clock, c-2 answers?)
    replaced: bool  # whether the last pass replaces c-2


def down_from(start: float, until: float, every: float = 3.0) -> tuple[tuple[float, bool], ...]:
    """Passes every `every` seconds that see c-2 down, the last one at `until`."""
    passes, t = [], start
    while t <= until - every:
        passes.append((t, False))
        t += every
    return tuple(passes) + ((until, False),)


ROWS = [
    # The substrate case: c-2 was unhealthy while an earlier process ran, recovered while the
    # operator was down, and stopped answering again 3 s before this process's first pass.
    Row("status_136s_old_process_saw_3s", 136.0, ((0.0, False), (3.0, False)), False),
    # A standby whose wall clock runs 10 min ahead takes over 5 s after the old leader wrote.
    Row("standby_clock_ahead_sees_status_605s_old", 605.0, ((0.0, False), (3.0, False)), False),
    Row("process_saw_it_unhealthy_121s", 136.0, down_from(0.0, 121.0), True),
    Row("process_saw_it_unhealthy_119s", None, down_from(0.0, 119.0), False),
    # Seen unhealthy for 90 s, then seen answering: the clock starts again at the next failure.
    Row(
        "recovery_seen_resets_the_clock", 136.0, down_from(0.0, 90.0) + ((93.0, True),) + down_from(96.0, 210.0), False
    ),
    Row(
        "after_a_seen_recovery_the_full_timeout_counts",
        136.0,
        down_from(0.0, 90.0) + ((93.0, True),) + down_from(96.0, 217.0),
        True,
    ),
    # Passes that failed for longer than the sightings last: what happened meanwhile was not seen.
    Row("a_gap_in_sightings_restarts_the_clock", None, down_from(0.0, 60.0) + down_from(130.0, 200.0), False),
]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
async def test_member_replaced_only_after_the_process_saw_it_unhealthy_for_the_timeout(row, monkeypatch):
    etcd = FakeCluster()
    reading = {"monotonic": MONOTONIC_START}
    observer = observer_of(etcd, monkeypatch)
    observer.clock = lambda: reading["monotonic"]  # this process's monotonic clock
    left = None if row.status_age is None else format_time(WALL_START - row.status_age)
    spec = ClusterSpec.from_dict(RAW_SPEC)
    for seconds, answers in row.passes:
        etcd.down = set() if answers else {FLAPPING}
        reading["monotonic"] = MONOTONIC_START + seconds
        seen_body = body(left)
        status = ClusterStatus.from_dict(seen_body.get("status") or {})
        observed = await observer.observe(seen_body, status, etcd.children())
        action = plan(spec, status, observed, WALL_START + seconds, stored_spec=RAW_SPEC).action
        last_pass = seconds == row.passes[-1][0]
        replaced = isinstance(action, a.RemoveMember) and action.replacing and action.member == FLAPPING
        assert replaced == (row.replaced and last_pass), f"pass at {seconds:.0f}s: {action.kind} ({action.reason})"
