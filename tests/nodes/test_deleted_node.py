"""A node gone for good, on real nodes: a follower's node is drained (its member, re-created
on its PVC, waits Pending for the cordoned node its local-path volume is pinned to, past
memberUnhealthyTimeout), then stopped and deleted from the API, as an admin or a cloud's
node controller does with a decommissioned machine. With the Node gone the data is out of
reach: the operator replaces the member on another node, with quorum kept throughout, and
its MemberReplaced event names the evidence. The node is started again afterwards (its
kubelet registers it anew), so that later modules find three Ready nodes. Prints how long
the cluster took to recover (`-s`)."""

from __future__ import annotations

import time

import pytest

from etcd_operator.core.cluster import naming
from localkube import nodefaults, realnodes
from tests.support import chart_release, measured
from tests.support.cluster_members import plaintext_cluster
from tests.support.clusters import condition, events, get_cluster, member_pods, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.members_from_host import put, read_locally, replacement_event, url
from tests.support.waiting import wait_for, wait_for_holding

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.usefixtures("nodes_to_the_module", "kubectl_on_real_nodes"),
]

OPERATOR_NAMESPACE = chart_release.NAMESPACE
NAMESPACE = "deleted-node"
CLUSTER = "decommission"
UNHEALTHY_TIMEOUT_SECONDS = 30  # the CRD's minimum
LEASE = "etcd-operator-leader"


@pytest.fixture(scope="module")
def cluster(operator_release, kubectl_on_real_nodes):
    with plaintext_cluster(NAMESPACE, CLUSTER, UNHEALTHY_TIMEOUT_SECONDS) as name:
        yield name


def live_members() -> list[dict]:
    return [p for p in member_pods(NAMESPACE, CLUSTER) if not p["metadata"].get("deletionTimestamp")]


def status_members() -> dict[str, dict]:
    return {m["name"]: m for m in get_cluster(NAMESPACE, CLUSTER)["status"]["members"]}


def member_ids() -> dict[str, str]:
    return {name: m["id"] for name, m in status_members().items()}


def pvc_uids() -> set[str]:
    selector = naming.label_selector(naming.selector_labels(CLUSTER))
    return {p["metadata"]["uid"] for p in kubectl_json("get", "pvc", "-n", NAMESPACE, "-l", selector)["items"]}


def replacements() -> list[str]:
    return [e["message"] for e in events(NAMESPACE, CLUSTER) if e.get("reason") == "MemberReplaced"]


def follower_away_from_the_operator() -> tuple[str, str]:
    """A follower on a node that does not run the acting operator: the fault hits etcd only."""
    holder = kubectl_json("get", "lease", LEASE, "-n", OPERATOR_NAMESPACE)["spec"]["holderIdentity"]
    operator_pod = holder.rsplit("_", 1)[0]  # the identity is <pod name>_<random>
    operator_node = kubectl_json("get", "pod", operator_pod, "-n", OPERATOR_NAMESPACE)["spec"]["nodeName"]
    leader = next(name for name, m in status_members().items() if m["role"] == "leader")
    placed = sorted((p["metadata"]["name"], p["spec"]["nodeName"]) for p in live_members())
    return next((name, node) for name, node in placed if name != leader and node != operator_node)


def node_exists(node: str) -> bool:
    return kubectl("get", "node", node, check=False).returncode == 0


def test_a_member_whose_node_is_deleted_from_the_api_is_replaced_on_another_node(cluster, real_nodes):
    assert sorted(p["spec"]["nodeName"] for p in live_members()) == realnodes.node_names()
    ids_before = member_ids()
    victim, node = follower_away_from_the_operator()
    victim_pod_uid = kubectl_json("get", "pod", victim, "-n", NAMESPACE)["metadata"]["uid"]
    victim_pvc_uid = kubectl_json("get", "pvc", naming.pvc_name(victim), "-n", NAMESPACE)["metadata"]["uid"]
    others = [url(p) for p in live_members() if p["metadata"]["name"] != victim]
    key = "/deleted-node/before"
    put(others, key, "written-before-the-node-went")

    def quorum_kept():
        available = condition(get_cluster(NAMESPACE, CLUSTER), "Available") or {}
        assert available.get("status") == "True", available

    def nothing_replaced():
        assert member_ids() == ids_before, f"members changed: {ids_before} -> {member_ids()}"
        assert replacements() == [], replacements()

    try:
        drain = kubectl(
            "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=180s", check=False
        )
        assert drain.returncode == 0, drain.stderr
        wait_for(
            lambda: (
                (p := kubectl_json("get", "pod", victim, "-n", NAMESPACE))
                and p["metadata"]["uid"] != victim_pod_uid
                and p["status"].get("phase") == "Pending"
            ),
            120,
            interval=1.0,
            what=f"{victim} re-created and Pending for cordoned {node}",
        )
        # While the Node is in the API (cordoned; it may come back with the data), the member waits.
        waiting = wait_for_holding(
            lambda: (
                (m := (condition(get_cluster(NAMESPACE, CLUSTER), "Progressing") or {}).get("message", ""))
                and f"{victim} not running for longer than memberUnhealthyTimeout" in m
                and m
            ),
            nothing_replaced,
            UNHEALTHY_TIMEOUT_SECONDS + 120,
            interval=2.0,
            what=f"the operator deciding, after the timeout, that {victim} waits for {node}",
        )
        print(f"{node} cordoned: the operator says: {waiting}")

        assert nodefaults.stop(real_nodes, node) == []
        kubectl("delete", "node", node, "--wait=true", "--timeout=60s")
        deleted_at = time.monotonic()
        removed = replacement_event(victim, ids_before[victim])
        event = wait_for_holding(
            lambda: next((m for m in replacements() if m.startswith(removed)), None),
            quorum_kept,
            120,
            interval=1.0,
            what=f"{victim} replaced once {node} is gone from the API",
        )
        replaced_after = time.monotonic() - deleted_at
        assert f"node {node} is gone from the API (its PV pins the member's data there)" in event, event

        def replaced():
            now = member_ids()
            return len(now) == 3 and ids_before[victim] not in now.values() and now

        wait_for_holding(replaced, quorum_kept, 240, interval=2.0, what=f"a new member in place of {victim}")
        wait_healthy(NAMESPACE, CLUSTER, 3, timeout=240)
        recovered_after = time.monotonic() - deleted_at
        # The newcomer may take the victim's name (the operator reuses the next free ordinal).
        (newcomer,) = [name for name, member_id in member_ids().items() if member_id not in ids_before.values()]
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in live_members()}
        assert placed[newcomer] != node, placed
        wait_for(
            lambda: victim_pvc_uid not in pvc_uids(),
            60,
            interval=1.0,
            what=f"{victim}'s PVC, pinned to the gone node, deleted",
        )
        newcomer_url = url(kubectl_json("get", "pod", newcomer, "-n", NAMESPACE))
        wait_for(
            lambda: read_locally(newcomer_url, key) == "written-before-the-node-went",
            60,
            interval=1.0,
            what=f"{newcomer} holding the key written before {node} went",
        )
        measured.report(
            f"node {node} deleted for good ({victim}): replaced {replaced_after:.0f}s after the Node "
            f"was deleted by {newcomer} on {placed[newcomer]}; healthy again {recovered_after:.0f}s "
            f"after it"
        )
    finally:
        nodefaults.heal(real_nodes, node)  # its kubelet starts again and registers the Node anew
        if node_exists(node):
            kubectl("uncordon", node, check=False)  # the test failed before the Node was deleted
        wait_for(
            lambda: (
                node in realnodes.ready_nodes(real_nodes)
                and node_exists(node)
                and not kubectl_json("get", "node", node)["spec"].get("unschedulable")
            ),
            180,
            interval=2.0,
            what=f"{node} registered again, Ready and schedulable",
        )
