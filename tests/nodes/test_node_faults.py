"""Node faults on real nodes, with one operator release and one cluster for all of them: the
members carry a preferred pod anti-affinity and sit on separate nodes; a node partitioned
while quorum holds and healed before memberUnhealthyTimeout costs nothing (same members,
same pods, no replacement) and its member catches up; a drained node's member, whose
local-path volume pins it to the node, waits for the node without being replaced while
the PodDisruptionBudget refuses an eviction that would break quorum, and comes back with its
data after the uncordon; a member that lost its data is replaced on the node left without
one; a member whose volume fills up crashes and is replaced after memberUnhealthyTimeout,
with quorum kept and no NOSPACE alarm (that is etcd's quota, not the disk). Each prints how
long the cluster took to be healthy again (`-s`)."""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import subprocess
import tempfile
import time
from datetime import datetime

import pytest

from etcd_operator.core.cluster import builders, naming
from localkube import containerfaults, nodefaults, realnodes
from tests.support import chart_release, measured
from tests.support.chart_release import delete_namespace, restricted_namespace
from tests.support.clusters import apply_cluster, condition, events, get_cluster, member_pods, patch_spec, wait_healthy
from tests.support.diagnostics import print_operator_pod_logs
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.members_from_host import put, read_locally, replacement_event, url
from tests.support.waiting import holds_throughout, wait_for, wait_for_holding

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.usefixtures("nodes_to_the_module", "kubectl_on_real_nodes"),
]

OPERATOR_NAMESPACE = chart_release.NAMESPACE

NAMESPACE = "node-faults"
CLUSTER = "faults"
UNHEALTHY_TIMEOUT_SECONDS = 45  # the CRD's minimum is 30 s
LEASE = "etcd-operator-leader"


@pytest.fixture(scope="module")
def core(nodes_api):
    from kubernetes import client

    return client.CoreV1Api(nodes_api)


@pytest.fixture(scope="module")
def cluster(operator_release, kubectl_on_real_nodes):
    """Plaintext, so that the host reaches each member by its pod IP whoever owns /etc/resolv.conf."""
    restricted_namespace(NAMESPACE)
    apply_cluster(
        NAMESPACE,
        CLUSTER,
        {
            "size": 3,
            "version": "3.6.16",
            "storage": {"size": "1Gi"},
            "recovery": {"memberUnhealthyTimeout": f"{UNHEALTHY_TIMEOUT_SECONDS}s"},
        },
    )
    wait_healthy(NAMESPACE, CLUSTER, 3, timeout=300)
    yield CLUSTER
    delete_namespace(NAMESPACE, wait=False)  # not under the hold of the nodes: it takes 30 s


@pytest.fixture
def spread(cluster):
    """Every test starts from three healthy members on three nodes."""
    wait_healthy(NAMESPACE, CLUSTER, 3, timeout=240)
    assert sorted(p["spec"]["nodeName"] for p in live_members()) == realnodes.node_names()
    return cluster


# --- looking at the cluster ------------------------------------------------------------


def live_members() -> list[dict]:
    return [p for p in member_pods(NAMESPACE, CLUSTER) if not p["metadata"].get("deletionTimestamp")]


def member_pod(name: str) -> dict:
    return kubectl_json("get", "pod", name, "-n", NAMESPACE)


def status_members() -> dict[str, dict]:
    return {m["name"]: m for m in get_cluster(NAMESPACE, CLUSTER)["status"]["members"]}


def identities() -> dict[str, tuple[str, str]]:
    """Member name: (etcd member ID, node)."""
    ids = {name: m["id"] for name, m in status_members().items()}
    return {p["metadata"]["name"]: (ids.get(p["metadata"]["name"]), p["spec"].get("nodeName")) for p in live_members()}


def pod_uids() -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in live_members()}


def pvc_uids() -> dict[str, str]:
    selector = naming.label_selector(naming.selector_labels(CLUSTER))
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in kubectl_json("get", "pvc", "-n", NAMESPACE, "-l", selector)["items"]
    }


def replacements() -> list[str]:
    return [e["message"] for e in events(NAMESPACE, CLUSTER) if e.get("reason") == "MemberReplaced"]


def operator_leader_node() -> str:
    holder = kubectl_json("get", "lease", LEASE, "-n", OPERATOR_NAMESPACE)["spec"]["holderIdentity"]
    pod = holder.rsplit("_", 1)[0]  # the identity is <pod name>_<random>
    return kubectl_json("get", "pod", pod, "-n", OPERATOR_NAMESPACE)["spec"]["nodeName"]


def follower_away_from_the_operator() -> tuple[str, str]:
    """A follower on a node that does not run the acting operator: the fault hits etcd only."""
    leader = next(name for name, m in status_members().items() if m["role"] == "leader")
    operator_node = operator_leader_node()
    placed = sorted((p["metadata"]["name"], p["spec"]["nodeName"]) for p in live_members())
    return next((name, node) for name, node in placed if name != leader and node != operator_node)


def member_replaced(before: dict[str, tuple[str, str]], victim: str):
    """A predicate: three members again, all with IDs, the victim's ID gone. The replacement
    may take the victim's name (the operator reuses the next free ordinal)."""
    gone = before[victim][0]

    def replaced():
        now = identities()
        ids = [member_id for member_id, _ in now.values()]
        return len(now) == 3 and None not in ids and gone not in ids and now

    return replaced


def newcomer(before: dict[str, tuple[str, str]], now: dict[str, tuple[str, str]]) -> str:
    known = {member_id for member_id, _ in before.values()}
    (name,) = [name for name, (member_id, _) in now.items() if member_id not in known]
    return name


def unchanged(what: str, now, before) -> None:
    assert now == before, f"{what} changed: {before} -> {now}"


# --- the scenarios ---------------------------------------------------------------------


def test_members_carry_a_preferred_anti_affinity_and_sit_on_separate_nodes(spread):
    pods = live_members()
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
    members, pods, pvcs, replaced = identities(), pod_uids(), pvc_uids(), replacements()
    victim, node = follower_away_from_the_operator()
    victim_url = url(member_pod(victim))
    others = [url(p) for p in live_members() if p["metadata"]["name"] != victim]
    key = "/node-faults/partition"
    nodefaults.partition(real_nodes, node)
    try:
        put(others, key, "written-during-the-partition")  # two of three: quorum holds
        assert read_locally(victim_url, key) is None  # the member is cut off
        seen = wait_for(
            lambda: (m := status_members()[victim]) and not m["healthy"] and m.get("unhealthySince"),
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
    unchanged("members", identities(), members)
    unchanged("member pods", pod_uids(), pods)
    unchanged("member PVCs", pvc_uids(), pvcs)
    unchanged("MemberReplaced events", replacements(), replaced)


def test_a_drained_node_keeps_its_member_which_waits_for_the_node_while_the_budget_holds_quorum(spread, core):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    members, pods, pvcs, replaced = identities(), pod_uids(), pvc_uids(), replacements()
    victim, node = follower_away_from_the_operator()
    others = [p for p in live_members() if p["metadata"]["name"] != victim]
    key = "/node-faults/drain"
    put([url(p) for p in others], key, "written-before-the-drain")

    def nothing_replaced():
        now = identities()
        assert {name: member_id for name, (member_id, _) in now.items()} == {
            name: member_id for name, (member_id, _) in members.items()
        }, f"members changed: {members} -> {now}"
        unchanged("member PVCs", pvc_uids(), pvcs)
        unchanged("MemberReplaced events", replacements(), replaced)

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
                (p := member_pod(victim))
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
        assert member_pod(second)["metadata"]["uid"] == pods[second]
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
    victim_url = url(member_pod(victim))
    wait_for(
        lambda: read_locally(victim_url, key) == "written-during-the-drain",
        120,
        interval=1.0,
        what=f"{victim} back on {node} with the write made while it was away",
    )
    recovered_after = time.monotonic() - uncordoned_at
    measured.report(f"drain of {node} ({victim}): healthy again {recovered_after:.0f}s after the uncordon")
    unchanged("members and their nodes", identities(), members)
    unchanged("member PVCs", pvc_uids(), pvcs)
    unchanged("MemberReplaced events", replacements(), replaced)
    assert {n: u for n, u in pod_uids().items() if n != victim} == {n: u for n, u in pods.items() if n != victim}


def test_a_member_that_lost_its_data_is_replaced_on_the_node_left_without_a_member(spread):
    before = identities()
    victim, node = follower_away_from_the_operator()
    others = [url(p) for p in live_members() if p["metadata"]["name"] != victim]
    key = "/node-faults/replaced"
    put(others, key, "written-before-the-data-loss")
    lost_at = time.monotonic()
    kubectl("delete", "pvc", naming.pvc_name(victim), "-n", NAMESPACE, "--wait=false")
    kubectl("delete", "pod", victim, "-n", NAMESPACE, "--wait=false")
    wait_for(member_replaced(before, victim), 300, interval=2.0, what=f"{victim} replaced")
    wait_healthy(NAMESPACE, CLUSTER, 3, timeout=240)
    recovered_after = time.monotonic() - lost_at
    now = identities()
    replacement = newcomer(before, now)
    assert now[replacement][1] == node, f"{replacement} landed on {now[replacement][1]}, {node} has no member"
    assert sorted(n for _, n in now.values()) == realnodes.node_names()
    assert any(m.startswith(replacement_event(victim, before[victim][0])) for m in replacements())
    replacement_url = url(member_pod(replacement))
    wait_for(
        lambda: read_locally(replacement_url, key) == "written-before-the-data-loss",
        60,
        interval=1.0,
        what=f"{replacement} holding the data",
    )
    measured.report(
        f"data loss of {victim} on {node}: replaced by {replacement} on {node}; "
        f"healthy again {recovered_after:.0f}s after the PVC was deleted"
    )


def where_things_stand(victim: str) -> str:
    """What a timed-out wait saw last: the victim's container, the cluster's Ready condition,
    its members' health and the events of the last minutes."""
    try:
        statuses = member_pod(victim)["status"].get("containerStatuses") or []
    except Exception as e:
        statuses = [f"unreadable: {e}"]
    cluster = get_cluster(NAMESPACE, CLUSTER)
    members = [(m["name"], m["role"], m["healthy"]) for m in cluster["status"].get("members") or []]
    said = [f"{e.get('reason')}: {e.get('message')}" for e in events(NAMESPACE, CLUSTER)][-8:]
    ready = condition(cluster, "Ready")
    return f"{victim}'s containers: {statuses}; Ready: {ready}; members: {members}; events: {said}"


def mounted(path: pathlib.Path) -> bool:
    return subprocess.run(["mountpoint", "-q", str(path)]).returncode == 0


@contextlib.contextmanager
def nearly_full(path: pathlib.Path, headroom: int):
    """The folder's data moved onto a tmpfs with `headroom` left: a node disk about to fill up.
    Only a container started afterwards sees it (a bind mount is taken at start)."""
    stash = pathlib.Path(tempfile.mkdtemp(prefix=".full-", dir=path.parent))
    try:
        subprocess.run(["cp", "-a", f"{path}/.", str(stash)], check=True)
        mode = path.stat()
        subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size=1g,mode={mode.st_mode & 0o7777:o},uid={mode.st_uid},gid={mode.st_gid}",
                "tmpfs",
                str(path),
            ],
            check=True,
        )
        # Not sparse: etcd preallocates its WAL segments (64 MiB each, read back as zeros); a
        # sparse copy would leave it that much to allocate again, beyond the headroom, as it starts.
        subprocess.run(["cp", "-a", "--sparse=never", f"{stash}/.", str(path)], check=True)
        used = int(
            subprocess.run(
                ["df", "--output=used", "-B1", str(path)], capture_output=True, text=True, check=True
            ).stdout.split()[1]
        )
        subprocess.run(["mount", "-o", f"remount,size={used + headroom}", str(path)], check=True)
        yield
    finally:
        if mounted(path):
            subprocess.run(["umount", "-l", str(path)], check=False)
        shutil.rmtree(stash, ignore_errors=True)


def test_a_member_whose_volume_fills_up_crashes_and_is_replaced_after_the_timeout(real_nodes, spread):
    before = identities()
    victim, node = follower_away_from_the_operator()
    others = [url(p) for p in live_members() if p["metadata"]["name"] != victim]
    path = containerfaults.volume_path(real_nodes, NAMESPACE, naming.pvc_name(victim))
    patch_spec(NAMESPACE, CLUSTER, {"paused": True})
    try:
        wait_for(
            lambda: get_cluster(NAMESPACE, CLUSTER)["status"].get("phase") == "Paused",
            60,
            what="the cluster paused, so that the member's pod stays away while its data moves",
        )
        kubectl("delete", "pod", victim, "-n", NAMESPACE, "--wait=true", "--timeout=90s")
        with nearly_full(path, 8 << 20):
            patch_spec(NAMESPACE, CLUSTER, {"paused": False})
            wait_healthy(NAMESPACE, CLUSTER, 3, timeout=180)
            filling_at = time.monotonic()
            value = "x" * (512 * 1024)

            def restarts():
                statuses = member_pod(victim)["status"].get("containerStatuses") or []
                return sum(s.get("restartCount", 0) for s in statuses)

            started_with = restarts()  # a restart before the writes is not the full volume's

            def crashed():
                return restarts() > started_with

            for index in range(200):  # 100 MiB at most; the tmpfs has 8 MiB left
                put(others, f"/node-faults/fill/{index}", value)  # quorum holds
                if crashed():
                    break
            assert crashed(), f"{victim} kept running on a full volume"
            crashed_after = time.monotonic() - filling_at

            def quorum_and_no_alarm():
                cluster = get_cluster(NAMESPACE, CLUSTER)
                assert (condition(cluster, "Alarm") or {}).get("status") != "True", condition(cluster, "Alarm")
                assert (condition(cluster, "Available") or {}).get("status") == "True", condition(cluster, "Available")

            removed = replacement_event(victim, before[victim][0])
            try:
                wait_for_holding(
                    lambda: any(m.startswith(removed) for m in replacements()),
                    quorum_and_no_alarm,
                    # A restarted container inside its startup probe's budget is waited for
                    # (docs/reference/etcdcluster.md): the bound is the timeout plus that budget.
                    UNHEALTHY_TIMEOUT_SECONDS + builders.STARTUP_PROBE_PERIOD * builders.STARTUP_PROBE_FAILURES + 60,
                    interval=2.0,
                    what=f"{victim} on a full volume replaced",
                )
            except TimeoutError as e:
                print_operator_pod_logs(OPERATOR_NAMESPACE, tail=200)
                raise TimeoutError(f"{e}; {where_things_stand(victim)}") from None
    finally:
        patch_spec(NAMESPACE, CLUSTER, {"paused": False})
    wait_for(member_replaced(before, victim), 240, interval=2.0, what=f"a new member in place of {victim}")
    wait_healthy(NAMESPACE, CLUSTER, 3, timeout=300)
    recovered_after = time.monotonic() - filling_at
    now = identities()
    replacement = newcomer(before, now)
    measured.report(
        f"full volume of {victim} on {node}: it crashed {crashed_after:.0f}s after the writes began; replaced by "
        f"{replacement} on {now[replacement][1]}, healthy again {recovered_after:.0f}s after the writes began"
    )
    assert sorted(n for _, n in now.values()) == realnodes.node_names()
