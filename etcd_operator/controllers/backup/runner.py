"""One backup run, its I/O in order: abort what earlier runs left (backup/stale_uploads.py),
snapshot a member that answers with the cluster's recorded ID (backup/source_choice.py)
straight into S3 (backup/stream.py), write the manifest, then delete what retention picks
(backup/catalogue.py). A run is one attempt: a failure is classified (backup/failure.py) as
permanent or transient, and the status the controller writes decides on a retry
(backup/backoff.py). Status itself is written only through the callbacks the executor gives."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from etcd_operator.clients.etcd.client import EtcdError, EtcdMemberClient
from etcd_operator.clients.etcd.snapshot import SnapshotStream
from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.credentials import s3_location
from etcd_operator.clients.storage.s3 import S3Storage
from etcd_operator.controllers import faults
from etcd_operator.controllers.backup import catalogue, segment_store, stale_uploads
from etcd_operator.controllers.backup.encoding import backup_encoding, backup_keys
from etcd_operator.controllers.backup.failure import BackupFailed, as_failure
from etcd_operator.controllers.backup.source_candidates import (
    SourceUnavailable,
    ask_candidates,
    chosen,
    find_candidates,
)
from etcd_operator.controllers.backup.stream import stream_to_s3
from etcd_operator.controllers.cluster.tls_observer import operator_credentials
from etcd_operator.core.backup import orphans, retention
from etcd_operator.core.backup.bbolt import snapshot_revision
from etcd_operator.core.backup.manifest import (
    Identity,
    Ignored,
    Manifest,
    ManifestUnauthenticated,
    backup_prefix,
    manifest_key,
    snapshot_key,
)
from etcd_operator.core.backup.object_lock import RetentionResult
from etcd_operator.core.backup.sealed_reader import open_plain
from etcd_operator.core.backup.source_choice import CLUSTER_ID_MISMATCH
from etcd_operator.core.backup.spec import BackupSpec
from etcd_operator.core.shard import Shard
from etcd_operator.core.timefmt import now_text

logger = logging.getLogger(__name__)

PROGRESS_INTERVAL_SECONDS = 2.0  # status writes during an upload: the first part, then at most this often


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
        continuous_chain: str | None = None,
    ):
        self.kube = kube_client
        self.continuous_chain = continuous_chain  # the chain being written: retention never deletes its segments
        self.clock = clock  # this process's wall clock: retention's maxAge also asks the store's
        self.cluster_id_history = tuple(cluster_id_history)  # status.clusterIDHistory (retention.py)
        self.orphan_grace_seconds = orphan_grace_seconds
        self.shard = shard  # a cluster outside it is refused (ClusterOutsideShard)
        self.on_progress = on_progress
        self.pending_uploads = [dict(u) for u in pending_uploads or []]
        self.on_upload_started = on_upload_started
        self.duration: float | None = None  # of the last snapshot this runner took

    async def run(self, identity: Identity, spec: BackupSpec, slot: str) -> tuple[Manifest, RetentionResult]:
        """Returns the slot's manifest and what retention deleted and found locked."""
        try:
            return await self._attempt(identity, spec, slot)
        except Exception as e:
            raise as_failure(e) from e

    async def _attempt(self, identity: Identity, spec: BackupSpec, slot: str) -> tuple[Manifest, RetentionResult]:
        namespace, backup = identity.namespace, identity.backup
        location = await s3_location(self.kube, namespace, spec.s3)
        storage = await asyncio.to_thread(S3Storage, location, spec.concurrency + 2)
        try:
            await storage.check_bucket()
            key = snapshot_key(spec.prefix, namespace, backup, slot)
            await stale_uploads.abort_recorded(storage, self.pending_uploads)
            await stale_uploads.abort_orphans(
                storage,
                backup_prefix(spec.prefix, namespace, backup),
                key,
                {u["uploadId"] for u in self.pending_uploads},
                self.orphan_grace_seconds,
            )
            keys = await backup_keys(self.kube, namespace, spec)
            if await storage.exists(manifest_key(key)):
                manifest = await _slot_manifest(storage, manifest_key(key), keys)
                refusal = manifest.foreign_slot(identity, manifest_key(key))
                if refusal:
                    raise BackupFailed("SlotTakenByForeignBackup", refusal, permanent=True)
                # this slot already ran
            else:
                manifest = await self._snapshot(storage, identity, spec, slot, key)
            history = retention.extend_history(self.cluster_id_history, manifest.cluster_id)
            retained = await catalogue.apply_retention(
                storage, identity, spec, manifest.snapshot_key, history, self.clock, keys
            )
            if spec.has_retention:
                ignored: list[Ignored] = []
                await segment_store.apply_segment_retention(
                    storage, identity, spec.prefix, self.continuous_chain or "", self.clock, keys, ignored
                )
                retained = dataclasses.replace(retained, ignored=retained.ignored + tuple(ignored))
            return manifest, retained
        finally:
            await asyncio.to_thread(storage.close)

    async def _snapshot(
        self, storage: S3Storage, identity: Identity, spec: BackupSpec, slot: str, key: str
    ) -> Manifest:
        namespace, backup = identity.namespace, identity.backup
        encoding = await backup_encoding(self.kube, namespace, spec)
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
            auth_revision = await _auth_revision(client)  # before: the snapshot's auth is at least this new
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
                encoding=encoding,
            )
            self.pending_uploads.remove(upload)
            # The exact revision inside the uploaded file, read back with a few ranged GETs
            # (through its index when it is sealed).
            plain = await open_plain(
                lambda offset, length: storage.read_range(key, offset, length),
                result.size,
                {encoding.key_id: encoding.key} if encoding.encrypted else {},
            )
            revision = await snapshot_revision(plain.read)
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
            compression=encoding.compression,
            encryption=encoding.algorithm if encoding.encrypted else None,
            key_id=encoding.key_id or None,
            plain_size=result.plain_size,
            auth_revision=auth_revision,
        )
        await storage.put(manifest.key, manifest.to_json(encoding.signing_key), "application/json")
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


async def _slot_manifest(storage: S3Storage, path: str, keys: dict[str, bytes]) -> Manifest:
    """The manifest already in this run's slot; with keys, one that authenticates, else the slot
    is not run (its name is taken by a manifest nobody holding the key wrote), nothing deleted."""
    try:
        return Manifest.read(await storage.get(path), path, keys)
    except ManifestUnauthenticated as e:
        raise BackupFailed(
            e.reason, f"{e.message}; it is left untouched and this slot is not run", permanent=True
        ) from None


async def _auth_revision(client: EtcdMemberClient) -> int | None:
    """The source's auth revision, read before the snapshot; None when the member does not
    answer: the backup stands, and a point-in-time restore from it says it cannot tell."""
    try:
        return await client.auth_revision()
    except EtcdError as e:
        logger.warning("no auth revision from %s: %s", client.endpoint, e.detail)
        return None


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
