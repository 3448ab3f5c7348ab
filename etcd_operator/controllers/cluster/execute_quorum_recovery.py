"""The cluster executor's quorum recovery: restarting the one survivor as a new one-member
cluster on its data (--force-new-cluster), with the lost members' data set aside."""

from __future__ import annotations

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster.execute_context import StepContext
from etcd_operator.controllers.cluster.execute_member_pods import create_pod, delete_pod
from etcd_operator.core.cluster import builders, naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.planner import QUORUM_RECOVERY
from etcd_operator.core.cluster.recorded import Operation
from etcd_operator.core.cluster.rejoin import self_only_cluster
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import Outcome


async def begin_quorum_recovery(
    ctx: StepContext, action: a.BeginQuorumRecovery, spec: ClusterSpec, observed: Observed
) -> Outcome:
    operation = Operation(QUORUM_RECOVERY, action.member, action.member_id, ctx.now)
    if observed.recovery_approved:
        # An approval is for one incident: it is used up as the recovery starts.
        await ctx.kube.merge_patch(
            kube.ETCDCLUSTERS,
            ctx.namespace,
            ctx.cluster,
            {"metadata": {"annotations": {naming.ANNOTATION_APPROVE_QUORUM_RECOVERY: None}}},
        )
    ctx.post_event(
        "Warning",
        "QuorumRecoveryStarted",
        f"Recovering quorum from {action.member}: {action.reason}. Writes that reached only the lost members are gone",
    )
    return Outcome(True, status_fields={"operation": operation.to_dict()})


async def stop_member_pod(ctx: StepContext, action: a.StopMemberPod, spec: ClusterSpec, observed: Observed) -> None:
    await delete_pod(ctx, observed, action.member)


async def set_aside_member_data(
    ctx: StepContext, action: a.SetAsideMemberData, spec: ClusterSpec, observed: Observed
) -> None:
    if action.min_ordinal > observed.min_ordinal:
        await ctx.kube.merge_patch(
            kube.ETCDCLUSTERS,
            ctx.namespace,
            ctx.cluster,
            {"metadata": {"annotations": {naming.ANNOTATION_MIN_ORDINAL: str(action.min_ordinal)}}},
        )
    pvc = observed.pvcs[naming.pvc_name(action.member)]
    patch = builders.set_aside_pvc_patch(
        ctx.cluster,
        ctx.token,
        [],
        {naming.LABEL_SET_ASIDE_FROM: ctx.cluster, naming.LABEL_SET_ASIDE_BY: "quorum-recovery"},
    )
    await ctx.kube.merge_patch(kube.PVCS, ctx.namespace, pvc.name, patch)
    ctx.post_event(
        "Warning",
        "MemberDataSetAside",
        f"Kept PVC {pvc.name} aside (label {naming.LABEL_SET_ASIDE_FROM}={ctx.cluster}): it may hold "
        f"writes the survivor lacks. Delete it once you no longer need it",
    )


async def force_new_cluster(ctx: StepContext, action: a.ForceNewCluster, spec: ClusterSpec, observed: Observed) -> None:
    pod = observed.pods.get(action.member)
    if pod is not None:
        await ctx.kube.delete(kube.PODS, ctx.namespace, action.member, uid=pod.uid)
        return
    await create_pod(
        ctx,
        spec,
        action.member,
        action.member_id,
        self_only_cluster(ctx.status, observed, action.member),
        builders.STATE_EXISTING,
        force_new_cluster=True,
    )


async def finish_quorum_recovery(
    ctx: StepContext, action: a.FinishQuorumRecovery, spec: ClusterSpec, observed: Observed
) -> Outcome:
    ctx.post_event("Normal", "QuorumRecovered", f"{action.member} leads again; members are re-added one at a time")
    return Outcome(True, status_fields={"operation": None})


async def abandon_quorum_recovery(
    ctx: StepContext, action: a.AbandonQuorumRecovery, spec: ClusterSpec, observed: Observed
) -> Outcome:
    ctx.post_event("Warning", "QuorumRecoveryAbandoned", f"Quorum recovery called off: {action.reason}")
    return Outcome(True, status_fields={"operation": None})
