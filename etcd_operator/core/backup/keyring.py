"""Encryption keys as a Secret holds them: each data key is a key ID, its value the base64
text of 32 random bytes (`openssl rand -base64 32`). A backup encrypts under the one key ID
its spec names; a restore (and a verification) may decrypt with any key of the Secret, the
one named by the object's header. Pure; values never appear in messages."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.backup.sealed import KEY_BYTES


class KeyringError(ValueError):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


def parse_key(key_id: str, text: bytes) -> bytes:
    """The 32-byte key in `text` (base64, surrounding whitespace allowed)."""
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KeyringError("EncryptionKeyInvalid", f"key {key_id!r} is not base64 text") from None
    if len(key) != KEY_BYTES:
        raise KeyringError(
            "EncryptionKeyInvalid",
            f"key {key_id!r} decodes to {len(key)} bytes; an AES-256 key is {KEY_BYTES} (openssl rand -base64 32)",
        )
    return key


def parse_keyring(values: Mapping[str, bytes]) -> dict[str, bytes]:
    """Key ID -> key, from a Secret's values (as mounted, or decoded from its data)."""
    return {key_id: parse_key(key_id, text) for key_id, text in values.items()}


def decryption_secret(source: Mapping[str, Any], backup_spec: Mapping[str, Any] | None) -> str | None:
    """The Secret a restore decrypts with: spec.source.encryptionKeysSecretRef, else the
    source EtcdBackup's spec.encryption.secretRef; None when neither names one."""
    named = (source.get("encryptionKeysSecretRef") or {}).get("name")
    if named:
        return str(named)
    from_backup = (((backup_spec or {}).get("encryption") or {}).get("secretRef") or {}).get("name")
    return str(from_backup) if from_backup else None
