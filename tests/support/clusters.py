"""Helpers for EtcdCluster scenario tests on the substrate."""

from __future__ import annotations

import json

from etcd_operator.core.cluster import naming
from tests.support.claims import claimed
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.waiting import wait_for

GROUP = "etcd.operator.dev/v1alpha1"
FAST_RECOVERY = {"memberUnhealthyTimeout": "30s", "quorumLossTimeout": "15s"}


# The scenario tests talk plaintext to members (probes, etcdctl, the acked writer); they ask
# for plaintext clusters unless the spec says otherwise. TLS clusters: tests/nodes/host_operator/test_tls.py.
PLAINTEXT = {"tls": {"enabled": False}}


# Test clusters' raft beats every 300 ms and elects after 3 s (etcd's defaults: 100 ms and 1 s):
# an idle 3-member cluster then takes about a third less CPU, and make test runs a dozen at once.
QUIET_RAFT = {"heartbeatIntervalMillis": 300, "electionTimeoutMillis": 3000}


def apply_cluster(namespace: str, name: str, spec: dict, raft: dict | None = QUIET_RAFT) -> None:
    """`raft` fills spec.etcd's heartbeat and election timeout where the spec sets neither; None
    leaves etcd's own, as users get them: the benches, and the tests that bound how long
    clients wait through a member's restart."""
    spec = {**PLAINTEXT, **spec}
    etcd = spec.get("etcd") or {}
    if raft and not raft.keys() & etcd.keys():
        spec["etcd"] = {**raft, **etcd}
    manifest = {
        "apiVersion": GROUP,
        "kind": "EtcdCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    kubectl("apply", "-f", "-", input=json.dumps(claimed(manifest)))


def patch_spec(namespace: str, name: str, spec: dict) -> None:
    kubectl("patch", "etcdcluster", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec}))


def get_cluster(namespace: str, name: str) -> dict:
    return kubectl_json("get", "etcdcluster", name, "-n", namespace)


def condition(obj: dict, type_: str) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def wait_condition(namespace: str, name: str, type_: str, status: str = "True", timeout: float = 180) -> dict:
    def check():
        obj = get_cluster(namespace, name)
        cond = condition(obj, type_)
        return obj if cond and cond["status"] == status else None

    return wait_for(check, timeout, what=f"{type_}={status} on {namespace}/{name}")


def wait_healthy(namespace: str, name: str, size: int, timeout: float = 240) -> dict:
    """Available, not Progressing, not Degraded, `size` healthy voting members, generation observed."""

    def check():
        obj = get_cluster(namespace, name)
        return obj if is_healthy(obj, size) else None

    return wait_for(check, timeout, interval=1.0, what=f"{namespace}/{name} healthy with {size} members")


def is_healthy(obj: dict, size: int) -> bool:
    """What wait_healthy waits for, on one EtcdCluster object."""
    status = obj.get("status") or {}
    members = status.get("members") or []
    return (
        status.get("observedGeneration") == obj["metadata"]["generation"]
        and (condition(obj, "Available") or {}).get("status") == "True"
        and (condition(obj, "Degraded") or {}).get("status") == "False"
        and status.get("phase") == "Running"
        and len(members) == size
        and all(m["healthy"] and m["role"] in ("leader", "follower") for m in members)
    )


def member_pods(namespace: str, cluster: str) -> list[dict]:
    selector = naming.label_selector(naming.selector_labels(cluster))
    return kubectl_json("get", "pods", "-n", namespace, "-l", selector)["items"]


def member_endpoints(namespace: str, cluster: str) -> list[str]:
    return sorted(
        f"{p['status']['podIP']}:{naming.CLIENT_PORT}"
        for p in member_pods(namespace, cluster)
        if (p.get("status") or {}).get("podIP") and not p["metadata"].get("deletionTimestamp")
    )


def events(namespace: str, name: str) -> list[dict]:
    items = kubectl_json("get", "events", "-n", namespace)["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


def event_posted(namespace: str, name: str, reason: str, timeout: float = 30) -> list[dict]:
    """The object's events of `reason`, waited for: the operator posts an event after the
    status it explains, so a test that has just read that status may find it a moment later."""
    return wait_for(
        lambda: [e for e in events(namespace, name) if e["reason"] == reason],
        timeout,
        what=f"a {reason} event of {name}",
    )
