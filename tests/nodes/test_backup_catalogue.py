"""Verified backups and a catalogue that cannot be confused, on real nodes against the
substrate's MinIO (on the nodes' bridge). The operator the chart installed and two one-member
source clusters (in two namespaces) are shared by every test of this module; data stays small."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid

import pytest

from etcd_operator.clients.etcd.client import EtcdMemberClient
from localkube import controlplane
from tests.support.backups import condition
from tests.support.chart_release import restricted_namespace
from tests.support.clusters import apply_cluster, event_posted, events, member_endpoints, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.s3 import create_credentials_secret, list_keys, read_json, s3_client, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.needs_store,
    pytest.mark.usefixtures("kubectl_on_real_nodes"),
]
GROUP = "etcd.operator.dev/v1alpha1"
EVERY_10S = "* * * * * */10"
UNVERIFIED = {"enabled": False}
VALUES = 60


def payload(i: int) -> bytes:
    return f"payload-{i:06}-".encode() * 8


@pytest.fixture(scope="module")
def shared(real_nodes, operator_release, kubectl_on_real_nodes):
    """(namespace a, namespace b): a one-member cluster `db` holding VALUES keys in each,
    and S3 credentials; the session's operator watches both."""
    suffix = uuid.uuid4().hex[:5]
    namespaces = (f"t-catalogue-a-{suffix}", f"t-catalogue-b-{suffix}")
    try:
        for ns in namespaces:
            restricted_namespace(ns)
            apply_cluster(ns, "db", {"size": 1, "storage": {"size": "1Gi"}})
            create_credentials_secret(real_nodes, ns)
        for ns in namespaces:
            wait_healthy(ns, "db", 1, timeout=300)

        async def fill(endpoint: str) -> None:
            async with EtcdMemberClient(endpoint, timeout=10) as client:
                for i in range(VALUES):
                    await client.put(f"/v/{i:04}".encode(), payload(i))

        for ns in namespaces:
            asyncio.run(fill(member_endpoints(ns, "db")[0]))
        yield namespaces
    finally:
        for ns in namespaces:
            kubectl("delete", "namespace", ns, "--wait=false", check=False)


def apply_backup(namespace: str, name: str, spec: dict) -> None:
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": GROUP,
                "kind": "EtcdBackup",
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            }
        ),
    )


def get_backup(namespace: str, name: str) -> dict:
    return kubectl_json("get", "etcdbackup", name, "-n", namespace)


def patch_backup(namespace: str, name: str, spec: dict) -> None:
    kubectl("patch", "etcdbackup", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec}))


def suspend(namespace: str, name: str) -> None:
    patch_backup(namespace, name, {"suspend": True})
    wait_for(lambda: get_backup(namespace, name)["status"].get("phase") == "Suspended", 60, what="suspended")


def reasons(namespace: str, name: str) -> list[str]:
    return [e["reason"] for e in events(namespace, name)]


def test_a_scheduled_backup_is_verified_automatically(real_nodes, shared):
    ns, _ = shared
    prefix = f"verify-{ns}"
    apply_backup(
        ns,
        "nightly",
        {"clusterRef": {"name": "db"}, "schedule": EVERY_10S, "storage": s3_storage_spec(real_nodes, prefix)},
    )
    obj = wait_for(
        lambda: (b := get_backup(ns, "nightly"))["status"].get("lastVerifiedTime") and b,
        180,
        what="a scheduled backup verified",
    )
    suspend(ns, "nightly")
    verification = obj["status"]["lastVerification"]
    assert verification["verified"] is True and verification["reason"] == "Verified", verification
    manifest = read_json(
        s3_client(real_nodes), controlplane.S3_BUCKET, verification["key"].removesuffix(".db") + ".manifest.json"
    )
    assert manifest["verified"] is True and manifest["verifiedAt"] == obj["status"]["lastVerifiedTime"]
    assert manifest["hashKv"] == manifest["verification"]["hashKv"] and manifest["keyCount"] >= VALUES
    assert manifest["backupUid"] == obj["metadata"]["uid"] and manifest["namespace"] == ns
    recent = {r["key"]: r for r in obj["status"]["recentBackups"]}
    assert recent[verification["key"]]["verification"]["verified"] is True
    event_posted(ns, "nightly", "BackupVerified")
    assert kubectl_json("get", "pods", "-n", ns, "-l", "etcd.operator.dev/verifies-backup")["items"] == []


def corrupt_one_value(snapshot: bytes) -> bytes:
    """A different but well-formed snapshot: one value changed, etcd's trailing sha256
    recomputed, so only comparing the data itself can tell. Every copy of the value is
    changed: bbolt's free pages keep stale copies of a leaf, and changing only the first
    copy found may change a page no key points to, which HashKV rightly does not see."""
    body = snapshot[:-32]
    needle = payload(7)
    assert body.count(needle) >= 1
    body = body.replace(needle, payload(999997))
    return body + hashlib.sha256(body).digest()


def test_a_backup_corrupted_in_s3_fails_its_next_verification(real_nodes, shared):
    ns, _ = shared
    prefix = f"corrupt-{ns}"
    # Stored as etcd wrote it (compression none): a value is changed in place, which only the
    # scratch member's HashKV can tell (a sealed object's chunks would not authenticate).
    apply_backup(
        ns,
        "once",
        {"clusterRef": {"name": "db"}, "compression": "none", "storage": s3_storage_spec(real_nodes, prefix)},
    )
    obj = wait_for(
        lambda: (b := get_backup(ns, "once"))["status"].get("phase") == "Completed" and b,
        120,
        what="one-shot backup completed",
    )
    assert "lastVerification" not in obj["status"]  # one-shot backups are not verified unless asked
    key, manifest_key = obj["status"]["lastBackup"]["key"], obj["status"]["lastBackup"]["manifestKey"]
    s3, bucket = s3_client(real_nodes), controlplane.S3_BUCKET
    corrupted = corrupt_one_value(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    manifest = read_json(s3, bucket, manifest_key)
    manifest["sha256"] = hashlib.sha256(corrupted).hexdigest()
    s3.put_object(Bucket=bucket, Key=key, Body=corrupted)
    s3.put_object(Bucket=bucket, Key=manifest_key, Body=json.dumps(manifest).encode())

    patch_backup(ns, "once", {"verification": {"enabled": True}})
    obj = wait_for(
        lambda: (b := get_backup(ns, "once"))["status"].get("lastVerification") and b,
        180,
        what="the verification of the corrupted backup",
    )
    verification = obj["status"]["lastVerification"]
    assert verification["verified"] is False and verification["reason"] in ("HashKVMismatch", "KeyCountMismatch"), (
        verification
    )
    degraded = condition(obj, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "BackupVerificationFailed"
    assert verification["reason"] in degraded["message"]
    event_posted(ns, "once", "BackupVerificationFailed")
    assert "lastVerifiedTime" not in obj["status"]
    assert sorted(list_keys(s3, bucket, prefix)) == sorted([key, manifest_key])  # marked, never deleted
    assert read_json(s3, bucket, manifest_key)["verified"] is False


def cluster_id(namespace: str) -> str:
    async def ask() -> int:
        async with EtcdMemberClient(member_endpoints(namespace, "db")[0]) as client:
            return (await client.status()).cluster_id

    return f"{asyncio.run(ask()):x}"


def test_retention_keeps_the_newest_by_revision_despite_a_clock_in_the_future(real_nodes, shared):
    ns, _ = shared
    prefix = f"clock-{ns}"
    apply_backup(
        ns,
        "keep",
        {
            "clusterRef": {"name": "db"},
            "schedule": EVERY_10S,
            "suspend": True,
            "retention": {"maxBackups": 1},
            "verification": UNVERIFIED,
            "storage": s3_storage_spec(real_nodes, prefix),
        },
    )
    obj = wait_for(
        lambda: (b := get_backup(ns, "keep")).get("status", {}).get("phase") == "Suspended" and b,
        60,
        what="created suspended",
    )
    s3, bucket = s3_client(real_nodes), controlplane.S3_BUCKET
    folder = f"{prefix}/{ns}/keep/"
    ahead = {
        "format": "etcd-operator.snapshot/v1",
        "writer": "etcd-operator",
        "snapshotKey": f"{folder}ahead.db",
        "backup": "keep",
        "namespace": ns,
        "backupUid": obj["metadata"]["uid"],
        "cluster": "db",
        "clusterId": cluster_id(ns),
        "etcdVersion": "3.6.0",
        "revision": 2,
        "size": 4,
        "sha256": "0" * 64,
        "createdAt": "2099-01-01T00:00:00Z",
        "member": "db-0",
        "slot": "ahead",
    }
    s3.put_object(Bucket=bucket, Key=f"{folder}ahead.db", Body=b"old!")
    s3.put_object(Bucket=bucket, Key=f"{folder}ahead.manifest.json", Body=json.dumps(ahead).encode())

    patch_backup(ns, "keep", {"suspend": False})
    obj = wait_for(
        lambda: (b := get_backup(ns, "keep")) and "RetentionApplied" in reasons(ns, "keep") and b,
        120,
        what="a run with retention",
    )
    suspend(ns, "keep")
    last = get_backup(ns, "keep")["status"]["lastBackup"]
    assert list_keys(s3, bucket, folder) == sorted([last["key"], last["manifestKey"]])
    assert last["revision"] > ahead["revision"]


def test_two_backups_with_colliding_prefixes_never_touch_each_others_objects(real_nodes, shared):
    a, b = shared
    outer = f"collide-{a}"
    inner = f"{outer}/{a}/same"  # b's folder lies inside a's: {outer}/{a}/same/{b}/same/
    for ns, prefix in ((a, outer), (b, inner)):
        apply_backup(
            ns,
            "same",
            {
                "clusterRef": {"name": "db"},
                "schedule": EVERY_10S,
                "retention": {"maxBackups": 1},
                "verification": UNVERIFIED,
                "storage": s3_storage_spec(real_nodes, prefix),
            },
        )
    wait_for(
        lambda: all(reasons(ns, "same").count("BackupSucceeded") >= 2 for ns in (a, b)),
        150,
        what="two runs of each backup",
    )
    for ns in (a, b):
        suspend(ns, "same")
    s3, bucket = s3_client(real_nodes), controlplane.S3_BUCKET
    keys = list_keys(s3, bucket, outer)
    for ns in (a, b):
        last = get_backup(ns, "same")["status"]["lastBackup"]
        assert last["key"] in keys and last["manifestKey"] in keys, (ns, keys)
    b_folder = f"{inner}/{b}/same/"
    assert len([k for k in keys if k.startswith(b_folder)]) == 2
    assert len([k for k in keys if not k.startswith(b_folder)]) == 2


@pytest.mark.parametrize("prefix", [".", "..", "a/./b", "a/../b", "backups/.."])
def test_a_prefix_with_dot_segments_is_refused_by_the_schema(real_nodes, shared, prefix):
    ns, _ = shared
    refused = kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        check=False,
        input=json.dumps(
            {
                "apiVersion": GROUP,
                "kind": "EtcdBackup",
                "metadata": {"name": "dots", "namespace": ns},
                "spec": {"clusterRef": {"name": "db"}, "storage": s3_storage_spec(real_nodes, prefix)},
            }
        ),
    )
    assert refused.returncode != 0 and "must not contain '.' or '..' path segments" in refused.stderr


def test_a_prefix_with_dots_inside_segments_is_accepted(real_nodes, shared):
    ns, _ = shared
    kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": GROUP,
                "kind": "EtcdBackup",
                "metadata": {"name": "dots", "namespace": ns},
                "spec": {"clusterRef": {"name": "db"}, "storage": s3_storage_spec(real_nodes, "v1.2/..x/a..")},
            }
        ),
    )
