"""Sealed snapshots on their way up (stream.py) and back (snapshot_integrity.py), and the
keyring format: in memory, with the fakes of test_snapshot_upload and test_consume_in_order."""

from __future__ import annotations

import asyncio
import base64
import hashlib

import pytest

from etcd_operator.controllers.backup import snapshot_integrity as verify
from etcd_operator.controllers.backup.stream import SnapshotCorrupt, stream_to_s3
from etcd_operator.core.backup import keyring, sealed
from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.buffer_budget import MemoryBudget
from tests.unit.test_consume_in_order import BudgetedStore
from tests.unit.test_snapshot_upload import PART, FakeStream, MemoryStore, snapshot_bytes

KEY = bytes(range(32))
ENCRYPTED = sealed.Encoding(algorithm="aes-256-gcm", key_id="2024-06", key=KEY, chunk_bytes=16 << 10)


def json_snapshot(size: int) -> bytes:
    db = (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"}}' * (size // 60 + 1))[:size]
    return db + hashlib.sha256(db).digest()


def upload(data: bytes, encoding: sealed.Encoding) -> tuple[MemoryStore, object]:
    store = MemoryStore()
    result = asyncio.run(stream_to_s3(FakeStream(data), store, "k", PART, 2, encoding=encoding))
    return store, result


@pytest.mark.parametrize("encoding", [sealed.Encoding(), ENCRYPTED])
def test_an_uploaded_sealed_snapshot_decodes_to_the_stream(encoding):
    data = json_snapshot(600_000)
    store, result = upload(data, encoding)
    stored = store.object()
    assert sealed.is_sealed(stored) and len(stored) < len(data) / 5
    assert b"".join(sealed.decode([stored], {"2024-06": KEY} if encoding.encrypted else None)) == data
    assert (result.size, result.sha256, result.plain_size) == (
        len(stored),
        hashlib.sha256(stored).hexdigest(),
        len(data),
    )


def test_a_plain_encoding_uploads_the_stream_as_it_is():
    data = snapshot_bytes(300_000)
    store, result = upload(data, sealed.PLAIN)
    assert store.object() == data and result.plain_size == result.size == len(data)


def test_etcds_checksum_is_checked_on_the_plain_bytes_of_a_sealed_upload():
    data = bytearray(json_snapshot(200_000))
    data[1000] ^= 1
    with pytest.raises(SnapshotCorrupt):
        upload(bytes(data), ENCRYPTED)


def manifest_for(stored: bytes) -> Manifest:
    return Manifest(
        "k", "b", "ns", "c", "1", "3.6.0", 1, len(stored), hashlib.sha256(stored).hexdigest(), "t", "m", "s"
    )


def test_verification_decrypts_and_checks_both_digests():
    data = json_snapshot(3 * verify.RANGE_BYTES // 2)
    stored = b"".join(sealed.encode([data], ENCRYPTED))
    budget = MemoryBudget(48 << 20)
    verified = asyncio.run(
        verify.verify_snapshot(BudgetedStore(stored, budget), "k", manifest_for(stored), budget, {"2024-06": KEY})
    )
    assert (verified.size, verified.plain_size) == (len(stored), len(data))


@pytest.mark.parametrize(
    ("keys", "reason"),
    [
        ({"2024-06": bytes(32)}, "DecryptionFailed"),
        ({"older": KEY}, "EncryptionKeyMissing"),
        ({}, "EncryptionKeyMissing"),
    ],
)
def test_verification_with_a_wrong_or_missing_key_fails_with_its_reason(keys, reason):
    stored = b"".join(sealed.encode([json_snapshot(100_000)], ENCRYPTED))
    budget = MemoryBudget(48 << 20)
    with pytest.raises(verify.VerificationFailed) as failed:
        asyncio.run(verify.verify_snapshot(BudgetedStore(stored, budget), "k", manifest_for(stored), budget, keys))
    assert failed.value.reason == reason
    assert budget.used == 0


def test_a_plain_snapshot_still_verifies_without_keys():
    data = snapshot_bytes(200_000)
    budget = MemoryBudget(48 << 20)
    verified = asyncio.run(verify.verify_snapshot(BudgetedStore(data, budget), "k", manifest_for(data), budget))
    assert verified.size == verified.plain_size == len(data)


def test_keys_are_base64_of_32_bytes_and_errors_never_show_them():
    text = base64.b64encode(KEY) + b"\n"
    assert keyring.parse_keyring({"k1": text}) == {"k1": KEY}
    short = base64.b64encode(b"x" * 16)
    with pytest.raises(keyring.KeyringError, match="16 bytes") as failed:
        keyring.parse_key("k1", short)
    assert failed.value.reason == "EncryptionKeyInvalid" and short.decode() not in failed.value.message
    with pytest.raises(keyring.KeyringError, match="not base64"):
        keyring.parse_key("k1", b"not base64!")


def test_a_restore_decrypts_with_its_own_secret_else_the_backups():
    backup_spec = {"encryption": {"secretRef": {"name": "backup-keys"}, "keyID": "k1"}}
    assert keyring.decryption_secret({"backupRef": {"name": "b"}}, backup_spec) == "backup-keys"
    assert (
        keyring.decryption_secret(
            {"backupRef": {"name": "b"}, "encryptionKeysSecretRef": {"name": "mine"}}, backup_spec
        )
        == "mine"
    )
    assert keyring.decryption_secret({"s3": {"key": "x"}}, None) is None


def test_restore_pods_get_the_keys_as_a_mounted_secret_never_as_values():
    from etcd_operator.core.restore import builders
    from etcd_operator.core.seed_containers import KEYS_MOUNT

    pod = builders.restore_pod(
        "r", "ns", "c", "c-0", ("c-0",), "t", "etcd", "op", {"bucket": "b"}, "k", "sha", 10, keys_secret="backup-keys"
    )
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["snapshot-keys"]["secret"]["secretName"] == "backup-keys"
    fetch = pod["spec"]["initContainers"][0]
    assert {"name": "SNAPSHOT_KEYS_DIR", "value": KEYS_MOUNT} in fetch["env"]
    assert any(m["mountPath"] == KEYS_MOUNT and m["readOnly"] for m in fetch["volumeMounts"])
    assert all(KEYS_MOUNT not in str(c) for c in pod["spec"]["containers"])  # etcdutl never sees them
    plain = builders.restore_pod("r", "ns", "c", "c-0", ("c-0",), "t", "etcd", "op", {"bucket": "b"}, "k", "sha", 10)
    assert "snapshot-keys" not in str(plain)


def test_the_fetch_program_reads_one_key_per_file_and_skips_the_kubelets_entries(tmp_path):
    from etcd_operator.clients.storage.keyring import read_mounted_keys as read_keys

    (tmp_path / "k1").write_bytes(base64.b64encode(KEY) + b"\n")
    (tmp_path / "..data").mkdir()
    assert read_keys(str(tmp_path)) == {"k1": KEY}
    assert read_keys("") == {}


def test_a_key_problem_ends_the_backup_slot_at_once():
    from etcd_operator.controllers.backup.failure import as_failure

    failure = as_failure(keyring.KeyringError("EncryptionKeyMissing", "Secret ns/keys has no key 'k9'"))
    assert (failure.reason, failure.permanent) == ("EncryptionKeyMissing", True)
