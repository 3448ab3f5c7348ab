"""Prometheus metrics of the operator and the clusters it manages."""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from etcd_operator.core.backup.continuous import StreamLag
from etcd_operator.core.timefmt import parse_time

REGISTRY = CollectorRegistry()
LABELS = ("namespace", "cluster")

cluster_members = Gauge(
    "etcd_operator_cluster_members",
    "Members in etcd, by role and health",
    LABELS + ("role", "healthy"),
    registry=REGISTRY,
)
cluster_desired = Gauge("etcd_operator_cluster_desired_members", "spec.size", LABELS, registry=REGISTRY)
cluster_quorum = Gauge(
    "etcd_operator_cluster_has_quorum", "1 while a quorum of voters is healthy", LABELS, registry=REGISTRY
)
cluster_quorum_lost = Gauge("etcd_operator_cluster_quorum_lost", "1 while QuorumLost is set", LABELS, registry=REGISTRY)
cluster_hibernating = Gauge(
    "etcd_operator_cluster_hibernating",
    "1 while the cluster is asleep, going to sleep or waking (spec.hibernation): members down on purpose",
    LABELS,
    registry=REGISTRY,
)
member_db_size = Gauge(
    "etcd_operator_member_db_size_bytes", "Backend size per member", LABELS + ("member",), registry=REGISTRY
)
member_db_in_use = Gauge(
    "etcd_operator_member_db_size_in_use_bytes",
    "Backend bytes in use per member",
    LABELS + ("member",),
    registry=REGISTRY,
)
reconcile_steps = Counter(
    "etcd_operator_reconcile_steps_total", "Steps taken, by kind", LABELS + ("step",), registry=REGISTRY
)
reconcile_errors = Counter(
    "etcd_operator_reconcile_errors_total", "Reconcile passes that failed", LABELS, registry=REGISTRY
)
backup_last_success = Gauge(
    "etcd_operator_backup_last_success_timestamp_seconds",
    "Unix time of the last successful backup",
    ("namespace", "backup"),
    registry=REGISTRY,
)
backup_bytes = Gauge(
    "etcd_operator_backup_last_size_bytes",
    "Size of the last successful backup",
    ("namespace", "backup"),
    registry=REGISTRY,
)
backup_failures = Counter(
    "etcd_operator_backup_failures_total", "Failed backup runs", ("namespace", "backup", "reason"), registry=REGISTRY
)
backup_duration = Histogram(
    "etcd_operator_backup_duration_seconds",
    "Duration of backup runs",
    ("namespace", "backup"),
    registry=REGISTRY,
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
)


member_warning = Gauge(
    "etcd_operator_member_warning",
    "1 while the operator's anomaly detection warns about a member (see status.members[].warnings)",
    LABELS + ("member", "kind"),
    registry=REGISTRY,
)
cluster_alarm = Gauge(
    "etcd_operator_cluster_alarm",
    "1 while etcd reports this alarm (NOSPACE, CORRUPT)",
    LABELS + ("alarm",),
    registry=REGISTRY,
)

# Label names of every series kept per cluster and per backup, for removing them when the
# object is deleted (stale series would keep alerts firing for good).
PER_CLUSTER = (
    (cluster_members, LABELS + ("role", "healthy")),
    (cluster_desired, LABELS),
    (cluster_quorum, LABELS),
    (cluster_quorum_lost, LABELS),
    (cluster_hibernating, LABELS),
    (member_db_size, LABELS + ("member",)),
    (member_db_in_use, LABELS + ("member",)),
    (reconcile_steps, LABELS + ("step",)),
    (reconcile_errors, LABELS),
    (member_warning, LABELS + ("member", "kind")),
    (cluster_alarm, LABELS + ("alarm",)),
)
backup_last_verified = Gauge(
    "etcd_operator_backup_last_verified_timestamp_seconds",
    "Unix time of the last backup whose verification succeeded",
    ("namespace", "backup"),
    registry=REGISTRY,
)
backup_verification_failures = Counter(
    "etcd_operator_backup_verification_failures_total",
    "Verifications that found a backup differing from its source, by reason",
    ("namespace", "backup", "reason"),
    registry=REGISTRY,
)

# What EtcdBackupStale needs to judge a backup by its own schedule: its mode and cluster
# (a hibernating cluster's backups wait), whether it is suspended, and its longest gap.
BACKUP_MODES = ("one-shot", "scheduled", "continuous")
backup_info = Gauge(
    "etcd_operator_backup_info",
    "1 per EtcdBackup, labelled by its cluster and mode (one-shot, scheduled, continuous)",
    ("namespace", "backup", "cluster", "mode"),
    registry=REGISTRY,
)
backup_suspended = Gauge(
    "etcd_operator_backup_suspended", "1 while spec.suspend is set", ("namespace", "backup"), registry=REGISTRY
)
backup_schedule_interval = Gauge(
    "etcd_operator_backup_schedule_interval_seconds",
    "Longest gap between two slots of spec.schedule, while the operator runs that schedule",
    ("namespace", "backup"),
    registry=REGISTRY,
)
continuous_lag_revisions = Gauge(
    "etcd_operator_backup_continuous_lag_revisions",
    "Revisions of the cluster a running continuous backup has not uploaded yet",
    ("namespace", "backup"),
    registry=REGISTRY,
)
continuous_lag_seconds = Gauge(
    "etcd_operator_backup_continuous_lag_seconds",
    "0 while a running continuous backup holds every revision; else seconds since its chain last moved on",
    ("namespace", "backup"),
    registry=REGISTRY,
)

PER_BACKUP = (
    (backup_info, ("namespace", "backup", "cluster", "mode")),
    (backup_suspended, ("namespace", "backup")),
    (backup_schedule_interval, ("namespace", "backup")),
    (continuous_lag_revisions, ("namespace", "backup")),
    (continuous_lag_seconds, ("namespace", "backup")),
    (backup_last_success, ("namespace", "backup")),
    (backup_bytes, ("namespace", "backup")),
    (backup_failures, ("namespace", "backup", "reason")),
    (backup_duration, ("namespace", "backup")),
    (backup_last_verified, ("namespace", "backup")),
    (backup_verification_failures, ("namespace", "backup", "reason")),
)


RESTORE_OUTCOMES = ("Completed", "Failed", "AlreadyApplied")
restores = Counter(
    "etcd_operator_restores_total",
    "EtcdRestores that ended, by outcome (Completed, Failed, AlreadyApplied)",
    ("namespace", "outcome"),
    registry=REGISTRY,
)
restore_in_progress = Gauge(
    "etcd_operator_restore_in_progress",
    "1 while an EtcdRestore has not ended",
    ("namespace", "restore"),
    registry=REGISTRY,
)
restore_duration = Histogram(
    "etcd_operator_restore_duration_seconds",
    "From an EtcdRestore's status.startTime to its completionTime, by outcome",
    ("namespace", "outcome"),
    registry=REGISTRY,
    buckets=(5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200),
)

build_info = Gauge(
    "etcd_operator_build_info",
    "1; labelled by the operator's version and the Python and kopf versions it runs on",
    ("version", "python_version", "kopf_version"),
    registry=REGISTRY,
)


def _remove_series(
    metric: Any, labelnames: tuple[str, ...], match: dict[str, str], keep: AbstractSet[tuple[str, ...]] = frozenset()
) -> None:
    """Removes the children of `metric` whose labels include `match`, except those in `keep`."""
    children = set()
    for family in metric.collect():
        for sample in family.samples:
            if all(sample.labels.get(k) == v for k, v in match.items()):
                children.add(tuple(sample.labels.get(n, "") for n in labelnames))
    for values in children - set(keep):
        try:
            metric.remove(*values)
        except KeyError:
            pass


# The label values each pass last set, per metric and owner (namespace, cluster or backup),
# for the series a pass replaces: _remove_series walks every series of every owner, which
# every pass of every cluster would make quadratic in the number of clusters.
_last_set: dict[tuple[int, str, str], AbstractSet[tuple[str, ...]]] = {}


def _replace_series(
    metric: Any,
    namespace: str,
    owner: str,
    keep: AbstractSet[tuple[str, ...]],
    setting: AbstractSet[tuple[str, ...]] | None = None,
) -> None:
    """Removes the owner's series that earlier calls set and `keep` does not hold; the caller
    then sets `setting` (default: `keep`)."""
    key = (id(metric), namespace, owner)
    kept = set()
    for values in _last_set.get(key, frozenset()):
        if values in keep:
            kept.add(values)
        else:
            _remove(metric, values)
    _last_set[key] = frozenset(kept | set(keep if setting is None else setting))


def _remove(metric: Any, values: tuple[str, ...]) -> None:
    try:
        metric.remove(*values)
    except KeyError:
        pass


def _forget_owner(namespace: str, owner: str) -> None:
    for key in [k for k in _last_set if k[1:] == (namespace, owner)]:
        del _last_set[key]


def forget_cluster(namespace: str, cluster: str) -> None:
    _forget_owner(namespace, cluster)
    for metric, labelnames in PER_CLUSTER:
        _remove_series(metric, labelnames, {"namespace": namespace, "cluster": cluster})


def forget_backup(namespace: str, backup: str) -> None:
    _forget_owner(namespace, backup)
    for metric, labelnames in PER_BACKUP:
        _remove_series(metric, labelnames, {"namespace": namespace, "backup": backup})


def record_member_warnings(namespace: str, cluster: str, warnings: dict[str, tuple]) -> None:
    """`warnings`: member name -> its warnings (each with a `kind`); others are removed."""
    current = {(namespace, cluster, member, w.kind) for member, ws in warnings.items() for w in ws}
    _replace_series(member_warning, namespace, cluster, current)
    for labels in current:
        member_warning.labels(*labels).set(1)


def record_alarms(namespace: str, cluster: str, alarms: tuple[str, ...]) -> None:
    current = {(namespace, cluster, alarm) for alarm in alarms}
    _replace_series(cluster_alarm, namespace, cluster, current)
    for labels in current:
        cluster_alarm.labels(*labels).set(1)


def record_build_info() -> None:
    build_info.labels(
        importlib.metadata.version("etcd-operator"), platform.python_version(), importlib.metadata.version("kopf")
    ).set(1)


def record_backup_spec(
    namespace: str, backup: str, cluster: str, mode: str, suspended: bool, interval: float | None
) -> None:
    """`interval`: the schedule's longest gap while the operator runs it, else None."""
    if mode not in BACKUP_MODES:
        raise ValueError(f"unknown backup mode {mode!r}")
    current = (namespace, backup, cluster, mode)
    _replace_series(backup_info, namespace, backup, {current})
    backup_info.labels(*current).set(1)
    backup_suspended.labels(namespace, backup).set(1 if suspended else 0)
    if interval is None:
        _remove(backup_schedule_interval, (namespace, backup))
    else:
        backup_schedule_interval.labels(namespace, backup).set(interval)


def record_continuous_lag(namespace: str, backup: str, lag: StreamLag | None) -> None:
    """`lag`: None while no writer runs here or it has not heard the cluster's revision."""
    if lag is None:
        for gauge in (continuous_lag_revisions, continuous_lag_seconds):
            _remove(gauge, (namespace, backup))
        return
    continuous_lag_revisions.labels(namespace, backup).set(lag.revisions)
    continuous_lag_seconds.labels(namespace, backup).set(lag.seconds)


def record_restore(namespace: str, restore: str, previous_phase: str | None, status: Mapping[str, Any]) -> None:
    """After a pass: an ended restore is counted once, by the pass that ended it."""
    phase = status.get("phase")
    if phase not in RESTORE_OUTCOMES:
        restore_in_progress.labels(namespace, restore).set(1)
        for outcome in RESTORE_OUTCOMES:  # at 0 before the first ends, so increase() sees it
            restores.labels(namespace, outcome)
        return
    forget_restore(namespace, restore)
    if previous_phase in RESTORE_OUTCOMES:
        return
    restores.labels(namespace, phase).inc()
    started, ended = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    if started is not None and ended is not None:
        restore_duration.labels(namespace, phase).observe(max(ended - started, 0.0))


def forget_restore(namespace: str, restore: str) -> None:
    _remove_series(restore_in_progress, ("namespace", "restore"), {"namespace": namespace, "restore": restore})


def record_backup_status(namespace: str, backup: str, status: dict) -> None:
    """Backup freshness from the object's status, so whichever replica leads exports the
    same value (a failover keeps it; a restart does not reset it)."""
    verified = parse_time(status.get("lastVerifiedTime"))
    if verified is not None:
        backup_last_verified.labels(namespace, backup).set(verified)
    finished = parse_time(status.get("lastSuccessfulTime"))
    if finished is None:
        return
    backup_last_success.labels(namespace, backup).set(finished)
    size = (status.get("lastBackup") or {}).get("size")
    if size is not None:
        backup_bytes.labels(namespace, backup).set(size)


def record_cluster(
    namespace: str,
    cluster: str,
    desired: int,
    members: list[tuple[str, str, bool, int, int]],
    has_quorum: bool,
    quorum_lost: bool,
    hibernating: bool = False,
) -> None:
    """`members`: (name, role, healthy, db_size, db_size_in_use) per member."""
    cluster_desired.labels(namespace, cluster).set(desired)
    cluster_hibernating.labels(namespace, cluster).set(1 if hibernating else 0)
    cluster_quorum.labels(namespace, cluster).set(1 if has_quorum else 0)
    cluster_quorum_lost.labels(namespace, cluster).set(1 if quorum_lost else 0)
    counts: dict[tuple[str, str], int] = {}
    present = {(namespace, cluster, m[0]) for m in members}
    sized = {(namespace, cluster, m[0]) for m in members if m[3]}
    for gauge in (member_db_size, member_db_in_use):  # members removed since
        _replace_series(gauge, namespace, cluster, present, sized)
    for name, role, healthy, db_size, in_use in members:
        key = (role, "true" if healthy else "false")
        counts[key] = counts.get(key, 0) + 1
        if db_size:
            member_db_size.labels(namespace, cluster, name).set(db_size)
            member_db_in_use.labels(namespace, cluster, name).set(in_use)
    for role in ("leader", "follower", "learner"):
        for health in ("true", "false"):
            cluster_members.labels(namespace, cluster, role, health).set(counts.get((role, health), 0))
