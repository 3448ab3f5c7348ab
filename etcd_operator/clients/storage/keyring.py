"""Reads the encryption keys of a Secret (core/backup/keyring.py says their format): from the
API (the operator), or mounted as a volume (the pods' programs). The values stay in memory
only: never logged, never written to status or events."""

from __future__ import annotations

import base64
import pathlib

from etcd_operator.clients.kube import client as kube
from etcd_operator.core.backup.keyring import KeyringError, parse_keyring


async def read_keyring(kube_client: kube.KubeClient, namespace: str, name: str) -> dict[str, bytes]:
    secret = await kube_client.get(kube.SECRETS, namespace, name)
    if secret is None:
        raise KeyringError("EncryptionKeyMissing", f"the encryption key Secret {namespace}/{name} does not exist")
    data = secret.get("data") or {}
    return parse_keyring({key_id: base64.b64decode(value) for key_id, value in data.items()})


def read_mounted_keys(folder: str) -> dict[str, bytes]:
    """Key ID -> key from a mounted Secret: one file per key ID (the kubelet's own entries,
    which start with a dot, are skipped); {} without a folder. Blocking: run it in a thread."""
    if not folder:
        return {}
    return parse_keyring(
        {p.name: p.read_bytes() for p in sorted(pathlib.Path(folder).iterdir()) if not p.name.startswith(".")}
    )
