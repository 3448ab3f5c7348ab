"""Leader moves asked for by the etcd.operator.dev/move-leader annotation, planned. Pure.

A new annotation value is one request: `<token> to <member>` moves leadership to that member
(`kubectl etcd move-leader` picks the most advanced follower when not told one). The move is
etcd's own (MoveLeader: the leader hands over once the member has caught up with its log),
made only while every member is healthy and none is on its way out, so that it never adds an
election to a cluster already short of members. A request that cannot be met (no member
named, no such voting member) is refused and recorded in status.leaderMove without waiting
for health: nothing would make it possible. The target is in the request, not chosen here,
so a pass killed after the move and before its record finds the target leading and only
records it.
"""

from __future__ import annotations

from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import Health, HealthState
from etcd_operator.core.cluster.naming import MOVE_LEADER_TARGET_SEPARATOR
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.recorded import LeaderMoveRecord


def requested_target(value: str) -> str | None:
    """The member an annotation value names (`<token> to <member>`), or None when it names none."""
    token, separator, target = value.strip().rpartition(MOVE_LEADER_TARGET_SEPARATOR)
    if not separator or not token.strip() or not target.strip():
        return None
    return target.strip()


def plan_requested_leader_move(
    record: LeaderMoveRecord, observed: Observed, health: Health, names: dict[int, str | None]
) -> a.Step | None:
    value = observed.leader_move_requested
    if not value:
        return None
    token, target = value.strip(), requested_target(value)  # the whole value identifies the request
    if token == record.last_token:
        return None
    asked = f"leader move requested ({token})"
    voters = {names[m.id] or m.hex_id: m for m in health.voters}
    if target is None:
        return a.FinishLeaderMoveRequest(
            f"{asked}: it names no member",
            token,
            f"refused: name the member, as '<token>{MOVE_LEADER_TARGET_SEPARATOR}<member>'",
            True,
        )
    if target not in voters:
        learner = any((names[m.id] or m.hex_id) == target for m in health.learners)
        why = "a learner, which cannot lead" if learner else "not a voting member of the cluster"
        return a.FinishLeaderMoveRequest(f"{asked}: {target} is {why}", token, f"refused: {target} is {why}", True)
    leader = next((m for m in health.voters if m.id == health.leader_id), None)
    if health.state != HealthState.HEALTHY or health.stopping_ids or leader is None:
        return a.Wait(f"{asked}; waiting for every member to be healthy")
    leader_name = names[leader.id] or leader.hex_id
    if target == leader_name:
        return a.FinishLeaderMoveRequest(f"{asked}: {target} leads already", token, f"{target} led already")
    return a.MoveLeaderOnRequest(asked, leader.id, voters[target].id, leader_name, target, token)
