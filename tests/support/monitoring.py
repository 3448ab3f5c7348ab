"""The shipped monitoring (deploy/monitoring/) as tests read it: the PrometheusRule's
groups as a plain rules file, the metric names used by rules and dashboard, promtool and
the Prometheus server from testbin."""

from __future__ import annotations

import copy
import json
import pathlib
import re
import subprocess

import yaml

from localkube import layout as localkube_layout

REPO = pathlib.Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "prometheusrules.yaml"
DASHBOARD = MONITORING / "etcd-operator-dashboard.json"


PROMQL_WORDS = {
    "by",
    "on",
    "sum",
    "max",
    "min",
    "rate",
    "increase",
    "time",
    "absent",
    "histogram_quantile",
    "and",
    "or",
    "unless",
    "without",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "count",
    "label_values",
}


# The Prometheus Operator release whose CRDs the monitoring objects are checked against,
# fetched with the Go module proxy like the testbin recipes.
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.80.1"
MONITORING_CRDS = ("servicemonitors", "podmonitors", "prometheusrules")


def prometheus_operator_crds() -> list[pathlib.Path]:
    out = subprocess.run(
        ["go", "mod", "download", "-json", PROMETHEUS_OPERATOR], check=True, capture_output=True, text=True, timeout=300
    ).stdout
    folder = pathlib.Path(json.loads(out)["Dir"]) / "example" / "prometheus-operator-crd"
    return [folder / f"monitoring.coreos.com_{kind}.yaml" for kind in MONITORING_CRDS]


def prometheus_binary(name: str) -> pathlib.Path:
    return localkube_layout.testbin_dir() / "prometheus" / name


def rule_groups(without_annotations: bool = False, for_override: str | None = None) -> dict:
    """The PrometheusRule's spec as a Prometheus rules file. Expressions are never changed."""
    spec = copy.deepcopy(yaml.safe_load(RULES.read_text())["spec"])
    for group in spec["groups"]:
        for rule in group["rules"]:
            if without_annotations:
                rule.pop("annotations", None)
            if for_override is not None and "for" in rule:
                rule["for"] = for_override
    return spec


def alerts() -> dict[str, dict]:
    return {r["alert"]: r for g in rule_groups()["groups"] for r in g["rules"] if "alert" in r}


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets") or []]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v.get("definition")]
    return exprs


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (labels, functions and keywords left out)."""
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    without_labels = re.sub(r"\{[^}]*\}", "{}", without_strings)
    without_ranges = re.sub(r"\[[^\]]*\]", "[]", without_labels)
    without_by = re.sub(r"\b(by|on|without|ignoring)\s*\([^)]*\)", "", without_ranges)
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", without_by))
    return {n for n in names if n not in PROMQL_WORDS and (n.startswith("etcd_") or n == "up")}


def used_metric_names() -> dict[str, set[str]]:
    """Metric name -> where it is used (alert names, "dashboard")."""
    used: dict[str, set[str]] = {}
    for name, rule in alerts().items():
        for metric in metric_names(rule["expr"]):
            used.setdefault(metric, set()).add(name)
    for expr in dashboard_expressions():
        for metric in metric_names(expr):
            used.setdefault(metric, set()).add("dashboard")
    return used


def exposed_names(page: str) -> set[str]:
    """Every series name a /metrics page can produce, samples or not (a labelled family
    with no children yet still has its # TYPE line)."""
    names = set()
    for line in page.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(maxsplit=3)
            suffixes = {
                "counter": ("_total", ""),
                "histogram": ("_bucket", "_count", "_sum"),
                "summary": ("", "_count", "_sum"),
            }.get(kind.strip(), ("",))
            base = family[: -len("_total")] if kind.strip() == "counter" and family.endswith("_total") else family
            names.update(base + s for s in suffixes)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names
