"""An EtcdCluster's deletion: its member PVCs go or stay as spec.reclaimPolicy says
(core/cluster/reclaim.py decides; this module carries the decision out and reports it)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.core.cluster import builders, naming
from etcd_operator.core.cluster.reclaim import RETAIN, Reclaim, reclaim
from etcd_operator.core.outcome import EventPoster


async def reclaim_member_volumes(
    kube_client: kube.KubeClient, body: Mapping[str, Any], post_event: EventPoster
) -> Reclaim:
    meta = body["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    selector = naming.label_selector(naming.selector_labels(name))
    pvcs, pods = await asyncio.gather(
        kube_client.list(kube.PVCS, namespace, selector), kube_client.list(kube.PODS, namespace, selector)
    )
    outcome = reclaim((body.get("spec") or {}).get("reclaimPolicy", RETAIN), meta, pvcs, pods)
    for pvc in pvcs:  # a kept PVC that an older version made owned by the cluster: the collector must not act
        pvc_meta = pvc["metadata"]
        owners = pvc_meta.get("ownerReferences") or []
        if pvc_meta["name"] in outcome.keep and any(o.get("uid") == uid for o in owners):
            await kube_client.merge_patch(
                kube.PVCS,
                namespace,
                pvc_meta["name"],
                {"metadata": {"ownerReferences": builders.owners_without(owners, uid)}},
            )
    for pvc_name in outcome.delete:
        await kube_client.delete(kube.PVCS, namespace, pvc_name)
    if not await namespace_terminating(kube_client, namespace):  # it takes no Event any more
        post_event("Normal", outcome.reason, outcome.message)
    return outcome


async def namespace_terminating(kube_client: kube.KubeClient, namespace: str) -> bool:
    try:
        found = await kube_client.get(kube.NAMESPACES, None, namespace)
    except kube.ApiError:
        return False  # unknown: the Event is tried
    return found is None or bool(found["metadata"].get("deletionTimestamp"))
