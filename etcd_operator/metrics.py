"""Prometheus metrics of the operator and the clusters it manages."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()
LABELS = ("namespace", "cluster")

cluster_members = Gauge("etcd_operator_cluster_members", "Members in etcd, by role and health",
                        LABELS + ("role", "healthy"), registry=REGISTRY)
cluster_desired = Gauge("etcd_operator_cluster_desired_members", "spec.size", LABELS, registry=REGISTRY)
cluster_quorum = Gauge("etcd_operator_cluster_has_quorum", "1 while a quorum of voters is healthy", LABELS,
                       registry=REGISTRY)
cluster_quorum_lost = Gauge("etcd_operator_cluster_quorum_lost", "1 while QuorumLost is set", LABELS,
                            registry=REGISTRY)
member_db_size = Gauge("etcd_operator_member_db_size_bytes", "Backend size per member", LABELS + ("member",),
                       registry=REGISTRY)
member_db_in_use = Gauge("etcd_operator_member_db_size_in_use_bytes", "Backend bytes in use per member",
                         LABELS + ("member",), registry=REGISTRY)
reconcile_steps = Counter("etcd_operator_reconcile_steps_total", "Steps taken, by kind", LABELS + ("step",),
                          registry=REGISTRY)
reconcile_errors = Counter("etcd_operator_reconcile_errors_total", "Reconcile passes that failed", LABELS,
                           registry=REGISTRY)
backup_last_success = Gauge("etcd_operator_backup_last_success_timestamp_seconds",
                            "Unix time of the last successful backup", ("namespace", "backup"), registry=REGISTRY)
backup_bytes = Gauge("etcd_operator_backup_last_size_bytes", "Size of the last successful backup",
                     ("namespace", "backup"), registry=REGISTRY)
backup_failures = Counter("etcd_operator_backup_failures_total", "Failed backup runs", ("namespace", "backup", "reason"),
                          registry=REGISTRY)
backup_duration = Histogram("etcd_operator_backup_duration_seconds", "Duration of backup runs",
                            ("namespace", "backup"), registry=REGISTRY,
                            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800))


def forget_cluster(namespace: str, cluster: str) -> None:
    for gauge in (cluster_desired, cluster_quorum, cluster_quorum_lost):
        try:
            gauge.remove(namespace, cluster)
        except KeyError:
            pass


def record_cluster(namespace: str, cluster: str, desired: int, members: list[tuple[str, str, bool, int, int]],
                   has_quorum: bool, quorum_lost: bool) -> None:
    """`members`: (name, role, healthy, db_size, db_size_in_use) per member."""
    cluster_desired.labels(namespace, cluster).set(desired)
    cluster_quorum.labels(namespace, cluster).set(1 if has_quorum else 0)
    cluster_quorum_lost.labels(namespace, cluster).set(1 if quorum_lost else 0)
    counts: dict[tuple[str, str], int] = {}
    for name, role, healthy, db_size, in_use in members:
        key = (role, "true" if healthy else "false")
        counts[key] = counts.get(key, 0) + 1
        if db_size:
            member_db_size.labels(namespace, cluster, name).set(db_size)
            member_db_in_use.labels(namespace, cluster, name).set(in_use)
    for role in ("leader", "follower", "learner"):
        for healthy in ("true", "false"):
            cluster_members.labels(namespace, cluster, role, healthy).set(counts.get((role, healthy), 0))

backup_last_verified = Gauge("etcd_operator_backup_last_verified_timestamp_seconds",
                             "Unix time of the last backup whose verification succeeded", ("namespace", "backup"),
                             registry=REGISTRY)
backup_verification_failures = Counter("etcd_operator_backup_verification_failures_total",
                                       "Verifications that found a backup differing from its source, by reason",
                                       ("namespace", "backup", "reason"), registry=REGISTRY)
