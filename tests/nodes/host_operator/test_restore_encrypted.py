"""Encrypted backups against real MinIO and real etcd members on the real nodes, with the
operator as a process on the host: the stored snapshot is sealed (zstd, AES-256-GCM), a
restore with the right key brings back exactly the data at the backup's revision, a
restore with a wrong or missing key fails with its reason before anything of its target
exists, and so does one whose snapshot or manifest someone who can write the bucket replaced."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys

import pytest

from etcd_operator.core.backup import sealed
from localkube import controlplane
from localkube import layout as localkube_layout
from tests.support import doc_commands
from tests.support.backups import apply_backup, apply_restore, fill, get_backup, wait_phase
from tests.support.cluster_checks import etcdctl
from tests.support.clusters import PLAINTEXT, apply_cluster, member_endpoints, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.s3 import create_credentials_secret, s3_client, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane6]


KEYS = {"old": os.urandom(32), "k1": os.urandom(32)}


def key_secret(namespace: str, name: str, keys: dict[str, bytes]) -> None:
    literals = [f"--from-literal={key_id}={base64.b64encode(key).decode()}" for key_id, key in keys.items()]
    kubectl("create", "secret", "generic", name, "-n", namespace, *literals)


def keyspace(endpoints: list[str], revision: int | None = None) -> dict[bytes, bytes]:
    args = ["get", "", "--prefix", "-w", "json"] + ([f"--rev={revision}"] if revision else [])
    kvs = json.loads(etcdctl(endpoints, *args)).get("kvs") or []
    return {base64.b64decode(kv["key"]): base64.b64decode(kv.get("value", "")) for kv in kvs}


def reason_of(restore: dict, type_: str) -> str:
    return next(c for c in restore["status"]["conditions"] if c["type"] == type_)["reason"]


def objects_of(namespace: str, cluster: str) -> list[str]:
    """Pods and PVCs that a restore into `cluster` would have created."""
    found = []
    for kind in ("pods", "pvc"):
        for item in kubectl_json("get", kind, "-n", namespace)["items"]:
            name = item["metadata"]["name"]
            if name.startswith((f"{cluster}-", f"data-{cluster}-")):
                found.append(f"{kind}/{name}")
    return found


@pytest.fixture
def encrypted_backup(real_nodes, namespace, operator):
    """A 1-member cluster holding /a/*, a completed encrypted backup of it, then /b/* written after."""
    apply_cluster(namespace, "src", {"size": 1, "storage": {"size": "1Gi"}})
    wait_healthy(namespace, "src", 1)
    create_credentials_secret(real_nodes, namespace)
    key_secret(namespace, "backup-keys", KEYS)
    fill(member_endpoints(namespace, "src"), 100, 256, prefix="/a/")
    apply_backup(
        namespace,
        "nightly",
        {
            "clusterRef": {"name": "src"},
            "storage": s3_storage_spec(real_nodes, f"tests/{namespace}"),
            "encryption": {"secretRef": {"name": "backup-keys"}, "keyID": "k1"},
        },
    )
    backup = wait_for(
        lambda: (b := get_backup(namespace, "nightly"))["status"].get("phase") == "Completed" and b,
        120,
        what="encrypted backup completed",
    )
    fill(member_endpoints(namespace, "src"), 10, 64, prefix="/b/")
    return backup["status"]["lastBackup"]


def test_an_encrypted_backup_is_stored_sealed_and_restores_exactly_with_its_key(
    real_nodes, namespace, encrypted_backup
):
    s3 = s3_client(real_nodes)
    stored = s3.get_object(Bucket=controlplane.S3_BUCKET, Key=encrypted_backup["key"])["Body"].read()
    header = sealed.Header.parse(stored)
    assert header is not None and (header.compression, header.algorithm, header.key_id) == ("zstd", "aes-256-gcm", "k1")
    assert b"/a/000001" not in stored  # keys and values are not readable in the store
    manifest = json.loads(
        s3.get_object(Bucket=controlplane.S3_BUCKET, Key=encrypted_backup["manifestKey"])["Body"].read()
    )
    assert (manifest["compression"], manifest["encryption"], manifest["keyId"]) == ("zstd", "aes-256-gcm", "k1")
    assert manifest["size"] == len(stored) < manifest["plainSize"]

    source_at_backup = keyspace(member_endpoints(namespace, "src"), encrypted_backup["revision"])
    apply_restore(
        namespace,
        "right-key",
        {
            # no encryptionKeysSecretRef: the EtcdBackup's Secret is used
            "source": {"backupRef": {"name": "nightly"}},
            "target": {"newCluster": {"name": "copy", "spec": {**PLAINTEXT, "size": 1, "storage": {"size": "1Gi"}}}},
        },
    )
    restore = wait_phase(namespace, "right-key", "Completed", timeout=400)
    assert restore["status"]["sha256"] == encrypted_backup["sha256"]
    wait_healthy(namespace, "copy", 1)
    restored = keyspace(member_endpoints(namespace, "copy"))
    assert len(restored) == len(source_at_backup) >= 100
    assert restored == source_at_backup


def test_a_wrong_or_missing_key_fails_the_restore_before_anything_is_created(namespace, encrypted_backup):
    key_secret(namespace, "wrong-keys", {"k1": os.urandom(32)})  # the same key ID, other bytes
    key_secret(namespace, "other-keys", {"k2": os.urandom(32)})  # no key under the snapshot's ID
    cases = {"wrong-key": ("wrong-keys", "DecryptionFailed"), "missing-key": ("other-keys", "EncryptionKeyMissing")}
    for name, (secret, _) in cases.items():
        apply_restore(
            namespace,
            name,
            {
                "source": {"backupRef": {"name": "nightly"}, "encryptionKeysSecretRef": {"name": secret}},
                "target": {"newCluster": {"name": f"never-{name}", "spec": {**PLAINTEXT, "size": 1}}},
            },
        )
    for name, (_, reason) in cases.items():
        failed = wait_phase(namespace, name, "Failed", timeout=120)
        assert reason_of(failed, "Failed") == reason, failed["status"]
        message = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")["message"]
        assert "nothing was touched" in message
        assert kubectl("get", "etcdcluster", f"never-{name}", "-n", namespace, check=False).returncode != 0
        assert objects_of(namespace, f"never-{name}") == []


def test_a_substituted_snapshot_or_manifest_fails_the_restore_before_anything_is_created(
    real_nodes, namespace, encrypted_backup
):
    """Someone who can write the bucket, without the key: first they rewrite the manifest
    (the revision a restore records and bumps from), then they put a plain etcd snapshot in
    place of the sealed one, with a manifest rewritten to match it (no MAC: no key)."""
    s3, bucket = s3_client(real_nodes), controlplane.S3_BUCKET
    genuine = json.loads(s3.get_object(Bucket=bucket, Key=encrypted_backup["manifestKey"])["Body"].read())
    assert len(genuine["mac"]) == 64

    def restore_fails(name: str, reason: str) -> None:
        apply_restore(
            namespace,
            name,
            {
                "source": {"backupRef": {"name": "nightly"}},
                "target": {"newCluster": {"name": f"never-{name}", "spec": {**PLAINTEXT, "size": 1}}},
            },
        )
        failed = wait_phase(namespace, name, "Failed", timeout=120)
        assert reason_of(failed, "Failed") == reason, failed["status"]
        message = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")["message"]
        assert "nothing was touched" in message
        assert kubectl("get", "etcdcluster", f"never-{name}", "-n", namespace, check=False).returncode != 0
        assert objects_of(namespace, f"never-{name}") == []

    rewritten = {**genuine, "revision": genuine["revision"] + 1000}
    s3.put_object(Bucket=bucket, Key=encrypted_backup["manifestKey"], Body=json.dumps(rewritten).encode())
    restore_fails("rewritten-manifest", "ManifestUnauthenticated")

    stored = s3.get_object(Bucket=bucket, Key=encrypted_backup["key"])["Body"].read()
    plain = b"".join(sealed.decode([stored], KEYS))  # a real etcd snapshot, as an attacker would bring
    chosen = {k: v for k, v in genuine.items() if k not in ("mac", "encryption", "keyId", "plainSize")}
    chosen.update(size=len(plain), sha256=hashlib.sha256(plain).hexdigest(), compression="none")
    s3.put_object(Bucket=bucket, Key=encrypted_backup["key"], Body=plain)
    s3.put_object(Bucket=bucket, Key=encrypted_backup["manifestKey"], Body=json.dumps(chosen).encode())
    restore_fails("plain-snapshot", "PlaintextRefused")


def test_the_unseal_commands_of_the_restore_page_run_as_printed(real_nodes, namespace, encrypted_backup, tmp_path):
    """docs/operations/restore.md, "Without the operator": the downloaded object, the key
    Secret's data as files, `kubectl etcd unseal` through kubectl's own plugin lookup, then
    etcdutl reads the snapshot at the backup's revision."""
    stored = tmp_path / "stored"
    stored.write_bytes(
        s3_client(real_nodes).get_object(Bucket=controlplane.S3_BUCKET, Key=encrypted_backup["key"])["Body"].read()
    )
    keys = tmp_path / "keys"
    keys.mkdir()
    for key_id, data in kubectl_json("get", "secret", "backup-keys", "-n", namespace)["data"].items():
        (keys / key_id).write_bytes(base64.b64decode(data))  # what the Secret holds: the key's base64 text
    testbin = localkube_layout.testbin_dir()
    path = f"{os.path.dirname(sys.executable)}:{testbin / 'kube'}:{testbin / 'etcd-3.6'}:{os.environ['PATH']}"
    env = {**os.environ, "PATH": path}
    _, unseal = doc_commands.command(
        "docs/operations/restore.md", "kubectl etcd unseal", STORED=str(stored), KEYS=str(keys)
    )
    subprocess.run(unseal, check=True, cwd=tmp_path, env=env, capture_output=True, text=True)
    _, status = doc_commands.command("docs/operations/restore.md", "etcdutl snapshot status")
    table = subprocess.run(status, check=True, cwd=tmp_path, env=env, capture_output=True, text=True).stdout
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.splitlines() if "|" in line]
    header, row = rows[0], rows[1]
    assert dict(zip(header, row, strict=True))["REVISION"] == str(encrypted_backup["revision"])
