"""What a point-in-time restore reads of its backup's store before it plans: the manifests of
the backup's full snapshots and of its segments (core/restore/replay_planner.py decides from
them). Reads only."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.credentials import s3_location
from etcd_operator.clients.storage.s3 import S3Storage, StorageError
from etcd_operator.controllers.backup.catalogue import read_manifests
from etcd_operator.core.backup.manifest import backup_prefix
from etcd_operator.core.backup.segments import SEGMENT_MANIFEST_SUFFIX, SegmentManifest, segments_prefix
from etcd_operator.core.restore.observed import Catalogue
from etcd_operator.core.restore.point_in_time import caught_up_of

logger = logging.getLogger(__name__)


def backup_folder(namespace: str, backup: str, s3: Mapping[str, Any]) -> str:
    return backup_prefix(s3.get("prefix", ""), namespace, backup)


async def read_segment_manifests(storage: S3Storage, folder: str, namespace: str, backup: str) -> list[SegmentManifest]:
    """The segment manifests this operator wrote for `backup` under its segments folder;
    anything else is ignored (the chain's planning sees gaps, never guesses)."""
    found = []
    for key in await storage.list_keys(folder):
        if not key.endswith(SEGMENT_MANIFEST_SUFFIX):
            continue
        try:
            manifest = SegmentManifest.from_json(await storage.get(key))
        except ValueError as e:
            logger.warning("%s is not a segment manifest (%s); ignored", key, e)
            continue
        if manifest.key == key and (manifest.namespace, manifest.backup) == (namespace, backup):
            found.append(manifest)
    return found


async def list_catalogue(kube_client: kube.KubeClient, namespace: str, backup: Mapping[str, Any]) -> Catalogue:
    """The backup's snapshots and segments as its store lists them now."""
    name = backup["metadata"]["name"]
    s3 = ((backup.get("spec") or {}).get("storage") or {}).get("s3") or {}
    folder = backup_folder(namespace, name, s3)
    try:
        storage = await asyncio.to_thread(S3Storage, await s3_location(kube_client, namespace, s3), 2)
        try:
            snapshots = await read_manifests(storage, folder, name)
            segments = await read_segment_manifests(
                storage, segments_prefix(s3.get("prefix", ""), namespace, name), namespace, name
            )
        finally:
            await asyncio.to_thread(storage.close)
    except StorageError as e:
        return Catalogue(folder=folder, error=str(e), permanent=e.permanent)
    return Catalogue(
        folder=folder,
        snapshots=tuple(snapshots),
        segments=tuple(segments),
        caught_up=caught_up_of(backup.get("status")),
    )
