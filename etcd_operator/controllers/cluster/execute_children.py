"""The cluster's children that are not members: its Services, PodDisruptionBudget and
NetworkPolicy, applied together; and member PVCs freed of an owner reference an older
operator set."""

from __future__ import annotations

import hashlib
import json
import logging

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster.execute_context import NameCollision, NotYet, StepContext
from etcd_operator.core.cluster import builders, network_policy, ownership
from etcd_operator.core.cluster.health import Health
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.spec import ClusterSpec

logger = logging.getLogger(__name__)


async def disown_member_pvcs(ctx: StepContext, observed: Observed) -> None:
    """Takes the cluster's owner reference off member PVCs that an older operator set, so
    that the garbage collector can never take their data (execute_member_pods.ensure_pvc)."""
    for name in sorted(n for n, pvc in observed.pvcs.items() if pvc.owned_by_cluster):
        pvc = await ctx.kube.get(kube.PVCS, ctx.namespace, name)
        if pvc is None:
            continue
        meta = pvc["metadata"]
        await ctx.kube.merge_patch(
            kube.PVCS,
            ctx.namespace,
            name,
            {
                "metadata": {
                    "ownerReferences": builders.owners_without(meta.get("ownerReferences") or [], ctx.token),
                    "resourceVersion": meta["resourceVersion"],
                }
            },
        )
        logger.info("%s/%s: PVC %s no longer has the cluster as its owner", ctx.namespace, ctx.cluster, name)


async def ensure_services(
    ctx: StepContext, spec: ClusterSpec, health: Health, applied: str | None = None, force: bool = True
) -> tuple[str | None, dict[str, str]]:
    """Applies the Services, the PDB and the NetworkPolicy (or deletes the policy when it is
    off), unless `force` is off and their manifests hash to `applied`, what this reconciler
    last applied in full. A child whose name an object that is not the operator's holds is
    left alone (cluster/ownership.py). Returns the hash of what is now in place (None when a
    child was left alone: the next pass tries again) and the collisions ("Kind name" -> why)."""
    voters = len(health.voters) or None
    manifests = [
        (kube.SERVICES, ctx.owned(builders.peer_service(ctx.cluster, ctx.namespace))),
        (kube.SERVICES, ctx.owned(builders.client_service(ctx.cluster, ctx.namespace))),
        (kube.PDBS, ctx.owned(builders.disruption_budget(spec, ctx.cluster, ctx.namespace, voters))),
    ]
    settings = (ctx.body.get("spec") or {}).get("networkPolicy")
    policy_on = network_policy.enabled(settings, spec.tls.enabled)
    if policy_on:
        manifests.append(
            (
                kube.NETWORK_POLICIES,
                ctx.owned(network_policy.network_policy(ctx.cluster, ctx.namespace, settings, ctx.operator_namespace)),
            )
        )
    digest = hashlib.sha256(
        json.dumps([(r.plural, m) for r, m in manifests], sort_keys=True, default=str).encode()
    ).hexdigest()
    if digest == applied and not force:
        return digest, {}
    collisions, complete = {}, True
    for resource, manifest in manifests:
        try:
            await ctx.apply(resource, manifest)
        except NameCollision as e:
            collisions[e.ref] = e.why
        except NotYet as e:
            complete = False  # changed or gone under the write: the next pass applies again
            logger.info("%s/%s: %s", ctx.namespace, ctx.cluster, e)
    if not policy_on:
        try:
            await ctx.delete(kube.NETWORK_POLICIES, "NetworkPolicy", network_policy.policy_name(ctx.cluster))
        except NameCollision as e:
            collisions[e.ref] = e.why
    for ref, why in sorted(collisions.items()):
        logger.warning("%s/%s: %s", ctx.namespace, ctx.cluster, ownership.describe(ref, why))
    return (digest if complete and not collisions else None), collisions
