"""EtcdRestore against real MinIO and real etcd members in pods on the real nodes, with the
operator as a process on the host: verified before anything is touched, old data kept, once
only, and safe against passes of the operator that decided on an old copy."""

from __future__ import annotations

import base64
import json

import pytest
import yaml

from etcd_operator.core.cluster import naming
from localkube import controlplane
from localkube.layout import REPO_ROOT
from tests.support.backups import apply_backup, apply_restore, fill, get_backup, get_restore, wait_phase
from tests.support.claims import claimed
from tests.support.cluster_checks import etcdctl, read_prefix
from tests.support.clusters import (
    FAST_RECOVERY,
    GROUP,
    PLAINTEXT,
    apply_cluster,
    events,
    get_cluster,
    member_endpoints,
    member_pods,
    wait_healthy,
)
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.operator_process import OperatorProcess
from tests.support.s3 import create_credentials_secret, s3_client, s3_storage_spec
from tests.support.waiting import wait_for
from tests.support.watch_events import WatchEvents

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane5]


@pytest.fixture
def backed_up(real_nodes, namespace, operator):
    """A 3-member cluster holding /a/*, a completed backup of it, then /b/* written after."""
    apply_cluster(namespace, "src", {"size": 3, "storage": {"size": "1Gi"}, "recovery": FAST_RECOVERY})
    wait_healthy(namespace, "src", 3)
    # etcd 3.6 records its storage version in the data a few seconds after a new cluster
    # elects its leader; a snapshot from before that is in 3.5's schema, and restores as one.
    wait_for(
        lambda: all(
            (s.get("Status") or {}).get("storageVersion", "").startswith("3.6")
            for s in json.loads(etcdctl(member_endpoints(namespace, "src"), "endpoint", "status", "-w", "json"))
        ),
        60,
        what="the 3.6 storage version recorded by every member",
    )
    create_credentials_secret(real_nodes, namespace)
    fill(member_endpoints(namespace, "src"), 200, 256, prefix="/a/")
    apply_backup(
        namespace,
        "nightly",
        {"clusterRef": {"name": "src"}, "storage": s3_storage_spec(real_nodes, f"tests/{namespace}")},
    )
    backup = wait_for(
        lambda: (b := get_backup(namespace, "nightly"))["status"].get("phase") == "Completed" and b,
        120,
        what="backup completed",
    )
    fill(member_endpoints(namespace, "src"), 50, 64, prefix="/b/")
    return backup["status"]["lastBackup"]


def assert_holds_exactly_the_backup(namespace: str, cluster: str) -> None:
    endpoints = member_endpoints(namespace, cluster)
    assert len(read_prefix(endpoints, "/a/")) == 200
    assert read_prefix(endpoints, "/b/") == {}


def keyspace(endpoints: list[str], revision: int | None = None) -> dict[bytes, bytes]:
    """Every key and value (as bytes), at `revision` if given."""
    args = ["get", "", "--prefix", "-w", "json"] + ([f"--rev={revision}"] if revision else [])
    kvs = json.loads(etcdctl(endpoints, *args)).get("kvs") or []
    return {base64.b64decode(kv["key"]): base64.b64decode(kv.get("value", "")) for kv in kvs}


def test_round_trip_restores_every_member_in_parallel_and_the_data_exactly(namespace, backed_up):
    source_at_backup = keyspace(member_endpoints(namespace, "src"), backed_up["revision"])
    apply_restore(
        namespace,
        "r1",
        {
            "source": {"backupRef": {"name": "nightly"}},
            "target": {"newCluster": {"name": "copy", "spec": {**PLAINTEXT, "size": 3, "storage": {"size": "1Gi"}}}},
        },
    )
    restore = wait_phase(namespace, "r1", "Completed", timeout=400)
    status = restore["status"]
    assert status["sourceKey"] == backed_up["key"] and status["sha256"] == backed_up["sha256"]
    assert status["restoredRevision"] == backed_up["revision"]
    # Every member was restored from the snapshot, and the restore pods ran at the same time.
    assert status["seedMembers"] == ["copy-0", "copy-1", "copy-2"]
    pods = status["seedPods"]
    assert sorted(p["member"] for p in pods) == status["seedMembers"]
    # One-second resolution: the operator created every pod before any had finished. (When
    # each container started is the kubelets' on loaded nodes, and a small zstd snapshot
    # restores in a second or two, so the run times themselves need not overlap.)
    assert max(p["createdAt"] for p in pods) <= min(p["finishedAt"] for p in pods), f"not in parallel: {pods}"
    # And the operator created every seed pod in one step, which its event records.
    seeding = [e["message"] for e in events(namespace, "r1") if e["reason"] == "SeedingMembers"]
    assert len(seeding) == 1 and all(m in seeding[0] for m in status["seedMembers"]), seeding
    cluster = wait_healthy(namespace, "copy", 3)
    assert status["clusterID"] == cluster["status"]["clusterID"] != get_cluster(namespace, "src")["status"]["clusterID"]
    restored = keyspace(member_endpoints(namespace, "copy"))
    assert len(restored) == len(source_at_backup) >= 200
    assert restored == source_at_backup  # every key and value, exactly as at the backup's revision
    listed = json.loads(etcdctl(member_endpoints(namespace, "copy"), "member", "list", "-w", "json"))["members"]
    assert len(listed) == 3 and not any(m.get("isLearner") for m in listed)
    assert sorted(m["name"] for m in listed) == status["seedMembers"]  # none joined later from the leader
    reasons = [e["reason"] for e in events(namespace, "r1")]
    assert "RestoreCompleted" in reasons and reasons.count("SeedingMembers") == 1


def test_corrupt_backup_is_refused_and_the_target_is_untouched(real_nodes, namespace, backed_up):
    s3 = s3_client(real_nodes)
    data = bytearray(s3.get_object(Bucket=controlplane.S3_BUCKET, Key=backed_up["key"])["Body"].read())
    data[len(data) // 2] ^= 0x01
    s3.put_object(Bucket=controlplane.S3_BUCKET, Key=backed_up["key"], Body=bytes(data))
    uids = {p["metadata"]["uid"] for p in member_pods(namespace, "src")}

    apply_restore(
        namespace,
        "bad-new",
        {"source": {"backupRef": {"name": "nightly"}}, "target": {"newCluster": {"name": "never"}}},
    )
    apply_restore(
        namespace,
        "bad-inplace",
        {"source": {"backupRef": {"name": "nightly"}}, "target": {"inPlace": {"clusterName": "src", "confirm": True}}},
    )
    for name in ("bad-new", "bad-inplace"):
        failed = wait_phase(namespace, name, "Failed", timeout=120)
        reason = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")["reason"]
        assert reason == "ChecksumMismatch"
    assert kubectl("get", "etcdcluster", "never", "-n", namespace, check=False).returncode != 0
    assert {p["metadata"]["uid"] for p in member_pods(namespace, "src")} == uids
    src = get_cluster(namespace, "src")
    assert naming.ANNOTATION_RESTORE_IN_PROGRESS not in (src["metadata"].get("annotations") or {})
    assert len(read_prefix(member_endpoints(namespace, "src"), "/b/")) == 50


def test_in_place_restore_keeps_the_old_data_while_it_runs(namespace, backed_up):
    old_pvcs = {p["metadata"]["name"] for p in kubectl_json("get", "pvc", "-n", namespace)["items"]}
    apply_restore(
        namespace,
        "inplace",
        {"source": {"backupRef": {"name": "nightly"}}, "target": {"inPlace": {"clusterName": "src", "confirm": True}}},
    )
    seen_preserved = wait_for(
        lambda: (
            (r := get_restore(namespace, "inplace"))["status"].get("seedMembers")
            and r["status"].get("phase") == "Restoring"
            and r
        ),
        180,
        interval=0.3,
        what="old data set aside",
    )
    assert set(seen_preserved["status"]["preservedData"]) == old_pvcs
    present = {p["metadata"]["name"] for p in kubectl_json("get", "pvc", "-n", namespace)["items"]}
    assert old_pvcs <= present, "old PVCs must exist while the restore runs"

    wait_phase(namespace, "inplace", "Completed", timeout=400)
    wait_healthy(namespace, "src", 3)
    assert_holds_exactly_the_backup(namespace, "src")
    kept = kubectl_json("get", "pvc", "-n", namespace, "-l", "etcd.operator.dev/preserved-by-restore=inplace")
    assert {p["metadata"]["name"] for p in kept["items"]} == old_pvcs


def test_total_loss_is_recovered_by_one_restore_from_the_latest_backup(namespace, backed_up, container_faults):
    for pod in member_pods(namespace, "src"):
        container_faults.lose_member_disk(namespace, pod["metadata"]["name"], "etcd")
    wait_for(
        lambda: (
            (
                c := next(
                    (c for c in get_cluster(namespace, "src")["status"]["conditions"] if c["type"] == "Available"), None
                )
            )
            and c["status"] == "False"
        ),
        120,
        what="cluster unavailable",
    )
    manifest = (REPO_ROOT / "examples" / "restore-after-total-loss.yaml").read_text()
    restore = yaml.safe_load(
        manifest.replace("name: demo-backup", "name: nightly").replace("clusterName: demo", "clusterName: src")
    )
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(claimed(restore)))
    wait_phase(namespace, "recover-demo", "Completed", timeout=400)
    wait_healthy(namespace, "src", 3)
    assert_holds_exactly_the_backup(namespace, "src")


def test_a_restore_applied_before_its_backup_and_secret_waits_then_completes(real_nodes, namespace, operator):
    """Applied in the worst order: the restore, then the backup, then the cluster, then the
    Secret. Everything waits for what it needs and converges with no spec change."""
    new_cluster = {"name": "copy", "spec": {**PLAINTEXT, "size": 1, "storage": {"size": "1Gi"}}}
    apply_restore(
        namespace, "early", {"source": {"backupRef": {"name": "first"}}, "target": {"newCluster": new_cluster}}
    )
    waiting = wait_for(
        lambda: (r := get_restore(namespace, "early")).get("status", {}).get("phase") == "Pending" and r,
        60,
        what="the restore pending",
    )
    progressing = next(c for c in waiting["status"]["conditions"] if c["type"] == "Progressing")
    assert progressing["reason"] == "WaitingForBackup" and "does not exist yet" in progressing["message"]
    apply_backup(
        namespace,
        "first",
        {"clusterRef": {"name": "origin"}, "storage": s3_storage_spec(real_nodes, f"tests/{namespace}")},
    )
    wait_for(
        lambda: (
            "has not completed a backup yet"
            in next(c for c in get_restore(namespace, "early")["status"]["conditions"] if c["type"] == "Progressing")[
                "message"
            ]
        ),
        60,
        what="the restore waiting for the backup to complete",
    )
    apply_cluster(namespace, "origin", {"size": 1, "storage": {"size": "1Gi"}})
    wait_for(
        lambda: (
            get_backup(namespace, "first")["status"].get("conditions")
            and next(c for c in get_backup(namespace, "first")["status"]["conditions"] if c["type"] == "Progressing")[
                "reason"
            ]
            == "WaitingForSecret"
        ),
        240,
        what="the backup waiting for its Secret",
    )
    fill(member_endpoints(namespace, "origin"), 20, 64, prefix="/a/")
    create_credentials_secret(real_nodes, namespace)
    done = wait_phase(namespace, "early", "Completed", timeout=400)
    assert done["metadata"]["generation"] == 1
    assert get_backup(namespace, "first")["status"]["phase"] == "Completed"
    assert len(read_prefix(member_endpoints(namespace, "copy"), "/a/")) == 20


def test_operator_killed_mid_restore_resumes_without_restoring_twice(operator_process, namespace, backed_up, operator):
    operator.stop()
    faulty = operator_process(namespace).start(faults="during-restore")
    apply_restore(
        namespace,
        "once",
        {
            "source": {"backupRef": {"name": "nightly"}},
            "target": {"newCluster": {"name": "again", "spec": {**PLAINTEXT, "size": 1, "storage": {"size": "1Gi"}}}},
        },
    )
    assert faulty.wait_exit(180) == 86
    created = kubectl_json("get", "pod", "once-s0", "-n", namespace)  # the killed operator had created it
    faulty.start()
    try:
        wait_phase(namespace, "once", "Completed", timeout=300)
    finally:
        faulty.stop()
    # The killed operator created the restore pod; the restarted one reused it, never a second:
    # the kubelet started its fetch container once, in that one pod.
    started = [
        e
        for e in kubectl_json("get", "events", "-n", namespace)["items"]
        if e["involvedObject"]["name"] == "once-s0"
        and e["reason"] == "Started"
        and e["involvedObject"].get("fieldPath") == "spec.initContainers{fetch}"
    ]
    assert {e["involvedObject"]["uid"] for e in started} == {created["metadata"]["uid"]}, started
    assert sum(e.get("count") or 1 for e in started) == 1, started
    reasons = [e["reason"] for e in events(namespace, "once")]
    assert reasons.count("SnapshotRestored") == 1 and "SeedingMembers" not in reasons[1:]
    assert len(read_prefix(member_endpoints(namespace, "again"), "/a/")) == 200
    # Re-applying the finished restore does nothing.
    apply_restore(
        namespace,
        "once",
        {
            "source": {"backupRef": {"name": "nightly"}},
            "target": {"newCluster": {"name": "again", "spec": {**PLAINTEXT, "size": 1, "storage": {"size": "1Gi"}}}},
        },
    )
    assert get_restore(namespace, "once")["status"]["phase"] == "Completed"
    assert [e["reason"] for e in events(namespace, "once")].count("SnapshotRestored") == 1


# What may still arrive is waited for (phase Pending), not failed.
EARLY_RESTORES = [
    ({"source": {"backupRef": {"name": "missing"}}, "target": {"newCluster": {"name": "x1"}}}, "WaitingForBackup"),
    (
        {
            "source": {"s3": {"bucket": "etcd-backups", "key": "k.db", "credentialsSecretRef": {"name": "nope"}}},
            "target": {"newCluster": {"name": "x2"}},
        },
        "WaitingForSecret",
    ),
    (
        {
            "source": {"backupRef": {"name": "nightly"}},
            "target": {"inPlace": {"clusterName": "ghost", "confirm": True}},
        },
        "WaitingForCluster",
    ),
]
BAD_RESTORES = [
    (
        {
            "source": {"backupRef": {"name": "nightly"}},
            "target": {"newCluster": {"name": "x3", "spec": {"version": "3.5.35"}}},
        },
        "VersionTooOld",
    ),
    ({"source": {"backupRef": {"name": "nightly"}}, "target": {"newCluster": {"name": "src"}}}, "TargetExists"),
    (
        {"source": {"backupRef": {"name": "nightly"}}, "target": {"newCluster": {"name": "x4", "spec": {"size": 12}}}},
        "InvalidClusterSpec",
    ),
    (
        {
            "source": {"backupRef": {"name": "nightly"}},
            "target": {"newCluster": {"name": "x5", "spec": {"size": 1, "storage": {"emptyDir": {}}}}},
        },
        "EmptyDirTarget",
    ),
]


def test_bad_restores_are_reported_clearly_and_touch_nothing(real_nodes, namespace, backed_up):
    # A 3.6 snapshot with no manifest beside it (as `etcdctl snapshot save` leaves it): its
    # version is read from the snapshot itself.
    bare_key = f"tests/{namespace}/bare/snapshot.db"
    s3_client(real_nodes).copy_object(
        Bucket=controlplane.S3_BUCKET,
        Key=bare_key,
        CopySource={"Bucket": controlplane.S3_BUCKET, "Key": backed_up["key"]},
    )
    bare = {k: v for k, v in s3_storage_spec(real_nodes, "")["s3"].items() if k != "prefix"}
    into_35 = {"newCluster": {"name": "x6", "spec": {"size": 1, "version": "3.5.35"}}}
    bad = BAD_RESTORES + [({"source": {"s3": {**bare, "key": bare_key}}, "target": into_35}, "VersionTooOld")]
    for i, (spec, _) in enumerate(bad):
        apply_restore(namespace, f"bad{i}", spec)
    for i, (spec, reason) in enumerate(bad):
        failed = wait_phase(namespace, f"bad{i}", "Failed", timeout=120)
        got = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")
        assert got["reason"] == reason, (spec, got)
    assert get_restore(namespace, f"bad{len(bad) - 1}")["status"]["snapshotEtcdVersion"].startswith("3.6")
    for i, (spec, _) in enumerate(EARLY_RESTORES):
        apply_restore(namespace, f"early{i}", spec)
    for i, (_, reason) in enumerate(EARLY_RESTORES):
        waiting = wait_for(
            lambda i=i, reason=reason: (
                (r := get_restore(namespace, f"early{i}")).get("status", {}).get("phase") == "Pending"
                and next(c for c in r["status"]["conditions"] if c["type"] == "Progressing")["reason"] == reason
                and r
            ),
            60,
            what=f"early{i} waiting, {reason}",
        )
        assert next(c for c in waiting["status"]["conditions"] if c["type"] == "Failed")["status"] == "False"
    clusters = {c["metadata"]["name"] for c in kubectl_json("get", "etcdclusters", "-n", namespace)["items"]}
    assert clusters == {"src"}
    for missing_opt_in in ({"clusterName": "src"}, {"clusterName": "src", "confirm": False}):
        refused = kubectl(
            "apply",
            "-f",
            "-",
            check=False,
            input=json.dumps(
                {
                    "apiVersion": GROUP,
                    "kind": "EtcdRestore",
                    "metadata": {"name": "noopt", "namespace": namespace},
                    "spec": {"source": {"backupRef": {"name": "nightly"}}, "target": {"inPlace": missing_opt_in}},
                }
            ),
        )
        assert refused.returncode != 0 and "confirm" in refused.stderr


# --- a restore never destroys data it was not asked to replace --------------------------


def small_cluster_with_backup(real_nodes, namespace: str, cluster: str) -> dict:
    """A 1-member cluster holding /a/*, a completed backup of it, then /b/* written after."""
    apply_cluster(namespace, cluster, {"size": 1, "storage": {"size": "1Gi"}})
    wait_healthy(namespace, cluster, 1)
    create_credentials_secret(real_nodes, namespace)
    fill(member_endpoints(namespace, cluster), 20, 64, prefix="/a/")
    apply_backup(
        namespace,
        "nightly",
        {"clusterRef": {"name": cluster}, "storage": s3_storage_spec(real_nodes, f"tests/{namespace}")},
    )
    backup = wait_for(
        lambda: (b := get_backup(namespace, "nightly"))["status"].get("phase") == "Completed" and b,
        120,
        what="backup completed",
    )
    fill(member_endpoints(namespace, cluster), 10, 64, prefix="/b/")
    return backup["status"]["lastBackup"]


def pvc_uids(namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in kubectl_json("get", "pvc", "-n", namespace)["items"]}


def reason_of(restore: dict, type_: str) -> str:
    return next(c for c in restore["status"]["conditions"] if c["type"] == type_)["reason"]


def test_a_new_cluster_restore_never_takes_over_retained_data(real_nodes, namespace, operator):
    backup = small_cluster_with_backup(real_nodes, namespace, "keep")
    kubectl("delete", "etcdcluster", "keep", "-n", namespace, "--wait=true", "--timeout=120s")
    wait_for(lambda: not member_pods(namespace, "keep"), 120, what="keep's pods gone")
    retained = pvc_uids(namespace)
    assert list(retained) == ["data-keep-0"]

    apply_restore(
        namespace,
        "into-keep",
        {
            "source": {"backupRef": {"name": "nightly", "key": backup["key"]}},
            "target": {"newCluster": {"name": "keep", "spec": {"size": 1, "storage": {"size": "1Gi"}}}},
        },
    )
    refused = wait_phase(namespace, "into-keep", "Failed", timeout=120)
    assert reason_of(refused, "Failed") == "TargetDataExists"
    assert "PersistentVolumeClaim data-keep-0" in refused["status"]["progress"]
    assert kubectl("get", "etcdcluster", "keep", "-n", namespace, check=False).returncode != 0
    assert pvc_uids(namespace) == retained

    # The retained data is whole: the cluster comes back on it, with the writes newer than the backup.
    apply_cluster(namespace, "keep", {"size": 1, "storage": {"size": "1Gi"}})
    wait_healthy(namespace, "keep", 1)
    endpoints = member_endpoints(namespace, "keep")
    assert len(read_prefix(endpoints, "/a/")) == 20 and len(read_prefix(endpoints, "/b/")) == 10
    assert pvc_uids(namespace) == retained


def test_an_in_place_restore_applied_again_is_recognised_and_touches_nothing(real_nodes, namespace, operator):
    small_cluster_with_backup(real_nodes, namespace, "one")
    spec = {
        "source": {"backupRef": {"name": "nightly"}},
        "target": {"inPlace": {"clusterName": "one", "confirm": True}},
    }
    # An approval of a quorum recovery was about the old data; the restore drops it.
    kubectl("annotate", "etcdcluster", "one", "-n", namespace, f"{naming.ANNOTATION_APPROVE_QUORUM_RECOVERY}=true")
    apply_restore(namespace, "rewind", spec)
    wait_phase(namespace, "rewind", "Completed", timeout=300)
    wait_healthy(namespace, "one", 1)
    assert naming.ANNOTATION_APPROVE_QUORUM_RECOVERY not in get_cluster(namespace, "one")["metadata"]["annotations"]
    assert read_prefix(member_endpoints(namespace, "one"), "/b/") == {}
    fill(member_endpoints(namespace, "one"), 10, 64, prefix="/c/")
    pods, pvcs = {p["metadata"]["uid"] for p in member_pods(namespace, "one")}, pvc_uids(namespace)
    applied = json.loads(get_cluster(namespace, "one")["metadata"]["annotations"]["etcd.operator.dev/restored-from"])
    assert [r["restore"] for r in applied] == ["rewind"]

    # What a GitOps re-sync does: the same object, deleted and applied again.
    kubectl("delete", "etcdrestore", "rewind", "-n", namespace, "--wait=true")
    apply_restore(namespace, "rewind", spec)
    again = wait_phase(namespace, "rewind", "AlreadyApplied", timeout=120)
    assert reason_of(again, "Completed") == "AlreadyApplied" and reason_of(again, "Failed") == "NoFailure"
    assert applied[0]["completedAt"] in again["status"]["progress"]

    endpoints = member_endpoints(namespace, "one")
    assert len(read_prefix(endpoints, "/c/")) == 10
    assert {p["metadata"]["uid"] for p in member_pods(namespace, "one")} == pods
    assert pvc_uids(namespace) == pvcs
    assert not kubectl_json("get", "pods", "-n", namespace, "-l", "etcd.operator.dev/restore=rewind")["items"]


# --- the restore and the cluster hand over explicitly ----------------------------------


def created_during_hold(cluster_events: list, child_events: list, before: set[str]) -> list[str]:
    """The member pods and PVCs created while the cluster carried a restore's hold, from watch
    events. They are ordered by resourceVersion: on the API server's one etcd it is the
    revision of the write, shared by every kind. A PVC the restore created for a member,
    annotated as its seed, is the restore's own."""
    holds = sorted(
        (
            int(obj["metadata"]["resourceVersion"]),
            (obj["metadata"].get("annotations") or {}).get(naming.ANNOTATION_RESTORE_IN_PROGRESS),
        )
        for _, obj in cluster_events
    )
    found = []
    for kind, obj in child_events:
        meta = obj.get("metadata") or {}
        if kind != "ADDED" or meta.get("uid") in before:
            continue
        if "etcd.operator.dev/seed-of-restore" in (meta.get("annotations") or {}):
            continue
        written = int(meta["resourceVersion"])
        hold = next((h for rv, h in reversed(holds) if rv <= written), None)
        if hold:
            found.append(f"{obj.get('kind', '')} {meta['name']} (held by {hold})")
    return found


def operator_with_a_late_pass(operator_process, namespace: str, operator, cluster: str, lag: float) -> OperatorProcess:
    """The operator restarted so that its first cluster pass, begun before any hold, waits
    until the live object is held and then `lag` seconds more (fault point
    stale-cluster-pass); returned once that pass waits."""
    from etcd_operator.controllers import faults

    operator.stop()
    stale = operator_process(namespace, env={faults.STALE_PASS_LAG: str(lag)}).start(faults=faults.STALE_CLUSTER_PASS)
    try:
        wait_for(
            lambda: f"{faults.STALE_CLUSTER_PASS}: {namespace}/{cluster} waits" in stale.log_text(),
            60,
            what="a cluster pass waiting on its old copy",
        )
    except BaseException:
        stale.stop()
        raise
    return stale


def test_a_cluster_pass_that_decided_before_the_hold_creates_nothing_while_it_stands(
    real_nodes, namespace, operator, operator_process
):
    """Issue 25: the cluster's daemon decides on the copy of its object taken as its pass
    began. Here the pass that began before the restore's hold goes on 6 s after the hold
    (fault point stale-cluster-pass). The restore stops nothing before the cluster's
    controller acknowledged the hold, and the cluster executor checks the live hold: no
    member pod or PVC appears while the hold stands."""
    from etcd_operator.controllers import faults

    small_cluster_with_backup(real_nodes, namespace, "held")
    stale = operator_with_a_late_pass(operator_process, namespace, operator, "held", 6)
    try:
        selector = naming.label_selector(naming.selector_labels("held"))
        before = {
            o["metadata"]["uid"]
            for kind in ("pods", "pvc")
            for o in kubectl_json("get", kind, "-n", namespace, "-l", selector)["items"]
        }
        watches = [WatchEvents(kind, "-n", namespace, "-l", selector) for kind in ("pods", "pvc")]
        cluster_watch = WatchEvents("etcdcluster", "held", "-n", namespace)
        apply_restore(
            namespace,
            "rewind",
            {
                "source": {"backupRef": {"name": "nightly"}},
                "target": {"inPlace": {"clusterName": "held", "confirm": True}},
            },
        )
        reasons: set[str] = set()

        def ended():
            restore = get_restore(namespace, "rewind")
            status = restore.get("status") or {}
            reasons.update(c["reason"] for c in status.get("conditions") or [] if c["type"] == "Progressing")
            return status.get("phase") in ("Completed", "Failed") and restore

        try:
            done = wait_for(ended, 400, interval=0.3, what="the restore ended")
        finally:
            cluster_events, child_events = cluster_watch.stop(), [e for w in watches for e in w.stop()]
        assert f"{faults.STALE_CLUSTER_PASS}: {namespace}/held goes on" in stale.log_text()
        created = created_during_hold(cluster_events, child_events, before)
        assert created == [], f"created while the restore held the cluster: {created}"
        assert done["status"]["phase"] == "Completed", done["status"]
        assert "WaitingForHoldAck" in reasons
        wait_healthy(namespace, "held", 1)
        endpoints = member_endpoints(namespace, "held")
        assert len(read_prefix(endpoints, "/a/")) == 20 and read_prefix(endpoints, "/b/") == {}
        ack = get_cluster(namespace, "held")["status"].get("restoreHold")
        assert ack is None, f"the acknowledgement outlived the hold: {ack}"
    finally:
        stale.stop()


def test_a_restore_deleted_while_it_waits_for_the_acknowledgement_lets_the_cluster_go(
    real_nodes, namespace, operator, operator_process
):
    """The cluster's pass that began before the hold goes on 20 s late, so the restore waits
    for the acknowledgement that long; deleted meanwhile, it takes its hold off, and the
    cluster goes on with its members and data untouched."""
    from etcd_operator.controllers import faults

    small_cluster_with_backup(real_nodes, namespace, "kept")
    stale = operator_with_a_late_pass(operator_process, namespace, operator, "kept", 20)
    try:
        pods = {p["metadata"]["uid"] for p in member_pods(namespace, "kept")}
        apply_restore(
            namespace,
            "undo",
            {
                "source": {"backupRef": {"name": "nightly"}},
                "target": {"inPlace": {"clusterName": "kept", "confirm": True}},
            },
        )
        wait_for(
            lambda: reason_of(get_restore(namespace, "undo"), "Progressing") == "WaitingForHoldAck",
            120,
            interval=0.3,
            what="the restore waiting for the acknowledgement",
        )
        kubectl("delete", "etcdrestore", "undo", "-n", namespace, "--wait=true", "--timeout=60s")
        annotations = get_cluster(namespace, "kept")["metadata"].get("annotations") or {}
        assert naming.ANNOTATION_RESTORE_IN_PROGRESS not in annotations, annotations
        assert naming.ANNOTATION_RESTORE_HOLD not in annotations, annotations
        wait_for(
            lambda: "ClusterReleased" in [e["reason"] for e in events(namespace, "undo")],
            30,
            what="the release told in an event",
        )
        wait_for(
            lambda: f"{faults.STALE_CLUSTER_PASS}: {namespace}/kept goes on" in stale.log_text(),
            60,
            what="the late pass going on",
        )
        wait_healthy(namespace, "kept", 1)
        assert {p["metadata"]["uid"] for p in member_pods(namespace, "kept")} == pods
        assert len(read_prefix(member_endpoints(namespace, "kept"), "/b/")) == 10
        assert get_cluster(namespace, "kept")["status"].get("restoreHold") is None
    finally:
        stale.stop()


def test_a_restore_pass_that_decided_before_the_cluster_was_deleted_creates_nothing_for_it(
    real_nodes, namespace, operator, operator_process
):
    """Race 1 of issue 25 with the real API server: the restore's pass decides CreateSeedVolumes
    on its GET of the EtcdCluster, and the cluster is deleted before the step runs (fault point
    stale-restore-pass: the pass waits until the live cluster is being deleted, then goes on).
    The executor reads the live target right before each create (restore/fence.py): no seed
    PVC, which would have no owner and outlive the cluster, is created; the old data stays
    aside and the restore fails once the cluster is gone."""
    from etcd_operator.controllers import faults

    small_cluster_with_backup(real_nodes, namespace, "doomed")
    operator.stop()
    late = operator_process(namespace, env={faults.STALE_PASS_LAG: "1"}).start(faults=faults.STALE_RESTORE_PASS)
    try:
        apply_restore(
            namespace,
            "rewind",
            {
                "source": {"backupRef": {"name": "nightly"}},
                "target": {"inPlace": {"clusterName": "doomed", "confirm": True}},
            },
        )
        wait_for(
            lambda: f"{faults.STALE_RESTORE_PASS}: {namespace}/rewind waits" in late.log_text(),
            300,
            interval=0.3,
            what="the restore pass that decided CreateSeedVolumes waiting",
        )
        kubectl("delete", "etcdcluster", "doomed", "-n", namespace, "--wait=false")
        wait_for(
            lambda: f"{faults.STALE_RESTORE_PASS}: {namespace}/rewind goes on" in late.log_text(),
            120,
            what="the late restore pass going on",
        )
        failed = wait_phase(namespace, "rewind", "Failed", timeout=180)
        assert reason_of(failed, "Failed") == "ClusterNotFound", failed["status"]
        wait_for(
            lambda: not kubectl_json("get", "etcdcluster", "-n", namespace)["items"], 120, what="the EtcdCluster gone"
        )
        pvcs = kubectl_json("get", "pvc", "-n", namespace)["items"]
        seeds = [
            p["metadata"]["name"]
            for p in pvcs
            if "etcd.operator.dev/seed-of-restore" in (p["metadata"].get("annotations") or {})
        ]
        assert seeds == [], f"seed PVCs created for a cluster being deleted: {seeds}"
        kept = [
            p["metadata"]["name"]
            for p in pvcs
            if (p["metadata"].get("labels") or {}).get("etcd.operator.dev/preserved-from-cluster") == "doomed"
        ]
        assert kept == ["data-doomed-0"], f"the old data set aside: {kept}"
        assert (
            f"{namespace}/rewind: CreateSeedVolumes not done: CreateSeedVolumes: EtcdCluster doomed is"
            in late.log_text()
        )
    finally:
        late.stop()
