"""Verifies a stored snapshot without touching anything: sha256 against its manifest and
etcd's own trailing checksum, read in ranges with memory drawn from the operator-wide
budget (etcd_operator.core.buffer_budget), like the backups' part buffers. A sealed object
(core/backup/sealed.py) is decrypted and decompressed as it is read: the sha256 is of the
stored bytes, etcd's checksum of the plain ones; the decoder holds one chunk more than the
budgeted ranges."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping

from etcd_operator.clients.storage.s3 import S3Storage
from etcd_operator.core.backup import sealed
from etcd_operator.core.backup.digest import SnapshotDigest
from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.buffer_budget import MemoryBudget, process_budget


class VerificationFailed(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclasses.dataclass(frozen=True)
class Verified:
    key: str
    size: int  # stored bytes
    sha256: str  # of the stored bytes
    plain_size: int  # the snapshot's own bytes (== size for a plain object)


# The operator reads the object as ranges, a few at a time (one stream waits on the store
# more than on the CPU). Each ranged GET costs ~4 ms of CPU in botocore, so ranges are large:
# 512 MiB in 2 MiB ranges took 1.1-1.5 s, in 6 MiB ranges 0.7 s. Memory: the ranges in
# flight, the one in hand and the one being hashed.
RANGE_BYTES = 6 << 20
MIN_RANGE_BYTES = 1 << 20
RANGES_IN_FLIGHT = 2
CHUNKS_HELD = RANGES_IN_FLIGHT + 2


def range_size(budget_limit: int) -> int:
    """RANGE_BYTES, or less when a small budget could not hold CHUNKS_HELD of them."""
    return max(MIN_RANGE_BYTES, min(RANGE_BYTES, budget_limit // CHUNKS_HELD // MIN_RANGE_BYTES * MIN_RANGE_BYTES))


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
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()  # stops the reads still in flight
        raise


async def ranged_chunks(
    storage: S3Storage, key: str, size: int, range_bytes: int = RANGE_BYTES
) -> AsyncIterator[bytes]:
    """The object's `size` bytes in order, read as ranges with a few in flight at once."""
    offsets = iter(range(0, size, range_bytes))
    in_flight: list[tuple[int, asyncio.Future]] = []

    def read_ahead() -> None:
        while len(in_flight) < RANGES_IN_FLIGHT:
            offset = next(offsets, None)
            if offset is None:
                return
            length = min(range_bytes, size - offset)
            in_flight.append((length, asyncio.ensure_future(storage.read_range(key, offset, length))))

    try:
        read_ahead()
        while in_flight:
            length, read = in_flight.pop(0)
            chunk = await read
            if len(chunk) != length:
                raise VerificationFailed(
                    "ChecksumMismatch",
                    f"{key} changed while it was read (a range returned {len(chunk)} bytes, not {length})",
                )
            read_ahead()
            yield chunk
    finally:
        for _, read in in_flight:
            read.cancel()
        await asyncio.gather(*(read for _, read in in_flight), return_exceptions=True)


async def verify_snapshot(
    storage: S3Storage,
    key: str,
    manifest: Manifest | None,
    budget: MemoryBudget | None = None,
    keys: Mapping[str, bytes] | None = None,
) -> Verified:
    """Waits for its share of the memory budget (the operator-wide one unless given).
    `keys`: key ID -> key, the candidates for a sealed object's key ID."""
    budget = budget or process_budget()
    range_bytes = range_size(budget.limit)
    await budget.acquire(range_bytes * CHUNKS_HELD)
    checked = SnapshotDigest()  # of the stored bytes
    decoder = sealed.Decoder(keys)
    plain = SnapshotDigest()

    def take(chunk: bytes) -> None:
        checked.update(chunk)
        if decoder.sealed is not False:  # a plain object is hashed once: it is its own plain form
            out = decoder.feed(chunk)
            if decoder.sealed:
                plain.update(out)

    try:
        await consume_in_order(ranged_chunks(storage, key, await storage.size(key), range_bytes), take)
        decoder.finish()
    except sealed.SealedError as e:
        raise VerificationFailed(e.reason, f"{key}: {e}; nothing was touched") from None
    finally:
        budget.release(range_bytes * CHUNKS_HELD)
    digest, size = checked.sha256, checked.size
    plain = plain if decoder.sealed else checked
    if manifest is not None and (digest != manifest.sha256 or size != manifest.size):
        raise VerificationFailed(
            "ChecksumMismatch",
            f"{key}: sha256 {digest[:16]}… and size {size} do not match the manifest "
            f"({manifest.sha256[:16]}…, {manifest.size} bytes); the backup is corrupt",
        )
    if not plain.etcd_checksum_matches:
        raise VerificationFailed(
            "SnapshotCorrupt", f"{key}: the database does not match etcd's own checksum; the backup is corrupt"
        )
    return Verified(key, size, digest, plain.size)
