"""One pass over a snapshot stream gives both checks: the sha256 of the whole object
(for the manifest) and etcd's own integrity check (the stream ends with the sha256 of
the database before it). The last 32 bytes are held back, hashed last."""

from __future__ import annotations

import hashlib

ETCD_CHECKSUM_BYTES = 32


class SnapshotDigest:
    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._held = b""
        self.size = 0

    def update(self, data: bytes | bytearray) -> None:
        self.size += len(data)
        if len(data) >= ETCD_CHECKSUM_BYTES:
            self._hash.update(self._held)
            self._hash.update(memoryview(data)[:-ETCD_CHECKSUM_BYTES])
            self._held = bytes(data[-ETCD_CHECKSUM_BYTES:])
        else:
            joined = self._held + data
            self._hash.update(joined[:-ETCD_CHECKSUM_BYTES] if len(joined) > ETCD_CHECKSUM_BYTES else b"")
            self._held = joined[-ETCD_CHECKSUM_BYTES:]

    @property
    def etcd_checksum_matches(self) -> bool:
        return len(self._held) == ETCD_CHECKSUM_BYTES and self._hash.digest() == self._held

    @property
    def sha256(self) -> str:
        whole = self._hash.copy()
        whole.update(self._held)
        return whole.hexdigest()
