"""One backup run: snapshot a member that answers with the cluster's recorded ID
(backup/source_choice.py) straight into S3, verify, write the manifest, then apply retention.
A run is one attempt: a failure is classified (as_failure) as permanent or transient, and
the planner retries a transient one after a backoff, with each attempt in status
(backup/backoff.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from etcd_operator.clients.etcd.client import EtcdError, EtcdMemberClient
from etcd_operator.clients.etcd.snapshot import SnapshotStream
from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.credentials import s3_location
from etcd_operator.clients.storage.s3 import S3Storage, StorageError
from etcd_operator.controllers import faults
from etcd_operator.controllers.backup.source_candidates import (
    SourceUnavailable,
    ask_candidates,
    chosen,
    find_candidates,
)
from etcd_operator.controllers.backup.stream import SnapshotCorrupt, stream_to_s3
from etcd_operator.controllers.cluster.tls_observer import operator_credentials
from etcd_operator.core.backup import orphans, retention
from etcd_operator.core.backup.bbolt import snapshot_revision
from etcd_operator.core.backup.manifest import (
    MANIFEST_SUFFIX,
    Identity,
    Manifest,
    backup_prefix,
    manifest_key,
    snapshot_key,
)
from etcd_operator.core.backup.source_choice import CLUSTER_ID_MISMATCH
from etcd_operator.core.buffer_budget import BudgetTooSmall
from etcd_operator.core.durations import parse_duration
from etcd_operator.core.leadership_fence import LeadershipLost
from etcd_operator.core.shard import Shard
from etcd_operator.core.timefmt import now_text

logger = logging.getLogger(__name__)

PROGRESS_INTERVAL_SECONDS = 2.0  # status writes during an upload: the first part, then at most this often


class BackupFailed(Exception):
    def __init__(self, reason: str, message: str, permanent: bool):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.permanent = permanent


def as_failure(error: Exception) -> BackupFailed:
    """The reason for a failed attempt, and whether its cause cannot pass by itself
    (permanent: the slot ends at once) or may (transient: retried, spec.backoffLimit).
    Permanent: a Secret without the credential keys, credential key names refused, a missing
    or refused bucket, access denied, invalid credentials, an http endpoint without
    `insecure`, another backup's manifest in the slot, a cluster of another shard, a part
    larger than the memory budget. Transient: the cluster or its Secret gone since the pass
    looked, no healthy member, members answering for another cluster (ClusterIDMismatch), the
    store unreachable or erring (5xx, throttling), etcd errors (including a leader change), a
    snapshot corrupted in transit, timeouts, this operator losing its leadership, anything
    unexpected."""
    if isinstance(error, BackupFailed):
        return error
    if isinstance(error, StorageError):
        reasons = {
            "NoSuchBucket": "BucketNotFound",
            "InvalidAccessKeyId": "InvalidCredentials",
            "SignatureDoesNotMatch": "InvalidCredentials",
            "AccessDenied": "AccessDenied",
            "SecretNotFound": "SecretNotFound",
            "SecretKeyNotFound": "CredentialsNotFound",
            "CredentialKeyRefused": "CredentialsRefused",
            "InsecureEndpoint": "InsecureEndpoint",
        }
        return BackupFailed(reasons.get(error.code, "StorageError"), f"S3: {error}", error.permanent)
    if isinstance(error, SourceUnavailable):
        reason = error.reason or ("ClusterNotFound" if error.permanent else "NoHealthyMember")
        return BackupFailed(reason, str(error), error.permanent)
    if isinstance(error, EtcdError):
        return BackupFailed("EtcdUnavailable", f"etcd: {error}", False)
    if isinstance(error, SnapshotCorrupt):
        return BackupFailed("SnapshotCorrupt", str(error), False)
    if isinstance(error, BudgetTooSmall):
        return BackupFailed("MemoryBudgetTooSmall", str(error), True)
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        return BackupFailed("Timeout", f"timed out: {error or type(error).__name__}", False)
    if isinstance(error, LeadershipLost):
        return BackupFailed("LeadershipLost", str(error), False)
    return BackupFailed("Error", f"{type(error).__name__}: {error}", False)


@dataclasses.dataclass(frozen=True)
class BackupSpec:
    cluster: str
    s3: Mapping[str, Any]
    prefix: str
    part_size: int
    concurrency: int
    max_backups: int | None
    max_age: float | None

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> BackupSpec:
        s3 = spec["storage"]["s3"]
        kept = spec.get("retention") or {}
        return cls(
            cluster=spec["clusterRef"]["name"],
            s3=s3,
            prefix=s3.get("prefix", ""),
            part_size=int(s3.get("partSizeBytes", 8 << 20)),
            concurrency=int(s3.get("uploadConcurrency", 3)),
            max_backups=kept.get("maxBackups"),
            max_age=parse_duration(kept["maxAge"]) if kept.get("maxAge") else None,
        )


UploadStarted = Callable[[list[dict[str, str]]], Awaitable[None]]


async def _no_record(pending: list[dict[str, str]]) -> None:
    return None


class BackupRunner:
    """`pending_uploads` ({key, uploadId} from status) are multipart uploads an earlier run
    started and may not have aborted; `on_upload_started` records the new list in status,
    and must have done so before any part is sent. `pending_uploads` is what is left after
    the run, for status, whether it succeeded or not."""

    def __init__(
        self,
        kube_client: kube.KubeClient,
        on_progress: Callable[[int, str], None] = lambda n, m: None,
        pending_uploads: list[dict[str, str]] | None = None,
        on_upload_started: UploadStarted = _no_record,
        shard: Shard = Shard(),
        cluster_id_history: Sequence[str] = (),
        orphan_grace_seconds: float = orphans.DEFAULT_GRACE_SECONDS,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ):
        self.kube = kube_client
        self.clock = clock  # this process's wall clock: retention's maxAge also asks the store's
        self.cluster_id_history = tuple(cluster_id_history)  # status.clusterIDHistory (retention.py)
        self.orphan_grace_seconds = orphan_grace_seconds
        self.shard = shard  # a cluster outside it is refused (ClusterOutsideShard)
        self.on_progress = on_progress
        self.pending_uploads = [dict(u) for u in pending_uploads or []]
        self.on_upload_started = on_upload_started
        self.duration: float | None = None  # of the last snapshot this runner took

    async def run(self, identity: Identity, spec: BackupSpec, slot: str) -> tuple[Manifest, list[Manifest]]:
        """Returns the slot's manifest and the manifests retention deleted."""
        try:
            return await self._attempt(identity, spec, slot)
        except Exception as e:
            raise as_failure(e) from e

    async def _attempt(self, identity: Identity, spec: BackupSpec, slot: str):
        namespace, backup = identity.namespace, identity.backup
        location = await s3_location(self.kube, namespace, spec.s3)
        storage = await asyncio.to_thread(S3Storage, location, spec.concurrency + 2)
        try:
            await storage.check_bucket()
            key = snapshot_key(spec.prefix, namespace, backup, slot)
            await self._abort_pending(storage)
            await self._abort_orphans(storage, backup_prefix(spec.prefix, namespace, backup), key)
            if await storage.exists(manifest_key(key)):
                manifest = Manifest.from_json(await storage.get(manifest_key(key)))
                if not manifest.belongs_to(identity):
                    raise BackupFailed(
                        "SlotTakenByForeignBackup",
                        f"{manifest_key(key)} was written by {manifest.namespace}/{manifest.backup} "
                        f"(uid {manifest.backup_uid or 'none'}), not by this EtcdBackup; "
                        "it is left untouched and this slot is not run",
                        permanent=True,
                    )
                # this slot already ran
            else:
                manifest = await self._snapshot(storage, identity, spec, slot, key)
            history = retention.extend_history(self.cluster_id_history, manifest.cluster_id)
            deleted = await self._apply_retention(storage, identity, spec, manifest.snapshot_key, history)
            return manifest, deleted
        finally:
            await asyncio.to_thread(storage.close)

    async def _abort_pending(self, storage: S3Storage) -> None:
        """Aborts the uploads recorded in status by their exact key and ID. An entry is
        dropped only once the store has answered for it."""
        for upload in list(self.pending_uploads):
            try:
                await storage.abort_multipart(upload["key"], upload["uploadId"])
            except StorageError as e:
                if e.code not in ("NoSuchUpload", "404", "NoSuchKey"):
                    raise
            self.pending_uploads.remove(upload)

    async def _abort_orphans(self, storage: S3Storage, folder: str, slot_key: str) -> None:
        """Aborts the uploads orphans.orphaned picks among those listed for this backup's
        folder. The slot's own key is listed too, and, when the folder lists nothing, the
        bucket without a prefix: MinIO lists uploads by exact key only, and without a
        prefix those started since it started (orphans.orphaned keeps only this folder's)."""
        listed, store_now = await storage.list_uploads(folder)
        prefixes = [slot_key] if listed else [slot_key, ""]
        for prefix in prefixes:
            more, answered_at = await storage.list_uploads(prefix)
            listed, store_now = listed + more, answered_at or store_now
        found = {upload_id: orphans.Upload(key, upload_id, initiated) for key, upload_id, initiated in listed}
        recorded = {u["uploadId"] for u in self.pending_uploads}
        for upload in orphans.orphaned(found.values(), folder, recorded, store_now, self.orphan_grace_seconds):
            try:
                await storage.abort_multipart(upload.key, upload.upload_id)
            except StorageError as e:
                if e.code not in ("NoSuchUpload", "404", "NoSuchKey"):
                    raise
            logger.info(
                "aborted orphaned multipart upload %s (%s, initiated %s)",
                upload.key,
                upload.upload_id,
                upload.initiated.isoformat(),
            )

    async def _snapshot(
        self, storage: S3Storage, identity: Identity, spec: BackupSpec, slot: str, key: str
    ) -> Manifest:
        namespace, backup = identity.namespace, identity.backup
        candidates, cluster_body = await find_candidates(self.kube, namespace, spec.cluster, self.shard)
        tls = await operator_credentials(self.kube, cluster_body)
        member = chosen(candidates, await ask_candidates(candidates, tls), cluster_body)
        started = now_text()
        clock_start = time.monotonic()
        last_report = [0.0]

        def progress(sent: int) -> None:
            if time.monotonic() - last_report[0] >= PROGRESS_INTERVAL_SECONDS:
                last_report[0] = time.monotonic()
                self.on_progress(sent, member.name)
                faults.hit(faults.DURING_BACKUP_UPLOAD)

        async with EtcdMemberClient(member.endpoint, timeout=10, tls=tls) as client:
            status = await client.status()
            if status.cluster_id != member.cluster_id:  # the address changed hands since it was asked
                raise SourceUnavailable(
                    f"{member.name} now answers for cluster {status.cluster_id:x}, not "
                    f"{member.cluster_id:x}; no snapshot is taken from another cluster",
                    reason=CLUSTER_ID_MISMATCH,
                )
            self.on_progress(0, member.name)
            upload = {"key": key, "uploadId": await storage.start_multipart(key)}
            self.pending_uploads.append(upload)
            await self.on_upload_started(list(self.pending_uploads))
            stream = await asyncio.to_thread(SnapshotStream, member.endpoint, tls)
            result = await stream_to_s3(
                stream,
                storage,
                key,
                spec.part_size,
                spec.concurrency,
                on_progress=progress,
                upload_id=upload["uploadId"],
            )
            self.pending_uploads.remove(upload)
            # The exact revision inside the uploaded file, read back with a few ranged GETs.
            revision = await snapshot_revision(lambda offset, length: storage.read_range(key, offset, length))
            key_count, hash_kv, compact_revision = await _source_digest(client, revision)
        manifest = Manifest(
            snapshot_key=key,
            backup=backup,
            namespace=namespace,
            cluster=spec.cluster,
            cluster_id=f"{status.cluster_id:x}",
            etcd_version=status.version,
            revision=revision,
            size=result.size,
            sha256=result.sha256,
            created_at=now_text(),
            member=member.name,
            slot=slot,
            backup_uid=identity.uid,
            key_count=key_count,
            hash_kv=hash_kv,
            compact_revision=compact_revision,
        )
        await storage.put(manifest.key, manifest.to_json(), "application/json")
        self.duration = time.monotonic() - clock_start
        logger.info(
            "backup %s/%s: %s (%d bytes, revision %d) from %s, started %s",
            namespace,
            backup,
            key,
            result.size,
            manifest.revision,
            member.name,
            started,
        )
        return manifest

    async def _apply_retention(
        self, storage: S3Storage, identity: Identity, spec: BackupSpec, keep: str, history: Sequence[str]
    ) -> list[Manifest]:
        if spec.max_backups is None and spec.max_age is None:
            return []
        folder = backup_prefix(spec.prefix, identity.namespace, identity.backup)
        manifests = await read_manifests(storage, folder, identity.backup)
        own = [m for m in manifests if m.belongs_to(identity)]  # everything else is foreign
        store = None
        if spec.max_age is not None:
            modified, store_now = await storage.list_modified(folder)
            store = retention.StoreTimes(store_now, modified) if store_now is not None else None
        doomed = retention.expired(
            own, spec.max_backups, spec.max_age, self.clock(), keep_keys={keep}, history=history, store=store
        )
        for manifest in doomed:
            await storage.delete(manifest.snapshot_key)
            await storage.delete(manifest.key)
        return doomed


async def _source_digest(client: EtcdMemberClient, revision: int) -> tuple[int | None, int | None, int | None]:
    """(keys, HashKV, compact revision) of the source at the snapshot's revision, taken
    right after the snapshot, before compaction can remove that revision. All None when
    the member no longer has it: the backup stands, but verification cannot compare."""
    try:
        hash_kv, compact_revision = await client.hash_kv(revision)
        return await client.count_keys(revision), hash_kv, compact_revision
    except EtcdError as e:
        logger.warning("no HashKV at revision %d from %s: %s", revision, client.endpoint, e.detail)
        return None, None, None


async def read_manifests(storage: S3Storage, prefix: str, backup: str | None = None) -> list[Manifest]:
    """Manifests this operator wrote directly in the folder `prefix` (for `backup`, if
    given); anything else, including deeper folders of other backups whose prefix happens to
    start the same, is ignored. Callers that delete must also check the identity."""
    manifests = []
    for key in await storage.list_keys(prefix):
        if not key.endswith(MANIFEST_SUFFIX):
            continue
        try:
            manifest = Manifest.from_json(await storage.get(key))
        except ValueError:
            continue
        if (
            manifest.key != key
            or not manifest.snapshot_key.startswith(prefix)
            or "/" in manifest.snapshot_key[len(prefix) :]
        ):
            continue
        if backup is None or manifest.backup == backup:
            manifests.append(manifest)
    return manifests
