"""Leader moves asked for with the etcd.operator.dev/move-leader annotation (cluster/leader_move.py),
through the planner: made only on a healthy cluster, to a voting member the request names, once
per annotation value, and refused at once (recorded) when they cannot be made."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.core.cluster import leader_move
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.planner import next_step
from etcd_operator.core.cluster.recorded import ClusterStatus, LeaderMoveRecord
from tests.unit.cluster_scenarios import HASH, NOW, RECORDED, M, health_of, observed, recorded, spec


def step_of(o, st: ClusterStatus = RECORDED, size: int = 3) -> a.Step:
    s = spec(size)
    return next_step(s, st, o, health_of(s, o, st), NOW, desired_hash=HASH)


def asking(value: str, members=None, **kw):
    return dataclasses.replace(observed(members or [M(0), M(1), M(2)], **kw), leader_move_requested=value)


@pytest.mark.parametrize(
    "value, target",
    [
        ("t1 to c-1", "c-1"),
        ("  t1 to c-1 ", "c-1"),
        ("20261205T130501Z-1a2b3c to c-2", "c-2"),
        ("t1", None),
        ("t1 to ", None),
        (" to c-1", None),
        ("moved to to c-2", "c-2"),  # the last " to " separates the member
    ],
)
def test_the_target_is_the_member_after_the_last_to(value, target):
    assert leader_move.requested_target(value) == target


def test_a_request_moves_leadership_to_the_member_it_names_then_is_recorded_once():
    o = asking("t1 to c-2")
    step = step_of(o)
    assert isinstance(step, a.MoveLeaderOnRequest)
    assert (step.from_member, step.to_member, step.to_id, step.token) == ("c-0", "c-2", M(2).id, "t1 to c-2")
    assert step.from_id == M(0).id
    done = recorded(leader_move=LeaderMoveRecord("t1 to c-2", "moved from c-0 to c-2"))
    assert isinstance(step_of(o, done), a.Steady)


def test_a_move_already_made_is_only_recorded():
    """A pass killed after etcd moved leadership, before status said so: the next finds the
    member leading and records the request without a second move."""
    step = step_of(asking("t1 to c-2", leader=2))
    assert isinstance(step, a.FinishLeaderMoveRequest) and not step.refused
    assert step.outcome == "c-2 led already" and step.token == "t1 to c-2"


@pytest.mark.parametrize(
    "value, members, outcome",
    [
        ("t1", None, "refused: name the member, as '<token> to <member>'"),
        ("t1 to c-7", None, "refused: c-7 is not a voting member of the cluster"),
    ],
)
def test_a_request_that_cannot_be_met_is_refused_at_once_and_recorded(value, members, outcome):
    step = step_of(asking(value, members))
    assert isinstance(step, a.FinishLeaderMoveRequest) and step.refused
    assert step.outcome == outcome and step.token == value


def test_a_learner_is_refused_without_waiting_for_health():
    """Asked of the request's planner directly: the cluster's planner promotes a learner (and
    waits for a member that is down) before it gets to requests."""
    o = asking("t1 to c-3", [M(0), M(1), M(2, healthy=False, unhealthy_for=5.0), M(3, learner=True)])
    health = health_of(spec(3), o)
    names = {m.id: m.name for m in [M(0), M(1), M(2), M(3)]}
    step = leader_move.plan_requested_leader_move(LeaderMoveRecord(), o, health, names)
    assert isinstance(step, a.FinishLeaderMoveRequest) and step.refused
    assert step.outcome == "refused: c-3 is a learner, which cannot lead"


@pytest.mark.parametrize(
    "members",
    [
        [M(0), M(1), M(2, healthy=False, unhealthy_for=5.0)],  # a member down: no extra election now
        [M(0), M(1), M(2, stopping=True)],  # a member on its way out
    ],
)
def test_a_move_waits_while_the_cluster_is_not_whole(members):
    """Through the planner (which waits for such a cluster before requests), and asked of the
    request's planner directly, which waits too, whatever order the planner comes to have."""
    o = asking("t1 to c-1", members)
    step = step_of(o)
    assert not isinstance(step, (a.MoveLeaderOnRequest, a.FinishLeaderMoveRequest)), step
    names = {m.id: m.name for m in members}
    step = leader_move.plan_requested_leader_move(LeaderMoveRecord(), o, health_of(spec(3), o), names)
    assert isinstance(step, a.Wait) and "waiting for every member to be healthy" in step.reason, step


def test_an_outdated_member_is_rolled_before_a_requested_move():
    step = step_of(asking("t1 to c-1", [M(0), M(1), M(2, outdated=True)]))
    assert isinstance(step, (a.CheckPodSpec, a.RollMember)) and step.member == "c-2", step


def test_a_new_value_is_a_new_request():
    st = recorded(leader_move=LeaderMoveRecord("t1 to c-2", "moved from c-0 to c-2"))
    step = step_of(asking("t2 to c-2", leader=2), st)
    assert isinstance(step, a.FinishLeaderMoveRequest) and step.token == "t2 to c-2"
    step = step_of(asking("t2 to c-1", leader=2), st)
    assert isinstance(step, a.MoveLeaderOnRequest) and (step.from_member, step.to_member) == ("c-2", "c-1")


def test_the_recorded_outcome_round_trips_through_status():
    record = LeaderMoveRecord("t1 to c-2", "moved from c-0 to c-2")
    assert ClusterStatus.from_dict({"leaderMove": record.to_dict()}).leader_move == record
    assert ClusterStatus.from_dict({}).leader_move == LeaderMoveRecord()
