"""Gathers the evidence for choosing the member a snapshot is taken from: the EtcdCluster
(its shard and recorded cluster ID), its member pods, and what each pod answers to a Status
call; the choice itself is backup/source_choice.choose_source (pure)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.etcd.client import ClientTLS, EtcdError, EtcdMemberClient
from etcd_operator.clients.kube import client as kube
from etcd_operator.core.backup.source_choice import Answer, Candidate, Refusal, SourceMember, choose_source
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.identity import parse_hex_id
from etcd_operator.core.shard import Shard

STATUS_TIMEOUT = 5.0


class SourceUnavailable(Exception):
    def __init__(self, message: str, permanent: bool = False, reason: str | None = None):
        super().__init__(message)
        self.permanent = permanent
        self.reason = reason  # None: ClusterNotFound when permanent, else NoHealthyMember


def rank_candidates(members: list[Mapping[str, Any]], pod_ips: Mapping[str, str | None]) -> list[Candidate]:
    """Every member pod with an address (a pod not scheduled yet has none), those
    status.members lists as followers first (a hint only: the choice rests on the live answers)."""
    roles = {m.get("name"): m.get("role") for m in members}
    names = sorted((n for n, ip in pod_ips.items() if ip), key=lambda n: (roles.get(n) != "follower", n))
    return [Candidate(n, f"{pod_ips[n]}:{naming.CLIENT_PORT}") for n in names]


async def find_candidates(
    kube_client: kube.KubeClient, namespace: str, cluster: str, shard: Shard = Shard()
) -> tuple[list[Candidate], dict]:
    candidates, body, _ = await find_candidates_counted(kube_client, namespace, cluster, shard)
    return candidates, body


async def find_candidates_counted(
    kube_client: kube.KubeClient, namespace: str, cluster: str, shard: Shard = Shard()
) -> tuple[list[Candidate], dict, int]:
    """find_candidates, and how many member pods exist, those being deleted too (their etcd
    may still answer for a quorum)."""
    body = await kube_client.get(kube.ETCDCLUSTERS, namespace, cluster)
    if body is None:
        # The pass that started this run saw it; it may come back (the planner waits for it).
        raise SourceUnavailable(f"EtcdCluster {namespace}/{cluster} does not exist", reason="ClusterNotFound")
    meta = body["metadata"]
    outside = shard.why_not_owned(meta.get("labels"), meta.get("finalizers"))
    if outside:
        raise SourceUnavailable(
            f"EtcdCluster {namespace}/{cluster} is not this operator's shard's: {outside}. "
            f"Label this EtcdBackup like its cluster",
            permanent=True,
            reason="ClusterOutsideShard",
        )
    pods = await kube_client.list(kube.PODS, namespace, naming.label_selector(naming.selector_labels(cluster)))
    pod_ips = {
        p["metadata"]["name"]: (p.get("status") or {}).get("podIP")
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
    }
    return rank_candidates((body.get("status") or {}).get("members") or [], pod_ips), body, len(pods)


async def ask_candidates(candidates: list[Candidate], tls: ClientTLS | None) -> dict[str, Answer]:
    """Each candidate's Status answer, asked at once; an error or timeout is an answer too."""

    async def ask(candidate: Candidate) -> Answer:
        try:
            async with EtcdMemberClient(candidate.endpoint, timeout=STATUS_TIMEOUT, tls=tls) as client:
                status = await client.status()
        except (TimeoutError, EtcdError) as e:
            return Answer(error=str(e) or type(e).__name__)
        return Answer(
            status.cluster_id, status.member_id, status.leader_id, status.is_learner, revision=status.revision
        )

    answers = await asyncio.gather(*(ask(c) for c in candidates))
    return {c.name: a for c, a in zip(candidates, answers, strict=True)}


def chosen(
    candidates: list[Candidate], answers: Mapping[str, Answer], body: Mapping[str, Any], fenced: bool = False
) -> SourceMember:
    """The member choose_source picks against the EtcdCluster's recorded ID; its refusal raised."""
    choice = choose_source(candidates, answers, parse_hex_id((body.get("status") or {}).get("clusterID")), fenced)
    if isinstance(choice, Refusal):
        meta = body["metadata"]
        raise SourceUnavailable(
            f"EtcdCluster {meta['namespace']}/{meta['name']}: {choice.message}", reason=choice.reason
        )
    return choice
