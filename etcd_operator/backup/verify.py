"""Verifies a stored snapshot without touching anything: sha256 against its manifest and
etcd's own trailing checksum, read as a stream with bounded memory."""

from __future__ import annotations

import dataclasses

from etcd_operator.backup.digest import SnapshotDigest
from etcd_operator.backup.manifest import Manifest
from etcd_operator.storage.s3 import S3Storage


class VerificationFailed(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclasses.dataclass(frozen=True)
class Verified:
    key: str
    size: int
    sha256: str


async def verify_snapshot(storage: S3Storage, key: str, manifest: Manifest | None) -> Verified:
    checked = SnapshotDigest()
    async for chunk in await storage.open_stream(key):
        checked.update(chunk)
    digest, size = checked.sha256, checked.size
    if manifest is not None and (digest != manifest.sha256 or size != manifest.size):
        raise VerificationFailed("ChecksumMismatch",
                                 f"{key}: sha256 {digest[:16]}… and size {size} do not match the manifest "
                                 f"({manifest.sha256[:16]}…, {manifest.size} bytes); the backup is corrupt")
    if not checked.etcd_checksum_matches:
        raise VerificationFailed("SnapshotCorrupt",
                                 f"{key}: the database does not match etcd's own checksum; the backup is corrupt")
    return Verified(key, size, digest)
