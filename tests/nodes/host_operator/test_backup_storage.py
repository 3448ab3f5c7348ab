"""Storage guards of EtcdBackup and EtcdRestore against the substrate's real MinIO, with the
operator as a process on the host given settings of its own, on the real nodes:
orphaned multipart uploads in a backup's own folder are aborted and no others; ambient
credentials are refused unless the install allows them for the namespace."""

from __future__ import annotations

import email.utils

import pytest

from localkube import controlplane
from tests.support.backups import apply_backup, apply_restore, condition, get_backup
from tests.support.clusters import apply_cluster, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.s3 import create_credentials_secret, list_keys, pending_uploads, s3_client, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane2]
GRACE_SECONDS = 2
AMBIENT_NOT_ALLOWED = "AmbientCredentialsNotAllowed"


def store_age(s3, bucket: str, key: str) -> float:
    """Seconds since the upload at `key` was initiated, on the store's own clock (0: none)."""
    response = s3.list_multipart_uploads(Bucket=bucket, Prefix=key)
    now = email.utils.parsedate_to_datetime(response["ResponseMetadata"]["HTTPHeaders"]["date"])
    return min(((now - u["Initiated"]).total_seconds() for u in response.get("Uploads", [])), default=0.0)


def test_orphaned_uploads_in_the_backups_own_folder_are_aborted_and_no_others(real_nodes, namespace, operator_process):
    operator = operator_process(namespace, env={"ORPHANED_UPLOAD_GRACE_SECONDS": str(GRACE_SECONDS)})
    operator.start()
    s3, bucket = s3_client(real_nodes), controlplane.S3_BUCKET
    prefix = f"tests/{namespace}"
    folder = f"{prefix}/{namespace}/orphans/"
    # An operator killed between starting an upload and recording it left this one...
    orphan = f"{folder}20200101T000000Z.db"
    # ...and these belong to others: another backup's deeper folder, another prefix.
    others = [f"{folder}deeper/{namespace}/b2/20200101T000000Z.db", f"other-{namespace}/{namespace}/orphans/x.db"]
    started = {key: s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"] for key in [orphan, *others]}
    try:
        apply_cluster(namespace, "db", {"size": 1, "storage": {"size": "1Gi"}})
        wait_healthy(namespace, "db", 1)
        create_credentials_secret(real_nodes, namespace)
        wait_for(
            lambda: all(store_age(s3, bucket, key) > GRACE_SECONDS for key in started),
            60,
            what="the uploads older than the grace on the store's clock",
        )
        apply_backup(
            namespace,
            "orphans",
            {
                "clusterRef": {"name": "db"},
                "verification": {"enabled": False},
                "storage": s3_storage_spec(real_nodes, prefix),
            },
        )
        done = wait_for(
            lambda: (b := get_backup(namespace, "orphans"))["status"].get("phase") == "Completed" and b,
            120,
            what="the backup completed",
        )
        # MinIO lists multipart uploads by exact key: look at each one.
        assert pending_uploads(s3, bucket, orphan) == []
        for key in others:
            assert [u["UploadId"] for u in pending_uploads(s3, bucket, key)] == [started[key]], key
        assert list_keys(s3, bucket, folder) == sorted(
            [done["status"]["lastBackup"]["key"], done["status"]["lastBackup"]["manifestKey"]]
        )
    finally:
        operator.stop()
        for key, upload_id in started.items():
            if pending_uploads(s3, bucket, key):
                s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)


def test_ambient_credentials_are_refused_unless_the_install_allows_the_namespace(
    real_nodes, namespace, operator_process
):
    env = controlplane.s3_environment(real_nodes)
    # The operator's own identity reaches the bucket: without the guard it would be used.
    ambient = {"AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"]}
    operator = operator_process(namespace, env=ambient).start()
    prefix = f"tests/{namespace}"
    s3 = {k: v for k, v in s3_storage_spec(real_nodes, prefix)["s3"].items() if k != "credentialsSecretRef"}
    try:
        apply_cluster(namespace, "db", {"size": 1, "storage": {"size": "1Gi"}})
        wait_healthy(namespace, "db", 1)
        apply_backup(
            namespace,
            "ambient",
            {"clusterRef": {"name": "db"}, "verification": {"enabled": False}, "storage": {"s3": s3}},
        )
        apply_restore(
            namespace,
            "ambient",
            {
                "source": {"s3": {**{k: v for k, v in s3.items() if k != "prefix"}, "key": f"{prefix}/x.db"}},
                "target": {"newCluster": {"name": "restored", "spec": {"size": 1}}},
            },
        )
        refused = wait_for(
            lambda: (
                (b := get_backup(namespace, "ambient"))
                and condition(b, "Degraded").get("reason") == AMBIENT_NOT_ALLOWED
                and b
            ),
            60,
            what="the backup refused",
        )
        assert (
            condition(refused, "Degraded")["status"] == "True"
            and namespace in condition(refused, "Degraded")["message"]
        )
        assert refused["status"]["phase"] == "Pending" and not refused["status"].get("lastBackup")
        restore = wait_for(
            lambda: (
                (r := kubectl_json("get", "etcdrestore", "ambient", "-n", namespace))
                and condition(r, "Progressing").get("reason") == AMBIENT_NOT_ALLOWED
                and r
            ),
            60,
            what="the restore refused",
        )
        assert restore["status"]["phase"] == "Pending"
        assert list_keys(s3_client(real_nodes), controlplane.S3_BUCKET, prefix) == []
        kubectl("delete", "etcdrestore", "ambient", "-n", namespace, "--wait=false")

        operator.stop()
        operator = operator_process(
            namespace, env={**ambient, "AMBIENT_CREDENTIALS_NAMESPACES": f"other,{namespace}"}
        ).start()
        done = wait_for(
            lambda: (b := get_backup(namespace, "ambient"))["status"].get("phase") == "Completed" and b,
            120,
            what="the backup completed once the install allowed ambient credentials here",
        )
        assert condition(done, "Degraded")["status"] == "False"
    finally:
        operator.stop()
