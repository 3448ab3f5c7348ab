"""The cluster executor's etcd membership: starting the first members, adding a learner and
its first pod, promoting, removing, and moving leadership."""

from __future__ import annotations

import asyncio

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.controllers import faults
from etcd_operator.controllers.cluster.execute_context import NotYet, StepContext
from etcd_operator.controllers.cluster.execute_member_pods import create_pod, ensure_bootstrap_pvc, settle_member
from etcd_operator.core.cluster import builders, naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Member, Observed
from etcd_operator.core.cluster.planner import member_add_receivers
from etcd_operator.core.cluster.recorded import LeaderMoveRecord
from etcd_operator.core.cluster.rejoin import self_only_cluster
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import Outcome


async def bootstrap_first_member(
    ctx: StepContext, action: a.BootstrapFirstMember, spec: ClusterSpec, observed: Observed
) -> None:
    await create_pod(
        ctx,
        spec,
        action.member,
        None,
        action.initial_cluster or self_only_cluster(ctx.status, observed, action.member),
        builders.STATE_NEW,
    )
    ctx.post_event(
        "Normal", "ClusterBootstrapping", f"Started first member {action.member} with initial-cluster-state=new"
    )


async def _all(calls) -> None:
    """Runs `calls` side by side to their end, then raises the first error: none is left
    running behind the step."""
    for result in await asyncio.gather(*calls, return_exceptions=True):
        if isinstance(result, BaseException):
            raise result


async def bootstrap_members(
    ctx: StepContext, action: a.BootstrapMembers, spec: ClusterSpec, observed: Observed
) -> None:
    """Every PVC first, then every pod: a pod of the bootstrap exists only once all its PVCs do
    (cluster/bootstrap.py relies on it)."""
    await _all(ensure_bootstrap_pvc(ctx, spec, member, action.initial_cluster) for member in action.members)
    faults.hit(faults.AFTER_BOOTSTRAP_PVCS)
    await _all(
        create_pod(ctx, spec, member, None, action.initial_cluster, builders.STATE_NEW, joining=True)
        for member in action.members
    )
    ctx.post_event(
        "Normal",
        "ClusterBootstrapping",
        f"Started {', '.join(action.members)} with initial-cluster-state=new, initial cluster {action.initial_cluster}",
    )


async def settle_started_members(
    ctx: StepContext, action: a.SettleStartedMembers, spec: ClusterSpec, observed: Observed
) -> None:
    await _all(settle_member(ctx, observed, member, member_id) for member, member_id in action.members)


async def start_restored_members(
    ctx: StepContext, action: a.StartRestoredMembers, spec: ClusterSpec, observed: Observed
) -> None:
    await asyncio.gather(
        *(create_pod(ctx, spec, member, None, action.initial_cluster, builders.STATE_NEW) for member in action.members)
    )
    ctx.post_event(
        "Normal", "ClusterBootstrapping", f"Started {', '.join(action.members)} together on their restored data"
    )


async def add_learner(ctx: StepContext, action: a.AddLearner, spec: ClusterSpec, observed: Observed) -> None:
    peer = naming.peer_url(ctx.cluster, ctx.namespace, action.member, spec.tls.enabled)
    learner, members = await member_add(ctx, observed, peer)
    ctx.post_event("Normal", "MemberAdded", f"Added {action.member} (id {learner.hex_id}) as a learner")
    faults.hit(faults.AFTER_MEMBER_ADD)
    initial = ",".join(
        sorted(f"{m.name or action.member}={m.peer_urls[0]}" for m in members if m.name or m.id == learner.id)
    )
    await create_pod(ctx, spec, action.member, learner.id, initial, builders.STATE_EXISTING, joining=True)


async def member_add(ctx: StepContext, observed: Observed, peer: str) -> tuple[Member, list[Member]]:
    """Offers the add to each healthy voter in turn (planner.member_add_receivers) until
    one accepts. Only etcd's own refusal of an unhealthy cluster moves on to the next:
    nothing was proposed then. Any other error ends the step as before."""
    receivers = member_add_receivers(observed)
    if not receivers:
        raise NotYet("no voting member answers")
    refused: EtcdError | None = None
    for member_id in receivers:
        try:
            return await ctx.member_client(observed, member_id).add_learner([peer])
        except EtcdError as e:
            if not e.cluster_not_ready:
                raise
            refused = e
    raise refused or NotYet("no voting member answers")


async def promote_learner(ctx: StepContext, action: a.PromoteLearner, spec: ClusterSpec, observed: Observed) -> None:
    await ctx.leader_client(observed).promote(action.member_id)
    ctx.post_event("Normal", "MemberPromoted", f"Promoted {action.member} to a voting member")


async def append_entry_for_learner(
    ctx: StepContext, action: a.AppendEntryForLearner, spec: ClusterSpec, observed: Observed
) -> None:
    await ctx.leader_client(observed).update_peer_urls(action.member_id, action.peer_urls)


async def remove_member(ctx: StepContext, action: a.RemoveMember, spec: ClusterSpec, observed: Observed) -> None:
    await ctx.leader_client(observed).remove(action.member_id)
    reason = "MemberReplaced" if action.replacing else "MemberRemoved"
    if action.learner_not_caught_up:
        reason = "LearnerNotCaughtUp"
    ctx.post_event(
        "Warning" if action.replacing or action.learner_not_caught_up else "Normal",
        reason,
        f"Removed {action.member} (id {action.member_id:x}) from etcd: {action.reason}",
    )
    faults.hit(faults.AFTER_MEMBER_REMOVE)


async def move_leader(ctx: StepContext, action: a.MoveLeader, spec: ClusterSpec, observed: Observed) -> None:
    await ctx.leader_client(observed).move_leader(action.to_id)
    ctx.post_event("Normal", "LeaderMoved", f"Moved leadership to {action.to_member}: {action.reason}")


async def move_leader_on_request(
    ctx: StepContext, action: a.MoveLeaderOnRequest, spec: ClusterSpec, observed: Observed
) -> Outcome:
    """etcd answers MoveLeader once the new leader leads; a call that fails is asked again by
    a later pass, which finds the request done if the move happened anyway."""
    await ctx.leader_client(observed).move_leader(action.to_id)
    outcome = f"moved from {action.from_member} to {action.to_member}"
    ctx.post_event(
        "Normal", "LeaderMoved", f"Moved leadership from {action.from_member} to {action.to_member}: {action.reason}"
    )
    return Outcome(True, status_fields={"leaderMove": LeaderMoveRecord(action.token, outcome).to_dict()})


async def finish_leader_move_request(
    ctx: StepContext, action: a.FinishLeaderMoveRequest, spec: ClusterSpec, observed: Observed
) -> Outcome:
    if action.refused:
        ctx.post_event("Warning", "LeaderMoveRefused", f"Leader move not made: {action.reason}")
    else:
        ctx.post_event("Normal", "LeaderMoveDone", f"No leader move needed: {action.reason}")
    return Outcome(True, status_fields={"leaderMove": LeaderMoveRecord(action.token, action.outcome).to_dict()})
