"""How an EtcdBackup stores its objects (snapshots and segments alike): spec.compression,
and with spec.encryption the key of its key ID, read from its Secret. The key stays in
memory only: never logged, never written to status or events."""

from __future__ import annotations

from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.keyring import read_keyring
from etcd_operator.core.backup import sealed
from etcd_operator.core.backup.keyring import KeyringError
from etcd_operator.core.backup.spec import BackupSpec


async def backup_encoding(kube_client: kube.KubeClient, namespace: str, spec: BackupSpec) -> sealed.Encoding:
    if not spec.encryption_secret:
        return sealed.Encoding(compression=spec.compression)
    key_id = spec.encryption_key_id or ""
    keys = await read_keyring(kube_client, namespace, spec.encryption_secret)
    if key_id not in keys:
        raise KeyringError(
            "EncryptionKeyMissing",
            f"Secret {namespace}/{spec.encryption_secret} has no key {key_id!r} (spec.encryption.keyID)",
        )
    return sealed.Encoding(compression=spec.compression, algorithm="aes-256-gcm", key_id=key_id, key=keys[key_id])


async def backup_keys(kube_client: kube.KubeClient, namespace: str, spec: BackupSpec) -> dict[str, bytes]:
    """Every key of the backup's Secret (earlier key IDs authenticate earlier manifests); {}
    without spec.encryption. What reads the store decides only on manifests they authenticate."""
    if not spec.encryption_secret:
        return {}
    return await read_keyring(kube_client, namespace, spec.encryption_secret)
