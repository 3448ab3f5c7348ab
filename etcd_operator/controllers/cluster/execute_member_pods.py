"""The cluster executor's member pods and PVCs: building and creating them, asking the API
server about them (dry runs), and the steps that patch or delete one."""

from __future__ import annotations

import dataclasses
import logging

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster.execute_context import NameCollision, PodRefused, StepContext
from etcd_operator.controllers.cluster.pod_dry_run import PodDryRun, is_refusal
from etcd_operator.core.cluster import admission, builders, naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.member_pod_outcome import MemberPodOutcome
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.rejoin import self_only_cluster
from etcd_operator.core.cluster.spec import ClusterSpec

logger = logging.getLogger(__name__)


async def ensure_pvc(ctx: StepContext, spec: ClusterSpec, member: str, member_id: int | None) -> None:
    """A member's PVC has no owner reference: the garbage collector must never take the
    data (foreground deletion, a finalizer removed by hand). The deletion handler finds
    PVCs by their labels and applies reclaimPolicy."""
    if not spec.storage.empty_dir:
        await ctx.create(kube.PVCS, builders.member_pvc(spec, ctx.cluster, ctx.namespace, member, member_id))


async def ensure_bootstrap_pvc(ctx: StepContext, spec: ClusterSpec, member: str, initial_cluster: str) -> None:
    """Creates a bootstrap member's PVC carrying the bootstrap's initial cluster. One of that
    name that exists already must be this bootstrap's own: a member never starts as new over a
    volume the bootstrap did not create (it may hold another cluster's data)."""
    manifest = builders.member_pvc(spec, ctx.cluster, ctx.namespace, member, None, initial_cluster)
    ctx.fence()
    ctx.hold_fence(f"{kube.PVCS.plural} {manifest['metadata']['name']}")
    try:
        await ctx.kube.create(kube.PVCS, ctx.namespace, manifest)
        return
    except kube.Conflict:
        pass
    current = await ctx.kube.get(kube.PVCS, ctx.namespace, manifest["metadata"]["name"])
    meta = (current or {}).get("metadata") or {}
    annotations = meta.get("annotations") or {}
    ours = (
        (meta.get("labels") or {}).get(naming.LABEL_CLUSTER) == ctx.cluster
        and annotations.get(naming.ANNOTATION_INITIAL_CLUSTER) == initial_cluster
        and not annotations.get(naming.ANNOTATION_MEMBER_ID)
    )
    if current is not None and not ours:
        raise NameCollision(
            "PersistentVolumeClaim",
            manifest["metadata"]["name"],
            "this cluster's bootstrap did not create it, and no member starts as new over a volume that may "
            "hold other data",
        )


def member_pod(
    ctx: StepContext,
    spec: ClusterSpec,
    member: str,
    member_id: int | None,
    initial_cluster: str,
    state: str,
    force_new_cluster: bool = False,
    joining: bool = False,
) -> dict:
    return ctx.owned(
        builders.member_pod(
            spec,
            ctx.cluster,
            ctx.namespace,
            member,
            member_id,
            initial_cluster,
            state,
            ctx.token,
            force_new_cluster,
            joining_image=ctx.operator_image if joining else None,
        )
    )


async def create_pod(
    ctx: StepContext,
    spec: ClusterSpec,
    member: str,
    member_id: int | None,
    initial_cluster: str,
    state: str,
    force_new_cluster: bool = False,
    joining: bool = False,
) -> None:
    """Raises PodRefused when the API server refuses the pod (the answer says why).
    `joining`: the member's first pod after its add (builders.peer_name_container)."""
    await ensure_pvc(ctx, spec, member, member_id)
    pod = member_pod(ctx, spec, member, member_id, initial_cluster, state, force_new_cluster, joining)
    try:
        await ctx.create(kube.PODS, pod)
    except kube.ApiError as e:
        if not is_refusal(e):
            raise
        raise PodRefused(await dry_runs(ctx, joining).answer(spec, member, e)) from None


def dry_runs(ctx: StepContext, joining: bool = False) -> PodDryRun:
    """Dry runs of a member's pod as the create would send it (its etcd ID aside): a
    re-create's, or with `joining` a new member's first pod (with TLS, its peer-name init
    container in the operator's image, which a policy may refuse where etcd's is allowed)."""

    def build(spec: ClusterSpec, member: str) -> dict:
        itself = f"{member}={naming.peer_url(ctx.cluster, ctx.namespace, member, spec.tls.enabled)}"
        return member_pod(ctx, spec, member, None, itself, builders.STATE_EXISTING, joining=joining)

    ctx.fence()
    return PodDryRun(ctx.kube, ctx.namespace, build)


async def check_pod_spec(
    ctx: StepContext, action: a.CheckPodSpec, spec: ClusterSpec, observed: Observed
) -> MemberPodOutcome:
    joining = action.before == a.AddLearner.__name__
    answer = dataclasses.replace(
        await dry_runs(ctx, joining).check(spec, action.member), pod_spec_hash=action.pod_spec_hash
    )
    if not answer.accepted:
        logger.warning("%s/%s: %s", ctx.namespace, ctx.cluster, admission.describe(answer))
    return MemberPodOutcome(True, admission=answer)


async def create_member_pod(ctx: StepContext, action: a.CreateMemberPod, spec: ClusterSpec, observed: Observed) -> None:
    await create_pod(
        ctx,
        spec,
        action.member,
        action.member_id,
        action.initial_cluster,
        builders.STATE_EXISTING,
        joining=not action.joined_before,
    )
    if action.joined_before:
        ctx.post_event("Normal", "MemberRestarted", f"Recreated the pod of {action.member}; it rejoins on its data")


async def settle_member_pod(ctx: StepContext, action: a.SettleMemberPod, spec: ClusterSpec, observed: Observed) -> None:
    await settle_member(ctx, observed, action.member, action.member_id)


async def settle_member(ctx: StepContext, observed: Observed, member: str, member_id: int) -> None:
    """Its ID on its pod and PVC, and its pod's flags those of a restart on its data."""
    id_text = builders.member_id_text(member_id)
    if member in observed.pods:
        await ctx.kube.merge_patch(
            kube.PODS,
            ctx.namespace,
            member,
            {
                "metadata": {
                    "annotations": {
                        naming.ANNOTATION_MEMBER_ID: id_text,
                        naming.ANNOTATION_INITIAL_CLUSTER: self_only_cluster(ctx.status, observed, member),
                        naming.ANNOTATION_INITIAL_STATE: builders.STATE_EXISTING,
                        naming.ANNOTATION_FORCE_NEW_CLUSTER: "false",
                    }
                }
            },
        )
    if naming.pvc_name(member) in observed.pvcs:
        await ctx.kube.merge_patch(
            kube.PVCS,
            ctx.namespace,
            naming.pvc_name(member),
            {"metadata": {"annotations": {naming.ANNOTATION_MEMBER_ID: id_text}}},
        )


async def delete_pod(ctx: StepContext, observed: Observed, member: str) -> None:
    """Deletes the member's pod as observed: a pod re-created since (another uid) stays."""
    pod = observed.pods[member]
    await ctx.kube.delete(kube.PODS, ctx.namespace, member, uid=pod.uid)


async def delete_member_pod(ctx: StepContext, action: a.DeleteMemberPod, spec: ClusterSpec, observed: Observed) -> None:
    await delete_pod(ctx, observed, action.member)


async def restart_failed_pod(
    ctx: StepContext, action: a.RestartFailedPod, spec: ClusterSpec, observed: Observed
) -> None:
    await delete_pod(ctx, observed, action.member)
    ctx.post_event("Warning", "FailedPodRestarted", f"Deleted failed pod {action.member}: {action.reason}")


async def delete_member_pvc(ctx: StepContext, action: a.DeleteMemberPVC, spec: ClusterSpec, observed: Observed) -> None:
    pvc = observed.pvcs[naming.pvc_name(action.member)]
    await ctx.kube.delete(kube.PVCS, ctx.namespace, pvc.name, uid=pvc.uid)
