"""Compares two renderings of the operator's install (the Helm chart and deploy/) by what
they grant and run, not by names or labels: RBAC as (scope, apiGroup, resource, verb)
permissions, the Deployment by its pod spec, the CRDs by their spec."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

# Environment variables the chart may add (it exposes them as values); deploy/ sets them
# only in overlays.
CHART_ONLY_ENV = {"LOG_LEVEL", "LOG_FORMAT", "WATCH_NAMESPACES"}
# Namespaces are created by `helm install --create-namespace`, not by the chart.
NOT_IN_CHART = {"Namespace"}


def permissions(docs: Iterable[dict]) -> set[tuple[str, str, str, str]]:
    """(scope, apiGroup, resource, verb) granted by bound roles; scope is "cluster" for a
    ClusterRole bound cluster-wide, else the namespace of the RoleBinding."""
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("ClusterRole", "Role")
    }
    granted = set()
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role = roles.get((ref["kind"], None if ref["kind"] == "ClusterRole" else namespace, ref["name"]))
        if role is None:
            granted.add((namespace or "cluster", "?", f"missing {ref['kind']} {ref['name']}", "?"))
            continue
        for rule in role.get("rules") or []:
            for group in rule.get("apiGroups") or [""]:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        granted.add((namespace or "cluster", group, resource, verb))
    return granted


def the(docs: Iterable[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


OWN_PODS = "<the Deployment's own pods>"


def pod_spec(deployment: dict) -> dict[str, Any]:
    """The pod spec with the container env as a dict; labels and selectors are left out: a
    pod anti-affinity term that selects exactly the Deployment's own pods reads OWN_PODS."""
    spec = copy.deepcopy(deployment["spec"]["template"]["spec"])
    for container in spec["containers"]:
        container["env"] = {e["name"]: {k: v for k, v in e.items() if k != "name"} for e in container.get("env", [])}
    anti = (spec.get("affinity") or {}).get("podAntiAffinity") or {}
    for term in anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        if term["podAffinityTerm"].get("labelSelector") == deployment["spec"]["selector"]:
            term["podAffinityTerm"]["labelSelector"] = OWN_PODS
    return spec


def deployment_differences(chart: dict, deploy: dict) -> list[str]:
    a, b = pod_spec(chart), pod_spec(deploy)
    out = []
    if chart["spec"].get("replicas") != deploy["spec"].get("replicas"):
        out.append(f"replicas: chart {chart['spec'].get('replicas')} != deploy {deploy['spec'].get('replicas')}")
    for ca, cb in zip(a.pop("containers"), b.pop("containers"), strict=True):
        env_a, env_b = ca.pop("env"), cb.pop("env")
        for name in sorted(set(env_a) | set(env_b)):
            if name in CHART_ONLY_ENV and name not in env_b:
                continue
            if env_a.get(name) != env_b.get(name):
                out.append(f"env {name}: chart {env_a.get(name)} != deploy {env_b.get(name)}")
        for key in sorted(set(ca) | set(cb)):
            if ca.get(key) != cb.get(key):
                out.append(f"container {key}: chart {ca.get(key)} != deploy {cb.get(key)}")
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append(f"pod {key}: chart {a.get(key)} != deploy {b.get(key)}")
    return out


def kinds(docs: Iterable[dict]) -> set[str]:
    return {d["kind"] for d in docs} - NOT_IN_CHART
