"""Chooses the member a snapshot is taken from: a healthy follower, so the leader is
spared; the leader only when no follower is healthy."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from etcd_operator.cluster import naming
from etcd_operator.kube import client as kube
from etcd_operator.shard import Shard


class SourceUnavailable(Exception):
    def __init__(self, message: str, permanent: bool = False, reason: str | None = None):
        super().__init__(message)
        self.permanent = permanent
        self.reason = reason  # None: ClusterNotFound when permanent, else NoHealthyMember


@dataclasses.dataclass(frozen=True)
class SourceMember:
    name: str
    endpoint: str
    role: str


def choose_member(members: list[Mapping[str, Any]], pod_ips: Mapping[str, str]) -> SourceMember | None:
    """Pure: from status.members and the pods' IPs."""
    ranked = sorted(
        (m for m in members if m.get("healthy") and m.get("role") in ("follower", "leader") and pod_ips.get(m["name"])),
        key=lambda m: (m["role"] != "follower", m["name"]),
    )
    if not ranked:
        return None
    best = ranked[0]
    return SourceMember(best["name"], f"{pod_ips[best['name']]}:{naming.CLIENT_PORT}", best["role"])


async def find_source(kube_client: kube.KubeClient, namespace: str, cluster: str,
                      shard: Shard = Shard()) -> tuple[SourceMember, dict]:
    body = await kube_client.get(kube.ETCDCLUSTERS, namespace, cluster)
    if body is None:
        # The pass that started this run saw it; it may come back (the planner waits for it).
        raise SourceUnavailable(f"EtcdCluster {namespace}/{cluster} does not exist", reason="ClusterNotFound")
    meta = body["metadata"]
    outside = shard.why_not_owned(meta.get("labels"), meta.get("finalizers"))
    if outside:
        raise SourceUnavailable(f"EtcdCluster {namespace}/{cluster} is not this operator's shard's: {outside}. "
                                f"Label this EtcdBackup like its cluster", permanent=True,
                                reason="ClusterOutsideShard")
    pods = await kube_client.list(kube.PODS, namespace, naming.label_selector(naming.selector_labels(cluster)))
    pod_ips = {p["metadata"]["name"]: (p.get("status") or {}).get("podIP") for p in pods
               if not p["metadata"].get("deletionTimestamp")}
    member = choose_member((body.get("status") or {}).get("members") or [], pod_ips)
    if member is None:
        raise SourceUnavailable(f"EtcdCluster {namespace}/{cluster} has no healthy member to snapshot")
    return member, body
