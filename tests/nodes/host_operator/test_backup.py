"""EtcdBackup against real etcd members in pods on the real nodes and the substrate's real
MinIO, with the operator as a process on the host, killed at fault points. A test that stops
the store has a MinIO of its own, so that the other run's backups keep theirs."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess

import pytest

from etcd_operator.clients.etcd.client import EtcdError, EtcdMemberClient
from etcd_operator.controllers.faults import AFTER_SCRATCH_POD_RECORDED
from etcd_operator.core.backup import sealed
from localkube import containerfaults, controlplane
from localkube import layout as localkube_layout
from tests.support.backups import apply_backup, condition, fill, get_backup
from tests.support.clusters import FAST_RECOVERY, apply_cluster, event_posted, events, member_endpoints, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.recording_proxy import RecordingProxy
from tests.support.s3 import (
    PrivateMinio,
    create_credentials_secret,
    list_keys,
    pending_uploads,
    read_json,
    s3_client,
    s3_storage_spec,
)
from tests.support.waiting import wait_for, wait_for_holding

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane2]


@pytest.fixture
def cluster(real_nodes, namespace, operator):
    apply_cluster(namespace, "db", {"size": 3, "storage": {"size": "1Gi"}, "recovery": FAST_RECOVERY})
    wait_healthy(namespace, "db", 3)
    create_credentials_secret(real_nodes, namespace)
    return "db"


@pytest.fixture
def own_minio(real_nodes, namespace):
    """A MinIO for this test alone, which it may stop."""
    store = PrivateMinio(real_nodes, namespace).start()
    yield store
    store.remove()


def event_reasons(namespace: str, name: str) -> set[str]:
    return {e["reason"] for e in events(namespace, name)}


def test_one_shot_backup_lands_verified_in_minio(own_minio, namespace, cluster, operator, tmp_path):
    """The backup lands in MinIO; then its verification, asked for with the store down, is
    incomplete and retried after its backoff, in passes that show the scratch pod in status,
    and is resumed with that same pod by an operator restarted after dying mid-verification."""
    fill(member_endpoints(namespace, cluster), 300, 1024)
    prefix = f"tests/{namespace}"
    apply_backup(namespace, "once", {"clusterRef": {"name": cluster}, "storage": s3_storage_spec(own_minio, prefix)})
    backup = wait_for(
        lambda: (b := get_backup(namespace, "once"))["status"].get("phase") == "Completed" and b,
        120,
        what="one-shot backup completed",
    )
    last = backup["status"]["lastBackup"]
    s3 = s3_client(own_minio)
    bucket = controlplane.S3_BUCKET
    keys = list_keys(s3, bucket, prefix)
    assert keys == sorted([last["key"], last["manifestKey"]])
    manifest = read_json(s3, bucket, last["manifestKey"])
    data = s3.get_object(Bucket=bucket, Key=last["key"])["Body"].read()
    assert hashlib.sha256(data).hexdigest() == manifest["sha256"] == last["sha256"]
    assert len(data) == manifest["size"]
    assert manifest["member"] in {
        m["name"]
        for m in kubectl_json("get", "etcdcluster", cluster, "-n", namespace)["status"]["members"]
        if m["role"] == "follower"
    }
    assert sealed.Header.parse(data).compression == "zstd"  # the default
    snapshot = tmp_path / "snapshot.db"
    snapshot.write_bytes(b"".join(sealed.decode([data])))
    etcdutl = localkube_layout.testbin_dir() / "etcd-3.6" / "etcdutl"
    out = subprocess.run(
        [str(etcdutl), "snapshot", "status", str(snapshot), "-w", "json"], check=True, capture_output=True, text=True
    )
    assert json.loads(out.stdout)["revision"] == manifest["revision"]
    event_posted(namespace, "once", "BackupSucceeded")
    secret_key = own_minio.s3_environment()["AWS_SECRET_ACCESS_KEY"]
    assert secret_key not in json.dumps(backup)
    assert secret_key not in operator.log_path.read_text()

    # Verification asked for while the store is down: no verdict, so a retry is scheduled.
    own_minio.stop()
    try:
        kubectl(
            "patch",
            "etcdbackup",
            "once",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"spec":{"verification":{"enabled":true}}}',
        )
        tried = wait_for(
            lambda: (
                (v := get_backup(namespace, "once")["status"].get("verification") or {}).get("nextAttemptTime") and v
            ),
            60,
            interval=0.2,
            what="an incomplete verification",
        )
    finally:
        own_minio.start()
    assert tried["key"] == last["key"] and tried["attempts"] == 1 and "pod" not in tried, tried
    assert tried["reason"] in ("ManifestUnreadable", "StorageError"), tried
    obj = get_backup(namespace, "once")
    assert "lastVerification" not in obj["status"] and condition(obj, "Degraded")["status"] == "False"
    event_posted(namespace, "once", "VerificationRetryScheduled")

    # The retry, after its backoff, records its scratch pod by uid; the operator dies in the
    # next pass (a fault point), while that pod runs.
    operator.stop()
    operator.start(faults=AFTER_SCRATCH_POD_RECORDED)
    assert operator.wait_exit(150) == 86
    obj = get_backup(namespace, "once")
    attempt = obj["status"]["verification"]
    assert attempt["attempts"] == 2 and attempt["key"] == last["key"] and attempt["startTime"], attempt
    progressing = condition(obj, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "Verifying"), progressing
    assert attempt["pod"]["name"] in progressing["message"]
    scratch = kubectl_json("get", "pods", "-n", namespace, "-l", "etcd.operator.dev/verifies-backup")["items"]
    assert [p["metadata"]["uid"] for p in scratch] == [attempt["pod"]["uid"]]
    operator.start()

    obj = wait_for(
        lambda: (b := get_backup(namespace, "once"))["status"].get("lastVerification") and b,
        120,
        what="the verification's verdict after the restart",
    )
    verification = obj["status"]["lastVerification"]
    assert verification["verified"] is True and verification["key"] == last["key"], verification
    assert "verification" not in obj["status"] and condition(obj, "Degraded")["status"] == "False"
    started = [e for e in events(namespace, "once") if e["reason"] == "VerificationStarted"]
    assert len(started) == 1 and started[0].get("count", 1) == 1, started  # the same pod, resumed
    assert attempt["pod"]["uid"] in started[0]["message"]
    wait_for(
        lambda: not kubectl_json("get", "pods", "-n", namespace, "-l", "etcd.operator.dev/verifies-backup")["items"],
        60,
        what="the scratch pod deleted",
    )
    assert read_json(s3, bucket, last["manifestKey"])["verified"] is True


def test_scheduled_backups_keep_exactly_n_and_leave_other_files_alone(real_nodes, namespace, cluster):
    prefix = f"tests/{namespace}"
    s3 = s3_client(real_nodes)
    bucket = controlplane.S3_BUCKET
    stranger = f"{prefix}/{namespace}/every10s/not-ours.txt"
    s3.put_object(Bucket=bucket, Key=stranger, Body=b"someone else's file")
    apply_backup(
        namespace,
        "every10s",
        {
            "clusterRef": {"name": cluster},
            "schedule": "* * * * * */10",
            "retention": {"maxBackups": 2},
            "verification": {"enabled": False},
            "storage": s3_storage_spec(real_nodes, prefix),
        },
    )
    wait_for(
        lambda: (
            len(get_backup(namespace, "every10s")["status"].get("recentBackups") or []) >= 2
            and sum(
                1 for e in kubectl_json("get", "events", "-n", namespace)["items"] if e["reason"] == "RetentionApplied"
            )
            >= 2
        ),
        120,
        what="several scheduled runs with retention",
    )
    kubectl("patch", "etcdbackup", "every10s", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for(lambda: get_backup(namespace, "every10s")["status"].get("phase") == "Suspended", 60, what="suspended")
    keys = list_keys(s3, bucket, prefix)
    snapshots = [k for k in keys if k.endswith(".db")]
    manifests = [k for k in keys if k.endswith(".manifest.json")]
    assert len(snapshots) == 2 and len(manifests) == 2, keys
    assert stranger in keys
    status = get_backup(namespace, "every10s")["status"]
    assert status["lastBackup"]["key"] in snapshots


def test_a_refused_schedule_is_reported_and_runs_once_fixed_by_the_same_operator(
    real_nodes, namespace, cluster, operator
):
    prefix = f"tests/{namespace}"
    apply_backup(
        namespace,
        "feb31",
        {"clusterRef": {"name": cluster}, "schedule": "0 0 31 2 *", "storage": s3_storage_spec(real_nodes, prefix)},
    )
    apply_backup(
        namespace,
        "toofast",
        {"clusterRef": {"name": cluster}, "schedule": "*/10 * * * * *", "storage": s3_storage_spec(real_nodes, prefix)},
    )
    refused = {"feb31": "ScheduleNeverFires", "toofast": "ScheduleTooFrequent"}
    for name, reason in refused.items():
        obj = wait_for(
            lambda name=name, reason=reason: (
                (b := get_backup(namespace, name)) and condition(b, "Degraded").get("reason") == reason and b
            ),
            60,
            what=f"{name} refused",
        )
        assert condition(obj, "Degraded")["status"] == "True" and obj["status"]["phase"] == "Failed"
        assert "progress" not in obj["status"] and "lastScheduleTime" not in obj["status"]

    def warnings() -> set[str]:
        return {e["reason"] for e in kubectl_json("get", "events", "-n", namespace)["items"] if e["type"] == "Warning"}

    # An event is posted after the status it explains, so it may land a moment later.
    wait_for(
        lambda: set(refused.values()) <= warnings(), 30, what=f"a Warning event of each of {sorted(refused.values())}"
    )
    pid = operator.process.pid

    kubectl(
        "patch", "etcdbackup", "feb31", "-n", namespace, "--type=merge", "-p", '{"spec":{"schedule":"* * * * * */10"}}'
    )
    obj = wait_for(
        lambda: (
            (b := get_backup(namespace, "feb31"))["status"].get("lastSuccessfulTime")
            and condition(b, "Degraded").get("status") == "False"
            and b
        ),
        120,
        what="the fixed schedule ran",
    )
    assert operator.exited() is None and operator.process.pid == pid
    keys = list_keys(s3_client(real_nodes), controlplane.S3_BUCKET, prefix)
    assert obj["status"]["lastBackup"]["key"] in keys
    assert not [k for k in keys if "/toofast/" in k]
    still_refused = get_backup(namespace, "toofast")
    assert condition(still_refused, "Degraded")["reason"] == "ScheduleTooFrequent"
    assert "lastScheduleTime" not in still_refused["status"]


def test_wrong_credentials_and_missing_bucket_become_clear_conditions(real_nodes, namespace, cluster, operator):
    create_credentials_secret(real_nodes, namespace, "bad-credentials", "nobody", "wrong-secret-value")
    prefix = f"tests/{namespace}"
    apply_backup(
        namespace,
        "badcreds",
        {"clusterRef": {"name": cluster}, "storage": s3_storage_spec(real_nodes, prefix, secret="bad-credentials")},
    )
    apply_backup(
        namespace,
        "nobucket",
        {"clusterRef": {"name": cluster}, "storage": s3_storage_spec(real_nodes, prefix, bucket="no-such-bucket")},
    )
    apply_backup(
        namespace, "nocluster", {"clusterRef": {"name": "missing"}, "storage": s3_storage_spec(real_nodes, prefix)}
    )
    # Permanent causes: Failed at once, after one attempt.
    expected = {"badcreds": "InvalidCredentials", "nobucket": "BucketNotFound"}
    for name, reason in expected.items():
        obj = wait_for(
            lambda name=name: (b := get_backup(namespace, name))["status"].get("phase") == "Failed" and b,
            120,
            what=f"{name} failed",
        )
        degraded = condition(obj, "Degraded")
        assert degraded["status"] == "True" and degraded["reason"] == reason, degraded
        assert obj["status"]["failedAttempts"] == 1 and not obj["status"].get("nextAttemptTime")
    # A cluster that does not exist may still come: the backup waits for it.
    waiting = wait_for(
        lambda: (b := get_backup(namespace, "nocluster"))["status"].get("phase") == "Pending" and b,
        60,
        what="nocluster pending",
    )
    assert condition(waiting, "Progressing")["reason"] == "WaitingForCluster"
    assert f"EtcdCluster {namespace}/missing does not exist yet" in condition(waiting, "Progressing")["message"]
    assert list_keys(s3_client(real_nodes), controlplane.S3_BUCKET, prefix) == []
    assert "wrong-secret-value" not in operator.log_path.read_text()


def wait_until_waiting_for(namespace: str, name: str, reason: str) -> dict:
    return wait_for(
        lambda: (
            (b := get_backup(namespace, name))["status"].get("phase") == "Pending"
            and condition(b, "Progressing").get("reason") == reason
            and b
        ),
        60,
        what=f"{name} pending, {reason}",
    )


def test_a_one_shot_backup_applied_before_its_cluster_waits_then_completes(real_nodes, namespace, operator):
    """As `make demo` and every GitOps tool apply them: the backup first, then its cluster.
    It waits in Pending, and completes with no change to its spec."""
    create_credentials_secret(real_nodes, namespace)
    prefix = f"tests/{namespace}"
    apply_backup(namespace, "early", {"clusterRef": {"name": "late"}, "storage": s3_storage_spec(real_nodes, prefix)})
    waiting = wait_until_waiting_for(namespace, "early", "WaitingForCluster")
    assert condition(waiting, "Progressing")["status"] == "False"
    assert condition(waiting, "Progressing")["observedGeneration"] == 1
    assert not waiting["status"].get("attempts") and not waiting["status"].get("progress")

    apply_cluster(namespace, "late", {"size": 1, "storage": {"size": "1Gi"}})
    done = wait_for(
        lambda: (b := get_backup(namespace, "early"))["status"].get("phase") == "Completed" and b,
        240,
        what="the early backup completed",
    )
    assert done["metadata"]["generation"] == 1  # no spec change was needed
    assert condition(done, "Available")["status"] == "True" and condition(done, "Degraded")["status"] == "False"
    key = done["status"]["lastBackup"]["key"]
    assert key in list_keys(s3_client(real_nodes), controlplane.S3_BUCKET, prefix)
    assert "BackupFailed" not in event_reasons(namespace, "early")


def test_a_backup_whose_secret_arrives_after_it_waits_then_completes(real_nodes, namespace, cluster):
    prefix = f"tests/{namespace}"
    apply_backup(
        namespace,
        "nosecret",
        {"clusterRef": {"name": cluster}, "storage": s3_storage_spec(real_nodes, prefix, secret="late-credentials")},
    )
    waiting = wait_until_waiting_for(namespace, "nosecret", "WaitingForSecret")
    assert f"Secret {namespace}/late-credentials does not exist yet" in condition(waiting, "Progressing")["message"]
    create_credentials_secret(real_nodes, namespace, "late-credentials")
    done = wait_for(
        lambda: (b := get_backup(namespace, "nosecret"))["status"].get("phase") == "Completed" and b,
        120,
        what="the backup completed once its Secret existed",
    )
    assert done["metadata"]["generation"] == 1 and done["status"]["attempts"] == 1
    secret_key = controlplane.s3_environment(real_nodes)["AWS_SECRET_ACCESS_KEY"]
    assert secret_key not in json.dumps(done) and secret_key not in json.dumps(events(namespace, "nosecret"))


def test_minio_killed_mid_upload_leaves_nothing_partial_and_the_next_run_succeeds(own_minio, namespace, cluster):
    fill(member_endpoints(namespace, cluster), 96, 1 << 20, incompressible=True)  # ~96 MiB, zstd or not
    prefix = f"tests/{namespace}"
    apply_backup(
        namespace,
        "outage",
        {
            "clusterRef": {"name": cluster},
            "schedule": "* * * * * */20",
            "verification": {"enabled": False},
            "storage": s3_storage_spec(own_minio, prefix, partSizeBytes=5 << 20, uploadConcurrency=1),
        },
    )
    status = wait_for(
        lambda: (
            (st := get_backup(namespace, "outage")["status"])
            and ((st.get("progress") or {}).get("bytesSent") or 0) > 0
            and st
        ),
        120,
        interval=0.1,
        what="upload under way",
    )
    # The key and upload ID were in status before the first part was sent.
    recorded = status["pendingUploads"]
    assert [u["key"] for u in recorded] == [f"{prefix}/{namespace}/outage/{status['progress']['slot']}.db"]
    own_minio.stop()
    try:
        obj = wait_for(
            lambda: (b := get_backup(namespace, "outage")) and condition(b, "Degraded").get("status") == "True" and b,
            180,
            what="failure reported",
        )
        assert condition(obj, "Degraded")["reason"] in ("StorageError", "Error")
        assert obj["status"]["pendingUploads"] == recorded  # kept through the failure
        failed_slot = obj["status"]["lastScheduleTime"]

        def still_degraded():
            assert condition(get_backup(namespace, "outage"), "Degraded").get("status") == "True"

        # Through the outage Degraded stays True, while a later slot starts and fails too.
        wait_for_holding(
            lambda: (
                (st := get_backup(namespace, "outage")["status"]).get("lastScheduleTime") != failed_slot
                and not st.get("progress")
            ),
            still_degraded,
            180,
            interval=0.5,
            what="a later slot failed during the outage",
        )
    finally:
        own_minio.start()
    obj = wait_for(
        lambda: (b := get_backup(namespace, "outage"))["status"].get("lastSuccessfulTime") and b,
        180,
        what="the next scheduled run succeeded",
    )
    s3 = s3_client(own_minio)
    keys = list_keys(s3, controlplane.S3_BUCKET, prefix)
    assert keys == sorted([obj["status"]["lastBackup"]["key"], obj["status"]["lastBackup"]["manifestKey"]])
    # MinIO lists multipart uploads only by exact key: look where the interrupted one was.
    for upload in recorded:
        assert pending_uploads(s3, controlplane.S3_BUCKET, upload["key"]) == []
    assert pending_uploads(s3, controlplane.S3_BUCKET, prefix) == []
    assert not obj["status"].get("pendingUploads")


def test_operator_killed_during_a_scheduled_run_does_not_run_it_twice(real_nodes, namespace, operator_process):
    operator = operator_process(namespace).start()
    try:
        apply_cluster(namespace, "db", {"size": 1, "storage": {"size": "1Gi"}})
        wait_healthy(namespace, "db", 1)
        create_credentials_secret(real_nodes, namespace)
        fill(member_endpoints(namespace, "db"), 80, 1 << 20)
        operator.stop()

        operator.start(faults="during-backup-upload")
        prefix = f"tests/{namespace}"
        apply_backup(
            namespace,
            "restart",
            {
                "clusterRef": {"name": "db"},
                "schedule": "* * * * * */15",
                "storage": s3_storage_spec(real_nodes, prefix, partSizeBytes=5 << 20),
            },
        )
        assert operator.wait_exit(120) == 86
        interrupted = get_backup(namespace, "restart")["status"]
        slot = interrupted["progress"]["slot"]

        operator.start()
        wait_for(
            lambda: (
                (get_backup(namespace, "restart")["status"].get("lastBackup") or {})
                .get("key", "")
                .endswith(f"/{slot}.db")
            ),
            180,
            what=f"slot {slot} finished after the restart",
        )
        kubectl("patch", "etcdbackup", "restart", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
        wait_for(lambda: get_backup(namespace, "restart")["status"].get("phase") == "Suspended", 60)
        keys = list_keys(s3_client(real_nodes), controlplane.S3_BUCKET, prefix)
        assert [k for k in keys if slot in k] == sorted(
            [f"{prefix}/{namespace}/restart/{slot}.db", f"{prefix}/{namespace}/restart/{slot}.manifest.json"]
        )

        def successes() -> list[dict]:
            return [
                e
                for e in kubectl_json("get", "events", "-n", namespace)["items"]
                if e["reason"] == "BackupSucceeded" and slot in e["message"]
            ]

        # Posted after the status that says the slot finished, so it may land a moment later.
        found = wait_for(successes, 30, what=f"the BackupSucceeded event of slot {slot}")
        assert len(found) == 1 and found[0].get("count", 1) == 1, found
    finally:
        operator.stop()


def scratch_pods(namespace: str) -> list[dict]:
    return kubectl_json("get", "pods", "-n", namespace, "-l", "etcd.operator.dev/verifies-backup")["items"]


def scratch_member_started(pod: dict) -> bool:
    """Its check container ended (it got answers from the scratch member), or its etcd is ready."""
    containers = (pod.get("status") or {}).get("containerStatuses") or []
    return any(c["name"] == "check" and (c.get("state") or {}).get("terminated") for c in containers) or any(
        c["name"] == "etcd" and c.get("ready") for c in containers
    )


def listeners_in_pod(real_nodes, namespace: str, pod: str, container: str, kind: str) -> list[str]:
    """`ss`'s lines for the sockets listening in the pod's network namespace (`kind`: `t` TCP,
    `x` unix)."""
    pid = wait_for(
        lambda: containerfaults.pid(real_nodes, namespace, pod, container),
        60,
        what=f"{pod}'s {container} container running",
    )
    out = subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "ss", f"-l{kind}nH"], check=True, capture_output=True, text=True
    ).stdout
    return out.splitlines()


def test_a_running_verification_serves_the_restored_data_to_nobody(real_nodes, namespace, cluster, operator):
    """The operator dies right after recording its scratch pod, so the pod stays up after its
    scratch member has started: in the pod's network namespace its member listens on unix
    sockets and on no TCP port, and a plain client at the pod's IP gets nothing. The restarted operator then takes
    the pod's verdict and deletes it."""
    fill(member_endpoints(namespace, cluster), 50, 100, prefix="/secret/")
    operator.stop()
    operator.start(faults=AFTER_SCRATCH_POD_RECORDED)
    apply_backup(
        namespace,
        "checked",
        {
            "clusterRef": {"name": cluster},
            "verification": {"enabled": True},
            "storage": s3_storage_spec(real_nodes, f"tests/{namespace}"),
        },
    )
    assert operator.wait_exit(150) == 86
    pod = wait_for(
        lambda: (pods := scratch_pods(namespace)) and scratch_member_started(pods[0]) and pods[0],
        120,
        what="the scratch member started",
    )
    ip = pod["status"]["podIP"]
    name = pod["metadata"]["name"]
    assert any("etcd-client" in line for line in listeners_in_pod(real_nodes, namespace, name, "etcd", "x"))
    assert listeners_in_pod(real_nodes, namespace, name, "etcd", "t") == []

    async def plain_get() -> int:
        async with EtcdMemberClient(f"{ip}:2379", timeout=3) as client:
            return await client.count_keys(0)

    with pytest.raises(EtcdError):
        asyncio.run(plain_get())

    operator.start()
    obj = wait_for(
        lambda: (b := get_backup(namespace, "checked"))["status"].get("lastVerification") and b,
        120,
        what="the verification's verdict",
    )
    assert obj["status"]["lastVerification"]["verified"] is True, obj["status"]["lastVerification"]
    wait_for(lambda: not scratch_pods(namespace), 60, what="the scratch pod deleted")


def test_a_truncated_snapshot_fails_its_verification(real_nodes, namespace, cluster, operator):
    """Cut short in the store, with its manifest's sha256 made to match: the scratch pod's
    etcdutl refuses it (etcd's own trailing checksum), and the manifest says so. Stored as
    etcd wrote it (compression none), so that etcd's own check is the one that refuses."""
    fill(member_endpoints(namespace, cluster), 50, 100)
    prefix = f"tests/{namespace}"
    apply_backup(
        namespace,
        "cut",
        {"clusterRef": {"name": cluster}, "compression": "none", "storage": s3_storage_spec(real_nodes, prefix)},
    )
    obj = wait_for(
        lambda: (b := get_backup(namespace, "cut"))["status"].get("phase") == "Completed" and b,
        120,
        what="one-shot backup completed",
    )
    key, manifest_key = obj["status"]["lastBackup"]["key"], obj["status"]["lastBackup"]["manifestKey"]
    s3, bucket = s3_client(real_nodes), controlplane.S3_BUCKET
    data = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    cut = data[: len(data) - 4096]
    manifest = read_json(s3, bucket, manifest_key)
    manifest.update(sha256=hashlib.sha256(cut).hexdigest(), size=len(cut))
    s3.put_object(Bucket=bucket, Key=key, Body=cut)
    s3.put_object(Bucket=bucket, Key=manifest_key, Body=json.dumps(manifest).encode())
    kubectl(
        "patch",
        "etcdbackup",
        "cut",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"verification":{"enabled":true}}}',
    )
    obj = wait_for(
        lambda: (b := get_backup(namespace, "cut"))["status"].get("lastVerification") and b,
        180,
        what="the verification of the truncated backup",
    )
    verification = obj["status"]["lastVerification"]
    assert verification["verified"] is False and verification["reason"] == "SnapshotNotRestorable", verification
    assert read_json(s3, bucket, manifest_key)["verified"] is False
    wait_for(lambda: not scratch_pods(namespace), 60, what="the scratch pod deleted")


def test_a_backup_takes_no_snapshot_from_members_answering_with_another_cluster_id(real_nodes, namespace, cluster):
    """status.clusterID says another cluster than the members answer for: the run snapshots
    nothing and its condition names both IDs."""
    real_id = kubectl_json("get", "etcdcluster", cluster, "-n", namespace)["status"]["clusterID"]
    recorded = "deadbeef" if real_id != "deadbeef" else "feedface"
    kubectl(
        "patch",
        "etcdcluster",
        cluster,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"clusterID": recorded}}),
    )
    prefix = f"tests/{namespace}"
    apply_backup(
        namespace,
        "foreign",
        {"clusterRef": {"name": cluster}, "backoffLimit": 0, "storage": s3_storage_spec(real_nodes, prefix)},
    )
    obj = wait_for(
        lambda: (b := get_backup(namespace, "foreign"))["status"].get("phase") == "Failed" and b,
        120,
        what="the backup refused",
    )
    degraded = condition(obj, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "ClusterIDMismatch", degraded
    assert f"for cluster {real_id}" in degraded["message"] and recorded in degraded["message"], degraded
    assert "lastBackup" not in obj["status"]
    assert list_keys(s3_client(real_nodes), controlplane.S3_BUCKET, prefix) == []


def test_uploads_over_http_are_signed_and_encrypted_at_rest_as_asked(real_nodes, namespace, operator):
    """One cluster, two backups: SSE-KMS through a recording proxy (every upload's payload
    must be signed; it listens where pods reach MinIO), then SSE-S3. MinIO runs with a
    built-in KMS key (localkube), so both encryption modes are real here."""
    apply_cluster(namespace, "sg", {"size": 1, "storage": {"size": "1Gi"}})
    wait_healthy(namespace, "sg", 1)
    create_credentials_secret(real_nodes, namespace)
    kms = {"mode": "SSE-KMS", "kmsKeyID": controlplane.MINIO_KMS_KEY_ID}
    with RecordingProxy(
        controlplane.s3_environment(real_nodes)["S3_ENDPOINT"], host=controlplane.apiserver_host(real_nodes)
    ) as proxy:
        storage = s3_storage_spec(real_nodes, f"tests/{namespace}", serverSideEncryption=kms)
        storage["s3"].update(endpoint=proxy.url, insecure=True)
        apply_backup(namespace, "signed", {"clusterRef": {"name": "sg"}, "storage": storage})
        signed = completed_backup(namespace, "signed")
        uploads = proxy.uploads()
    assert uploads, "no upload went through the proxy"
    for request in uploads:
        # The SigV4 signature covers x-amz-content-sha256; it must be the body's own hash,
        # not UNSIGNED-PAYLOAD, or a man in the middle could swap the body.
        assert request.headers.get("x-amz-content-sha256") == request.body_sha256, (
            f"{request.method} {request.path}: x-amz-content-sha256={request.headers.get('x-amz-content-sha256')}"
        )
        assert "x-amz-content-sha256" in request.headers["authorization"]
    assert_encrypted(real_nodes, signed, "aws:kms")

    apply_backup(
        namespace,
        "sse-s3",
        {
            "clusterRef": {"name": "sg"},
            "storage": s3_storage_spec(real_nodes, f"tests/{namespace}", serverSideEncryption={"mode": "SSE-S3"}),
        },
    )
    assert_encrypted(real_nodes, completed_backup(namespace, "sse-s3"), "AES256")


def completed_backup(namespace: str, name: str) -> dict:
    return wait_for(
        lambda: (b := get_backup(namespace, name))["status"].get("phase") == "Completed" and b,
        120,
        what=f"backup {name} completed",
    )


def assert_encrypted(store, backup: dict, algorithm: str) -> None:
    client = s3_client(store)
    bucket = controlplane.S3_BUCKET
    for key in (backup["status"]["lastBackup"]["key"], backup["status"]["lastBackup"]["manifestKey"]):
        head = client.head_object(Bucket=bucket, Key=key)
        assert head.get("ServerSideEncryption") == algorithm, (key, head.get("ServerSideEncryption"))
        if algorithm == "aws:kms":
            assert controlplane.MINIO_KMS_KEY_ID in head.get("SSEKMSKeyId", ""), head.get("SSEKMSKeyId")
