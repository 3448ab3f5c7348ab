"""Where a pod may go: nodeSelector, required node affinity, taints and tolerations,
required pod (anti-)affinity; among fitting nodes, spread."""

from __future__ import annotations

from collections.abc import Iterable

TERMINAL = ("Succeeded", "Failed")


# --- selectors ------------------------------------------------------------------------


def match_labels(selector: dict | None, labels: dict) -> bool:
    """A metav1.LabelSelector; None matches nothing, {} matches everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_match_expression(e, labels) for e in selector.get("matchExpressions") or [])


def _match_expression(expr: dict, labels: dict) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def match_node_selector_term(term: dict, node: dict) -> bool:
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    exprs, field_exprs = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not field_exprs:
        return False
    return all(_match_expression(e, labels) for e in exprs) and all(_match_expression(e, fields) for e in field_exprs)


# --- filters --------------------------------------------------------------------------


def tolerates(taint: dict, tolerations: list[dict]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def node_affinity_fits(pod: dict, node: dict) -> bool:
    spec = pod["spec"]
    labels = node["metadata"].get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required:
        return any(match_node_selector_term(t, node) for t in required.get("nodeSelectorTerms") or [])
    return True


def taints_fit(pod: dict, node: dict) -> bool:
    tolerations = pod["spec"].get("tolerations") or []
    if node.get("spec", {}).get("unschedulable"):
        if not tolerates({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}, tolerations):
            return False
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(taint, tolerations):
            return False
    return True


def _term_namespaces(term: dict, pod: dict) -> set[str] | None:
    """None means every namespace."""
    if term.get("namespaceSelector") is not None:
        return None  # approximation: any namespaceSelector matches all namespaces
    return set(term.get("namespaces") or []) or {pod["metadata"]["namespace"]}


def _term_matches(term: dict, owner: dict, other: dict) -> bool:
    namespaces = _term_namespaces(term, owner)
    if namespaces is not None and other["metadata"]["namespace"] not in namespaces:
        return False
    return match_labels(term.get("labelSelector"), other["metadata"].get("labels") or {})


def _required(pod: dict, kind: str) -> list[dict]:
    return ((pod["spec"].get("affinity") or {}).get(kind) or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []


def _domain(node: dict, key: str) -> str | None:
    return (node["metadata"].get("labels") or {}).get(key)


def pod_affinity_fits(pod: dict, node: dict, nodes: dict[str, dict], placed: dict[str, list[dict]]) -> bool:
    """placed: node name -> pods bound there (or about to be)."""

    def pods_in_domain(key: str) -> Iterable[dict]:
        value = _domain(node, key)
        if value is None:
            return []
        return [p for name, ps in placed.items() if name in nodes and _domain(nodes[name], key) == value for p in ps]

    for term in _required(pod, "podAntiAffinity"):
        if any(_term_matches(term, pod, other) for other in pods_in_domain(term["topologyKey"])):
            return False
    for term in _required(pod, "podAffinity"):
        candidates = pods_in_domain(term["topologyKey"])
        if not any(_term_matches(term, pod, other) for other in candidates):
            # the first pod of a group may go anywhere if it matches its own term
            anywhere = [p for ps in placed.values() for p in ps]
            if any(_term_matches(term, pod, other) for other in anywhere) or not _term_matches(term, pod, pod):
                return False
    # symmetry: pods already placed may repel this one
    for name, ps in placed.items():
        if name not in nodes:
            continue
        for other in ps:
            for term in _required(other, "podAntiAffinity"):
                key = term["topologyKey"]
                if (
                    _domain(node, key) is not None
                    and _domain(nodes[name], key) == _domain(node, key)
                    and _term_matches(term, other, pod)
                ):
                    return False
    return True


# --- choice ---------------------------------------------------------------------------

FILTERS = (
    ("didn't match Pod's node affinity/selector", lambda pod, node, nodes, placed: node_affinity_fits(pod, node)),
    ("had untolerated taint(s)", lambda pod, node, nodes, placed: taints_fit(pod, node)),
    ("didn't match pod affinity/anti-affinity rules", pod_affinity_fits),
)


def choose_node(pod: dict, nodes: dict[str, dict], placed: dict[str, list[dict]]) -> tuple[str | None, str]:
    """Returns (node name, "") or (None, reason message as the scheduler words it)."""
    fitting, reasons = [], {}
    for name in sorted(nodes):
        node = nodes[name]
        for reason, check in FILTERS:
            if not check(pod, node, nodes, placed):
                reasons[reason] = reasons.get(reason, 0) + 1
                break
        else:
            fitting.append(name)
    if not fitting:
        detail = ", ".join(f"{count} node(s) {reason}" for reason, count in sorted(reasons.items()))
        return None, f"0/{len(nodes)} nodes are available: {detail or 'no nodes registered'}."
    return min(fitting, key=lambda name: _score(pod, name, nodes, placed)), ""


def _score(pod: dict, name: str, nodes: dict[str, dict], placed: dict[str, list[dict]]) -> tuple:
    """Lower is better: preferred rules first, then pods like this one, then all pods."""
    here = placed.get(name, [])
    affinity = pod["spec"].get("affinity") or {}
    penalty = 0
    for pref in (affinity.get("nodeAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        if match_node_selector_term(pref.get("preference") or {}, nodes[name]):
            penalty -= pref.get("weight", 1)
    for pref in (affinity.get("podAntiAffinity") or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        term = pref.get("podAffinityTerm") or {}
        value = _domain(nodes[name], term.get("topologyKey", ""))
        if value is not None and any(
            _term_matches(term, pod, other)
            for n, ps in placed.items()
            if n in nodes and _domain(nodes[n], term["topologyKey"]) == value
            for other in ps
        ):
            penalty += pref.get("weight", 1)
    labels = pod["metadata"].get("labels") or {}
    alike = sum(1 for p in here if labels and (p["metadata"].get("labels") or {}) == labels)
    return penalty, alike, len(here), name


def active_pods(pods: Iterable[dict]) -> dict[str, list[dict]]:
    placed: dict[str, list[dict]] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in TERMINAL:
            placed.setdefault(node, []).append(pod)
    return placed
