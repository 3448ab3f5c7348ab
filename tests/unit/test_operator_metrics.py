"""The series the backup, restore and build alerts read (docs/monitoring.md): a schedule's
longest gap, a continuous writer's lag, restores by outcome, build_info; and their lifecycle.
Table-driven, no substrate."""

from __future__ import annotations

import datetime

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from etcd_operator.controllers import metrics
from etcd_operator.core.backup import schedule
from etcd_operator.core.backup.continuous import StreamLag, StreamView, stream_lag

HOUR = 3600.0


def samples(name: str, **match: str) -> dict[tuple[tuple[str, str], ...], float]:
    page = generate_latest(metrics.REGISTRY).decode()
    found = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in match.items()):
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


@pytest.mark.parametrize(
    "expression, gap",
    [
        ("0 2 * * *", 24 * HOUR),
        ("@hourly", HOUR),
        ("*/10 * * * *", 600.0),
        ("0 9 * * 1-5", 72 * HOUR),  # Friday to Monday
        ("*/5 9-17 * * 1-5", 63 * HOUR + 300),  # Friday 17:55 to Monday 09:00
        ("0 2,14 * * *", 12 * HOUR),
        ("0 0 1 * *", 31 * 24 * HOUR),
        ("0 0 29 2 *", (4 * 365 + 1) * 24 * HOUR),  # fires less often than the window
    ],
)
def test_longest_gap_of_a_schedule(expression, gap):
    assert schedule.longest_gap(expression, 2026) == gap


def test_interval_only_for_a_schedule_the_operator_runs():
    now = datetime.datetime(2026, 12, 2, 12, tzinfo=datetime.UTC)
    assert schedule.interval("0 2 * * *", now) == 24 * HOUR
    assert schedule.interval(None, now) is None
    assert schedule.interval("not a schedule", now) is None
    assert schedule.interval("*/1 * * * * *", now) is None  # too frequent: refused


def view(last_revision=100, cluster_revision=None, last_segment_at=None, caught_up=None):
    return StreamView(
        "c1", last_revision, cluster_revision=cluster_revision, last_segment_at=last_segment_at, caught_up=caught_up
    )


@pytest.mark.parametrize(
    "stream, base_time, lag",
    [
        (view(cluster_revision=None), 900.0, None),  # the cluster's revision not heard yet
        (view(cluster_revision=100, last_segment_at=10.0), 900.0, StreamLag(0, 0.0)),  # holds everything
        (view(cluster_revision=90), None, StreamLag(0, 0.0)),  # a stale revision is not a negative lag
        (view(cluster_revision=150, last_segment_at=940.0), 900.0, StreamLag(50, 60.0)),
        (view(cluster_revision=150, last_segment_at=940.0, caught_up=(100, 970.0)), 900.0, StreamLag(50, 30.0)),
        (view(cluster_revision=150), 900.0, StreamLag(50, 100.0)),  # nothing uploaded yet: from the base
        (view(cluster_revision=150), None, StreamLag(50, 0.0)),
    ],
)
def test_stream_lag(stream, base_time, lag):
    assert stream_lag(stream, base_time, 1000.0) == lag


def test_backup_spec_series_follow_the_spec_and_go_with_the_backup():
    metrics.record_backup_spec("ns-m", "b", "c", "scheduled", False, 86400.0)
    assert samples("etcd_operator_backup_info", namespace="ns-m") == {
        (("backup", "b"), ("cluster", "c"), ("mode", "scheduled"), ("namespace", "ns-m")): 1.0
    }
    assert samples("etcd_operator_backup_schedule_interval_seconds", namespace="ns-m") == {
        (("backup", "b"), ("namespace", "ns-m")): 86400.0
    }
    metrics.record_backup_spec("ns-m", "b", "other", "one-shot", True, None)  # schedule removed, suspended
    assert list(samples("etcd_operator_backup_info", namespace="ns-m")) == [
        (("backup", "b"), ("cluster", "other"), ("mode", "one-shot"), ("namespace", "ns-m"))
    ]
    assert samples("etcd_operator_backup_schedule_interval_seconds", namespace="ns-m") == {}
    assert samples("etcd_operator_backup_suspended", namespace="ns-m") == {
        (("backup", "b"), ("namespace", "ns-m")): 1.0
    }
    metrics.record_continuous_lag("ns-m", "b", StreamLag(7, 3.0))
    assert samples("etcd_operator_backup_continuous_lag_revisions", namespace="ns-m") == {
        (("backup", "b"), ("namespace", "ns-m")): 7.0
    }
    metrics.record_continuous_lag("ns-m", "b", None)  # the writer stopped
    assert samples("etcd_operator_backup_continuous_lag_seconds", namespace="ns-m") == {}
    metrics.record_continuous_lag("ns-m", "b", StreamLag(7, 3.0))
    metrics.forget_backup("ns-m", "b")
    for name in ("info", "suspended", "continuous_lag_revisions", "continuous_lag_seconds"):
        assert samples(f"etcd_operator_backup_{name}", namespace="ns-m") == {}, name
    with pytest.raises(ValueError):
        metrics.record_backup_spec("ns-m", "b", "c", "weekly", False, None)


def test_a_restore_is_counted_once_when_it_ends():
    running = {"phase": "Restoring", "startTime": "2026-12-02T10:00:00Z"}
    metrics.record_restore("ns-r", "r", "Verifying", running)
    assert samples("etcd_operator_restore_in_progress", namespace="ns-r") == {
        (("namespace", "ns-r"), ("restore", "r")): 1.0
    }
    assert samples("etcd_operator_restores_total", namespace="ns-r") == {
        (("namespace", "ns-r"), ("outcome", outcome)): 0.0 for outcome in ("Completed", "Failed", "AlreadyApplied")
    }
    ended = {**running, "phase": "Completed", "completionTime": "2026-12-02T10:02:00Z"}
    metrics.record_restore("ns-r", "r", "Restoring", ended)
    metrics.record_restore("ns-r", "r", "Completed", ended)  # a later pass of an ended restore
    assert samples("etcd_operator_restore_in_progress", namespace="ns-r") == {}
    assert samples("etcd_operator_restores_total", namespace="ns-r", outcome="Completed") == {
        (("namespace", "ns-r"), ("outcome", "Completed")): 1.0
    }
    assert samples("etcd_operator_restore_duration_seconds_sum", namespace="ns-r") == {
        (("namespace", "ns-r"), ("outcome", "Completed")): 120.0
    }
    metrics.record_restore("ns-r", "failed-early", None, {"phase": "Failed", "completionTime": "2026-12-02T10:00:00Z"})
    assert samples("etcd_operator_restores_total", namespace="ns-r", outcome="Failed") == {
        (("namespace", "ns-r"), ("outcome", "Failed")): 1.0
    }
    metrics.record_restore("ns-r", "gone", None, {"phase": "Pending"})
    metrics.forget_restore("ns-r", "gone")
    assert samples("etcd_operator_restore_in_progress", namespace="ns-r") == {}


def test_build_info_names_the_version():
    metrics.record_build_info()
    (labels,) = samples("etcd_operator_build_info")
    assert dict(labels)["version"] == "0.1.0" and set(dict(labels)) == {"version", "python_version", "kopf_version"}


class OneStream:
    def __init__(self, view: StreamView | None):
        self._view = view

    def view(self, key):
        return self._view


@pytest.mark.parametrize(
    "spec, mode, interval",
    [
        ({"schedule": "0 2 * * *"}, "scheduled", 86400.0),
        ({}, "one-shot", None),
        ({"schedule": "0 2 * * *", "continuous": {"enabled": True}}, "continuous", 86400.0),
        ({"continuous": {"enabled": True}}, "continuous", None),
        ({"schedule": "whenever"}, "scheduled", None),
    ],
)
def test_a_backup_pass_exports_its_mode_interval_and_lag(spec, mode, interval):
    import asyncio

    from etcd_operator.controllers.backup.reconciler import BackupReconciler
    from etcd_operator.core.backup.state import ScheduleSpec

    spec = {"clusterRef": {"name": "c"}, "storage": {"s3": {"bucket": "b"}}, **spec}
    writer = StreamView("c1", 100, cluster_revision=104) if mode == "continuous" else None
    reconciler = BackupReconciler(None, {}, lambda *_: None, streams=OneStream(writer))
    meta = {"namespace": "ns-p", "name": "b"}
    status = {"lastSuccessfulTime": "2026-12-02T10:00:00Z"}
    asyncio.run(reconciler.record_metrics(meta, spec, ScheduleSpec.from_dict(spec), status, 1796205600.0))
    assert samples("etcd_operator_backup_info", namespace="ns-p") == {
        (("backup", "b"), ("cluster", "c"), ("mode", mode), ("namespace", "ns-p")): 1.0
    }
    intervals = samples("etcd_operator_backup_schedule_interval_seconds", namespace="ns-p")
    assert list(intervals.values()) == ([] if interval is None else [interval])
    lag = samples("etcd_operator_backup_continuous_lag_revisions", namespace="ns-p")
    assert list(lag.values()) == ([4.0] if writer else [])
    metrics.forget_backup("ns-p", "b")


def test_every_operator_series_the_rules_and_dashboard_use_is_registered():
    """The real-node test checks this against a running operator; here before any starts."""
    from tests.support import monitoring

    exposed = monitoring.exposed_names(generate_latest(metrics.REGISTRY).decode())
    used = {name for name in monitoring.used_metric_names() if name.startswith("etcd_operator_")}
    assert used - exposed == set()
    assert {"etcd_operator_backup_schedule_interval_seconds", "etcd_operator_restores_total"} <= used


def test_a_clusters_member_series_follow_its_members_and_go_with_it():
    member = ("leader", True, 1000, 800)
    metrics.record_cluster("ns-c", "c", 3, [("c-0", *member), ("c-1", *member), ("c-2", *member)], True, False)
    metrics.record_member_warnings("ns-c", "c", {"c-1": (type("W", (), {"kind": "SlowDisk"})(),)})
    metrics.record_alarms("ns-c", "c", ("NOSPACE",))
    # c-1 stops answering (no size: its last one stays) and c-2 is removed.
    metrics.record_cluster("ns-c", "c", 3, [("c-0", *member), ("c-1", "follower", False, 0, 0)], True, False)
    assert {
        dict(k)["member"]: v for k, v in samples("etcd_operator_member_db_size_bytes", namespace="ns-c").items()
    } == {
        "c-0": 1000.0,
        "c-1": 1000.0,
    }
    metrics.record_member_warnings("ns-c", "c", {})
    metrics.record_alarms("ns-c", "c", ())
    assert samples("etcd_operator_member_warning", namespace="ns-c") == {}
    assert samples("etcd_operator_cluster_alarm", namespace="ns-c") == {}
    metrics.record_cluster("ns-c", "c", 3, [("c-0", *member)], True, False)
    assert [dict(k)["member"] for k in samples("etcd_operator_member_db_size_bytes", namespace="ns-c")] == ["c-0"]
    metrics.forget_cluster("ns-c", "c")
    assert samples("etcd_operator_member_db_size_bytes", namespace="ns-c") == {}
    assert samples("etcd_operator_cluster_desired_members", namespace="ns-c") == {}


def test_a_pass_touches_only_its_own_clusters_series(monkeypatch):
    """Each cluster's pass records its series; walking every cluster's series (collect) on
    every pass would make the operator's CPU quadratic in the number of clusters."""
    member = ("leader", True, 1000, 800)
    for cluster in ("a", "b"):
        metrics.record_cluster("ns-q", cluster, 1, [(f"{cluster}-0", *member)], True, False)

    def walked(*_):
        raise AssertionError("a pass walked every series of a metric")

    for metric in (metrics.member_db_size, metrics.member_db_in_use, metrics.member_warning, metrics.cluster_alarm):
        monkeypatch.setattr(metric, "collect", walked)
    metrics.record_cluster("ns-q", "a", 1, [], True, False)
    metrics.record_member_warnings("ns-q", "a", {})
    metrics.record_alarms("ns-q", "a", ())
    monkeypatch.undo()
    assert [dict(k)["cluster"] for k in samples("etcd_operator_member_db_size_bytes", namespace="ns-q")] == ["b"]
    for cluster in ("a", "b"):
        metrics.forget_cluster("ns-q", cluster)
