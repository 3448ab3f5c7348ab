"""Finds the snapshot an EtcdRestore names: the latest good backup of an EtcdBackup, a
named one, or an explicit S3 object. Reads only."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.s3 import S3Storage
from etcd_operator.controllers.backup.catalogue import read_manifests
from etcd_operator.controllers.backup.snapshot_integrity import VerificationFailed
from etcd_operator.core.backup import retention, sealed
from etcd_operator.core.backup.keyring import decryption_secret
from etcd_operator.core.backup.manifest import Ignored, Manifest, ManifestUnauthenticated, backup_prefix, manifest_key


@dataclasses.dataclass(frozen=True)
class SnapshotSource:
    s3: Mapping[str, Any]  # a storage.s3 block: bucket, endpoint, credentialsSecretRef, ...
    key: str
    manifest: Manifest | None
    ignored: tuple[Ignored, ...] = ()  # manifests the latest-backup choice left out: they did not authenticate


async def s3_block(kube_client: kube.KubeClient, namespace: str, source: Mapping[str, Any]) -> Mapping[str, Any]:
    if "s3" in source:
        return source["s3"]
    name = source["backupRef"]["name"]
    backup = await kube_client.get(kube.ETCDBACKUPS, namespace, name)
    if backup is None:
        raise VerificationFailed("BackupNotFound", f"EtcdBackup {namespace}/{name} does not exist")
    return backup["spec"]["storage"]["s3"]


async def keys_secret(kube_client: kube.KubeClient, namespace: str, source: Mapping[str, Any]) -> str | None:
    """The Secret whose keys decrypt the snapshot (keyring.decryption_secret), or None."""
    backup_spec = None
    if "backupRef" in source and not source.get("encryptionKeysSecretRef"):
        backup = await kube_client.get(kube.ETCDBACKUPS, namespace, source["backupRef"]["name"])
        backup_spec = (backup or {}).get("spec")
    return decryption_secret(source, backup_spec)


async def resolve(
    storage: S3Storage,
    namespace: str,
    source: Mapping[str, Any],
    s3: Mapping[str, Any],
    keys: Mapping[str, bytes] | None = None,
) -> SnapshotSource:
    """`keys`: the restore's, when it has any: then the snapshot's manifest must be there, and
    the latest backup is the newest whose manifest authenticates under them. The manifest
    returned is authenticated by `authenticated`, after the trial decryption, so that a wrong
    key is told apart from an altered manifest."""
    if "s3" in source:
        key = source["s3"]["key"]
        manifest = None
        if await storage.exists(manifest_key(key)):
            try:
                manifest = Manifest.from_json(await storage.get(manifest_key(key)))
            except ValueError as e:
                if keys:
                    raise VerificationFailed("ManifestInvalid", f"{manifest_key(key)}: {e}") from None
                manifest = None
        elif keys:
            raise VerificationFailed(
                "ManifestUnauthenticated",
                f"{key} has no manifest beside it ({manifest_key(key)}), while the restore has keys: an encrypted "
                f"snapshot is restored only with its authenticated manifest; nothing was touched",
            )
        if not await storage.exists(key):
            raise VerificationFailed("SnapshotNotFound", f"s3://{s3['bucket']}/{key} does not exist")
        return SnapshotSource(s3, key, manifest)

    backup = source["backupRef"]["name"]
    wanted = source["backupRef"].get("key")
    if wanted:
        if not await storage.exists(manifest_key(wanted)):
            raise VerificationFailed("SnapshotNotFound", f"no manifest for {wanted} in bucket {s3['bucket']}")
        try:
            manifest = Manifest.from_json(await storage.get(manifest_key(wanted)))
        except ValueError as e:
            raise VerificationFailed("ManifestInvalid", f"{manifest_key(wanted)}: {e}") from None
        return SnapshotSource(s3, wanted, manifest)
    folder = backup_prefix(s3.get("prefix", ""), namespace, backup)
    listing = await read_manifests(storage, folder, backup, keys)
    manifests = listing.manifests
    if not manifests and listing.ignored:
        # None authenticates: chosen unauthenticated, so that the trial decryption tells a wrong
        # key apart; `authenticated` refuses it before anything is restored.
        manifests = (await read_manifests(storage, folder, backup)).manifests
    if not manifests:
        raise VerificationFailed("NoBackupFound", f"EtcdBackup {namespace}/{backup} has no completed backup yet")
    latest = retention.newest_first(manifests)[0]
    return SnapshotSource(s3, latest.snapshot_key, latest, tuple(listing.ignored))


async def authenticated(storage: S3Storage, snapshot: SnapshotSource, keys: Mapping[str, bytes]) -> SnapshotSource:
    """`snapshot` with its manifest read again and authenticated under `keys` (when any are
    given): what the rest of the verification goes by (its sha256 pins the object). Raises
    VerificationFailed (ManifestUnauthenticated, EncryptionKeyMissing) for a manifest missing
    its MAC, with a wrong one, or copied from another name."""
    if not keys:
        return snapshot
    path = manifest_key(snapshot.key)
    try:
        manifest = Manifest.read(await storage.get(path), path, keys)
    except ManifestUnauthenticated as e:
        raise VerificationFailed(e.reason, f"{e.message}; nothing was touched") from None
    except ValueError as e:
        raise VerificationFailed("ManifestInvalid", f"{path}: {e}") from None
    return dataclasses.replace(snapshot, manifest=manifest)


def unsealing_message(key: str, error: sealed.SealedError, keys_secret: str | None) -> str:
    """Why `key` could not be opened with the restore's keys, for its Failed condition."""
    if isinstance(error, sealed.PlaintextRefused):
        return f"{key}: {error}; nothing was touched"
    where = f"the keys of Secret {keys_secret}" if keys_secret else "no encryption keys (none given)"
    return (
        f"{key} cannot be decrypted with {where}: {error}. Give the Secret holding the backup's key "
        f"(spec.source.encryptionKeysSecretRef); nothing was touched"
    )
