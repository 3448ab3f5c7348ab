"""Streams a snapshot from etcd into an S3 multipart upload as it arrives.

Memory is bounded: at most `concurrency` parts are in flight plus the one being filled.
The sha256 of the whole object is computed on the way, and etcd's own trailing checksum
(the sha256 of the database, appended to every snapshot stream) is verified before the
upload is completed, so a corrupted stream never becomes a backup."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from typing import AsyncIterator, Callable

from etcd_operator.storage.s3 import S3Storage

ETCD_CHECKSUM_BYTES = 32


class SnapshotCorrupt(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class UploadResult:
    size: int
    sha256: str
    parts: int


class TrailerCheck:
    """sha256 of everything but the last 32 bytes, compared with those 32 bytes."""

    def __init__(self):
        self._hash = hashlib.sha256()
        self._held = b""

    def update(self, chunk: bytes) -> None:
        data = self._held + chunk
        if len(data) > ETCD_CHECKSUM_BYTES:
            self._hash.update(data[:-ETCD_CHECKSUM_BYTES])
            self._held = data[-ETCD_CHECKSUM_BYTES:]
        else:
            self._held = data

    def matches(self) -> bool:
        return len(self._held) == ETCD_CHECKSUM_BYTES and self._hash.digest() == self._held


async def stream_to_s3(
    chunks: AsyncIterator[bytes],
    storage: S3Storage,
    key: str,
    part_size: int,
    concurrency: int,
    on_progress: Callable[[int], None] = lambda sent: None,
    on_started: Callable[[str], None] = lambda upload_id: None,
) -> UploadResult:
    upload_id = await storage.start_multipart(key)
    on_started(upload_id)
    whole = hashlib.sha256()
    trailer = TrailerCheck()
    slots = asyncio.Semaphore(concurrency)
    etags: dict[int, str] = {}
    in_flight: set[asyncio.Task] = set()
    pending: list[bytes] = []
    pending_bytes = 0
    total = 0
    sent = 0
    parts_dispatched = 0

    async def upload(number: int, data: bytes) -> None:
        nonlocal sent
        try:
            etags[number] = await storage.upload_part(key, upload_id, number, data)
            sent += len(data)
            on_progress(sent)
        finally:
            slots.release()

    async def dispatch(data: bytes) -> None:
        nonlocal parts_dispatched
        await slots.acquire()
        for task in [t for t in in_flight if t.done()]:
            in_flight.discard(task)
            task.result()  # surfaces a failed part at once
        parts_dispatched += 1
        in_flight.add(asyncio.create_task(upload(parts_dispatched, data)))

    try:
        async for chunk in chunks:
            whole.update(chunk)
            trailer.update(chunk)
            pending.append(chunk)
            pending_bytes += len(chunk)
            total += len(chunk)
            if pending_bytes >= part_size:
                data = b"".join(pending)
                pending.clear()
                head, rest = data[:part_size], data[part_size:]
                del data
                pending_bytes = len(rest)
                if rest:
                    pending.append(rest)
                await dispatch(head)
                del head
        if pending_bytes or parts_dispatched == 0:
            await dispatch(b"".join(pending))
            pending.clear()
        await asyncio.gather(*in_flight)
        if not trailer.matches():
            raise SnapshotCorrupt("the snapshot stream does not match etcd's own checksum")
        await storage.complete_multipart(key, upload_id, [etags[n] for n in sorted(etags)])
    except BaseException:
        for task in in_flight:
            task.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)
        try:
            await asyncio.shield(storage.abort_multipart(key, upload_id))
        except Exception:
            pass  # the store may be down; stale uploads are aborted on the next run
        raise
    return UploadResult(size=total, sha256=whole.hexdigest(), parts=len(etags))
