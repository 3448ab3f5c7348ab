"""This operator's manifests in the store: reading a backup's folder, and deleting the
backups retention (backup/retention.py) picked after a run, unless S3 Object Lock holds
them (backup/object_lock.py). A reader holding the backup's keys decides only on manifests
that authenticate under them; the others are listed as ignored, never deleted."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping, Sequence

from etcd_operator.clients.storage.s3 import S3Storage
from etcd_operator.core.backup import object_lock, retention
from etcd_operator.core.backup.manifest import (
    MANIFEST_SUFFIX,
    Identity,
    Ignored,
    Manifest,
    ManifestUnauthenticated,
    backup_prefix,
)
from etcd_operator.core.backup.spec import BackupSpec


async def apply_retention(
    storage: S3Storage,
    identity: Identity,
    spec: BackupSpec,
    keep: str,
    history: Sequence[str],
    clock: Callable[[], datetime.datetime],
    keys: Mapping[str, bytes] | None = None,
) -> object_lock.RetentionResult:
    """Deletes what retention.to_delete picks in this backup's folder and the store does not
    hold: every version of its snapshot, then of its manifest. Returns the backups deleted,
    the expired ones Object Lock keeps (neither deleted nor attempted), and the manifests
    ignored because they do not authenticate under `keys` (the backup's, when it has any)."""
    if not spec.has_retention:
        return object_lock.RetentionResult()
    folder = backup_prefix(spec.prefix, identity.namespace, identity.backup)
    listing = await read_manifests(storage, folder, identity.backup, keys)
    manifests = listing.manifests
    store = None
    if spec.max_age is not None:
        modified, store_now = await storage.list_modified(folder)
        store = retention.StoreTimes(store_now, modified) if store_now is not None else None
    doomed = retention.to_delete(manifests, identity, spec.max_backups, spec.max_age, clock(), keep, history, store)
    stored = {key: await storage.stored(key) for m in doomed for key in (m.snapshot_key, m.key)}
    plan = object_lock.sort_out(doomed, stored, clock())
    for _, deletions in plan.deletions:
        for deletion in deletions:
            for version_id in deletion.version_ids:
                await storage.delete(deletion.key, version_id)
    return object_lock.RetentionResult(tuple(m for m, _ in plan.deletions), plan.locked, tuple(listing.ignored))


@dataclasses.dataclass(frozen=True)
class Listing:
    manifests: list[Manifest]
    ignored: list[Ignored]  # they did not authenticate: no decision goes by them


async def read_manifests(
    storage: S3Storage, prefix: str, backup: str | None = None, keys: Mapping[str, bytes] | None = None
) -> Listing:
    """Manifests this operator wrote directly in the folder `prefix` (for `backup`, if
    given); anything else, including deeper folders of other backups whose prefix happens to
    start the same, is left out. With `keys`, only manifests that authenticate under them
    are listed; the others are `ignored`. Callers that delete must also check the identity."""
    manifests, ignored = [], []
    for key in await storage.list_keys(prefix):
        if not key.endswith(MANIFEST_SUFFIX):
            continue
        try:
            manifest = Manifest.read(await storage.get(key), key, keys or {})
        except ManifestUnauthenticated as e:
            ignored.append(Ignored(key, e.reason))
            continue
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
    return Listing(manifests, ignored)
