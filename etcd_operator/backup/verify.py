"""Verifies a stored snapshot without touching anything: sha256 against its manifest and
etcd's own trailing checksum, read as a stream with bounded memory."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import AsyncIterator, Callable

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


VERIFY_CHUNK_BYTES = 1 << 20  # two in memory at a time (one hashed, the next downloading); larger reads cost more CPU


async def consume_in_order(chunks: AsyncIterator[bytes], sink: Callable[[bytes], object]) -> None:
    """Calls `sink` on every chunk, in order, in a worker thread while the next chunk
    downloads, so hashing (and writing) overlaps the network and never runs on the event loop."""
    pending: asyncio.Future | None = None
    try:
        async for chunk in chunks:
            if pending is not None:
                await pending
            pending = asyncio.ensure_future(asyncio.to_thread(sink, chunk))
        if pending is not None:
            await pending
    except BaseException:
        if pending is not None and not pending.done():
            await asyncio.wait([pending])  # the thread cannot be interrupted; it ends with its chunk
        raise


async def verify_snapshot(storage: S3Storage, key: str, manifest: Manifest | None) -> Verified:
    checked = SnapshotDigest()
    await consume_in_order(await storage.open_stream(key, VERIFY_CHUNK_BYTES), checked.update)
    digest, size = checked.sha256, checked.size
    if manifest is not None and (digest != manifest.sha256 or size != manifest.size):
        raise VerificationFailed("ChecksumMismatch",
                                 f"{key}: sha256 {digest[:16]}… and size {size} do not match the manifest "
                                 f"({manifest.sha256[:16]}…, {manifest.size} bytes); the backup is corrupt")
    if not checked.etcd_checksum_matches:
        raise VerificationFailed("SnapshotCorrupt",
                                 f"{key}: the database does not match etcd's own checksum; the backup is corrupt")
    return Verified(key, size, digest)
