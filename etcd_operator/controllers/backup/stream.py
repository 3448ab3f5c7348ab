"""Streams a snapshot from etcd into an S3 multipart upload as it arrives.

A worker thread reads the gRPC stream and cuts it into parts; a second one hashes each part
in order, so the reader never waits on sha256; the event loop uploads the hashed parts, at
most `concurrency` at a time. Parts are filled in a fixed pool of
(concurrency + 1) buffers: those in flight and the one being filled. A buffer goes back to
the pool only when its upload call has returned, so memory is bounded by the pool and no
page is allocated per part. Before the upload is completed, etcd's own trailing checksum
is verified, so a corrupted stream never becomes a backup; a failure at any point aborts
the multipart upload.

The pool's buffers are drawn from the operator-wide memory budget (etcd_operator.core.buffer_budget):
the first one is waited for, later ones are taken only while the budget has room, else the
cutter reuses the buffers it has. All are given back when the upload ends.

With a sealing encoding (core/backup/sealed.py: zstd, AES-256-GCM) the reader thread
compresses and encrypts the stream as it cuts it; what that holds (Encoding.working_bytes)
is taken from the budget with the first buffer. etcd's checksum is checked on the plain
bytes and the sha256 taken of the stored ones."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import cast

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.clients.storage.s3 import S3Storage
from etcd_operator.core.backup import sealed
from etcd_operator.core.backup.digest import SnapshotDigest
from etcd_operator.core.buffer_budget import MemoryBudget, process_budget

_END = object()
_POLL_SECONDS = 0.5


class SnapshotCorrupt(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class UploadResult:
    size: int  # stored bytes
    sha256: str  # of the stored bytes
    parts: int
    plain_size: int  # the snapshot's own bytes


def _wait_get(source: queue.Queue, stop: threading.Event, deadline: float = math.inf) -> object | None:
    """The next item, or None once `stop` is set or the monotonic `deadline` has passed."""
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            return source.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            continue
    return None


class _PartCutter:
    """Runs in two worker threads: `run` reads the stream into parts, `hash_parts` hashes
    them in order and hands them on. A part is a pool buffer; the consumer hands it back
    through `free` once it is uploaded. Buffers are made on demand, so a small database
    never allocates the whole pool, and only while the memory budget has room: the first
    buffer was granted before the cutter started (`granted` = 1)."""

    def __init__(
        self,
        stream: Iterable[bytes],
        part_size: int,
        buffers: int,
        stop: threading.Event,
        budget: MemoryBudget,
        encoding: sealed.Encoding = sealed.PLAIN,
    ):
        self.part_size = part_size
        self.stop = stop
        self.budget = budget
        self.free: queue.Queue = queue.Queue()
        self.cut: queue.Queue = queue.Queue()  # parts read, not yet hashed
        self.parts: queue.Queue = queue.Queue()  # parts hashed, ready to upload
        self.digest = SnapshotDigest()  # of the stored bytes
        # etcd's trailing checksum is in the plain bytes: checked on them before they are sealed
        self.plain = SnapshotDigest() if encoding.sealed else self.digest
        self.stream = sealed.encode(self._plain(stream), encoding) if encoding.sealed else stream
        self.error: BaseException | None = None
        self._unmade = buffers
        self._cut_any = False
        self.granted = 1  # buffers' worth of budget this upload holds
        self._prepaid = True

    def run(self) -> None:
        try:
            part, filled = self._take_buffer(), 0
            for blob in self.stream:
                view = memoryview(blob)
                while view and part is not None:
                    taken = min(len(view), self.part_size - filled)
                    part[filled : filled + taken] = view[:taken]
                    filled += taken
                    view = view[taken:]
                    if filled == self.part_size:
                        self._emit(part, filled)
                        part, filled = self._take_buffer(), 0
                if part is None:
                    return  # stopped
            if part is None:
                return  # stopped before the first buffer
            if filled or not self._cut_any:
                self._emit(part, filled)
        except BaseException as e:  # handed to the event loop
            self.error = e
        finally:
            self.cut.put(_END)

    def _plain(self, stream: Iterable[bytes]) -> Iterable[bytes]:
        for blob in stream:
            self.plain.update(blob)
            yield blob

    def hash_parts(self) -> None:
        try:
            while (part := _wait_get(self.cut, self.stop)) not in (None, _END):
                self.digest.update(cast(bytearray, part))
                self.parts.put(part)
        except BaseException as e:
            self.error = self.error or e
        finally:
            self.parts.put(_END)

    def _take_buffer(self) -> bytearray | None:
        """A free buffer, a new one if the budget allows, else the next one handed back.
        None once stopped. Never waits for budget: at least one buffer is ours."""
        while not self.stop.is_set():
            try:
                return self.free.get_nowait()
            except queue.Empty:
                pass
            if self._unmade and (self._prepaid or self.budget.try_acquire(self.part_size)):
                self.granted += 0 if self._prepaid else 1
                self._prepaid = False
                self._unmade -= 1
                return bytearray(self.part_size)
            try:
                return self.free.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                continue
        return None

    def _emit(self, buffer: bytearray, length: int) -> None:
        if length < len(buffer):
            del buffer[length:]  # the last part: shrunk in place, never reused
        self._cut_any = True
        self.cut.put(buffer)


async def stream_to_s3(
    stream,
    storage: S3Storage,
    key: str,
    part_size: int,
    concurrency: int,
    on_progress: Callable[[int], None] = lambda sent: None,
    idle_timeout: float = 60.0,
    budget: MemoryBudget | None = None,
    upload_id: str | None = None,
    encoding: sealed.Encoding = sealed.PLAIN,
) -> UploadResult:
    """`stream` iterates the snapshot's bytes (blocking) and has `cancel()`. Waits for the
    memory budget (the operator-wide one unless given) before anything is read. `upload_id`:
    a multipart upload the caller started (and recorded) itself; otherwise one is started."""
    budget = budget or process_budget()
    try:
        await budget.acquire(part_size + encoding.working_bytes)
    except BaseException:
        stream.cancel()
        raise
    stop = threading.Event()
    cutter = _PartCutter(stream, part_size, concurrency + 1, stop, budget, encoding)
    try:
        return await _upload(stream, storage, key, concurrency, on_progress, idle_timeout, stop, cutter, upload_id)
    finally:
        budget.release(cutter.granted * part_size + encoding.working_bytes)


async def _upload(
    stream,
    storage: S3Storage,
    key: str,
    concurrency: int,
    on_progress: Callable[[int], None],
    idle_timeout: float,
    stop: threading.Event,
    cutter: _PartCutter,
    upload_id: str | None,
) -> UploadResult:
    upload_id = upload_id or await storage.start_multipart(key)
    workers = [
        threading.Thread(target=cutter.run, name=f"snapshot-{key}", daemon=True),
        threading.Thread(target=cutter.hash_parts, name=f"sha256-{key}", daemon=True),
    ]
    slots = asyncio.Semaphore(concurrency)
    uploaded: list[dict[str, str]] = []
    in_flight: set[asyncio.Task] = set()
    sent = 0

    async def upload(number: int, buffer: bytearray) -> None:
        nonlocal sent
        try:
            uploaded.append(await storage.upload_part(key, upload_id, number, buffer))
            sent += len(buffer)
            on_progress(sent)
            cutter.free.put(buffer)  # only after the upload call returned: nothing reads it now
        finally:
            slots.release()

    for worker in workers:
        worker.start()
    try:
        number = 0
        while True:
            await slots.acquire()
            for task in [t for t in in_flight if t.done()]:
                in_flight.discard(task)
                task.result()  # a failed part fails the upload at once
            item = await asyncio.to_thread(_wait_get, cutter.parts, stop, time.monotonic() + idle_timeout)
            if item is None:
                raise EtcdError(
                    getattr(stream, "endpoint", ""), "Snapshot", None, f"no snapshot data for {idle_timeout:.0f}s"
                )
            if item is _END:
                slots.release()
                break
            number += 1
            in_flight.add(asyncio.create_task(upload(number, cast(bytearray, item))))
            del item
        if cutter.error is not None:
            raise cutter.error
        await asyncio.gather(*in_flight)
        if not cutter.plain.etcd_checksum_matches:
            raise SnapshotCorrupt("the snapshot stream does not match etcd's own checksum")
        await storage.complete_multipart(key, upload_id, uploaded)
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
        for worker in workers:
            await asyncio.to_thread(worker.join, 10)
    return UploadResult(
        size=cutter.digest.size, sha256=cutter.digest.sha256, parts=number, plain_size=cutter.plain.size
    )
