"""Continuous-backup segments and the replayed snapshot are sealed like the backup's
snapshots: the writer's path stores a segment compressed and encrypted, its manifest says
how; the replay checks the stored bytes, then unseals them with the mounted keys, refusing a
missing or wrong key; plain segments written before still replay; the replayed snapshot is
stored sealed, never in clear what was read encrypted; and the restore's trial decryption
refuses a wrong key before its replay pod exists."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import os
import pathlib

import pytest

from etcd_operator.clients.storage.s3 import ObjectExists
from etcd_operator.controllers.backup.continuous_writer import SegmentWriter
from etcd_operator.controllers.backup.snapshot_integrity import VerificationFailed
from etcd_operator.controllers.restore.replay_inputs import check_keys
from etcd_operator.core.backup import continuous as cb
from etcd_operator.core.backup import sealed
from etcd_operator.core.backup.keyring import KeyringError
from etcd_operator.core.backup.manifest import Identity, Manifest, manifest_key
from etcd_operator.core.backup.segment_cutting import Cut
from etcd_operator.core.backup.segments import (
    KeyChange,
    RevisionRecord,
    SegmentBody,
    SegmentManifest,
    chain_id,
    encode,
)
from etcd_operator.core.backup.spec import BackupSpec
from etcd_operator.core.restore import replay_pod
from etcd_operator.core.restore.point_in_time import REPLAY_EXIT_CODES, ReplayRecord, init_failure_reason
from etcd_operator.core.restore.replay_sealing import ReplayedSealing, replayed_sealing
from etcd_operator.core.seed_containers import KEYS_MOUNT
from etcd_operator.programs import replay as program

KEY, OTHER_KEY = os.urandom(32), os.urandom(32)
ENCRYPTED = sealed.Encoding(algorithm="aes-256-gcm", key_id="k1", key=KEY)
CHAIN = chain_id("c1", 10)
FOLDER = "p/ns/nightly/"
SECRET_VALUE = b"the-secret-value-" + b"x" * 40
BASE_KEY = f"{FOLDER}s10.db"


class ObjectStore:
    """The few S3Storage calls the writer, the replay and the trial decryption make."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    async def put(self, key: str, data: bytes, content_type: str | None = None, create_only: bool = False) -> None:
        if create_only and key in self.objects:  # If-None-Match: *, as S3 and MinIO answer it
            raise ObjectExists("PreconditionFailed", "PreconditionFailed", True)
        self.objects[key] = bytes(data)

    async def get(self, key: str) -> bytes:
        return self.objects[key]

    async def exists(self, key: str) -> bool:
        return key in self.objects

    async def list_keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    async def read_range(self, key: str, offset: int, length: int) -> bytes:
        return self.objects[key][offset : offset + length]

    async def size(self, key: str) -> int:
        return len(self.objects[key])


def body(first: int, revisions: int = 3) -> SegmentBody:
    return SegmentBody(
        tuple(
            RevisionRecord(r, 100.0 + r, (KeyChange(f"/k/{r}".encode(), SECRET_VALUE + str(r).encode()),))
            for r in range(first, first + revisions)
        )
    )


def writer(encoding: sealed.Encoding) -> SegmentWriter:
    spec = BackupSpec(cluster="src", s3={}, prefix="p", part_size=1, concurrency=1, max_backups=None, max_age=None)
    start = cb.ChainStart(chain=CHAIN, cluster_id="c1", base_revision=10, base_key=BASE_KEY)
    w = SegmentWriter(None, Identity("ns", "nightly", "u"), spec, cb.ContinuousSpec(), start)  # type: ignore[arg-type]
    w._encoding = encoding  # what _run reads from the backup's spec and Secret
    return w


def written(store: ObjectStore, encoding: sealed.Encoding, bodies: list[SegmentBody]) -> list[SegmentManifest]:
    """Each body through the writer's own upload path, in order."""
    w = writer(encoding)
    for sequence, b in enumerate(bodies, start=1):
        asyncio.run(w._upload_segment(store, sequence, Cut(b, 0)))  # type: ignore[arg-type]
    return w.drain()


def settings(tmp_path: pathlib.Path, last_sequence: int = 2, **fields) -> program.Settings:
    record = ReplayRecord(
        target="revision 16",
        base_key=BASE_KEY,
        base_revision=10,
        base_etcd_version="3.6.0",
        chain=CHAIN,
        first_sequence=1,
        last_sequence=last_sequence,
        segments=last_sequence,
        up_to_revision=10 + 3 * last_sequence,
        replayed_key=f"{FOLDER}restores/uid/replayed.db",
    )
    return program.Settings(
        socket="",
        tls_dir="",
        result_file=tmp_path / "result",
        work=tmp_path / "work",
        segments_folder=f"{FOLDER}segments/{CHAIN}/",
        output_key=record.replayed_key,
        restore="r1",
        until_time=None,
        record=record,
        **fields,
    )


def fetched(store: ObjectStore, tmp_path: pathlib.Path, keys: dict[str, bytes]) -> list[SegmentBody]:
    files, _ = asyncio.run(program.fetch_segments(store, settings(tmp_path), keys))  # type: ignore[arg-type]
    return list(program.read_bodies(files))


# --- the writer's path to the replay's decode ---------------------------------------------


def test_a_sealed_segment_round_trips_from_the_writer_to_the_replay(tmp_path):
    store = ObjectStore()
    bodies = [body(11), body(14)]
    manifests = written(store, ENCRYPTED, bodies)
    for manifest in manifests:
        stored = store.objects[manifest.segment_key]
        assert SECRET_VALUE not in stored and sealed.is_sealed(stored)
        assert (manifest.size, manifest.sha256) == (len(stored), hashlib.sha256(stored).hexdigest())
        again = SegmentManifest.from_json(store.objects[manifest.key])
        assert again == manifest
        assert (again.compression, again.encryption, again.key_id) == ("zstd", "aes-256-gcm", "k1")
    assert fetched(store, tmp_path, {"k1": KEY, "old": OTHER_KEY}) == bodies


def test_a_segment_is_compressed_by_default_and_decodes_without_keys(tmp_path):
    store = ObjectStore()
    manifests = written(store, sealed.Encoding(), [body(11), body(14)])
    assert all(not m.encrypted and m.compression == "zstd" for m in manifests)
    assert all(sealed.is_sealed(store.objects[m.segment_key]) for m in manifests)
    assert fetched(store, tmp_path, {}) == [body(11), body(14)]


@pytest.mark.parametrize(
    "keys, reason",
    [
        ({"k1": OTHER_KEY}, "ManifestUnauthenticated"),  # the manifest's MAC is checked first
        ({}, "EncryptionKeyMissing"),
        ({"k2": KEY}, "EncryptionKeyMissing"),
    ],
)
def test_a_wrong_or_missing_key_is_refused_with_its_reason_and_exit_code(tmp_path, keys, reason):
    store = ObjectStore()
    written(store, ENCRYPTED, [body(11), body(14)])
    with pytest.raises(program.Refused) as refused:
        fetched(store, tmp_path, keys)
    assert refused.value.reason == reason and REPLAY_EXIT_CODES[reason] not in (0, 1)
    assert base64.b64encode(KEY).decode() not in refused.value.message
    assert not any((tmp_path / "work").glob("*.segment"))  # nothing kept of a segment it could not open


def test_the_stored_bytes_are_checked_before_anything_is_decrypted(tmp_path):
    store = ObjectStore()
    manifests = written(store, ENCRYPTED, [body(11), body(14)])
    key = manifests[0].segment_key
    store.objects[key] = store.objects[key][:-1] + bytes([store.objects[key][-1] ^ 1])
    with pytest.raises(program.Refused) as refused:
        fetched(store, tmp_path, {})  # no key: a checksum refusal, not a key refusal, comes first
    assert refused.value.reason == "SegmentChecksumMismatch"


def test_plain_segments_written_before_sealing_still_replay(tmp_path):
    store = ObjectStore()
    manifests = written(store, sealed.PLAIN, [body(11), body(14)])
    for manifest in manifests:
        stored = store.objects[manifest.segment_key]
        assert stored == encode(body(manifest.first_revision))  # exactly the old plain form
        fields = json.loads(manifest.to_json())
        assert fields.pop("compression") == "none" and "encryption" not in fields and "keyId" not in fields
        old_json = json.dumps(fields).encode()  # as the writer wrote it before segments were sealed
        assert SegmentManifest.from_json(old_json) == dataclasses.replace(manifest, compression=None)
        store.objects[manifest.key] = old_json
    assert fetched(store, tmp_path, {}) == [body(11), body(14)]


# --- the replayed snapshot ------------------------------------------------------------


def test_the_replayed_snapshot_is_sealed_under_the_newest_encrypted_inputs_key():
    base = Manifest(BASE_KEY, "nightly", "ns", "src", "c1", "3.6.0", 10, 1, "s", "t", "m", "s10")
    segments = [SegmentManifest.from_json(m.to_json()) for m in written(ObjectStore(), ENCRYPTED, [body(11), body(14)])]
    assert replayed_sealing(None, None, base, []) == ReplayedSealing("zstd", "")
    assert replayed_sealing("none", "k9", base, []) == ReplayedSealing("none", "k9")  # the backup encrypts now
    assert replayed_sealing(None, "k9", base, segments) == ReplayedSealing("zstd", "k1")
    old_base = dataclasses.replace(base, encryption="aes-256-gcm", key_id="old")
    assert replayed_sealing("zstd", None, old_base, []) == ReplayedSealing("zstd", "old")
    assert replayed_sealing("zstd", None, old_base, segments).key_id == "k1"


def test_the_replay_refuses_a_key_it_lacks_and_never_stores_in_clear_what_it_read_encrypted(tmp_path):
    keys = {"k1": KEY}
    encoding = program.replayed_encoding(settings(tmp_path, replayed_key_id="k1"), keys)
    assert encoding.encrypted and encoding.key == KEY
    with pytest.raises(program.Refused) as refused:
        program.replayed_encoding(settings(tmp_path, replayed_key_id="k2"), keys)
    assert refused.value.reason == "EncryptionKeyMissing"
    base = Manifest(BASE_KEY, "nightly", "ns", "src", "c1", "3.6.0", 10, 1, "s", "t", "m", "s10")
    segments = written(ObjectStore(), ENCRYPTED, [body(11)])
    plain = program.replayed_encoding(settings(tmp_path), keys)
    program.refuse_clear_output(plain, base, [])  # nothing was encrypted: stored as the backup says
    program.refuse_clear_output(encoding, base, segments)
    for inputs in ((base, segments), (dataclasses.replace(base, encryption="aes-256-gcm", key_id="k1"), [])):
        with pytest.raises(program.Refused, match="stored in clear") as refused:
            program.refuse_clear_output(plain, *inputs)
        assert refused.value.reason == "EncryptionKeyMissing"


class ScratchMember:
    """What `store` asks of the scratch member; `auth`: its auth revision, or the failure to read it;
    `revision`: the one it serves (the replay's, 16, unless a lease expired under it)."""

    tls = None

    def __init__(self, auth: int | Exception = 4, revision: int = 16):
        self.auth = auth
        self.served = revision

    async def revision(self) -> int:
        return self.served

    async def auth_revision(self, timeout: float | None = None) -> int:
        if isinstance(self.auth, Exception):
            raise self.auth
        return self.auth

    async def status(self):
        return type("Status", (), {"version": "3.6.0"})()

    async def hash_kv(self, revision: int) -> tuple[int, int]:
        return 1234, 5

    async def count_keys(self, revision: int) -> int:
        return 7


def test_the_replayed_snapshot_is_uploaded_sealed_with_a_manifest_that_says_how(tmp_path, monkeypatch):
    snapshot = SECRET_VALUE * 1000

    def save_snapshot(socket: str, tls: object, path: pathlib.Path) -> tuple[str, int]:
        path.write_bytes(snapshot)
        return hashlib.sha256(snapshot).hexdigest(), len(snapshot)

    monkeypatch.setattr(program, "save_snapshot", save_snapshot)
    store = ObjectStore()
    base = Manifest(BASE_KEY, "nightly", "ns", "src", "c1", "3.6.0", 10, 1, "s", "t", "m", "s10")
    s = settings(tmp_path, replayed_key_id="k1")
    s.work.mkdir()
    encoding = program.replayed_encoding(s, {"k1": KEY})
    progress = program.Progress(16, 116.0, 6)
    result = asyncio.run(program.store(store, ScratchMember(), s, progress, base, encoding))  # type: ignore[arg-type]
    stored = store.objects[s.output_key]
    assert SECRET_VALUE not in stored and sealed.is_sealed(stored)
    manifest = Manifest.from_json(store.objects[manifest_key(s.output_key)])
    assert (manifest.compression, manifest.encryption, manifest.key_id) == ("zstd", "aes-256-gcm", "k1")
    assert (manifest.size, manifest.sha256) == (len(stored), hashlib.sha256(stored).hexdigest())
    assert manifest.plain_size == len(snapshot) and (result.sha256, result.size) == (manifest.sha256, manifest.size)
    assert b"".join(sealed.decode([stored], {"k1": KEY})) == snapshot
    assert not (s.work / "replayed.db").exists()  # the plain copy does not outlive its sealing
    assert asyncio.run(program.stored_result(store, s.output_key, {"k1": KEY})) == result  # type: ignore[arg-type]


def test_a_snapshot_taken_after_the_member_moved_past_the_replay_is_never_uploaded(tmp_path, monkeypatch):
    """A lease that expired under the scratch member made a revision the source never had."""
    monkeypatch.setattr(program, "save_snapshot", lambda socket, tls, path: (path.write_bytes(b"db"), ("", 2))[1])
    store = ObjectStore()
    base = Manifest(BASE_KEY, "nightly", "ns", "src", "c1", "3.6.0", 10, 1, "s", "t", "m", "s10")
    s = settings(tmp_path)
    s.work.mkdir()
    encoding = program.replayed_encoding(s, {})
    with pytest.raises(program.Refused, match="moved to revision 17 after revision 16") as refused:
        asyncio.run(program.store(store, ScratchMember(revision=17), s, program.Progress(16, 116.0, 6), base, encoding))  # type: ignore[arg-type]
    assert refused.value.reason == "RevisionMismatch" and store.objects == {}


# --- the pod and the restore's checks before it ---------------------------------------


def test_the_replay_pod_mounts_the_keys_into_the_fetch_and_the_replay_only_and_names_only_the_key_id():
    record = settings(pathlib.Path("/x")).record
    pod = replay_pod.replay_pod(
        "r1", "ns", "etcd:v3.6.0", "op:1", {"bucket": "b"}, FOLDER, record, None,
        keys_secret="backup-keys", sealing=ReplayedSealing("zstd", "k1"),
    )  # fmt: skip
    spec = pod["spec"]
    assert {v["name"]: v for v in spec["volumes"]}["snapshot-keys"]["secret"]["secretName"] == "backup-keys"
    fetch, restore, tls, apply = spec["initContainers"]
    etcd, replay = spec["containers"]
    for container in (fetch, apply, replay):
        assert any(m["mountPath"] == KEYS_MOUNT and m["readOnly"] for m in container["volumeMounts"])
        assert {"name": "SNAPSHOT_KEYS_DIR", "value": KEYS_MOUNT} in container["env"]
    for container in (restore, tls, etcd):
        assert KEYS_MOUNT not in str(container)
    env = {e["name"]: e.get("value") for e in replay["env"]}
    assert (env["REPLAYED_COMPRESSION"], env["REPLAYED_KEY_ID"]) == ("zstd", "k1")
    for key in (KEY, OTHER_KEY):
        assert base64.b64encode(key).decode() not in str(pod)
    plain = replay_pod.replay_pod("r1", "ns", "etcd:v3.6.0", "op:1", {"bucket": "b"}, FOLDER, record, None)
    assert "snapshot-keys" not in str(plain)


def stored_backup(store: ObjectStore, base_encoding: sealed.Encoding) -> ReplayRecord:
    """A base snapshot and two segments of it in `store`, all sealed with `base_encoding`'s key."""
    base_stored = b"".join(sealed.encode([SECRET_VALUE * 100], base_encoding))
    store.objects[BASE_KEY] = base_stored
    base = Manifest(
        BASE_KEY, "nightly", "ns", "src", "c1", "3.6.0", 10, len(base_stored),
        hashlib.sha256(base_stored).hexdigest(), "t", "m", "s10",
        **{"compression": base_encoding.compression, "encryption": base_encoding.algorithm
           if base_encoding.encrypted else None, "key_id": base_encoding.key_id or None},
    )  # fmt: skip
    store.objects[manifest_key(BASE_KEY)] = base.to_json(base_encoding.signing_key)
    written(store, base_encoding, [body(11), body(14)])
    return settings(pathlib.Path("/x")).record


def check(store: ObjectStore, record: ReplayRecord, keys: dict[str, bytes], backup_spec: dict | None = None):
    folder = replay_pod.segments_folder(FOLDER, CHAIN)
    sealing, _ = asyncio.run(check_keys(store, record, folder, keys, "backup-keys", backup_spec or {}))  # type: ignore[arg-type]
    return sealing


def test_the_restore_tries_the_keys_on_the_base_and_the_segments_before_the_replay_pod():
    store = ObjectStore()
    record = stored_backup(store, ENCRYPTED)
    assert check(store, record, {"k1": KEY}, {"compression": "zstd"}) == ReplayedSealing("zstd", "k1")
    for keys, reason in (({"k1": OTHER_KEY}, "DecryptionFailed"), ({"k2": KEY}, "EncryptionKeyMissing")):
        with pytest.raises(VerificationFailed) as failed:
            check(store, record, keys)
        assert failed.value.reason == reason and "nothing was touched" in failed.value.message
        assert BASE_KEY in failed.value.message


def test_a_segment_under_a_key_the_restore_lacks_is_refused_though_the_base_opens():
    store = ObjectStore()
    record = stored_backup(store, sealed.Encoding())  # base and segments compressed only
    for key in [k for k in store.objects if "/0000000001-" in k]:
        del store.objects[key]  # a writer never overwrites a segment (If-None-Match: *): room is made
    segment = written(store, ENCRYPTED, [body(11)])[0]  # then segment 1 written again, encrypted
    assert store.objects[segment.segment_key] != encode(body(11))
    with pytest.raises(VerificationFailed) as failed:
        check(store, record, {})
    assert failed.value.reason == "EncryptionKeyMissing" and segment.segment_key in failed.value.message


def test_the_backups_key_for_the_replayed_snapshot_must_be_among_the_restores_keys():
    store = ObjectStore()
    record = stored_backup(store, sealed.Encoding())
    assert check(store, record, {}) == ReplayedSealing("zstd", "")
    spec = {"encryption": {"secretRef": {"name": "backup-keys"}, "keyID": "k1"}}
    with pytest.raises(VerificationFailed) as plain:  # a key vouches for no object written without it
        check(store, record, {"k1": KEY}, spec)
    assert plain.value.reason == "PlaintextRefused"
    with pytest.raises(KeyringError) as missing:
        check(store, record, {}, spec)
    assert missing.value.reason == "EncryptionKeyMissing"


def test_a_base_the_replay_pod_cannot_decode_fails_the_restore_with_its_reason():
    assert init_failure_reason("fetch", 4) == "SnapshotNotDecodable"
    assert init_failure_reason("fetch", 3) == "ChecksumMismatch"
