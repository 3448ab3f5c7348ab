"""The initial cluster a started member is given when its pod is created again on its own
data: itself alone. etcd ignores it over an intact data directory; over an empty one the
member cannot start as anyone else. Pure."""

from __future__ import annotations

from etcd_operator.core.cluster import naming, tls_plan
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.recorded import ClusterStatus


def self_only_cluster(status: ClusterStatus, observed: Observed, member: str) -> str:
    tls = tls_plan.serves_tls_observed(status, observed)
    return f"{member}={naming.peer_url(observed.cluster, observed.namespace, member, tls)}"
