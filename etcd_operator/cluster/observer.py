"""Gathers one pass's view of a cluster from Kubernetes and from the members themselves."""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

from etcd_operator.cluster import naming
from etcd_operator.cluster.timers import carry_timers
from etcd_operator.cluster.observed import EtcdView, Observed, Operation, PodView, PVCView
from etcd_operator.etcd.client import EtcdError
from etcd_operator.etcd.pool import EtcdClientPool
from etcd_operator.kube import client as kube

STATUS_TIMEOUT = 2.0


def _hex(value: str | None) -> int | None:
    try:
        return int(value, 16) if value else None
    except ValueError:
        return None


def pod_view(pod: Mapping[str, Any]) -> PodView:
    meta, status = pod["metadata"], pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    containers = status.get("containerStatuses") or []
    waiting = next((c["state"]["waiting"].get("reason") for c in containers
                    if (c.get("state") or {}).get("waiting")), None)
    return PodView(
        name=meta["name"],
        uid=meta["uid"],
        member_id=_hex(annotations.get(naming.ANNOTATION_MEMBER_ID)),
        phase=status.get("phase", "Pending"),
        ready=conditions.get("Ready") == "True",
        deleting=bool(meta.get("deletionTimestamp")),
        ip=status.get("podIP"),
        spec_hash=annotations.get(naming.ANNOTATION_SPEC_HASH),
        initial_state=annotations.get(naming.ANNOTATION_INITIAL_STATE, ""),
        initial_cluster=annotations.get(naming.ANNOTATION_INITIAL_CLUSTER, ""),
        force_new_cluster=annotations.get(naming.ANNOTATION_FORCE_NEW_CLUSTER) == "true",
        restart_count=sum(c.get("restartCount", 0) for c in containers),
        waiting_reason=waiting,
    )


def pvc_view(pvc: Mapping[str, Any]) -> PVCView:
    meta = pvc["metadata"]
    return PVCView(
        name=meta["name"],
        uid=meta["uid"],
        member_id=_hex((meta.get("annotations") or {}).get(naming.ANNOTATION_MEMBER_ID)),
        deleting=bool(meta.get("deletionTimestamp")),
        storage_class=(pvc.get("spec") or {}).get("storageClassName"),
    )


def member_endpoint(pod: PodView) -> str | None:
    return f"{pod.ip}:{naming.CLIENT_PORT}" if pod.ip else None


class ClusterObserver:
    def __init__(self, kube_client: kube.KubeClient, etcd_clients: EtcdClientPool):
        self.kube = kube_client
        self.etcd_clients = etcd_clients

    async def observe(self, body: Mapping[str, Any], now: float) -> Observed:
        meta = body["metadata"]
        cluster, namespace = meta["name"], meta["namespace"]
        selector = naming.label_selector(naming.selector_labels(cluster))
        pods_raw, pvcs_raw = await asyncio.gather(
            self.kube.list(kube.PODS, namespace, selector),
            self.kube.list(kube.PVCS, namespace, selector),
        )
        pods = {p.name: p for p in map(pod_view, pods_raw)}
        pvcs = {p.name: p for p in map(pvc_view, pvcs_raw)}
        etcd = await self.observe_etcd(pods)
        await self.etcd_clients.retain_only({e for e in map(member_endpoint, pods.values()) if e})

        status = body.get("status") or {}
        observed = Observed(
            cluster=cluster, namespace=namespace, uid=meta["uid"], now=now,
            pods=pods, pvcs=pvcs, etcd=etcd, unhealthy_since={}, no_quorum_since=None,
            running_version=min((s.version for s in etcd.statuses.values()),
                                key=lambda v: tuple(int(x) for x in v.split(".")), default=None),
            recovery_approved=(meta.get("annotations") or {}).get(naming.ANNOTATION_APPROVE_QUORUM_RECOVERY) == "true",
            operation=Operation.from_dict(status.get("operation")),
            bootstrapped=bool(status.get("clusterID")),
            restoring=(meta.get("annotations") or {}).get(naming.ANNOTATION_RESTORE_IN_PROGRESS),
            min_ordinal=int((meta.get("annotations") or {}).get(naming.ANNOTATION_MIN_ORDINAL) or 0),
        )
        return carry_timers(observed, status)

    async def observe_etcd(self, pods: dict[str, PodView]) -> EtcdView:
        endpoints = {name: member_endpoint(p) for name, p in pods.items() if member_endpoint(p)}

        async def status_of(endpoint: str):
            try:
                return await asyncio.wait_for(self.etcd_clients.get(endpoint).status(), STATUS_TIMEOUT)
            except (EtcdError, asyncio.TimeoutError) as e:
                return e

        results = await asyncio.gather(*(status_of(e) for e in endpoints.values()))
        statuses, errors, by_endpoint = {}, {}, {}
        for (name, endpoint), result in zip(endpoints.items(), results):
            if isinstance(result, Exception):
                errors[name] = str(result) or type(result).__name__
            else:
                statuses[result.member_id] = result
                by_endpoint[endpoint] = result
        endpoint_of = {status.member_id: endpoint for endpoint, status in by_endpoint.items()}
        if not statuses:
            return EtcdView(errors=errors)

        leaders = [e for e, s in by_endpoint.items() if s.leader_id == s.member_id and s.leader_id]
        sources = leaders + sorted(by_endpoint, key=lambda e: -by_endpoint[e].raft_index)
        for endpoint in sources:
            try:
                cluster_id, members = await asyncio.wait_for(
                    self.etcd_clients.get(endpoint).member_list(), STATUS_TIMEOUT)
            except (EtcdError, asyncio.TimeoutError) as e:
                errors[endpoint] = str(e) or type(e).__name__
                continue
            status = by_endpoint[endpoint]
            return EtcdView(
                members=tuple(members), statuses=statuses, cluster_id=cluster_id,
                leader_id=status.leader_id or None, from_leader=endpoint in leaders, errors=errors,
                endpoints=endpoint_of,
            )
        return EtcdView(statuses=statuses, errors=errors, endpoints=endpoint_of)
