"""EtcdCluster handlers: a daemon per cluster that reconciles from observed state, and a
deletion handler that applies reclaimPolicy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from etcd_operator import API_GROUP, API_VERSION
from etcd_operator.clients.etcd.pool import EtcdClientPool
from etcd_operator.controllers import faults, metrics
from etcd_operator.controllers.cluster.reclaimer import reclaim_member_volumes
from etcd_operator.controllers.cluster.reconciler import ClusterReconciler
from etcd_operator.core.cluster import naming
from etcd_operator.handlers.common import event_poster, logging_about, run_until_deleted
from etcd_operator.handlers.sharding import held_by_shard, in_shard

ERROR_BACKOFF = 10.0


@kopf.daemon(API_GROUP, API_VERSION, "etcdclusters", cancellation_timeout=60.0, when=in_shard)
async def run_cluster(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, logger: kopf.Logger, **_) -> None:
    etcd_clients = EtcdClientPool()
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    children = getattr(memo, "children", None)  # the operator's pod and PVC watches; None: list every pass
    wake = children.wakeups.register(namespace, name) if children else None
    reconciler = ClusterReconciler(
        memo.kube,
        etcd_clients,
        event_poster(body),
        memo.config.lease_namespace,
        cached_children=children.children if children else None,
        storage_classes=memo.storage_classes,
        steady_poll=memo.config.steady_poll_seconds,
        steady_poll_max=memo.config.steady_poll_max_seconds,
        resync=memo.config.resync_seconds,
        being_deleted=lambda: bool(body.get("metadata", {}).get("deletionTimestamp")),
        held_by=lambda: restore_hold(body),
        operator_image=memo.config.operator_image,
        cluster_domain=memo.config.cluster_domain,
        adoption_cross_namespace=memo.config.adoption_cross_namespace,
        member_metrics_every=memo.config.member_metrics_interval_seconds,
        child_changed=wake,
    )

    async def stall_unless_held(seen: Mapping[str, Any]) -> None:
        if not restore_hold(seen):
            await faults.stall_once(faults.STALE_CLUSTER_PASS, f"{namespace}/{name}", lambda: bool(restore_hold(body)))

    try:
        await run_until_deleted(
            reconciler,
            body,
            stopped,
            logger,
            ERROR_BACKOFF,
            before_pass=stall_unless_held,
            on_error=lambda: metrics.reconcile_errors.labels(namespace, name).inc(),
            wake=wake,
            wakeable=lambda: reconciler.wakeable,
        )
    finally:
        if wake is not None and children is not None:
            children.wakeups.forget(namespace, name, wake)
        await reconciler.close()
        await etcd_clients.close()
        metrics.forget_cluster(body["metadata"]["namespace"], body["metadata"]["name"])


def restore_hold(obj) -> str | None:
    """The EtcdRestore holding the cluster, as this copy (or the live body) says."""
    return (obj.get("metadata", {}).get("annotations") or {}).get(naming.ANNOTATION_RESTORE_IN_PROGRESS)


@kopf.on.delete(API_GROUP, API_VERSION, "etcdclusters", when=held_by_shard)
async def cluster_deleted(
    name: str, namespace: str | None, memo: kopf.Memo, body: kopf.Body, logger: kopf.Logger, **_
) -> None:
    """Pods, Services and Secrets go with the owner; PVCs follow spec.reclaimPolicy."""
    if namespace is None:
        raise kopf.PermanentError("an EtcdCluster is namespaced; this one came without a namespace")
    with logging_about(body):
        outcome = await reclaim_member_volumes(memo.kube, body, event_poster(body))
    logger.info("%s/%s deleted: %s", namespace, name, outcome.message)
