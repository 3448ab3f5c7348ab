"""Streams a snapshot from etcd into an S3 multipart upload as it arrives.

A worker thread reads the gRPC stream, cuts it into parts and hashes them; the event loop
uploads the parts, at most `concurrency` at a time. Memory is bounded by
(concurrency + 1) parts: those in flight and the one being filled. Before the upload is completed, etcd's own
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
        # Parts are filled in place, exactly part_size long: no joining, no extra copy.
        part, filled = bytearray(self.part_size), 0
        try:
            for blob in self.stream:
                if self.stop.is_set():
                    return
                view = memoryview(blob)
                while view:
                    taken = min(len(view), self.part_size - filled)
                    part[filled:filled + taken] = view[:taken]
                    filled += taken
                    view = view[taken:]
                    if filled == self.part_size:
                        self._emit(part)
                        part, filled = bytearray(self.part_size), 0
            if filled or self.digest.size == 0:
                del part[filled:]
                self._emit(part)
        except BaseException as e:  # handed to the event loop
            self.error = e
        finally:
            self._put(_END)

    def _emit(self, part: bytearray) -> None:
        self.digest.update(part)
        self._put(part)
        # The next part is only started once this one has been taken for upload: at most
        # `concurrency` parts in flight plus the one being filled.
        while self.parts.unfinished_tasks and not self.stop.is_set():
            time.sleep(0.002)

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

    async def upload(number: int, data: bytearray) -> None:
        nonlocal sent
        try:
            etags[number] = await storage.upload_part(key, upload_id, number, data)
            sent += len(data)
            on_progress(sent)
        finally:
            del data  # before the slot is freed, so the next part never overlaps this one
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
            await slots.acquire()  # before taking a part, so no part waits here in memory
            for task in [t for t in in_flight if t.done()]:
                in_flight.discard(task)
                task.result()  # a failed part fails the upload at once
            item = await asyncio.to_thread(next_part, time.monotonic() + idle_timeout)
            if item is not None:
                parts.task_done()
            if item is None:
                raise EtcdError(getattr(stream, "endpoint", ""), "Snapshot", None,
                                f"no snapshot data for {idle_timeout:.0f}s")
            if item is _END:
                slots.release()
                break
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
