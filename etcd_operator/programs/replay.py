"""`python -m etcd_operator.programs.replay [apply]`: the point-in-time replay pod's two
program containers (core/restore/replay_pod.py). `apply` runs as an init container, once the
base snapshot is restored on the pod's emptyDir and before any etcd serves it; without it,
the replay container runs beside the scratch etcd started on the result. That etcd listens
on a unix socket of the emptyDir, with TLS of a CA made in the pod: every call authenticates
with its client certificate (CN root, programs/scratch_tls.py), so a base snapshot taken
with etcd authentication on is served too, with no secret.

1. Both: if this restore's replayed snapshot is stored already (its result document,
   uploaded last, names its sha256), report it again: a pod started after a restart does
   not replay twice.
2. apply: list the recorded chain's segment manifests, check the chain (core/restore/
   point_in_time.chain_to_replay: every sequence number, no revision missing), then
   download every segment, checking its size and sha256 against its manifest, unsealing it
   with the keys mounted at SNAPSHOT_KEYS_DIR (core/backup/segment_sealing.py: a missing or
   wrong key is refused) and decoding it whole, all before the first write.
3. apply: replay into the restored backend through etcd's own storage code
   (clients/etcd/backend_apply.py, cmd/etcd-replay-apply): each original revision is one
   write transaction, and the store's revision before and after it must be the original's
   (the program refuses any other); a lease is granted with its recorded ID and TTL before
   the first put that uses it (one recorded as gone with segments.GONE_LEASE_TTL: its keys'
   deletions are revisions of the chain). No lease expires there: no etcd runs. Stops at
   the recorded revision, or at the first revision the backup's watch saw after the time
   asked for, and hands its progress to the replay container in WORK_DIR.
4. replay: the scratch member must serve exactly the replayed revision; every lease it
   holds is kept alive until its snapshot is taken (an expiry would add a revision the
   source never had; after that, each expires on its own in the restored cluster). Snapshot
   the store over its socket, seal it (core/restore/replay_sealing.py: REPLAYED_COMPRESSION,
   and REPLAYED_KEY_ID's key from the mounted keys; never in clear what was read
   encrypted), upload it with a snapshot manifest saying how it is sealed, then the result.
   The manifest records no `authRevision`: the keys are the source's at the point, but the
   users, roles and auth switch are the base's (segments hold key changes only), so the
   source's auth revision at the point is not what it holds. It records `baseAuthRevision`
   instead: the scratch member's auth revision, read once it serves and again before the
   snapshot (left out when a read fails or the two differ).

Each container's exit code names a refusal (point_in_time.REPLAY_EXIT_CODES); the
termination message carries the result (JSON) or why it refused."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from etcd_operator.clients.etcd.backend_apply import APPLY_PROGRAM, ApplyFailed, BackendApplier
from etcd_operator.clients.etcd.client import ClientTLS, EtcdError
from etcd_operator.clients.etcd.replay import ReplayMember, leases_kept_alive
from etcd_operator.clients.etcd.snapshot import SnapshotStream
from etcd_operator.clients.storage.keyring import read_mounted_keys
from etcd_operator.clients.storage.s3 import S3Location, S3Storage, StorageError
from etcd_operator.core.backup import sealed, segment_sealing
from etcd_operator.core.backup.chain import ChainProblem
from etcd_operator.core.backup.keyring import KeyringError
from etcd_operator.core.backup.manifest import (
    Ignored,
    Manifest,
    ManifestUnauthenticated,
    ignored_reason,
    ignored_summary,
    manifest_key,
)
from etcd_operator.core.backup.segments import (
    SEGMENT_MANIFEST_SUFFIX,
    KeyChange,
    RevisionRecord,
    SegmentBody,
    SegmentCorrupt,
    SegmentManifest,
    decode,
)
from etcd_operator.core.restore.point_in_time import (
    REPLAY_EXIT_CODES,
    ReplayRecord,
    ReplayResult,
    chain_to_replay,
    result_key,
)
from etcd_operator.core.timefmt import now_text
from etcd_operator.programs.scratch_tls import read_client_tls

logger = logging.getLogger("replay")

ANSWER_WAIT_SECONDS = 120.0  # from this container's start until the scratch member must answer
RETRY_SECONDS = 0.5
PART_BYTES = 64 << 20  # the replayed snapshot is uploaded in parts of this size above it
KEEP_ALIVE_MIN, KEEP_ALIVE_MAX = 0.5, 5.0  # seconds between renewals: a third of the shortest TTL, within these
SEAL_READ_BYTES = 1 << 20  # the replayed snapshot is sealed from its file in reads of this size
AUTH_READ_SECONDS = 10.0  # the scratch member's auth revision: not known rather than waited for longer


class Refused(Exception):
    """The replay cannot give the store the source had: `reason` is a key of REPLAY_EXIT_CODES."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclasses.dataclass(frozen=True)
class Settings:
    socket: str
    tls_dir: str  # the pod's throwaway client certificate (programs/scratch_tls.py), CN root
    result_file: pathlib.Path
    work: pathlib.Path
    segments_folder: str
    output_key: str
    restore: str
    until_time: float | None
    record: ReplayRecord
    keys_dir: str = ""  # the restore's keys Secret, mounted: one file per key ID
    replayed_compression: str = "zstd"
    replayed_key_id: str = ""  # "": the replayed snapshot is not encrypted
    backend_db: pathlib.Path = pathlib.Path()  # the restored base's member/snap/db (the apply container's)
    apply_program: str = APPLY_PROGRAM

    @property
    def progress_file(self) -> pathlib.Path:
        return self.work / "progress.json"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        return cls(
            socket=env["ETCD_SOCKET"],
            tls_dir=env["SCRATCH_TLS_DIR"],
            result_file=pathlib.Path(env["RESULT_FILE"]),
            work=pathlib.Path(env["WORK_DIR"]),
            segments_folder=env["SEGMENTS_FOLDER"],
            output_key=env["OUTPUT_KEY"],
            restore=env.get("RESTORE", ""),
            until_time=float(env["UNTIL_TIME"]) if env.get("UNTIL_TIME") else None,
            record=ReplayRecord(
                target="",
                base_key=env["BASE_KEY"],
                base_revision=int(env["BASE_REVISION"]),
                base_etcd_version="",
                chain=env["CHAIN"],
                first_sequence=int(env["FIRST_SEQUENCE"]),
                last_sequence=int(env["LAST_SEQUENCE"]),
                segments=int(env["LAST_SEQUENCE"]) - int(env["FIRST_SEQUENCE"]) + 1,
                up_to_revision=int(env["UP_TO_REVISION"]),
                replayed_key=env["OUTPUT_KEY"],
            ),
            keys_dir=env.get("SNAPSHOT_KEYS_DIR", ""),
            replayed_compression=env.get("REPLAYED_COMPRESSION") or "zstd",
            replayed_key_id=env.get("REPLAYED_KEY_ID", ""),
            backend_db=pathlib.Path(env.get("BACKEND_DB", "")),
            apply_program=env.get("APPLY_PROGRAM") or APPLY_PROGRAM,
        )


# --- the keys: the inputs' and the output's ---------------------------------------------


def read_keys(settings: Settings) -> dict[str, bytes]:
    """The mounted keys. Blocking: run it in a thread."""
    try:
        return read_mounted_keys(settings.keys_dir)
    except KeyringError as e:
        raise Refused(e.reason, e.message) from None


def replayed_encoding(settings: Settings, keys: Mapping[str, bytes]) -> sealed.Encoding:
    """How the replayed snapshot is stored: the compression and key ID the operator chose,
    the key from the mounted Secret."""
    key_id = settings.replayed_key_id
    if not key_id:
        return sealed.Encoding(compression=settings.replayed_compression)
    if key_id not in keys:
        raise Refused(
            "EncryptionKeyMissing",
            f"the replayed snapshot is to be encrypted under key ID {key_id!r}, which the mounted keys do not "
            f"hold (key IDs given: {', '.join(sorted(keys)) or 'none'})",
        )
    return sealed.Encoding(
        compression=settings.replayed_compression, algorithm="aes-256-gcm", key_id=key_id, key=keys[key_id]
    )


def refuse_clear_output(encoding: sealed.Encoding, base: Manifest, segments: list[SegmentManifest]) -> None:
    """Never store in clear what was read encrypted."""
    encrypted = [m.segment_key for m in segments if m.encrypted]
    if base.encryption and base.encryption != "none":
        encrypted.insert(0, base.snapshot_key)
    if encrypted and not encoding.encrypted:
        raise Refused(
            "EncryptionKeyMissing",
            f"{encrypted[0]} is encrypted, and no key ID was given to encrypt the replayed snapshot under "
            f"(REPLAYED_KEY_ID); it would be stored in clear",
        )


# --- 1. an earlier pod's result -------------------------------------------------------


async def stored_result(storage: S3Storage, key: str, keys: Mapping[str, bytes]) -> ReplayResult | None:
    """The result an earlier replay of this restore uploaded, when its snapshot's manifest
    agrees (and authenticates under `keys`, when any are given)."""
    if not await storage.exists(result_key(key)):
        return None
    try:
        result = ReplayResult.from_json(await storage.get(result_key(key)))
        manifest = Manifest.read(await storage.get(manifest_key(key)), manifest_key(key), keys)
    except (ValueError, StorageError, ManifestUnauthenticated):
        return None
    if (manifest.sha256, manifest.size, manifest.revision) != (result.sha256, result.size, result.revision):
        return None
    return result


# --- 2. the chain, checked before the first write ---------------------------------------


async def fetch_segments(
    storage: S3Storage, settings: Settings, keys: Mapping[str, bytes]
) -> tuple[list[pathlib.Path], list[SegmentManifest]]:
    """Every segment of the plan, checked against its manifest, unsealed and decoded, on
    scratch space in order (their plain bodies); and their manifests. With keys, only
    manifests that authenticate under one of them are read: one planted in the chain's
    folder is ignored (logged), and refuses the replay only where the authentic ones leave
    a gap (with the reason it did not authenticate, naming it)."""
    listed, ignored = [], []
    for key in await storage.list_keys(settings.segments_folder):
        if not key.endswith(SEGMENT_MANIFEST_SUFFIX):
            continue
        try:
            manifest = SegmentManifest.read(await storage.get(key), key, keys)
        except ManifestUnauthenticated as e:
            logger.warning("%s; ignored", e.message)
            ignored.append(Ignored(key, e.reason))
            continue
        except ValueError as e:
            logger.warning("%s is not a segment manifest (%s); ignored", key, e)
            continue
        if manifest.key == key:
            listed.append(manifest)
    listed = await without_broken_duplicates(storage, listed)
    try:
        chain = chain_to_replay(listed, settings.record)
    except ChainProblem as e:
        if ignored:
            raise Refused(ignored_reason(ignored), f"{e}; {ignored_summary(ignored)}") from None
        raise Refused("ChainBroken", str(e)) from None
    settings.work.mkdir(parents=True, exist_ok=True)
    files = []
    for manifest in chain:
        data = await storage.get(manifest.segment_key)
        problem = manifest.checks(data)  # the stored bytes first, before any is decrypted
        if problem:
            raise Refused("SegmentChecksumMismatch", problem)
        try:
            plain = segment_sealing.unseal(data, keys)
        except sealed.SealedError as e:  # PlaintextRefused too: a plain segment where keys are held
            reason = "SegmentCorrupt" if e.reason == sealed.SealedError.reason else e.reason
            raise Refused(reason, f"{manifest.segment_key} cannot be unsealed: {e}") from None
        try:
            body = decode(plain)
        except SegmentCorrupt as e:
            raise Refused("SegmentCorrupt", f"{manifest.segment_key}: {e}") from None
        held = (body.revisions[0].revision, body.revisions[-1].revision) if body.revisions else None
        if held != (manifest.first_revision, manifest.last_revision):
            raise Refused(
                "SegmentCorrupt",
                f"{manifest.segment_key} holds revisions {held}, its manifest says "
                f"{manifest.first_revision}..{manifest.last_revision}",
            )
        path = settings.work / f"{manifest.sequence:010d}.segment"
        await asyncio.to_thread(path.write_bytes, plain)
        files.append(path)
    logger.info("chain %s: %d segments checked", settings.record.chain, len(files))
    return files, list(chain)


async def without_broken_duplicates(storage: S3Storage, listed: list[SegmentManifest]) -> list[SegmentManifest]:
    """Where two manifests of one chain share a sequence number (two writers raced), those
    whose segment is not stored, or not as the manifest says, are left out; the chain's check
    (core/backup/chain.py, runs) then takes the one that follows its predecessor."""
    numbered: dict[tuple[str, int], list[SegmentManifest]] = {}
    for manifest in listed:
        numbered.setdefault((manifest.chain, manifest.sequence), []).append(manifest)
    kept = []
    for manifests in numbered.values():
        if len(manifests) == 1:
            kept += manifests
            continue
        for manifest in manifests:
            try:
                problem = manifest.checks(await storage.get(manifest.segment_key))
            except StorageError as e:
                if e.code not in ("NoSuchKey", "404", "NotFound"):
                    raise  # the store failed: no guess is made
                problem = f"{manifest.segment_key} is not stored"
            if problem:
                logger.warning("segment %d of chain %s: %s; left out", manifest.sequence, manifest.chain, problem)
            else:
                kept.append(manifest)
    return kept


def read_bodies(files: list[pathlib.Path]) -> Iterator[SegmentBody]:
    """One segment at a time: checked already, held in memory only while it is replayed."""
    for path in files:
        yield decode(path.read_bytes())


# --- 3. the replay ---------------------------------------------------------------------


@dataclasses.dataclass
class Progress:
    revision: int
    seen_at: float | None = None
    applied: int = 0
    base_auth_revision: int | None = None  # the scratch member's, restored from the base, before the replay


def wanted(record: RevisionRecord, up_to: int, until: float | None) -> bool:
    return record.revision <= up_to and (until is None or record.seen_at <= until)


class ReplayStore(Protocol):
    """Where the revisions go: a restored backend (clients/etcd/backend_apply.py), or a
    model of one in tests. `apply` lands `changes` on exactly `revision`, or refuses."""

    async def grant_lease(self, lease: int, ttl: int) -> bool: ...

    async def apply(self, revision: int, changes: Sequence[KeyChange]) -> None: ...


async def replay(
    store: ReplayStore,
    bodies: Iterator[SegmentBody],
    base_revision: int,
    up_to: int,
    until: float | None,
    leases: set[int],
) -> Progress:
    """Applies each revision after `base_revision` as one transaction, until the first one not
    `wanted`. `leases`: those the store holds (the base snapshot's); grows as leases are granted."""
    progress = Progress(base_revision)
    granted_ttl: dict[int, int] = {}
    for body in bodies:
        granted_ttl.update(body.lease_ttls)
        for record in body.revisions:
            if record.revision <= progress.revision:
                continue  # before the base snapshot
            if not wanted(record, up_to, until):
                return progress
            if record.revision != progress.revision + 1:
                raise Refused("ChainBroken", f"revision {record.revision} follows {progress.revision}")
            for lease in sorted({c.lease for c in record.changes if c.lease and not c.deleted} - leases):
                if lease not in granted_ttl:
                    raise Refused(
                        "LeaseUnknown",
                        f"revision {record.revision} puts a key with lease {lease:x}, which neither the base "
                        f"snapshot holds nor a segment recorded",
                    )
                await store.grant_lease(lease, granted_ttl[lease])
                leases.add(lease)
            await store.apply(record.revision, record.changes)
            progress.revision, progress.seen_at, progress.applied = (
                record.revision,
                record.seen_at,
                progress.applied + 1,
            )
    return progress


async def member_ready(member: ReplayMember) -> int:
    deadline = time.monotonic() + ANSWER_WAIT_SECONDS
    last = "no answer yet"
    while time.monotonic() < deadline:
        try:
            return await member.revision()
        except EtcdError as e:
            last = str(e)
        await asyncio.sleep(RETRY_SECONDS)
    raise Refused(
        "ScratchMemberUnavailable", f"the scratch member did not answer within {ANSWER_WAIT_SECONDS:.0f}s: {last}"
    )


def keep_alive_period(ttls: list[int]) -> float:
    return min(KEEP_ALIVE_MAX, max(KEEP_ALIVE_MIN, min(ttls, default=30) / 3))


async def apply_into_backend(db: pathlib.Path, files: list[pathlib.Path], settings: Settings) -> Progress:
    """Replays the checked segments into the restored base's backend `db`, before any etcd
    serves it: every revision on its original number (the program refuses any other)."""
    record = settings.record
    try:
        async with BackendApplier(db, settings.apply_program) as backend:
            if backend.revision != record.base_revision:
                raise Refused(
                    "RevisionMismatch",
                    f"the backend restored from {record.base_key} is at revision {backend.revision}, "
                    f"the base snapshot's is {record.base_revision}",
                )
            leases = {lease for lease, _ in backend.leases}
            progress = await replay(
                backend, read_bodies(files), record.base_revision, record.up_to_revision, settings.until_time, leases
            )
            revision, applied = await backend.finish()
    except ApplyFailed as e:
        if e.reason:
            raise Refused(e.reason, e.message) from None
        raise
    if (revision, applied) != (progress.revision, progress.applied):
        raise Refused(
            "RevisionMismatch",
            f"the backend is at revision {revision} after {applied} revisions were applied; the replay "
            f"sent {progress.applied}, up to revision {progress.revision}",
        )
    if settings.until_time is None and progress.revision != record.up_to_revision:
        raise Refused(
            "ChainBroken", f"the segments ended at revision {progress.revision}, before {record.up_to_revision}"
        )
    return progress


def write_progress(path: pathlib.Path, progress: Progress) -> None:
    """The apply container's hand-over to the replay container, on the pod's emptyDir."""
    path.write_text(json.dumps(dataclasses.asdict(progress)))


def read_progress(path: pathlib.Path) -> Progress:
    try:
        return Progress(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError) as e:
        raise ApplyFailed(None, f"no replay was applied before the scratch member started: {e}") from None


async def serving_replayed(member: ReplayMember, progress: Progress) -> Progress:
    """The scratch member, started on the replayed backend, serves exactly its revision;
    the auth revision it holds is the base's (a replay writes keys only)."""
    revision = await member_ready(member)
    if revision != progress.revision:
        raise Refused(
            "RevisionMismatch",
            f"the scratch member serves revision {revision}; the replay applied up to revision {progress.revision}",
        )
    return dataclasses.replace(progress, base_auth_revision=await scratch_auth_revision(member))


# --- 4. the snapshot -------------------------------------------------------------------


def save_snapshot(socket: str, tls: ClientTLS | None, path: pathlib.Path) -> tuple[str, int]:
    """Streams the scratch member's snapshot into `path`: (sha256, size). Runs in a thread."""
    digest, size = hashlib.sha256(), 0
    with path.open("wb") as out:
        for chunk in SnapshotStream(f"unix://{socket}", tls):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def seal_file(plain: pathlib.Path, stored: pathlib.Path, encoding: sealed.Encoding) -> tuple[str, int]:
    """Writes `plain`'s stored form into `stored`: (sha256, size) of the stored bytes. Runs in a thread."""

    def chunks() -> Iterator[bytes]:
        with plain.open("rb") as f:
            while chunk := f.read(SEAL_READ_BYTES):
                yield chunk

    digest, size = hashlib.sha256(), 0
    with stored.open("wb") as out:
        for piece in sealed.encode(chunks(), encoding):
            digest.update(piece)
            out.write(piece)
            size += len(piece)
    return digest.hexdigest(), size


async def upload(storage: S3Storage, key: str, path: pathlib.Path, size: int) -> None:
    if size <= PART_BYTES:
        await storage.put(key, await asyncio.to_thread(path.read_bytes))
        return
    upload_id = await storage.start_multipart(key)
    parts = []
    try:
        with path.open("rb") as f:
            number = 1
            while chunk := await asyncio.to_thread(f.read, PART_BYTES):
                parts.append(await storage.upload_part(key, upload_id, number, chunk))
                number += 1
        await storage.complete_multipart(key, upload_id, parts)
    except BaseException:
        await storage.abort_multipart(key, upload_id)
        raise


async def scratch_auth_revision(member: ReplayMember) -> int | None:
    """The scratch member's auth revision (a single member: answered at once); None when it
    does not answer, which leaves the replayed snapshot's auth state unrecorded, not failed."""
    try:
        return await member.auth_revision(timeout=AUTH_READ_SECONDS)
    except EtcdError as e:
        logger.warning("the scratch member's auth revision was not read: %s", e.detail)
        return None


def held_auth_revision(before_replay: int | None, before_snapshot: int | None) -> int | None:
    """The auth revision the replayed snapshot holds, the base's: read once the base was
    restored, and again before the snapshot. A replay applies key revisions only; were the
    two to differ, the store's auth state would not be the base's, and none is recorded."""
    if before_replay is None or before_replay != before_snapshot:
        if before_replay is not None and before_snapshot is not None:
            logger.warning(
                "the scratch member's auth revision moved from %d to %d during the replay; none is recorded",
                before_replay,
                before_snapshot,
            )
        return None
    return before_replay


async def store(
    storage: S3Storage,
    member: ReplayMember,
    settings: Settings,
    progress: Progress,
    base: Manifest,
    encoding: sealed.Encoding,
) -> ReplayResult:
    status = await member.status()
    held_auth = held_auth_revision(progress.base_auth_revision, await scratch_auth_revision(member))
    hash_kv, compact_revision = await member.hash_kv(progress.revision)
    key_count = await member.count_keys(progress.revision)
    path = settings.work / "replayed.db"
    _, plain_size = await asyncio.to_thread(save_snapshot, settings.socket, member.tls, path)
    if (now := await member.revision()) != progress.revision:
        raise Refused(
            "RevisionMismatch",
            f"the scratch member moved to revision {now} after revision {progress.revision} was replayed "
            f"(a lease expired?); its snapshot is not used",
        )
    stored_path = settings.work / "replayed.stored"
    sha256, size = await asyncio.to_thread(seal_file, path, stored_path, encoding)
    await asyncio.to_thread(path.unlink)
    await upload(storage, settings.output_key, stored_path, size)
    manifest = Manifest(
        snapshot_key=settings.output_key,
        backup=base.backup,
        namespace=base.namespace,
        cluster=base.cluster,
        cluster_id=base.cluster_id,
        etcd_version=status.version,
        revision=progress.revision,
        size=size,
        sha256=sha256,
        created_at=now_text(),
        member="replay",
        slot=f"replay-{settings.restore}",
        # no backup_uid: it matches no EtcdBackup, so no retention ever counts or deletes it
        key_count=key_count,
        hash_kv=hash_kv,
        compact_revision=compact_revision,
        compression=encoding.compression,
        encryption=encoding.algorithm if encoding.encrypted else None,
        key_id=encoding.key_id or None,
        plain_size=plain_size,
        base_auth_revision=held_auth,  # never auth_revision: that would claim the source's at `revision`
    )
    await storage.put(manifest.key, manifest.to_json(encoding.signing_key), "application/json")
    result = ReplayResult(progress.revision, progress.seen_at, progress.applied, sha256, size)
    await storage.put(result_key(settings.output_key), result.to_json().encode(), "application/json")
    return result


def storage_of(env: Mapping[str, str]) -> S3Storage:
    ca = pathlib.Path(env["S3_CA_FILE"]).read_bytes() if env.get("S3_CA_FILE") else None
    return S3Storage(S3Location.from_pod_env(env, ca))


async def inputs(storage: S3Storage, settings: Settings, keys: Mapping[str, bytes]) -> tuple[sealed.Encoding, Manifest]:
    """How the replayed snapshot will be sealed, and the base snapshot's manifest."""
    encoding = replayed_encoding(settings, keys)
    base_manifest = manifest_key(settings.record.base_key)
    try:
        return encoding, Manifest.read(await storage.get(base_manifest), base_manifest, keys)
    except ManifestUnauthenticated as e:
        raise Refused(e.reason, e.message) from None


async def keys_and_earlier_result(
    storage: S3Storage, settings: Settings
) -> tuple[dict[str, bytes], ReplayResult | None]:
    """The mounted keys, and the result of an earlier pod of this restore, when one is stored."""
    keys = await asyncio.to_thread(read_keys, settings)
    earlier = await stored_result(storage, settings.output_key, keys)
    if earlier is not None:
        logger.info("%s was replayed already, to revision %d", settings.output_key, earlier.revision)
    return keys, earlier


async def apply_phase(env: Mapping[str, str]) -> Progress | ReplayResult:
    """The apply init container: the chain checked and replayed into the restored backend,
    and the progress handed to the replay container (or an earlier pod's stored result)."""
    settings = Settings.from_env(env)
    storage = await asyncio.to_thread(storage_of, env)
    try:
        keys, earlier = await keys_and_earlier_result(storage, settings)
        if earlier is not None:
            return earlier
        encoding, base = await inputs(storage, settings, keys)
        files, segments = await fetch_segments(storage, settings, keys)
        refuse_clear_output(encoding, base, segments)
        started = time.monotonic()
        progress = await apply_into_backend(settings.backend_db, files, settings)
        elapsed = time.monotonic() - started
        logger.info(
            "replayed %d revisions in %.1fs (%.0f/s): revision %d",
            progress.applied,
            elapsed,
            progress.applied / elapsed if elapsed else 0,
            progress.revision,
        )
        await asyncio.to_thread(write_progress, settings.progress_file, progress)
        return progress
    finally:
        storage.close()


async def run(env: Mapping[str, str]) -> ReplayResult:
    """The replay container, beside the scratch member started on the replayed backend:
    checks what it serves, snapshots, seals and uploads it."""
    settings = Settings.from_env(env)
    storage = await asyncio.to_thread(storage_of, env)
    try:
        keys, earlier = await keys_and_earlier_result(storage, settings)
        if earlier is not None:
            return earlier
        encoding, base = await inputs(storage, settings, keys)
        progress = await asyncio.to_thread(read_progress, settings.progress_file)
        try:
            tls = await asyncio.to_thread(read_client_tls, settings.tls_dir)
        except OSError as e:  # the scratch-tls init container's files
            raise Refused("ScratchMemberUnavailable", f"no client certificate for the scratch member: {e}") from None
        async with ReplayMember(f"unix://{settings.socket}", tls=tls) as member:
            return await store_replayed(storage, member, settings, progress, base, encoding)
    finally:
        storage.close()


async def store_replayed(
    storage: S3Storage,
    member: ReplayMember,
    settings: Settings,
    progress: Progress,
    base: Manifest,
    encoding: sealed.Encoding,
) -> ReplayResult:
    """`store`, with every lease the member holds kept alive until its snapshot is taken:
    an expiry would add a revision the source never had."""
    progress = await serving_replayed(member, progress)
    held = await member.leases()
    leases = {lease for lease, _ in held}
    errors: list[BaseException] = []
    async with leases_kept_alive(member, leases, keep_alive_period([ttl for _, ttl in held]), errors):
        result = await store(storage, member, settings, progress, base, encoding)
    if errors:
        raise Refused("ScratchMemberUnavailable", f"keeping the leases alive failed: {errors[0]}")
    return result


def main(env: Mapping[str, str], argv: Sequence[str] = ()) -> int:
    """`replay apply`: the apply init container; `replay`: the replay container."""
    logging.basicConfig(level=logging.INFO, format="replay: %(message)s")
    result_file = pathlib.Path(env["RESULT_FILE"])
    applying = list(argv) == ["apply"]
    try:
        result = asyncio.run(apply_phase(env) if applying else run(env))
    except Refused as e:
        text, code = f"{e.reason}: {e.message}", REPLAY_EXIT_CODES[e.reason]
    except (EtcdError, StorageError, ApplyFailed) as e:
        text, code = f"ReplayFailed: {e}", 1
    else:
        text = json.dumps(dataclasses.asdict(result)) if isinstance(result, Progress) else result.to_json()
        code = 0
    print(text, file=sys.stderr if code else sys.stdout)
    if code or not applying:  # the apply container's success is no result yet
        try:
            result_file.write_text(text[:3000])
        except OSError as e:  # the exit code alone still says whether it replayed
            print(f"could not write {result_file}: {e}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(dict(os.environ), sys.argv[1:]))
