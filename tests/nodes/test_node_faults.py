"""Node faults on real nodes, with one operator release and one cluster for all of them: the
members carry a preferred pod anti-affinity and sit on separate nodes; a node partitioned
while quorum holds and healed before memberUnhealthyTimeout costs nothing (same members,
same pods, no replacement) and its member catches up; a drained node's member, whose
local-path volume pins it to the node, waits for the node without being replaced while
the PodDisruptionBudget refuses an eviction that would break quorum, and comes back with its
data after the uncordon. Each prints how long the cluster took to be healthy again (`-s`).
A member's own faults (its data lost, its volume full) fault no node: test_member_faults.py,
beside the other runs' tests."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from etcd_operator.core.cluster import naming
from localkube import nodefaults, realnodes
from tests.support import measured
from tests.support.cluster_members import ClusterMembers, plaintext_cluster, unchanged
from tests.support.clusters import condition, get_cluster, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.members_from_host import put, read_locally, url
from tests.support.waiting import holds_throughout, wait_for, wait_for_holding

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.usefixtures("nodes_to_the_module", "kubectl_on_real_nodes"),
]

NAMESPACE = "node-faults"
CLUSTER = "faults"
UNHEALTHY_TIMEOUT_SECONDS = 30  # the CRD's minimum
MEMBERS = ClusterMembers(NAMESPACE, CLUSTER)


@pytest.fixture(scope="module")
def core(nodes_api):
    from kubernetes import client

    return client.CoreV1Api(nodes_api)


@pytest.fixture(scope="module")
def cluster(operator_release, kubectl_on_real_nodes):
    with plaintext_cluster(NAMESPACE, CLUSTER, UNHEALTHY_TIMEOUT_SECONDS) as name:
        yield name


@pytest.fixture
def spread(cluster):
    """Every test starts from three healthy members on three nodes."""
    wait_healthy(NAMESPACE, CLUSTER, 3, timeout=240)
    assert sorted(p["spec"]["nodeName"] for p in MEMBERS.live()) == realnodes.node_names()
    return cluster


# --- the scenarios ---------------------------------------------------------------------


def test_members_carry_a_preferred_anti_affinity_and_sit_on_separate_nodes(spread):
    pods = MEMBERS.live()
    for pod in pods:
        anti_affinity = pod["spec"]["affinity"]["podAntiAffinity"]
        assert anti_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {naming.LABEL_CLUSTER: CLUSTER}},
                },
            }
        ]
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti_affinity
    assert sorted(p["spec"]["nodeName"] for p in pods) == realnodes.node_names()


def test_a_partition_healed_before_the_timeout_replaces_nothing_and_the_member_catches_up(spread, real_nodes):
    members, pods, pvcs, replaced = MEMBERS.identities(), MEMBERS.pod_uids(), MEMBERS.pvc_uids(), MEMBERS.replacements()
    victim, node = MEMBERS.follower_away_from_the_operator()
    victim_url = url(MEMBERS.pod(victim))
    others = [url(p) for p in MEMBERS.live() if p["metadata"]["name"] != victim]
    key = "/node-faults/partition"
    nodefaults.partition(real_nodes, node)
    try:
        put(others, key, "written-during-the-partition")  # two of three: quorum holds
        assert read_locally(victim_url, key) is None  # the member is cut off
        seen = wait_for(
            lambda: (m := MEMBERS.in_status()[victim]) and not m["healthy"] and m.get("unhealthySince"),
            60,
            interval=1.0,
            what=f"the operator seeing {victim} on partitioned {node} unhealthy",
        )
    finally:
        nodefaults.heal(real_nodes, node)
    healed_at = time.monotonic()
    unhealthy_for = (datetime.now().astimezone() - datetime.fromisoformat(seen.replace("Z", "+00:00"))).total_seconds()
    wait_for(
        lambda: read_locally(victim_url, key) == "written-during-the-partition",
        120,
        interval=1.0,
        what=f"{victim} catching up after the heal",
    )
    wait_healthy(NAMESPACE, CLUSTER, 3, timeout=180)
    recovered_after = time.monotonic() - healed_at
    measured.report(
        f"partition of {node} ({victim}): healed {unhealthy_for:.0f}s after the operator saw it unhealthy "
        f"(timeout {UNHEALTHY_TIMEOUT_SECONDS}s); healthy again {recovered_after:.0f}s after the heal"
    )
    unchanged("members", MEMBERS.identities(), members)
    unchanged("member pods", MEMBERS.pod_uids(), pods)
    unchanged("member PVCs", MEMBERS.pvc_uids(), pvcs)
    unchanged("MemberReplaced events", MEMBERS.replacements(), replaced)


def test_a_drained_node_keeps_its_member_which_waits_for_the_node_while_the_budget_holds_quorum(spread, core):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    members, pods, pvcs, replaced = MEMBERS.identities(), MEMBERS.pod_uids(), MEMBERS.pvc_uids(), MEMBERS.replacements()
    victim, node = MEMBERS.follower_away_from_the_operator()
    others = [p for p in MEMBERS.live() if p["metadata"]["name"] != victim]
    key = "/node-faults/drain"
    put([url(p) for p in others], key, "written-before-the-drain")

    def nothing_replaced():
        now = MEMBERS.identities()
        assert {name: member_id for name, (member_id, _) in now.items()} == {
            name: member_id for name, (member_id, _) in members.items()
        }, f"members changed: {members} -> {now}"
        unchanged("member PVCs", MEMBERS.pvc_uids(), pvcs)
        unchanged("MemberReplaced events", MEMBERS.replacements(), replaced)

    try:
        # --force: other tests' bare pods may sit on the node (the instance keeps them across
        # sessions); pods with a controller, as members are, still go through the Eviction API.
        drain = kubectl(
            "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=180s", check=False
        )
        assert drain.returncode == 0, drain.stderr
        # The operator re-creates the evicted pod on its PVC; the volume holds it to the cordoned node.
        waiting = wait_for(
            lambda: (
                (p := MEMBERS.pod(victim))
                and p["metadata"]["uid"] != pods[victim]
                and p["status"].get("phase") == "Pending"
                and p
            ),
            120,
            interval=1.0,
            what=f"{victim} re-created and waiting for {node}",
        )
        assert not waiting["spec"].get("nodeName")
        assert any(
            c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
            for c in waiting["status"].get("conditions") or []
        )
        wait_for(
            lambda: (
                kubectl_json("get", "pdb", naming.pdb_name(CLUSTER), "-n", NAMESPACE)["status"].get(
                    "disruptionsAllowed"
                )
                == 0
            ),
            60,
            what="the budget allowing no other disruption",
        )
        second = others[0]["metadata"]["name"]
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod_eviction(
                second, NAMESPACE, client.V1Eviction(metadata=client.V1ObjectMeta(name=second, namespace=NAMESPACE))
            )
        assert refused.value.status == 429 and "disruption budget" in refused.value.body, refused.value.body
        assert MEMBERS.pod(second)["metadata"]["uid"] == pods[second]
        put([url(p) for p in others], key, "written-during-the-drain")  # quorum kept
        # Past memberUnhealthyTimeout on the operator's own clock it still waits, and says why.
        reason = wait_for_holding(
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
        print(f"drain of {node}: after the timeout the operator says: {reason}")
        holds_throughout(nothing_replaced, 20, interval=2.0, what="nothing replaced while the node is cordoned")
    finally:
        kubectl("uncordon", node, check=False)
    uncordoned_at = time.monotonic()
    wait_healthy(NAMESPACE, CLUSTER, 3, timeout=240)
    victim_url = url(MEMBERS.pod(victim))
    wait_for(
        lambda: read_locally(victim_url, key) == "written-during-the-drain",
        120,
        interval=1.0,
        what=f"{victim} back on {node} with the write made while it was away",
    )
    recovered_after = time.monotonic() - uncordoned_at
    measured.report(f"drain of {node} ({victim}): healthy again {recovered_after:.0f}s after the uncordon")
    unchanged("members and their nodes", MEMBERS.identities(), members)
    unchanged("member PVCs", MEMBERS.pvc_uids(), pvcs)
    unchanged("MemberReplaced events", MEMBERS.replacements(), replaced)
    assert {n: u for n, u in MEMBERS.pod_uids().items() if n != victim} == {
        n: u for n, u in pods.items() if n != victim
    }
