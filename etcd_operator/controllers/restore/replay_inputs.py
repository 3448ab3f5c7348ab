"""Before a point-in-time restore's replay pod is created: do the restore's keys open what the
replay reads, and hold the key the replayed snapshot is to be sealed under
(core/restore/replay_sealing.py)? A trial decryption, as the snapshot restore's verification
does: the base snapshot's index, and one segment's index per key ID among the recorded
segments, a few ranged reads each. A missing or wrong key fails the restore here, before the
pod exists (nothing of the target is touched before the replayed snapshot is verified
anyway); the replay program checks every segment again where it runs. Reads only."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.credentials import s3_location
from etcd_operator.clients.storage.keyring import read_keyring
from etcd_operator.clients.storage.s3 import S3Storage
from etcd_operator.controllers.backup.snapshot_integrity import VerificationFailed
from etcd_operator.controllers.restore import snapshot_lookup
from etcd_operator.controllers.restore.point_in_time import backup_folder
from etcd_operator.core.backup import sealed
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
from etcd_operator.core.backup.sealed_reader import open_plain
from etcd_operator.core.backup.segment_retention import parse_manifest_key
from etcd_operator.core.backup.segments import SegmentManifest
from etcd_operator.core.restore.point_in_time import ReplayRecord, chain_to_replay
from etcd_operator.core.restore.replay_pod import segments_folder
from etcd_operator.core.restore.replay_sealing import ReplayedSealing, replayed_sealing

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ReplayInputs:
    """What the replay pod is built with."""

    s3: Mapping[str, Any]
    keys_secret: str | None
    sealing: ReplayedSealing
    ignored: tuple[Ignored, ...] = ()  # recorded segments' manifests that did not authenticate


async def check_replay_inputs(
    kube_client: kube.KubeClient, namespace: str, source: Mapping[str, Any], record: ReplayRecord
) -> ReplayInputs:
    """Raises VerificationFailed (a key that does not open an input: its reason is the
    sealed format's), KeyringError or StorageError."""
    s3 = await snapshot_lookup.s3_block(kube_client, namespace, source)
    backup_name = source["backupRef"]["name"]
    backup = await kube_client.get(kube.ETCDBACKUPS, namespace, backup_name)
    backup_spec = (backup or {}).get("spec") or {}
    keys_secret = await snapshot_lookup.keys_secret(kube_client, namespace, source)
    keys = await read_keyring(kube_client, namespace, keys_secret) if keys_secret else {}
    storage = await asyncio.to_thread(S3Storage, await s3_location(kube_client, namespace, s3), 2)
    try:
        folder = segments_folder(backup_folder(namespace, backup_name, s3), record.chain)
        sealing, ignored = await check_keys(storage, record, folder, keys, keys_secret, backup_spec)
    finally:
        await asyncio.to_thread(storage.close)
    return ReplayInputs(s3, keys_secret, sealing, ignored)


async def check_keys(
    storage: S3Storage,
    record: ReplayRecord,
    chain_folder: str,
    keys: Mapping[str, bytes],
    keys_secret: str | None,
    backup_spec: Mapping[str, Any],
) -> tuple[ReplayedSealing, tuple[Ignored, ...]]:
    """The replayed snapshot's sealing, once the trial decryptions passed, and the recorded
    segments' manifests that were ignored. The base's trial comes before its manifest is
    authenticated, so that a wrong key fails as one, not as an altered manifest. With `keys`,
    only segment manifests that authenticate under them are tried and replayed: one planted
    in the recorded range is ignored, and fails the restore only where the authentic ones
    leave a gap (then with the reason it did not authenticate, naming it)."""
    base_manifest = manifest_key(record.base_key)
    base_document = await storage.get(base_manifest)
    try:
        base = Manifest.from_json(base_document)
    except ValueError as e:
        raise VerificationFailed("ManifestInvalid", f"{base_manifest}: {e}") from None
    await _trial(storage, record.base_key, base.size, keys, keys_secret)
    ignored: list[Ignored] = []
    if keys:
        try:
            base = Manifest.read(base_document, base_manifest, keys)
        except ManifestUnauthenticated as e:
            raise VerificationFailed(e.reason, f"{e.message}; nothing was touched") from None
    segments = await recorded_segments(storage, record, chain_folder, keys, ignored)
    if ignored:
        try:
            chain_to_replay(list(segments), record)
        except ChainProblem as e:
            summary = ignored_summary(ignored)
            raise VerificationFailed(ignored_reason(ignored), f"{e}; {summary}; nothing was touched") from None
    by_key_id = {m.key_id: m for m in sorted(segments, key=lambda m: m.sequence) if m.encrypted}
    for m in by_key_id.values():  # the replay pod checks every one
        await _trial(storage, m.segment_key, m.size, keys, keys_secret)
    sealing = replayed_sealing(
        backup_spec.get("compression"), (backup_spec.get("encryption") or {}).get("keyID"), base, segments
    )
    if sealing.encrypted and sealing.key_id not in keys:
        raise KeyringError(
            "EncryptionKeyMissing",
            f"the replayed snapshot is to be encrypted under key ID {sealing.key_id!r} (the backup's), which "
            f"{f'Secret {keys_secret}' if keys_secret else 'the restore (no keys Secret)'} does not hold",
        )
    return sealing, tuple(ignored)


async def _trial(storage: S3Storage, key: str, size: int, keys: Mapping[str, bytes], keys_secret: str | None) -> None:
    try:
        await open_plain(functools.partial(storage.read_range, key), size, keys)
    except sealed.SealedError as e:
        raise VerificationFailed(e.reason, snapshot_lookup.unsealing_message(key, e, keys_secret)) from None


async def recorded_segments(
    storage: S3Storage,
    record: ReplayRecord,
    chain_folder: str,
    keys: Mapping[str, bytes],
    ignored: list[Ignored],
) -> Sequence[SegmentManifest]:
    """The manifests of the recorded segments (names pick them, each manifest decides); with
    `keys`, those that authenticate under them, the others go to `ignored`."""
    prefix = chain_folder.removesuffix(f"{record.chain}/")
    found = []
    for key in await storage.list_keys(chain_folder):
        parsed = parse_manifest_key(prefix, key)
        if parsed is None or parsed[0] != record.chain:
            continue
        if not record.first_sequence <= parsed[1] <= record.last_sequence:
            continue
        try:
            manifest = SegmentManifest.read(await storage.get(key), key, keys)
        except ManifestUnauthenticated as e:
            ignored.append(Ignored(key, e.reason))
            continue
        except ValueError as e:
            logger.warning("%s is not a segment manifest (%s); ignored", key, e)
            continue
        if manifest.key == key and manifest.chain == record.chain:
            found.append(manifest)
    return found
