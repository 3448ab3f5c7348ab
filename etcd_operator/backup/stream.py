"""Streams a snapshot from etcd into an S3 multipart upload as it arrives.

A worker thread reads the gRPC stream, cuts it into parts and hashes them; the event loop
uploads the parts, at most `concurrency` at a time. Memory is bounded: the parts in
flight, one waiting and one being filled. Before the upload is completed, etcd's own
trailing checksum is verified, so a corrupted stream never becomes a backup; a failure
at any point aborts the multipart upload."""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
import time
from typing import Callable, Iterable

from etcd_operator.backup.digest import SnapshotDigest
from etcd_operator.etcd.client import EtcdError
from etcd_operator.storage.s3 import S3Storage

_END = object()


class SnapshotCorrupt(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class UploadResult:
    size: int
    sha256: str
    parts: int


class _PartCutter:
    """Runs in a worker thread: stream in, hashed parts out through a bounded queue."""

    def __init__(self, stream: Iterable[bytes], part_size: int, parts: queue.Queue, stop: threading.Event):
        self.stream = stream
        self.part_size = part_size
        self.parts = parts
        self.stop = stop
        self.digest = SnapshotDigest()
        self.error: BaseException | None = None

    def run(self) -> None:
        pending: list[bytes] = []
        pending_bytes = 0
        try:
            for blob in self.stream:
                if self.stop.is_set():
                    return
                pending.append(blob)
                pending_bytes += len(blob)
                if pending_bytes >= self.part_size:
                    self._emit(b"".join(pending))
                    pending.clear()
                    pending_bytes = 0
            if pending_bytes or self.digest.size == 0:
                self._emit(b"".join(pending))
        except BaseException as e:  # handed to the event loop
            self.error = e
        finally:
            self._put(_END)

    def _emit(self, part: bytes) -> None:
        self.digest.update(part)
        self._put(part)

    def _put(self, item: object) -> None:
        while not self.stop.is_set():
            try:
                self.parts.put(item, timeout=0.5)
                return
            except queue.Full:
                continue


async def stream_to_s3(
    stream,
    storage: S3Storage,
    key: str,
    part_size: int,
    concurrency: int,
    on_progress: Callable[[int], None] = lambda sent: None,
    idle_timeout: float = 60.0,
) -> UploadResult:
    """`stream` iterates the snapshot's bytes (blocking) and has `cancel()`."""
    upload_id = await storage.start_multipart(key)
    parts: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()
    cutter = _PartCutter(stream, part_size, parts, stop)
    worker = threading.Thread(target=cutter.run, name=f"snapshot-{key}", daemon=True)
    slots = asyncio.Semaphore(concurrency)
    etags: dict[int, str] = {}
    in_flight: set[asyncio.Task] = set()
    sent = 0

    async def upload(number: int, data: bytes) -> None:
        nonlocal sent
        try:
            etags[number] = await storage.upload_part(key, upload_id, number, data)
            sent += len(data)
            on_progress(sent)
        finally:
            slots.release()

    def next_part(deadline: float) -> object:
        while time.monotonic() < deadline:
            try:
                return parts.get(timeout=0.5)
            except queue.Empty:
                continue
        return None

    worker.start()
    try:
        number = 0
        while True:
            item = await asyncio.to_thread(next_part, time.monotonic() + idle_timeout)
            if item is None:
                raise EtcdError(getattr(stream, "endpoint", ""), "Snapshot", None,
                                f"no snapshot data for {idle_timeout:.0f}s")
            if item is _END:
                break
            await slots.acquire()
            for task in [t for t in in_flight if t.done()]:
                in_flight.discard(task)
                task.result()  # a failed part fails the upload at once
            number += 1
            in_flight.add(asyncio.create_task(upload(number, item)))
            del item
        if cutter.error is not None:
            raise cutter.error
        await asyncio.gather(*in_flight)
        if not cutter.digest.etcd_checksum_matches:
            raise SnapshotCorrupt("the snapshot stream does not match etcd's own checksum")
        await storage.complete_multipart(key, upload_id, [etags[n] for n in sorted(etags)])
    except BaseException:
        stop.set()
        stream.cancel()
        for task in in_flight:
            task.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)
        try:
            await asyncio.shield(storage.abort_multipart(key, upload_id))
        except Exception:
            pass  # the store may be down; stale uploads are aborted before the next run
        raise
    finally:
        stop.set()
        await asyncio.to_thread(worker.join, 10)
    return UploadResult(size=cutter.digest.size, sha256=cutter.digest.sha256, parts=len(etags))
