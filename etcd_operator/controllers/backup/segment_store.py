"""A continuous backup's segments in the store: uploading one, finding where a chain left off,
and deleting the segments retention (core/backup/segment_retention.py) picks."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from etcd_operator.clients.storage.s3 import S3Storage, StorageError
from etcd_operator.controllers.backup.catalogue import read_manifests
from etcd_operator.core.backup.manifest import Identity, Manifest, backup_prefix
from etcd_operator.core.backup.segment_retention import chain_cluster_id, may_delete, oldest_kept, parse_manifest_key
from etcd_operator.core.backup.segments import (
    SEGMENT_MANIFEST_SUFFIX,
    SEGMENT_SUFFIX,
    SegmentManifest,
    segments_prefix,
)

logger = logging.getLogger(__name__)


async def upload_segment(
    storage: S3Storage, manifest: SegmentManifest, stored: bytes, signing_key: bytes | None = None
) -> None:
    """The segment's bytes, then its manifest: a segment without a manifest was never
    finished, and nothing reads it. The one place a segment is written; `stored` comes
    sealed already (core/backup/segment_sealing.py), as the manifest records, and
    `signing_key` (the backup's key, when it has one) authenticates the manifest."""
    await storage.put(manifest.segment_key, stored)
    await storage.put(manifest.key, manifest.to_json(signing_key), "application/json")


async def last_segment(
    storage: S3Storage, chain_prefix: str, segments_prefix: str, chain: str
) -> SegmentManifest | None:
    """The finished segment with the highest sequence in `chain` (under `chain_prefix`), read
    from its manifest; None when the chain has none. Segment bodies after it that have no
    manifest (the writer was stopped between the two uploads) are deleted."""
    keys = await storage.list_keys(chain_prefix)
    parsed = [(p, key) for key in keys if (p := parse_manifest_key(segments_prefix, key))]
    numbered = sorted(((p[1], key) for p, key in parsed if p[0] == chain), reverse=True)
    last = None
    for sequence, key in numbered:
        try:
            manifest = SegmentManifest.from_json(await storage.get(key))
        except ValueError as e:
            logger.warning("segment manifest %s unreadable, skipped: %s", key, e)
            continue
        if manifest.key == key and manifest.chain == chain and manifest.sequence == sequence:
            last = manifest
            break
    done = {key.removesuffix(SEGMENT_MANIFEST_SUFFIX) + SEGMENT_SUFFIX for key in keys}
    for key in keys:
        if key.endswith(SEGMENT_SUFFIX) and key not in done:
            await storage.delete(key)  # never finished: its revisions are watched again
    return last


async def delete_unneeded(
    storage: S3Storage,
    segments_prefix: str,
    identity: Identity,
    kept_snapshots: Sequence[Manifest],
    newest_chain: str,
) -> list[SegmentManifest]:
    """Deletes this backup's segments no kept snapshot needs (manifest first, then the
    body); returns their manifests. Names pick the candidates; each one's manifest decides."""
    kept = oldest_kept(kept_snapshots)
    deleted = []
    for key in await storage.list_keys(segments_prefix):
        parsed = parse_manifest_key(segments_prefix, key)
        if parsed is None:
            continue
        chain, _, _, last = parsed
        if not may_delete(chain, chain_cluster_id(chain), last, kept, newest_chain):
            continue
        try:
            manifest = SegmentManifest.from_json(await storage.get(key))
        except (ValueError, StorageError):
            continue
        if manifest.key != key or manifest.backup_uid != identity.uid or not identity.uid:
            continue
        if may_delete(manifest.chain, manifest.cluster_id, manifest.last_revision, kept, newest_chain):
            await storage.delete(manifest.key)
            await storage.delete(manifest.segment_key)
            deleted.append(manifest)
    return deleted


async def apply_segment_retention(
    storage: S3Storage, identity: Identity, prefix: str, newest_chain: str
) -> list[SegmentManifest]:
    """After snapshot retention: the segments the snapshots this backup still keeps do not
    need (core/backup/segment_retention.py)."""
    folder = backup_prefix(prefix, identity.namespace, identity.backup)
    kept = [m for m in await read_manifests(storage, folder, identity.backup) if m.belongs_to(identity)]
    return await delete_unneeded(
        storage, segments_prefix(prefix, identity.namespace, identity.backup), identity, kept, newest_chain
    )
