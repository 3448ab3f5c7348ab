"""The NetworkPolicy of one cluster, from spec.networkPolicy. Pure.

Ingress to the members only:
- peer port: from the cluster's own members;
- client port: from the members, from the operator's pods (in the operator's namespace),
  and from the pods the user selects (spec.networkPolicy.clientSelector, in the cluster's
  namespace, or in the namespaces spec.networkPolicy.clientNamespaceSelector picks);
- metrics port: from anywhere (it serves metrics and health, no keys), so scrapers and
  probes keep working.
A NetworkPolicy only adds isolation where the cluster's network plugin enforces it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etcd_operator.core.cluster import naming

# The labels of the operator's own pods (deploy/deployment.yaml).
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "etcd-operator"}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def policy_name(cluster: str) -> str:
    return f"{cluster}-etcd"


def enabled(settings: Mapping[str, Any] | None, serves_tls: bool) -> bool:
    """An explicit `enabled` wins. Unset, the policy is on for clusters that serve TLS, that is
    every cluster created by this operator version with its defaults, and off for plaintext
    ones: a cluster that predates the policy keeps its clients, who may not match clientSelector."""
    explicit = (settings or {}).get("enabled")
    return serves_tls if explicit is None else bool(explicit)


def _port(number: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": number}]


def network_policy(
    cluster: str, namespace: str, settings: Mapping[str, Any] | None, operator_namespace: str
) -> dict[str, Any]:
    settings = settings or {}
    members = {"podSelector": {"matchLabels": naming.selector_labels(cluster)}}
    operator = {
        "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)},
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator_namespace}},
    }
    client_peers = [members, operator]
    if settings.get("clientSelector") is not None:
        chosen: dict[str, Any] = {"podSelector": dict(settings["clientSelector"])}
        if settings.get("clientNamespaceSelector") is not None:
            chosen["namespaceSelector"] = dict(settings["clientNamespaceSelector"])
        client_peers.append(chosen)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": policy_name(cluster), "namespace": namespace, "labels": naming.selector_labels(cluster)},
        "spec": {
            "podSelector": {"matchLabels": naming.selector_labels(cluster)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [members], "ports": _port(naming.PEER_PORT)},
                {"from": client_peers, "ports": _port(naming.CLIENT_PORT)},
                {"ports": _port(naming.METRICS_PORT)},
            ],
        },
    }
