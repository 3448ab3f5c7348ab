"""A segment's stored form: its body (segments.encode) sealed like the backup's snapshots
(core/backup/sealed.py: zstd, and AES-256-GCM under the backup's key), and back. The
manifest records how, and keeps the size and sha256 of the stored bytes; a segment written
before segments were sealed is its plain body, and still reads (sealed.decode passes it
through). Pure."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from etcd_operator.core.backup import sealed
from etcd_operator.core.backup.segments import SegmentBody, decode, encode


def seal(body: SegmentBody, encoding: sealed.Encoding) -> bytes:
    """The bytes to store for `body`. CPU-bound (a few ms per MiB): call it off the event loop."""
    return b"".join(sealed.encode([encode(body)], encoding))


def unseal(stored: bytes, keys: Mapping[str, bytes]) -> bytes:
    """The plain body of a stored segment, sealed or not. Raises sealed.SealedError
    (KeyMissing, DecryptionFailed) when it cannot be trusted."""
    return b"".join(sealed.decode([stored], keys))


def open_body(stored: bytes, keys: Mapping[str, bytes]) -> SegmentBody:
    """The body of a stored segment. Raises sealed.SealedError or segments.SegmentCorrupt."""
    return decode(unseal(stored, keys))


def recorded(encoding: sealed.Encoding) -> dict[str, str | None]:
    """The manifest fields that say how a segment sealed with `encoding` is stored."""
    return {
        "compression": encoding.compression,
        "encryption": encoding.algorithm if encoding.encrypted else None,
        "key_id": encoding.key_id or None,
    }


def stored_form(body: SegmentBody, encoding: sealed.Encoding) -> tuple[bytes, str]:
    """(stored bytes, their sha256): what the writer uploads and its manifest records."""
    data = seal(body, encoding)
    return data, hashlib.sha256(data).hexdigest()
