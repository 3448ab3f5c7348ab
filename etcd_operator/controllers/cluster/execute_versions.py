"""The cluster executor's version changes: rolling members onto the acting version, and
etcd's downgrade (enable, cancel, finish)."""

from __future__ import annotations

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.controllers.cluster.execute_context import StepContext
from etcd_operator.controllers.cluster.execute_member_pods import delete_pod
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import Outcome


async def roll_member(ctx: StepContext, action: a.RollMember, spec: ClusterSpec, observed: Observed) -> None:
    await delete_pod(ctx, observed, action.member)
    ctx.post_event("Normal", "MemberRolling", f"Restarting {action.member} with etcd {spec.version}: {action.reason}")


async def roll_failed(ctx: StepContext, action: a.RollFailed, spec: ClusterSpec, observed: Observed) -> None:
    ctx.post_event("Warning", "RollFailed", f"Roll paused and rolled back: {action.reason}")


async def enable_downgrade(
    ctx: StepContext, action: a.EnableDowngrade, spec: ClusterSpec, observed: Observed
) -> Outcome:
    leader = ctx.leader_client(observed)
    try:
        await leader.downgrade("VALIDATE", action.target)
        await leader.downgrade("ENABLE", action.target)
    except EtcdError as e:
        if "downgrade job in progress" not in e.detail:  # enabled by an interrupted pass
            raise
    ctx.post_event("Normal", "DowngradeEnabled", f"Enabled etcd's downgrade to {action.target}: {action.reason}")
    return Outcome(True, status_fields={"downgrade": {"target": action.target}})


async def cancel_downgrade(
    ctx: StepContext, action: a.CancelDowngrade, spec: ClusterSpec, observed: Observed
) -> Outcome:
    try:
        await ctx.leader_client(observed).downgrade("CANCEL", action.target)
    except EtcdError as e:
        if "no inflight downgrade" not in e.detail:  # ended already
            raise
    ctx.post_event("Normal", "DowngradeCancelled", f"Cancelled the downgrade to {action.target}: {action.reason}")
    return Outcome(True, status_fields={"downgrade": None})


async def finish_downgrade(
    ctx: StepContext, action: a.FinishDowngrade, spec: ClusterSpec, observed: Observed
) -> Outcome:
    ctx.post_event("Normal", "DowngradeFinished", f"Downgraded to {action.target}: {action.reason}")
    return Outcome(True, status_fields={"downgrade": None})
