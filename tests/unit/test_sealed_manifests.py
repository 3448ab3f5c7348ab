"""Sealed means sealed: when a backup has a key, what a restore, a replay or a verification
reads is refused unless it is encrypted under one of the keys and its manifest carries a MAC
under a key derived from them, bound to the name it is stored at. Each refusal is driven
through the code that reads the store (the restore's verification step, the replay program,
the trial decryption before the replay pod, the backup verifier), over an in-memory store
holding what the writers' own code paths wrote."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import pathlib

import pytest

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.backup.scratch_verifier import BackupVerifier, VerificationError
from etcd_operator.controllers.restore import executor as restore_executor
from etcd_operator.controllers.restore.executor import RestoreExecutor
from etcd_operator.controllers.restore.replay_inputs import check_keys
from etcd_operator.core.backup import sealed, segment_sealing
from etcd_operator.core.backup.manifest import Manifest, ManifestUnauthenticated, manifest_key, snapshot_key
from etcd_operator.core.backup.scratch_verdict import Verdict
from etcd_operator.core.backup.segments import SegmentManifest, encode
from etcd_operator.core.restore import replay_pod
from etcd_operator.programs import replay as program
from tests.unit.test_sealed_segments import (
    BASE_KEY,
    CHAIN,
    ENCRYPTED,
    FOLDER,
    KEY,
    OTHER_KEY,
    ObjectStore,
    body,
    check,
    fetched,
    stored_backup,
    written,
)

PREFIX = "backups"
S3 = {"bucket": "b", "prefix": PREFIX}
SECRET = "backup-keys"


def etcd_snapshot(size: int, marker: bytes) -> bytes:
    """Bytes with etcd's trailing sha256, as a snapshot stream ends."""
    db = (marker * (size // len(marker) + 1))[:size]
    return db + hashlib.sha256(db).digest()


def put_snapshot(
    store: ObjectStore, slot: str, data: bytes, encoding: sealed.Encoding, backup: str = "nightly"
) -> Manifest:
    """A snapshot and its manifest, stored as the backup runner stores them."""
    key = snapshot_key(PREFIX, "ns", backup, slot)
    stored = b"".join(sealed.encode([data], encoding))
    store.objects[key] = stored
    manifest = Manifest(
        key, backup, "ns", "src", "c1", "3.6.5", 100, len(stored), hashlib.sha256(stored).hexdigest(),
        f"2026-01-0{slot[-1]}T00:00:00Z", "src-0", slot, backup_uid="u-" + backup,
        compression=encoding.compression, encryption=encoding.algorithm if encoding.encrypted else None,
        key_id=encoding.key_id or None, plain_size=len(data),
    )  # fmt: skip
    store.objects[manifest.key] = manifest.to_json(encoding.signing_key)
    return manifest


def plain_substitute(store: ObjectStore, genuine: Manifest, data: bytes) -> None:
    """What someone who can write the bucket puts in place of a snapshot: chosen plain bytes,
    with a manifest rewritten to match them (no MAC: they do not hold the key)."""
    store.objects[genuine.snapshot_key] = data
    fields = json.loads(genuine.to_json())
    fields.update(size=len(data), sha256=hashlib.sha256(data).hexdigest(), compression="none")
    for name in ("encryption", "keyId", "plainSize"):
        fields.pop(name, None)
    store.objects[genuine.key] = json.dumps(fields).encode()


class Storage(ObjectStore):
    async def check_bucket(self) -> None:
        return None

    def close(self) -> None:
        return None


class Kube:
    """The EtcdBackup and the keys Secret the restore's verification reads."""

    def __init__(self, keys: dict[str, bytes]):
        self.keys = keys

    async def get(self, resource, namespace: str, name: str):
        if resource == kube.ETCDBACKUPS and name == "nightly":
            spec = {"storage": {"s3": S3}, "encryption": {"secretRef": {"name": SECRET}, "keyID": "k1"}}
            return {"metadata": {"name": name, "namespace": namespace, "uid": "u-nightly"}, "spec": spec}
        if resource == kube.SECRETS and name == SECRET:
            return {"data": {k: base64.b64encode(base64.b64encode(v)).decode() for k, v in self.keys.items()}}
        return None


def restore_verification(
    store: Storage, source: dict, keys: dict[str, bytes], monkeypatch, events: list | None = None
) -> tuple:
    """The restore's verification step (RestoreExecutor._verified_facts) over `store`:
    (failure reason or None, message or the status fields); the events it posts go to `events`."""

    async def location(*_):
        return None

    monkeypatch.setattr(restore_executor, "s3_location", location)
    monkeypatch.setattr(restore_executor, "S3Storage", lambda *_: store)
    body = {"metadata": {"namespace": "ns", "name": "r1"}}
    posted = events if events is not None else []
    executor = RestoreExecutor(Kube(keys), "op:1", body, lambda *event: posted.append(event))  # type: ignore[arg-type]
    try:
        outcome = asyncio.run(executor._verified_facts(source))
    except restore_executor.VerificationFailed as e:
        return e.reason, e.message
    return None, outcome.status_fields


SOURCE = {"backupRef": {"name": "nightly"}}
DATA = etcd_snapshot(300_000, b'{"kind":"Secret","data":"genuine"}')
CHOSEN = etcd_snapshot(200_000, b'{"kind":"Secret","data":"chosen by the attacker"}')


@pytest.fixture
def backup() -> tuple[Storage, Manifest, Manifest]:
    """An encrypted backup with two snapshots, as its runner stored them."""
    store = Storage()
    older = put_snapshot(store, "slot1", etcd_snapshot(250_000, b"older genuine data"), ENCRYPTED)
    newer = put_snapshot(store, "slot2", DATA, ENCRYPTED)
    return store, older, newer


# --- the manifest's MAC ------------------------------------------------------------------


def test_a_manifest_of_an_encrypted_backup_carries_a_mac_and_reads_back(backup):
    store, _, newer = backup
    document = json.loads(store.objects[newer.key])
    assert len(document["mac"]) == 64 and document["keyId"] == "k1"
    assert Manifest.read(store.objects[newer.key], newer.key, {"k1": KEY}) == newer
    assert Manifest.read(store.objects[newer.key], newer.key, {}) == newer  # no keys: nothing to check


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(revision=d["revision"] + 1),
        lambda d: d.update(sha256="0" * 64),
        lambda d: d.update(encryption=None),
        lambda d: d.pop("mac"),
        lambda d: d.update(mac="0" * 64),
        lambda d: d.update(extra="a field this version does not know"),
    ],
    ids=["revision", "sha256", "encryption", "no-mac", "made-up-mac", "added-field"],
)
def test_a_manifest_changed_in_any_way_is_refused(backup, change):
    store, _, newer = backup
    document = json.loads(store.objects[newer.key])
    change(document)
    with pytest.raises(ManifestUnauthenticated) as refused:
        Manifest.read(json.dumps(document).encode(), newer.key, {"k1": KEY})
    assert refused.value.reason == "ManifestUnauthenticated"


def test_a_manifest_under_another_key_or_a_key_id_not_held_is_refused(backup):
    store, _, newer = backup
    with pytest.raises(ManifestUnauthenticated) as wrong:
        Manifest.read(store.objects[newer.key], newer.key, {"k1": OTHER_KEY})
    assert wrong.value.reason == "ManifestUnauthenticated"
    with pytest.raises(ManifestUnauthenticated) as missing:
        Manifest.read(store.objects[newer.key], newer.key, {"k2": KEY})
    assert missing.value.reason == "EncryptionKeyMissing" and "'k1'" in missing.value.message
    assert base64.b64encode(KEY).decode() not in str(wrong.value) + str(missing.value)


def test_the_mac_is_bound_to_the_name_the_manifest_is_stored_at(backup):
    store, older, newer = backup
    with pytest.raises(ManifestUnauthenticated, match="copied here from another name"):
        Manifest.read(store.objects[older.key], newer.key, {"k1": KEY})


# --- the restore's verification step -------------------------------------------------------


def test_the_genuine_encrypted_snapshot_verifies(backup, monkeypatch):
    store, _, newer = backup
    reason, facts = restore_verification(store, SOURCE, {"k1": KEY}, monkeypatch)
    assert reason is None and facts["sourceKey"] == newer.snapshot_key and facts["snapshotSize"] == len(DATA)


def test_a_plaintext_substitute_with_a_rewritten_manifest_is_never_the_latest_backup(backup, monkeypatch):
    """The latest backup is the newest whose manifest authenticates: the substitute is left
    out and named in a Warning event; restored by name, it is refused."""
    store, older, newer = backup
    plain_substitute(store, newer, CHOSEN)
    events: list = []
    reason, facts = restore_verification(store, SOURCE, {"k1": KEY}, monkeypatch, events)
    assert reason is None and facts["sourceKey"] == older.snapshot_key
    assert [(kind, why) for kind, why, _ in events] == [("Warning", "ManifestUnauthenticated")]
    assert newer.key in events[0][2]
    reason, message = restore_verification(store, by_name(newer), {"k1": KEY}, monkeypatch)
    assert reason == "PlaintextRefused" and newer.snapshot_key in message and "nothing was touched" in message


def test_a_rewritten_manifest_is_never_the_latest_backup_and_fails_a_restore_by_name(backup, monkeypatch):
    store, older, newer = backup
    document = json.loads(store.objects[newer.key])
    document["revision"] += 1_000  # what the restore would record, and bump revisions from
    store.objects[newer.key] = json.dumps(document).encode()
    events: list = []
    reason, facts = restore_verification(store, SOURCE, {"k1": KEY}, monkeypatch, events)
    assert reason is None and facts["sourceKey"] == older.snapshot_key and newer.key in events[0][2]
    reason, message = restore_verification(store, by_name(newer), {"k1": KEY}, monkeypatch)
    assert reason == "ManifestUnauthenticated" and newer.key in message and "nothing was touched" in message


def test_a_wrong_key_is_told_apart_from_an_altered_manifest(backup, monkeypatch):
    store, _, _ = backup
    assert restore_verification(store, SOURCE, {"k1": OTHER_KEY}, monkeypatch)[0] == "DecryptionFailed"
    assert restore_verification(store, SOURCE, {"k2": KEY}, monkeypatch)[0] == "EncryptionKeyMissing"


def test_a_plaintext_substitute_under_the_genuine_manifest_is_refused_as_plaintext(backup, monkeypatch):
    store, _, newer = backup
    store.objects[newer.snapshot_key] = CHOSEN
    reason, message = restore_verification(store, SOURCE, {"k1": KEY}, monkeypatch)
    assert reason == "PlaintextRefused" and newer.snapshot_key in message


def test_a_snapshot_sealed_without_encryption_is_refused_in_an_encrypted_backup(backup, monkeypatch):
    store, _, newer = backup
    store.objects[newer.snapshot_key] = b"".join(sealed.encode([CHOSEN], sealed.Encoding()))
    reason, _ = restore_verification(store, SOURCE, {"k1": KEY}, monkeypatch)
    assert reason == "PlaintextRefused"


def by_name(manifest: Manifest) -> dict:
    return {"backupRef": {"name": "nightly", "key": manifest.snapshot_key}}


def test_a_pair_from_another_backup_under_the_same_key_is_refused(backup, monkeypatch):
    store, _, newer = backup
    other = put_snapshot(store, "slot3", CHOSEN, ENCRYPTED, backup="other-app")
    store.objects[newer.snapshot_key] = store.objects[other.snapshot_key]
    store.objects[newer.key] = store.objects[other.key]
    reason, message = restore_verification(store, by_name(newer), {"k1": KEY}, monkeypatch)
    assert reason == "ManifestUnauthenticated" and "another name or another backup" in message


def test_an_older_pair_of_the_same_backup_moved_to_a_newer_name_is_refused(backup, monkeypatch):
    store, older, newer = backup
    store.objects[newer.snapshot_key] = store.objects[older.snapshot_key]
    store.objects[newer.key] = store.objects[older.key]
    reason, _ = restore_verification(store, by_name(newer), {"k1": KEY}, monkeypatch)
    assert reason == "ManifestUnauthenticated"


def test_a_genuine_object_swapped_under_another_snapshots_manifest_is_refused(backup, monkeypatch):
    store, older, newer = backup
    store.objects[newer.snapshot_key] = store.objects[older.snapshot_key]
    reason, _ = restore_verification(store, SOURCE, {"k1": KEY}, monkeypatch)
    assert reason == "ChecksumMismatch"


def test_an_explicit_object_of_an_encrypted_backup_needs_its_authenticated_manifest(backup, monkeypatch):
    store, _, newer = backup
    source = {"s3": {**S3, "key": newer.snapshot_key}, "encryptionKeysSecretRef": {"name": SECRET}}
    assert restore_verification(store, source, {"k1": KEY}, monkeypatch)[0] is None
    del store.objects[newer.key]
    reason, message = restore_verification(store, source, {"k1": KEY}, monkeypatch)
    assert reason == "ManifestUnauthenticated" and "no manifest" in message


def test_a_backup_without_a_key_restores_plain_snapshots_as_before(monkeypatch):
    store = Storage()
    plain = put_snapshot(store, "slot1", DATA, sealed.PLAIN)
    assert "mac" not in json.loads(store.objects[plain.key])
    source = {"s3": {**S3, "key": plain.snapshot_key}}
    reason, facts = restore_verification(store, source, {}, monkeypatch)
    assert reason is None and facts["sha256"] == plain.sha256


# --- the point-in-time replay's inputs ------------------------------------------------------


def test_a_plain_segment_with_a_rewritten_manifest_is_refused_by_the_replay(tmp_path):
    store = ObjectStore()
    manifests = written(store, ENCRYPTED, [body(11), body(14)])
    first = manifests[0]
    chosen = encode(body(11))  # a plain segment body with chosen values
    store.objects[first.segment_key] = chosen
    fields = json.loads(first.to_json())
    fields.update(size=len(chosen), sha256=hashlib.sha256(chosen).hexdigest(), compression="none")
    fields.pop("encryption"), fields.pop("keyId")
    store.objects[first.key] = json.dumps(fields).encode()
    with pytest.raises(program.Refused) as refused:
        fetched(store, tmp_path, {"k1": KEY})
    assert refused.value.reason == "ManifestUnauthenticated" and first.key in refused.value.message
    assert program.REPLAY_EXIT_CODES["ManifestUnauthenticated"] not in (0, 1)


def test_a_segment_manifest_moved_to_another_sequence_is_refused_by_the_replay(tmp_path):
    store = ObjectStore()
    first, second = written(store, ENCRYPTED, [body(11), body(14)])
    store.objects[second.key] = store.objects[first.key]
    with pytest.raises(program.Refused) as refused:
        fetched(store, tmp_path, {"k1": KEY})
    assert refused.value.reason == "ManifestUnauthenticated"


def test_a_plain_segment_is_refused_when_the_replay_holds_keys():
    with pytest.raises(sealed.PlaintextRefused):
        segment_sealing.unseal(encode(body(11)), {"k1": KEY})
    assert segment_sealing.open_body(encode(body(11)), {}) == body(11)


def test_the_trial_before_the_replay_pod_refuses_a_plain_base_and_an_unauthenticated_base_manifest():
    store = ObjectStore()
    record = stored_backup(store, ENCRYPTED)
    genuine = dict(store.objects)
    base = Manifest.from_json(store.objects[manifest_key(BASE_KEY)])
    plain_substitute(store, base, CHOSEN)  # type: ignore[arg-type]
    with pytest.raises(restore_executor.VerificationFailed) as failed:
        check(store, record, {"k1": KEY})
    assert failed.value.reason == "PlaintextRefused"
    store.objects = genuine
    document = json.loads(store.objects[manifest_key(BASE_KEY)])
    document["encryption"] = None  # the replayed snapshot would be stored in clear
    store.objects[manifest_key(BASE_KEY)] = json.dumps(document).encode()
    with pytest.raises(restore_executor.VerificationFailed) as failed:
        check(store, record, {"k1": KEY})
    assert failed.value.reason == "ManifestUnauthenticated"


def test_the_trial_before_the_replay_pod_refuses_an_unauthenticated_segment_manifest():
    store = ObjectStore()
    record = stored_backup(store, ENCRYPTED)
    key = next(k for k in store.objects if k.endswith(".segment.json"))
    document = json.loads(store.objects[key])
    document["lastSeenAt"] += 3600  # a time target would pick another revision
    store.objects[key] = json.dumps(document).encode()
    with pytest.raises(restore_executor.VerificationFailed) as failed:
        check(store, record, {"k1": KEY})
    assert failed.value.reason == "ManifestUnauthenticated" and key in failed.value.message


def planted_manifest(store: ObjectStore, genuine: SegmentManifest, sequence: int, first: int, last: int) -> str:
    """What someone who can write the bucket but lacks the key can store in the chain's folder:
    a segment claiming `sequence` of the chain (revisions first..last), its manifest without a MAC."""
    chosen = encode(body(first, last - first + 1))
    planted = dataclasses.replace(
        genuine,
        sequence=sequence,
        first_revision=first,
        last_revision=last,
        segment_key=genuine.segment_key.replace(
            genuine.segment_key.rsplit("/", 1)[1], f"{sequence:010d}-{first:020d}-{last:020d}.segment"
        ),
        size=len(chosen),
        sha256=hashlib.sha256(chosen).hexdigest(),
        compression="none",
        encryption=None,
        key_id=None,
    )
    store.objects[planted.segment_key] = chosen
    store.objects[planted.key] = planted.to_json()
    return planted.key


def test_a_planted_manifest_in_the_chain_is_ignored_by_the_replay_and_the_trial_before_it(tmp_path):
    """A duplicate of segment 2 that would reach further, and a segment 3 beyond the plan: both
    planted, neither authenticates. The replay and the trial before its pod go by the authentic
    manifests, and the trial names the planted one in the range for a Warning event."""
    store = ObjectStore()
    record = stored_backup(store, ENCRYPTED)
    genuine = [SegmentManifest.from_json(v) for k, v in sorted(store.objects.items()) if k.endswith(".segment.json")]
    duplicate = planted_manifest(store, genuine[1], 2, 14, 20)
    beyond = planted_manifest(store, genuine[1], 3, 17, 19)
    assert fetched(store, tmp_path, {"k1": KEY}) == [body(11), body(14)]
    folder = replay_pod.segments_folder(FOLDER, CHAIN)
    sealing, ignored = asyncio.run(check_keys(store, record, folder, {"k1": KEY}, SECRET, {}))  # type: ignore[arg-type]
    assert sealing.key_id == "k1" and [i.key for i in ignored] == [duplicate]
    assert beyond not in {i.key for i in ignored}  # outside the recorded range: not read by the trial


def test_a_gap_the_authentic_manifests_leave_refuses_the_replay_naming_it_and_the_ignored(tmp_path):
    """Segment 2's genuine manifest gone and a planted one in its place: the authentic ones
    stop at segment 1, so the replay and the trial refuse, saying the gap and the planted key."""
    store = ObjectStore()
    record = stored_backup(store, ENCRYPTED)
    genuine = [SegmentManifest.from_json(v) for k, v in sorted(store.objects.items()) if k.endswith(".segment.json")]
    del store.objects[genuine[1].key]
    planted = planted_manifest(store, genuine[1], 2, 14, 16)
    with pytest.raises(program.Refused) as refused:
        fetched(store, tmp_path, {"k1": KEY})
    assert refused.value.reason == "ManifestUnauthenticated"
    assert "holds segments 1..1, the plan needs 1..2" in refused.value.message and planted in refused.value.message
    with pytest.raises(restore_executor.VerificationFailed) as failed:
        check(store, record, {"k1": KEY})
    assert failed.value.reason == "ManifestUnauthenticated"
    assert "the plan needs 1..2" in failed.value.message and planted in failed.value.message


def test_an_earlier_replays_result_counts_only_with_an_authenticated_manifest(tmp_path):
    store = ObjectStore()
    output = f"{PREFIX}/ns/nightly/restores/r1/replayed.db"
    genuine = Manifest(
        output, "nightly", "ns", "src", "c1", "3.6.5", 16, 10, "s" * 64, "t", "replay", "replay-r1",
        encryption="aes-256-gcm", key_id="k1",
    )  # fmt: skip
    result = program.ReplayResult(16, 116.0, 6, "s" * 64, 10)
    store.objects[program.result_key(output)] = result.to_json().encode()
    store.objects[manifest_key(output)] = genuine.to_json(KEY)
    assert asyncio.run(program.stored_result(store, output, {"k1": KEY})) == result  # type: ignore[arg-type]
    store.objects[manifest_key(output)] = genuine.to_json()
    assert asyncio.run(program.stored_result(store, output, {"k1": KEY})) is None  # type: ignore[arg-type]


# --- the backup's verification --------------------------------------------------------------


def verifier() -> BackupVerifier:
    backup_body = asyncio.run(Kube({}).get(kube.ETCDBACKUPS, "ns", "nightly"))
    assert backup_body is not None
    backup_body["spec"]["clusterRef"] = {"name": "src"}
    return BackupVerifier(Kube({"k1": KEY}), "op:1", backup_body)  # type: ignore[arg-type]


def test_a_verdict_rewrites_the_manifest_still_authenticated(backup):
    store, _, newer = backup
    asyncio.run(verifier()._mark(store, newer, Verdict(True, "Verified", "every answer matched")))  # type: ignore[arg-type]
    marked = Manifest.read(store.objects[newer.key], newer.key, {"k1": KEY})
    assert marked.verified is True and marked.sha256 == newer.sha256


def test_the_backup_verification_refuses_an_unauthenticated_manifest(backup):
    store, _, newer = backup
    checker = verifier()
    assert asyncio.run(checker._manifest(store, newer.snapshot_key)) == newer  # type: ignore[arg-type]
    plain_substitute(store, newer, CHOSEN)
    with pytest.raises(VerificationError) as refused:
        asyncio.run(checker._manifest(store, newer.snapshot_key))  # type: ignore[arg-type]
    assert refused.value.reason == "ManifestUnauthenticated"


def test_the_seed_fetch_of_an_encrypted_backup_refuses_a_plain_object(tmp_path, monkeypatch):
    """Restore and verification pods fetch through programs/seed.py with the keys mounted."""
    from etcd_operator.programs import seed

    keys_dir = tmp_path / "keys"
    keys_dir.mkdir()
    (keys_dir / "k1").write_bytes(base64.b64encode(KEY))

    class Stream(Storage):
        async def open_stream(self, key: str, chunk: int):
            async def chunks():
                yield self.objects[key]

            return chunks()

    store = Stream()
    store.objects["k"] = CHOSEN
    monkeypatch.setattr(seed, "S3Storage", lambda *_: store)
    env = {
        "SNAPSHOT_FILE": str(tmp_path / "snapshot.db"), "DATA_DIR": str(tmp_path / "data"), "S3_KEY": "k",
        "EXPECTED_SHA256": hashlib.sha256(CHOSEN).hexdigest(), "SNAPSHOT_KEYS_DIR": str(keys_dir),
        "S3_BUCKET": "b",
    }  # fmt: skip
    monkeypatch.setattr(seed.S3Location, "from_pod_env", classmethod(lambda cls, env, ca: None))
    assert asyncio.run(seed.fetch(env)) == seed.UNSEALING_REFUSED
    assert not pathlib.Path(env["SNAPSHOT_FILE"]).exists()
    del env["SNAPSHOT_KEYS_DIR"]  # a backup without a key: plain objects restore as before
    assert asyncio.run(seed.fetch(env)) == 0


def test_keys_never_appear_in_the_refusals():
    store = ObjectStore()
    written(store, ENCRYPTED, [body(11)])
    values = [base64.b64encode(k).decode() for k in (KEY, OTHER_KEY)] + [KEY.hex(), OTHER_KEY.hex()]
    messages = []
    for keys in ({"k1": OTHER_KEY}, {"k2": KEY}):
        key = next(k for k in store.objects if k.endswith(".segment.json"))
        try:
            SegmentManifest.read(store.objects[key], key, keys)
        except ManifestUnauthenticated as e:
            messages.append(e.message)
    assert len(messages) == 2 and not any(v in m for v in values for m in messages)


# --- the auth revision (optional, under the MAC) -------------------------------------------


def test_a_snapshot_manifests_auth_revision_is_covered_by_its_mac_and_optional():
    store = Storage()
    genuine = put_snapshot(store, "slot1", DATA, ENCRYPTED)
    with_auth = dataclasses.replace(genuine, auth_revision=7)
    stored = with_auth.to_json(ENCRYPTED.signing_key)
    assert Manifest.read(stored, with_auth.key, {"k1": KEY}).auth_revision == 7
    for change in (lambda d: d.update(authRevision=8), lambda d: d.pop("authRevision")):
        document = json.loads(stored)
        change(document)
        with pytest.raises(ManifestUnauthenticated):
            Manifest.read(json.dumps(document).encode(), with_auth.key, {"k1": KEY})
    assert "authRevision" not in json.loads(store.objects[genuine.key])  # as older versions wrote it
    assert Manifest.read(store.objects[genuine.key], genuine.key, {"k1": KEY}).auth_revision is None


def test_a_segment_manifests_auth_revision_is_covered_by_its_mac_and_optional():
    store = ObjectStore()
    (old,) = written(store, ENCRYPTED, [body(11)])
    assert "authRevision" not in json.loads(store.objects[old.key])
    assert SegmentManifest.read(store.objects[old.key], old.key, {"k1": KEY}).auth_revision is None
    recorded = dataclasses.replace(old, auth_revision=3)
    stored = recorded.to_json(ENCRYPTED.signing_key)
    assert SegmentManifest.read(stored, recorded.key, {"k1": KEY}).auth_revision == 3
    document = json.loads(stored)
    document["authRevision"] = 2
    with pytest.raises(ManifestUnauthenticated):
        SegmentManifest.read(json.dumps(document).encode(), recorded.key, {"k1": KEY})
