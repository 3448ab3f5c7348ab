"""Backups in a bucket with S3 Object Lock on the substrate's real MinIO: retention neither
deletes nor tries to delete a backup the store holds, reports it with its retain-until date,
and deletes every version of one whose date has passed (no delete marker over any data).
Each test makes a bucket of its own (Object Lock can only be turned on at creation) and
removes it afterwards, bypassing its GOVERNANCE retention with MinIO's root credentials."""

from __future__ import annotations

import asyncio
import datetime
import math
import uuid

import pytest

from etcd_operator.clients.storage.s3 import S3Location, S3Storage
from etcd_operator.core.backup.object_lock import UploadLock
from localkube import controlplane
from tests.support.backups import apply_backup, condition, get_backup
from tests.support.clusters import apply_cluster, event_posted, wait_healthy
from tests.support.kubectl import kubectl
from tests.support.s3 import create_credentials_secret, list_keys, s3_client, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane6]


def locked_bucket(s3, default_days: int | None) -> str:
    """A new bucket with Object Lock on, with a GOVERNANCE default retention of `default_days`."""
    bucket = f"locked-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    if default_days is not None:
        s3.put_object_lock_configuration(
            Bucket=bucket,
            ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": default_days}},
            },
        )
    return bucket


def remove_bucket(s3, bucket: str) -> None:
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", []) + page.get("DeleteMarkers", []):
            s3.delete_object(
                Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"], BypassGovernanceRetention=True
            )
    s3.delete_bucket(Bucket=bucket)


def versions_of(s3, bucket: str, key: str) -> tuple[list[str], list[str]]:
    """(version IDs, delete marker IDs) of exactly `key`."""
    listed = s3.list_object_versions(Bucket=bucket, Prefix=key)
    return (
        [v["VersionId"] for v in listed.get("Versions", []) if v["Key"] == key],
        [m["VersionId"] for m in listed.get("DeleteMarkers", []) if m["Key"] == key],
    )


def delete_markers(s3, bucket: str) -> list[str]:
    return [m["Key"] for m in s3.list_object_versions(Bucket=bucket).get("DeleteMarkers", [])]


def rfc3339_ceiling(moment: datetime.datetime) -> str:
    return datetime.datetime.fromtimestamp(math.ceil(moment.timestamp()), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def suspend(namespace: str, name: str) -> None:
    kubectl("patch", "etcdbackup", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for(lambda: get_backup(namespace, name)["status"].get("phase") == "Suspended", 60, what="suspended")


def test_a_backup_the_buckets_default_retention_holds_survives_retention_and_is_reported(
    real_nodes, namespace, operator
):
    s3 = s3_client(real_nodes)
    bucket = locked_bucket(s3, default_days=1)
    prefix = f"tests/{namespace}"
    try:
        apply_cluster(namespace, "db", {"size": 1, "storage": {"size": "1Gi"}})
        wait_healthy(namespace, "db", 1)
        create_credentials_secret(real_nodes, namespace)
        apply_backup(
            namespace,
            "locked",
            {
                "clusterRef": {"name": "db"},
                "schedule": "* * * * * */10",
                "retention": {"maxBackups": 1},
                "verification": {"enabled": False},
                "storage": s3_storage_spec(real_nodes, prefix, bucket=bucket),
            },
        )
        first = wait_for(
            lambda: (b := get_backup(namespace, "locked"))["status"].get("lastBackup") and b,
            120,
            what="the first backup",
        )["status"]["lastBackup"]
        reported = wait_for(
            lambda: (
                (b := get_backup(namespace, "locked"))["status"].get("retention", {}).get("lockedCount", 0) >= 1 and b
            ),
            120,
            what="a later run reported the first backup locked",
        )
        suspend(namespace, "locked")
        status = get_backup(namespace, "locked")["status"]

        # Still there, every byte of it: the snapshot and its manifest, one version each, no delete marker.
        for key in (first["key"], first["manifestKey"]):
            kept, markers = versions_of(s3, bucket, key)
            assert len(kept) == 1 and markers == [], (key, kept, markers)
        assert delete_markers(s3, bucket) == []
        keys = list_keys(s3, bucket, prefix)
        assert first["key"] in keys and first["manifestKey"] in keys

        # Reported with the later of its two retain-until dates (the manifest is written last).
        until = max(
            s3.head_object(Bucket=bucket, Key=key)["ObjectLockRetainUntilDate"]
            for key in (first["key"], first["manifestKey"])
        )
        locked = {entry["key"]: entry for entry in status["retention"]["locked"]}
        assert locked[first["key"]] == {
            "key": first["key"],
            "mode": "GOVERNANCE",
            "retainUntil": rfc3339_ceiling(until),
        }
        assert status["retention"]["lockedCount"] == len(status["retention"]["locked"])
        available = condition(reported, "Available")
        assert "kept by S3 Object Lock; the earliest may be deleted after" in available["message"], available
        events = event_posted(namespace, "locked", "RetentionKeptLocked")
        assert events[0]["type"] == "Normal", events
        assert condition(reported, "Degraded")["status"] == "False"
    finally:
        kubectl("delete", "etcdbackup", "locked", "-n", namespace, "--wait=false", check=False)
        remove_bucket(s3, bucket)


def test_a_retention_the_spec_sets_holds_each_backup_until_its_date_then_every_version_goes(
    real_nodes, namespace, operator
):
    s3 = s3_client(real_nodes)
    bucket = locked_bucket(s3, default_days=None)
    prefix = f"tests/{namespace}"
    try:
        apply_cluster(namespace, "db", {"size": 1, "storage": {"size": "1Gi"}})
        wait_healthy(namespace, "db", 1)
        create_credentials_secret(real_nodes, namespace)
        apply_backup(
            namespace,
            "short",
            {
                "clusterRef": {"name": "db"},
                "schedule": "* * * * * */10",
                "retention": {"maxBackups": 1},
                "verification": {"enabled": False},
                "storage": s3_storage_spec(
                    real_nodes, prefix, bucket=bucket, objectLock={"mode": "GOVERNANCE", "retainFor": "25s"}
                ),
            },
        )
        first = wait_for(
            lambda: (b := get_backup(namespace, "short"))["status"].get("lastBackup") and b,
            120,
            what="the first backup",
        )["status"]["lastBackup"]
        head = s3.head_object(Bucket=bucket, Key=first["key"])
        assert head["ObjectLockMode"] == "GOVERNANCE", head
        assert head["ObjectLockRetainUntilDate"] > head["LastModified"], head
        wait_for(
            lambda: (
                first["key"]
                in {e["key"] for e in get_backup(namespace, "short")["status"].get("retention", {}).get("locked", [])}
            ),
            120,
            what="the first backup reported locked",
        )
        # Past its date, a later run deletes every version of both its keys, and no marker stays.
        wait_for(
            lambda: (
                versions_of(s3, bucket, first["key"]) == ([], [])
                and versions_of(s3, bucket, first["manifestKey"]) == ([], [])
            ),
            180,
            what="the first backup deleted, every version, once its retention passed",
        )
        suspend(namespace, "short")
        assert delete_markers(s3, bucket) == []
        assert condition(get_backup(namespace, "short"), "Degraded")["status"] == "False"
    finally:
        kubectl("delete", "etcdbackup", "short", "-n", namespace, "--wait=false", check=False)
        remove_bucket(s3, bucket)


def test_the_storage_client_reads_locks_and_deletes_exact_versions(real_nodes):
    """S3Storage on its own: uploads (put and multipart) with a retention, the lock read back,
    a held version refused by nobody because none is tried, a plain bucket without versions."""
    s3 = s3_client(real_nodes)
    env = controlplane.s3_environment(real_nodes)
    bucket = locked_bucket(s3, default_days=None)
    plain = f"plain-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=plain)

    def storage(name: str, lock: UploadLock | None = None) -> S3Storage:
        return S3Storage(
            S3Location(
                bucket=name,
                endpoint=env["S3_ENDPOINT"],
                region=env["S3_REGION"],
                force_path_style=True,
                access_key=env["AWS_ACCESS_KEY_ID"],
                secret_key=env["AWS_SECRET_ACCESS_KEY"],
                insecure=True,
                object_lock=lock,
            )
        )

    async def check() -> None:
        locking, free, unversioned = storage(bucket, UploadLock("GOVERNANCE", 3600)), storage(bucket), storage(plain)
        try:
            await locking.put("held.json", b"{}")
            upload = await locking.start_multipart("held.db")
            part = await locking.upload_part("held.db", upload, 1, b"x" * 1024)
            await locking.complete_multipart("held.db", upload, [part])
            for key in ("held.json", "held.db"):
                stored = await free.stored(key)
                (version,) = stored.versions
                assert version.version_id and version.lock.mode == "GOVERNANCE", stored
                assert stored.store_now is not None
                assert version.lock.retain_until > stored.store_now + datetime.timedelta(minutes=59), stored

            await free.put("free.db", b"1")
            await free.put("free.db", b"2")
            stored = await free.stored("free.db")
            assert len(stored.versions) == 2 and all(not v.lock.mode for v in stored.versions), stored
            for version in stored.versions:
                await free.delete("free.db", version.version_id)
            assert (await free.stored("free.db")).versions == ()
            assert versions_of(s3, bucket, "free.db") == ([], [])

            # A plain DELETE in a versioned bucket leaves the data behind a marker: stored() still sees it.
            await free.put("hidden.db", b"1")
            await free.delete("hidden.db")
            hidden = await free.stored("hidden.db")
            assert len(hidden.versions) == 2, hidden

            await unversioned.put("p.db", b"1")
            (version,) = (await unversioned.stored("p.db")).versions
            assert version.version_id is None and not version.lock.mode
            await unversioned.delete("p.db", version.version_id)
            assert (await unversioned.stored("p.db")).versions == ()
        finally:
            for client in (locking, free, unversioned):
                client.close()

    try:
        asyncio.run(check())
    finally:
        remove_bucket(s3, bucket)
        remove_bucket(s3, plain)
