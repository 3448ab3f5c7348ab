"""EtcdCluster end to end on the real nodes, with the operator as a process on the host:
create, scale one member at a time, heal members crashed or wiped in their containers,
recover quorum, resume after the operator dies at a fault point, and refuse bad input."""

from __future__ import annotations

import itertools
import json

import pytest

from etcd_operator.core.cluster import naming
from tests.support import doc_commands
from tests.support.cluster_checks import (
    assert_all_acked_writes_present,
    etcdctl,
    live_configuration,
    pod_of,
    read_prefix,
    restart_count,
)
from tests.support.clusters import (
    FAST_RECOVERY,
    apply_cluster,
    condition,
    events,
    get_cluster,
    member_endpoints,
    member_pods,
    patch_spec,
    wait_condition,
    wait_healthy,
)
from tests.support.etcd_data import put_markers
from tests.support.etcd_probes import AckedWriter, MembershipLog, MembershipRecorder, voter_counts
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process]


def test_create_scale_and_heal(namespace, operator, container_faults):
    apply_cluster(namespace, "demo", {"size": 3, "storage": {"size": "1Gi"}, "recovery": FAST_RECOVERY})
    wait_healthy(namespace, "demo", 3)
    endpoints = member_endpoints(namespace, "demo")
    listed = json.loads(etcdctl(endpoints, "member", "list", "-w", "json"))["members"]
    assert len(listed) == 3 and all(m.get("name") and not m.get("isLearner") for m in listed)
    put_markers(endpoints, "/initial/", 50)

    writer = AckedWriter(lambda: member_endpoints(namespace, "demo")).start()
    recorder = MembershipRecorder(lambda: member_endpoints(namespace, "demo")).start()
    start = live_configuration(endpoints)
    membership = MembershipLog(
        namespace, [p["metadata"]["name"] for p in member_pods(namespace, "demo")], container_faults.read_log
    ).mark()
    for size in (5, 3, 1, 3):
        patch_spec(namespace, "demo", {"size": size})
        wait_healthy(namespace, "demo", size, timeout=300)
    recorder.stop()

    # etcd's own record (a sampler misses a learner promoted and the next one added between
    # two polls): one member at a time, each joining as a learner, straight to each size.
    configurations = membership.configurations(start, live_configuration(member_endpoints(namespace, "demo")))
    assert voter_counts(configurations) == [3, 4, 5, 4, 3, 2, 1, 2, 3], configurations
    for before, after in itertools.pairwise(configurations):
        joined = dict(after).keys() - dict(before).keys()
        assert all(dict(after)[member] for member in joined), f"a member joined as a voter: {before} -> {after}"
    assert all(sum(learner for _, learner in c) <= 1 for c in configurations), "two members were joining at once"
    assert all(sample.has_quorum for sample in recorder.samples), "quorum was lost during scaling"

    # A member's process dies: it restarts on its own data.
    victim = sorted(p["metadata"]["name"] for p in member_pods(namespace, "demo"))[0]
    before = restart_count(pod_of(namespace, victim))
    container_faults.crash_container(namespace, victim, "etcd")
    wait_for(lambda: restart_count(pod_of(namespace, victim)) > before, 60, what="container restart")
    wait_healthy(namespace, "demo", 3)

    # A member's pod is deleted: the operator recreates it and it rejoins as itself.
    uid = pod_of(namespace, victim)["metadata"]["uid"]
    kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")
    wait_for(lambda: pod_of(namespace, victim)["metadata"]["uid"] != uid, 120, what="pod recreated")
    obj = wait_healthy(namespace, "demo", 3)
    assert victim in {m["name"] for m in obj["status"]["members"]}

    # A member's data is wiped: it is replaced by a new member with a new identity.
    container_faults.lose_member_disk(namespace, victim, "etcd")
    obj = wait_for(
        lambda: (
            (o := wait_healthy(namespace, "demo", 3))
            and victim not in {m["name"] for m in o["status"]["members"]}
            and o
        ),
        300,
        what=f"{victim} replaced",
    )
    writer.stop()

    endpoints = member_endpoints(namespace, "demo")
    assert len(read_prefix(endpoints, "/initial/")) == 50
    assert_all_acked_writes_present(endpoints, writer)
    reasons = {e["reason"] for e in events(namespace, "demo")}
    assert {"MemberAdded", "MemberPromoted", "MemberRemoved", "MemberReplaced"} <= reasons, reasons


def test_a_new_cluster_bootstraps_all_members_at_once_and_never_over_a_foreign_volume(operator_process, namespace):
    """docs/concepts.md, "A new cluster starts all its members at once, and never over data":
    a PVC of a member's name that the bootstrap did not create stops it (ChildrenOwned=False,
    NameCollision) with no pod started and the PVC as it was; once it is gone, an operator
    killed after the bootstrap's PVCs resumes, and every member starts at once as a voter,
    none added through the member API, each then settled with its ID on its PVC."""
    name = "boot"
    foreign = f"data-{name}-1"
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": foreign, "namespace": namespace, "labels": {"app": "another-application"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }
        ),
    )
    before = kubectl_json("get", "pvc", foreign, "-n", namespace)["metadata"]
    operator = operator_process(namespace).start()
    try:
        apply_cluster(namespace, name, {"size": 3, "storage": {"size": "1Gi"}})
        refused = wait_condition(namespace, name, "ChildrenOwned", "False", timeout=120)
        owned = condition(refused, "ChildrenOwned")
        assert owned["reason"] == "NameCollision" and f"PersistentVolumeClaim {foreign} exists" in owned["message"]
        assert member_pods(namespace, name) == []
        after = kubectl_json("get", "pvc", foreign, "-n", namespace)["metadata"]
        assert (after["labels"], after.get("annotations"), after["uid"]) == (
            before["labels"],
            before.get("annotations"),
            before["uid"],
        )

        operator.stop()
        operator.start(faults="after-bootstrap-pvcs")
        # Waited for by its UID, not its name: the operator, starting meanwhile, may create its
        # own claim of that name within milliseconds of the foreign one going (CI, once: kubectl's
        # --wait listed the new claim after the old one's deletion and waited on it).
        kubectl("delete", "pvc", foreign, "-n", namespace, "--wait=false")
        wait_for(
            lambda: (
                before["uid"]
                not in {c["metadata"]["uid"] for c in kubectl_json("get", "pvc", "-n", namespace)["items"]}
            ),
            120,
            what=f"the foreign {foreign} gone",
        )
        assert operator.wait_exit(240) == 86
        assert member_pods(namespace, name) == []  # killed with the PVCs created and no pod
        operator.start()
        wait_healthy(namespace, name, 3, timeout=240)
    finally:
        operator.stop()
    listed = json.loads(etcdctl(member_endpoints(namespace, name), "member", "list", "-w", "json"))["members"]
    assert len(listed) == 3 and not any(m.get("isLearner") for m in listed), listed
    reasons = [e["reason"] for e in events(namespace, name)]
    assert "MemberAdded" not in reasons and "MemberPromoted" not in reasons, reasons

    def claim_annotations() -> dict[str, dict]:
        claims = kubectl_json("get", "pvc", "-n", namespace)["items"]
        return {p["metadata"]["name"]: p["metadata"]["annotations"] for p in claims}

    initial = {a[naming.ANNOTATION_INITIAL_CLUSTER] for a in claim_annotations().values()}
    assert len(initial) == 1
    assert [entry.split("=")[0] for entry in initial.pop().split(",")] == [f"{name}-{i}" for i in range(3)]
    ids = {f"data-{m['name']}": f"{m['ID']:x}" for m in listed}
    wait_for(
        lambda: all(claim_annotations()[pvc].get(naming.ANNOTATION_MEMBER_ID) == i for pvc, i in ids.items()),
        60,
        what="every member's ID recorded on its PVC",
    )


def test_quorum_loss_waits_for_approval_then_recovers_from_the_best_survivor(namespace, operator, container_faults):
    apply_cluster(namespace, "q", {"size": 3, "storage": {"size": "1Gi"}, "recovery": FAST_RECOVERY})
    wait_healthy(namespace, "q", 3)
    writer = AckedWriter(lambda: member_endpoints(namespace, "q")).start()
    wait_for(lambda: len(writer.acked) > 100, 60, what="some acknowledged writes")
    writer.stop()

    pods = sorted(p["metadata"]["name"] for p in member_pods(namespace, "q"))
    lost = pods[1:]
    for name in lost:
        container_faults.lose_member_disk(namespace, name, "etcd")

    obj = wait_condition(namespace, "q", "QuorumLost", "True", timeout=180)
    assert condition(obj, "Available")["status"] == "False"
    assert any(e["reason"] == "QuorumLost" and e["type"] == "Warning" for e in events(namespace, "q"))
    # Nothing destructive without approval: every member pod and PVC is still there.
    assert sorted(p["metadata"]["name"] for p in member_pods(namespace, "q")) == pods
    pvcs = kubectl_json("get", "pvc", "-n", namespace)["items"]
    assert {p["metadata"]["name"] for p in pvcs} >= {naming.pvc_name(n) for n in pods}

    # The approval as docs/operations/healing.md prints it.
    _, approve = doc_commands.command("docs/operations/healing.md", "kubectl annotate etcdcluster", NAME="q")
    kubectl(*approve[1:], "-n", namespace)
    obj = wait_healthy(namespace, "q", 3, timeout=400)
    assert condition(obj, "QuorumLost")["status"] == "False"
    assert_all_acked_writes_present(member_endpoints(namespace, "q"), writer)
    assert any(e["reason"] == "QuorumRecovered" for e in events(namespace, "q"))
    # The approval was for this incident only, and the lost members' data was kept aside.
    annotations = obj["metadata"].get("annotations") or {}
    assert naming.ANNOTATION_APPROVE_QUORUM_RECOVERY not in annotations
    kept = kubectl_json("get", "pvc", "-n", namespace, "-l", f"{naming.LABEL_SET_ASIDE_FROM}=q")["items"]
    assert {p["metadata"]["name"] for p in kept} == {naming.pvc_name(n) for n in lost}


def test_operator_killed_right_after_member_add_and_remove_converges(operator_process, namespace):
    operator = operator_process(namespace).start()
    try:
        # The member add of a scale-up, on a cluster that already runs.
        apply_cluster(namespace, "k", {"size": 1, "storage": {"size": "1Gi"}})
        wait_healthy(namespace, "k", 1)
        operator.stop()
        operator.start(faults="after-member-add")
        patch_spec(namespace, "k", {"size": 2})
        assert operator.wait_exit(240) == 86
        # etcd has the learner; its pod was never created.
        endpoints = member_endpoints(namespace, "k")
        listed = json.loads(etcdctl(endpoints, "member", "list", "-w", "json"))["members"]
        assert len(listed) == 2 and len(member_pods(namespace, "k")) == 1

        operator.start()
        wait_healthy(namespace, "k", 2)
        operator.stop()

        operator.start(faults="after-member-remove")
        patch_spec(namespace, "k", {"size": 1})
        assert operator.wait_exit(240) == 86
        listed = json.loads(etcdctl(member_endpoints(namespace, "k"), "member", "list", "-w", "json"))["members"]
        assert len(listed) == 1 and len(member_pods(namespace, "k")) == 2  # removed, pod not yet deleted

        operator.start()
        wait_healthy(namespace, "k", 1)
        wait_for(
            lambda: (
                len(member_pods(namespace, "k")) == 1 and len(kubectl_json("get", "pvc", "-n", namespace)["items"]) == 1
            ),
            120,
            what="the removed member's pod and PVC cleaned up",
        )
    finally:
        operator.stop()


REJECTED_BY_SCHEMA = [
    ({"size": 0}, "greater than or equal to 1"),
    ({"size": 10}, "less than or equal to 9"),
    ({"size": "three"}, "must be of type integer"),
    ({"version": "3.4.27"}, "supported etcd release"),
    ({"version": "latest"}, "supported etcd release"),
    ({"storage": {"emptyDir": {}, "size": "1Gi"}}, "use either emptyDir or a PVC"),
    ({"storage": {"size": "lots"}}, "spec.storage.size"),
    ({"reclaimPolicy": "Keep"}, "supported values"),
    ({"etcd": {"heartbeatIntervalMillis": 100, "electionTimeoutMillis": 300}}, "at least 5 times"),
    ({"etcd": {"quotaBackendBytes": 1024}}, "greater than or equal to 16777216"),
    ({"etcd": {"autoCompactionMode": "hourly"}}, "supported values"),
    ({"repository": "quay.io/coreos/etcd:v3.5.0"}, "must not contain a tag"),
    ({"pod": {"labels": {"etcd.operator.dev/cluster": "other"}}}, "must not use the operator's own"),
    ({"recovery": {"memberUnhealthyTimeout": "soon"}}, "spec.recovery.memberUnhealthyTimeout"),
]


@pytest.mark.parametrize("spec,message", REJECTED_BY_SCHEMA, ids=[m for _, m in REJECTED_BY_SCHEMA])
def test_invalid_spec_is_rejected_with_a_clear_message(namespace, spec, message):
    manifest = {
        "apiVersion": "etcd.operator.dev/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": {"name": "bad", "namespace": namespace},
        "spec": spec,
    }
    refused = kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
    assert refused.returncode != 0 and message in refused.stderr, refused.stderr


def test_disallowed_changes_become_a_condition_and_touch_nothing(namespace, operator):
    apply_cluster(namespace, "c", {"size": 1, "version": "3.6.16", "storage": {"size": "1Gi"}})
    wait_healthy(namespace, "c", 1)
    uids = {p["metadata"]["uid"] for p in member_pods(namespace, "c")}

    cases = [
        ({"version": "3.5.21"}, "VersionDowngrade"),  # below 3.5.32: no downgrade path (etcd_operator/core/versions.py)
        ({"storage": {"size": "1Gi", "storageClassName": "other-class"}}, "StorageClassChange"),
    ]
    for change, reason in cases:
        patch_spec(namespace, "c", change)
        obj = wait_for(
            lambda reason=reason: (
                (o := get_cluster(namespace, "c"))
                and (condition(o, "SpecAccepted") or {}).get("reason") == reason
                and o
            ),
            60,
            what=reason,
        )
        assert condition(obj, "SpecAccepted")["status"] == "False"
        assert condition(obj, "Available")["status"] == "True"
        assert {p["metadata"]["uid"] for p in member_pods(namespace, "c")} == uids, "a member pod was touched"
        undo = {"version": "3.6.16", "storage": {"size": "1Gi", "storageClassName": None}, "etcd": {"extraArgs": None}}
        patch_spec(namespace, "c", undo)
        wait_condition(namespace, "c", "SpecAccepted", "True", timeout=60)
    assert {p["metadata"]["uid"] for p in member_pods(namespace, "c")} == uids
    assert any(e["reason"] == "VersionDowngrade" and e["type"] == "Warning" for e in events(namespace, "c"))


def test_even_size_is_allowed_with_a_warning(namespace, operator):
    apply_cluster(namespace, "even", {"size": 2, "storage": {"size": "1Gi"}})
    obj = wait_healthy(namespace, "even", 2)
    assert condition(obj, "OddSize")["status"] == "False" and condition(obj, "OddSize")["reason"] == "EvenSize"
    assert any(e["reason"] == "EvenSize" and e["type"] == "Warning" for e in events(namespace, "even"))


def test_delete_with_reclaim_policy(namespace, operator):
    apply_cluster(namespace, "keep", {"size": 1, "storage": {"size": "1Gi"}, "reclaimPolicy": "Retain"})
    apply_cluster(namespace, "drop", {"size": 1, "storage": {"size": "1Gi"}, "reclaimPolicy": "Delete"})
    wait_healthy(namespace, "keep", 1)
    wait_healthy(namespace, "drop", 1)
    kubectl("delete", "etcdcluster", "keep", "drop", "-n", namespace, "--timeout=120s")

    def pvc_names():
        return {p["metadata"]["name"] for p in kubectl_json("get", "pvc", "-n", namespace)["items"]}

    wait_for(
        lambda: (
            not member_pods(namespace, "keep") and not member_pods(namespace, "drop") and pvc_names() == {"data-keep-0"}
        ),
        120,
        what="pods gone, only the retained PVC left",
    )
    retained = kubectl_json("get", "pvc", "data-keep-0", "-n", namespace)
    assert not retained["metadata"].get("ownerReferences")
