"""Reads the encryption keys of a Secret (core/backup/keyring.py says their format). The
values stay in memory only: never logged, never written to status or events."""

from __future__ import annotations

import base64

from etcd_operator.clients.kube import client as kube
from etcd_operator.core.backup.keyring import KeyringError, parse_keyring


async def read_keyring(kube_client: kube.KubeClient, namespace: str, name: str) -> dict[str, bytes]:
    secret = await kube_client.get(kube.SECRETS, namespace, name)
    if secret is None:
        raise KeyringError("EncryptionKeyMissing", f"the encryption key Secret {namespace}/{name} does not exist")
    data = secret.get("data") or {}
    return parse_keyring({key_id: base64.b64decode(value) for key_id, value in data.items()})
