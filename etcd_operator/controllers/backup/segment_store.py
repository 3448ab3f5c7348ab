"""A continuous backup's segments in the store: uploading one, finding where a chain left off,
and deleting the segments retention (core/backup/segment_retention.py) picks. With the
backup's keys, where a chain left off and what is deleted go only by manifests that
authenticate under them; the others are ignored (reported, never deleted)."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence

from etcd_operator.clients.storage.s3 import ObjectExists, S3Storage, StorageError
from etcd_operator.controllers.backup.catalogue import read_manifests
from etcd_operator.core.backup import object_lock
from etcd_operator.core.backup.chain import follows_one_of
from etcd_operator.core.backup.manifest import Identity, Ignored, Manifest, ManifestUnauthenticated, backup_prefix
from etcd_operator.core.backup.segment_retention import chain_cluster_id, may_delete, oldest_kept, parse_manifest_key
from etcd_operator.core.backup.segments import (
    SEGMENT_MANIFEST_SUFFIX,
    SEGMENT_SUFFIX,
    SegmentManifest,
    segments_prefix,
)

logger = logging.getLogger(__name__)


class SegmentTaken(Exception):
    """Another writer stored a different object under this segment's name: this writer's
    view of the chain is out of date (it resumes from the store, or stops)."""


async def upload_segment(
    storage: S3Storage, manifest: SegmentManifest, stored: bytes, signing_key: bytes | None = None
) -> None:
    """The segment's bytes, then its manifest: a segment without a manifest was never
    finished, and nothing reads it. The one place a segment is written; `stored` comes
    sealed already (core/backup/segment_sealing.py), as the manifest records, and
    `signing_key` (the backup's key, when it has one) authenticates the manifest. Both are
    created only where nothing is stored yet (If-None-Match: *): an object another writer
    stored there is never overwritten (SegmentTaken); the same bytes there are this
    writer's own earlier attempt, whose answer was lost."""
    await _create(storage, manifest.segment_key, stored, "application/octet-stream")
    await _create(storage, manifest.key, manifest.to_json(signing_key), "application/json")


async def _create(storage: S3Storage, key: str, data: bytes, content_type: str) -> None:
    try:
        await storage.put(key, data, content_type, create_only=True)
    except ObjectExists:
        if await storage.get(key) != data:
            raise SegmentTaken(f"{key} holds another writer's object") from None


async def last_segment(
    storage: S3Storage,
    chain_prefix: str,
    segments_prefix: str,
    chain: str,
    backup_keys: Mapping[str, bytes] | None = None,
    ignored: list[Ignored] | None = None,
) -> SegmentManifest | None:
    """The finished segment with the highest sequence in `chain` (under `chain_prefix`), read
    from its manifest; None when the chain has none. Of two manifests under one sequence (two
    writers raced), the one that follows the segment before it, whose body is stored, and
    which reaches furthest. With `backup_keys`, a manifest that does not authenticate under them is
    passed over (appended to `ignored`). Segment bodies that have no manifest (the writer was
    stopped between the two uploads) are deleted."""
    keys = await storage.list_keys(chain_prefix)
    stored = set(keys)
    by_sequence: dict[int, list[str]] = {}
    for key in keys:
        parsed = parse_manifest_key(segments_prefix, key)
        if parsed is not None and parsed[0] == chain:
            by_sequence.setdefault(parsed[1], []).append(key)
    last = None
    for sequence in sorted(by_sequence, reverse=True):
        found = [
            m
            for key in sorted(by_sequence[sequence])
            if (m := await _manifest(storage, key, chain, sequence, backup_keys, ignored))
        ]
        found = [m for m in found if m.segment_key in stored]
        if len(found) > 1:
            before = [
                m
                for key in by_sequence.get(sequence - 1, [])
                if (m := await _manifest(storage, key, chain, sequence - 1, backup_keys, ignored))
            ]
            follows = follows_one_of(found, before)
            found = follows or found[:0]
        if found:
            last = max(found, key=lambda m: (m.last_revision, m.key))
            break
    done = {key.removesuffix(SEGMENT_MANIFEST_SUFFIX) + SEGMENT_SUFFIX for key in keys}
    for key in keys:
        if key.endswith(SEGMENT_SUFFIX) and key not in done:
            await storage.delete(key)  # never finished: its revisions are watched again
    return last


async def _manifest(
    storage: S3Storage,
    key: str,
    chain: str,
    sequence: int,
    keys: Mapping[str, bytes] | None,
    ignored: list[Ignored] | None,
) -> SegmentManifest | None:
    try:
        manifest = SegmentManifest.read(await storage.get(key), key, keys or {})
    except ManifestUnauthenticated as e:
        logger.warning("segment manifest %s ignored: %s", key, e.message)
        if ignored is not None and all(i.key != key for i in ignored):
            ignored.append(Ignored(key, e.reason))
        return None
    except ValueError as e:
        logger.warning("segment manifest %s unreadable, skipped: %s", key, e)
        return None
    if manifest.key == key and manifest.chain == chain and manifest.sequence == sequence:
        return manifest
    return None


async def delete_unneeded(
    storage: S3Storage,
    segments_prefix: str,
    identity: Identity,
    kept_snapshots: Sequence[Manifest],
    newest_chain: str,
    clock: Callable[[], datetime.datetime],
    keys: Mapping[str, bytes] | None = None,
    ignored: list[Ignored] | None = None,
) -> list[SegmentManifest]:
    """Deletes this backup's segments no kept snapshot needs and S3 Object Lock does not hold
    (manifest first, then the body, every version); returns their manifests. Names pick the
    candidates; each one's manifest decides, once it authenticates under `keys` (when any are
    given; one that does not is kept and appended to `ignored`)."""
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
            manifest = SegmentManifest.read(await storage.get(key), key, keys or {})
        except ManifestUnauthenticated as e:
            if ignored is not None:
                ignored.append(Ignored(key, e.reason))
            continue
        except (ValueError, StorageError):
            continue
        if manifest.key != key or manifest.backup_uid != identity.uid or not identity.uid:
            continue
        if may_delete(manifest.chain, manifest.cluster_id, manifest.last_revision, kept, newest_chain):
            # Under Object Lock a plain DELETE only hides a version: each is deleted by its ID.
            stored = [await storage.stored(k) for k in (manifest.key, manifest.segment_key)]
            deletions = object_lock.segment_deletions(stored, clock())
            if deletions is None:
                continue  # a version is held: kept whole, a later pass deletes it
            for deletion in deletions:
                for version_id in deletion.version_ids:
                    await storage.delete(deletion.key, version_id)
            deleted.append(manifest)
    return deleted


async def apply_segment_retention(
    storage: S3Storage,
    identity: Identity,
    prefix: str,
    newest_chain: str,
    clock: Callable[[], datetime.datetime],
    keys: Mapping[str, bytes] | None = None,
    ignored: list[Ignored] | None = None,
) -> list[SegmentManifest]:
    """After snapshot retention: the segments the snapshots this backup still keeps do not
    need (core/backup/segment_retention.py). With `keys`, only authenticated snapshot
    manifests count as kept (a restore holding the keys refuses the others as a base), and
    only authenticated segment manifests are deleted; the others go to `ignored`."""
    folder = backup_prefix(prefix, identity.namespace, identity.backup)
    listing = await read_manifests(storage, folder, identity.backup, keys)
    kept = [m for m in listing.manifests if m.belongs_to(identity)]
    return await delete_unneeded(
        storage,
        segments_prefix(prefix, identity.namespace, identity.backup),
        identity,
        kept,
        newest_chain,
        clock,
        keys,
        ignored,
    )
