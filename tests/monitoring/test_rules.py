"""The shipped alerting rules (deploy/monitoring/prometheusrules.yaml) checked and unit-tested
with Prometheus's own promtool from testbin, and the monitoring kustomization built."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import yaml

from localkube import layout as localkube_layout
from tests.support import monitoring

HERE = pathlib.Path(__file__).parent


def run(*args: str | pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_shipped_rules(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(monitoring.rule_groups()))
    result = run(monitoring.prometheus_binary("promtool"), "check", "rules", rules)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(monitoring.alerts())} rules found" in result.stdout + result.stderr


def test_promtool_rule_unit_tests_pass(tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(monitoring.rule_groups(without_annotations=True)))
    shutil.copy(HERE / "rules_test.yaml", tmp_path / "rules_test.yaml")
    result = run(monitoring.prometheus_binary("promtool"), "test", "rules", tmp_path / "rules_test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_non_firing_case():
    """Firing: a case expects it. Not firing: the same evaluation has input series of another
    cluster/member/backup that must not alert (exp_alerts lists exactly what fires), or an
    earlier evaluation expects nothing."""
    tests = yaml.safe_load((HERE / "rules_test.yaml").read_text())["tests"]
    for alert in monitoring.alerts():
        cases = [(t, c) for t in tests for c in t.get("alert_rule_test") or [] if c["alertname"] == alert]
        assert any(c.get("exp_alerts") for _, c in cases), f"{alert}: no case where it fires"
        quiet = any(not c.get("exp_alerts") for _, c in cases) or any(
            len(t["input_series"]) > len(c["exp_alerts"]) for t, c in cases if c.get("exp_alerts")
        )
        assert quiet, f"{alert}: no case where it must stay quiet"


def test_monitoring_kustomization_builds_and_ships_the_dashboard():
    kubectl = localkube_layout.testbin_dir() / "kube" / "kubectl"
    result = run(kubectl, "kustomize", monitoring.MONITORING)
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == ["ConfigMap", "PodMonitor", "PrometheusRule", "ServiceMonitor"]
    dashboard = next(o for o in objects if o["kind"] == "ConfigMap")["data"]["etcd-operator-dashboard.json"]
    assert json.loads(dashboard)["uid"] == "etcd-operator"


def test_metric_names_are_found_in_expressions():
    expr = (
        "histogram_quantile(0.99, sum by (pod, le) (rate(etcd_disk_wal_fsync_duration_seconds_bucket"
        '{namespace=~"$namespace",job="etcd-members"}[5m]))) > 0.01 and on (pod) up == 1'
    )
    assert monitoring.metric_names(expr) == {"etcd_disk_wal_fsync_duration_seconds_bucket", "up"}
