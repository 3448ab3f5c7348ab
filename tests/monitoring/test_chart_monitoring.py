"""The chart's monitoring values (values.yaml `monitoring`): off by default, and when on the
same ServiceMonitor, PodMonitor and rules as deploy/monitoring/, with the labels asked for
(kube-prometheus-stack selects by `release`). Rendered by the testbin's helm; no cluster."""

from __future__ import annotations

import yaml

from tests.support import monitoring
from tests.support.helm import CHART, helm

ALL_ON = [
    "--set",
    "monitoring.serviceMonitor.enabled=true,monitoring.podMonitor.enabled=true,monitoring.prometheusRule.enabled=true",
    "--set",
    "monitoring.labels.release=kube-prometheus-stack",
]
KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")


def render(*args: str) -> dict[str, dict]:
    out = helm("template", "etcd-operator", str(CHART), "-n", "ops", *args).stdout
    return {d["kind"]: d for d in yaml.safe_load_all(out) if d and d["kind"] in KINDS}


def shipped(kind: str) -> dict:
    docs = [yaml.safe_load(p.read_text()) for p in monitoring.MONITORING.glob("*.yaml")]
    return next(d for d in docs if d and d.get("kind") == kind)


def test_no_monitoring_objects_by_default():
    assert render() == {}


def test_enabled_objects_are_those_of_deploy_with_the_labels_asked_for():
    objects = render(*ALL_ON, "--set", "monitoring.podMonitor.labels.team=etcd")
    assert sorted(objects) == sorted(KINDS)
    for kind, obj in objects.items():
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack", kind
        assert obj["metadata"]["namespace"] == "ops"
    assert objects["PodMonitor"]["metadata"]["labels"]["team"] == "etcd"
    assert "team" not in objects["PrometheusRule"]["metadata"]["labels"]
    assert objects["PodMonitor"]["spec"] == shipped("PodMonitor")["spec"]
    assert objects["PrometheusRule"]["spec"] == shipped("PrometheusRule")["spec"]
    service_monitor, ours = objects["ServiceMonitor"]["spec"], shipped("ServiceMonitor")["spec"]
    assert service_monitor["endpoints"] == ours["endpoints"]
    assert service_monitor["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "etcd-operator"


def test_runbook_urls_follow_the_base_url():
    rules = render(*ALL_ON, "--set", "monitoring.prometheusRule.runbookBaseURL=https://docs.example/etcd/")
    urls = [r["annotations"]["runbook_url"] for g in rules["PrometheusRule"]["spec"]["groups"] for r in g["rules"]]
    assert len(urls) == len(monitoring.alerts())
    assert all(u.startswith("https://docs.example/etcd/monitoring.md#") for u in urls), urls


def test_a_namespaced_install_scrapes_members_of_its_namespaces_only():
    objects = render(*ALL_ON, "--set", "rbac.scope=namespaced", "--set", "watchNamespaces={team-a,team-b}")
    assert objects["PodMonitor"]["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}


def test_a_service_monitor_needs_the_metrics_service():
    result = helm(
        "template",
        "x",
        str(CHART),
        "--set",
        "monitoring.serviceMonitor.enabled=true,metricsService.enabled=false",
        check=False,
    )
    assert result.returncode != 0 and "needs metricsService.enabled" in result.stderr
