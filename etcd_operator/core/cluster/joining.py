"""What a member added to the cluster is called and started with: the next free ordinal, and
the --initial-cluster its pod names. Pure; the planner and the adoption both use it."""

from __future__ import annotations

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.health import member_name
from etcd_operator.core.cluster.observed import Member, Observed


def next_ordinal(observed: Observed) -> int:
    """One past the highest ordinal any pod, PVC or member holds (never below min_ordinal)."""
    names = set(observed.pods) | {naming.pvc_member(n) for n in observed.pvcs}
    names |= {member_name(observed, m) or "" for m in observed.etcd.members}
    ordinals = [o for n in names if (o := naming.member_ordinal(observed.cluster, n)) is not None]
    return max(max(ordinals, default=-1) + 1, observed.min_ordinal)


def initial_cluster(observed: Observed, members: tuple[Member, ...], joining: Member) -> str:
    """Every started member (foreign ones too, while adopting) and the joining one, at its
    peer URL."""
    entries = [
        f"{member_name(observed, m)}={m.peer_urls[0]}"
        for m in members
        if (m.id == joining.id or m.name) and m.peer_urls
    ]
    return ",".join(sorted(entries))
