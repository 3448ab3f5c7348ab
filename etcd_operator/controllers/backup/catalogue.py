"""This operator's manifests in the store: reading a backup's folder, and deleting the
backups retention (backup/retention.py) picked after a run."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence

from etcd_operator.clients.storage.s3 import S3Storage
from etcd_operator.core.backup import retention
from etcd_operator.core.backup.manifest import MANIFEST_SUFFIX, Identity, Manifest, backup_prefix
from etcd_operator.core.backup.spec import BackupSpec


async def apply_retention(
    storage: S3Storage,
    identity: Identity,
    spec: BackupSpec,
    keep: str,
    history: Sequence[str],
    clock: Callable[[], datetime.datetime],
) -> list[Manifest]:
    """Deletes what retention.to_delete picks in this backup's folder (snapshot, then
    manifest); returns the manifests deleted."""
    if not spec.has_retention:
        return []
    folder = backup_prefix(spec.prefix, identity.namespace, identity.backup)
    manifests = await read_manifests(storage, folder, identity.backup)
    store = None
    if spec.max_age is not None:
        modified, store_now = await storage.list_modified(folder)
        store = retention.StoreTimes(store_now, modified) if store_now is not None else None
    doomed = retention.to_delete(manifests, identity, spec.max_backups, spec.max_age, clock(), keep, history, store)
    for manifest in doomed:
        await storage.delete(manifest.snapshot_key)
        await storage.delete(manifest.key)
    return doomed


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
