"""What a point-in-time restore reads of its backup's store before it plans: the manifests of
the backup's full snapshots and of its segments (core/restore/replay_planner.py decides from
them). With the restore's keys, only manifests that authenticate under them are planned with;
the others are listed as ignored. Reads only."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.credentials import s3_location
from etcd_operator.clients.storage.keyring import read_keyring
from etcd_operator.clients.storage.s3 import S3Storage, StorageError
from etcd_operator.controllers.backup.catalogue import read_manifests
from etcd_operator.core.backup.keyring import KeyringError
from etcd_operator.core.backup.manifest import Ignored, ManifestUnauthenticated, backup_prefix
from etcd_operator.core.backup.segments import SEGMENT_MANIFEST_SUFFIX, SegmentManifest, segments_prefix
from etcd_operator.core.restore.observed import Catalogue
from etcd_operator.core.restore.point_in_time import auth_read_of, caught_up_of

logger = logging.getLogger(__name__)


def backup_folder(namespace: str, backup: str, s3: Mapping[str, Any]) -> str:
    return backup_prefix(s3.get("prefix", ""), namespace, backup)


async def read_segment_manifests(
    storage: S3Storage,
    folder: str,
    namespace: str,
    backup: str,
    keys: Mapping[str, bytes] | None = None,
    ignored: list[Ignored] | None = None,
) -> list[SegmentManifest]:
    """The segment manifests this operator wrote for `backup` under its segments folder, each
    authenticated under `keys` when any are given (one that is not goes to `ignored`);
    anything else is left out (the chain's planning sees gaps, never guesses)."""
    found = []
    for key in await storage.list_keys(folder):
        if not key.endswith(SEGMENT_MANIFEST_SUFFIX):
            continue
        try:
            manifest = SegmentManifest.read(await storage.get(key), key, keys or {})
        except ManifestUnauthenticated as e:
            if ignored is not None:
                ignored.append(Ignored(key, e.reason))
            continue
        except ValueError as e:
            logger.warning("%s is not a segment manifest (%s); ignored", key, e)
            continue
        if manifest.key == key and (manifest.namespace, manifest.backup) == (namespace, backup):
            found.append(manifest)
    return found


async def list_catalogue(
    kube_client: kube.KubeClient, namespace: str, backup: Mapping[str, Any], keys_secret: str | None = None
) -> Catalogue:
    """The backup's snapshots and segments as its store lists them now; with `keys_secret`
    (the restore's keys), only those whose manifests authenticate under its keys."""
    name = backup["metadata"]["name"]
    s3 = ((backup.get("spec") or {}).get("storage") or {}).get("s3") or {}
    folder = backup_folder(namespace, name, s3)
    try:
        keys = await read_keyring(kube_client, namespace, keys_secret) if keys_secret else {}
    except KeyringError as e:
        return Catalogue(folder=folder, error=e.message, permanent=True)
    try:
        storage = await asyncio.to_thread(S3Storage, await s3_location(kube_client, namespace, s3), 2)
        try:
            catalogue = await read_catalogue(storage, s3.get("prefix", ""), namespace, name, keys)
        finally:
            await asyncio.to_thread(storage.close)
    except StorageError as e:
        return Catalogue(folder=folder, error=str(e), permanent=e.permanent)
    backup_status = backup.get("status")
    return dataclasses.replace(catalogue, caught_up=caught_up_of(backup_status), auth_read=auth_read_of(backup_status))


async def read_catalogue(
    storage: S3Storage, prefix: str, namespace: str, backup: str, keys: Mapping[str, bytes]
) -> Catalogue:
    """The snapshot and segment manifests of `backup` a plan may use: with `keys`, those that
    authenticate under them; the others are `ignored`."""
    folder = backup_prefix(prefix, namespace, backup)
    snapshots = await read_manifests(storage, folder, backup, keys)
    ignored = list(snapshots.ignored)
    segments = await read_segment_manifests(
        storage, segments_prefix(prefix, namespace, backup), namespace, backup, keys, ignored
    )
    return Catalogue(
        folder=folder, snapshots=tuple(snapshots.manifests), segments=tuple(segments), ignored=tuple(ignored)
    )
