"""The part cutter between the snapshot stream and the multipart upload, against an
in-memory store: parts, buffer reuse, bounds and aborts. The real path (etcd, MinIO) is
covered in tests/nodes/host_operator/test_backup.py."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading

import pytest

from etcd_operator.controllers.backup import stream as stream_module
from etcd_operator.controllers.backup.stream import SnapshotCorrupt, stream_to_s3
from etcd_operator.core.backup import digest
from etcd_operator.core.buffer_budget import BudgetTooSmall, MemoryBudget

PART = 64 * 1024


def snapshot_bytes(size: int) -> bytes:
    db = os.urandom(size)
    return db + hashlib.sha256(db).digest()  # etcd appends the database's sha256


class FakeStream:
    def __init__(self, data: bytes, chunk: int = 32 * 1024):
        self.chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
        self.cancelled = False

    def __iter__(self):
        for chunk in self.chunks:
            if self.cancelled:
                raise RuntimeError("cancelled")
            yield chunk

    def cancel(self) -> None:
        self.cancelled = True


class MemoryStore:
    """Records what each part held when its upload call returned, after yielding mid-call
    so a buffer refilled too early would show."""

    def __init__(self, fail_part: int | None = None):
        self.parts: dict[int, bytes] = {}
        self.completed: list[dict] | None = None
        self.aborted = False
        self.in_flight = 0
        self.max_in_flight = 0
        self.buffers: set[int] = set()
        self.fail_part = fail_part

    async def start_multipart(self, key: str) -> str:
        return "upload-1"

    async def upload_part(self, key: str, upload_id: str, number: int, data: bytearray) -> dict:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.buffers.add(id(data))
        try:
            first = bytes(data)
            await asyncio.sleep(0.01)
            if number == self.fail_part:
                raise OSError("connection reset")
            assert bytes(data) == first, f"part {number} changed while it was being uploaded"
            self.parts[number] = first
            return {"PartNumber": number, "ETag": f"etag-{number}"}
        finally:
            self.in_flight -= 1

    async def complete_multipart(self, key: str, upload_id: str, parts: list[dict]) -> None:
        self.completed = parts

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        self.aborted = True

    def object(self) -> bytes:
        return b"".join(self.parts[n] for n in sorted(self.parts))


@pytest.mark.parametrize("size", [0, 100, PART - 32, PART * 3 - 32, PART * 20 + 1234])
async def test_parts_are_exact_and_the_object_is_the_stream(size):
    data = snapshot_bytes(size)
    store = MemoryStore()
    result = await stream_to_s3(FakeStream(data), store, "k", PART, concurrency=2)
    assert store.object() == data
    assert all(len(store.parts[n]) == PART for n in sorted(store.parts)[:-1])
    assert [p["PartNumber"] for p in store.completed] == list(range(1, len(store.parts) + 1))
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert result.size == len(data) and result.parts == len(store.parts)


@pytest.mark.parametrize("concurrency", [1, 2, 4])
async def test_at_most_concurrency_uploads_and_one_filling_buffer(concurrency):
    store = MemoryStore()
    await stream_to_s3(FakeStream(snapshot_bytes(PART * 30)), store, "k", PART, concurrency)
    assert store.max_in_flight <= concurrency
    # Full parts come from a fixed pool; only the short last part may be a new object.
    assert len(store.buffers) <= concurrency + 2


async def test_a_stream_that_fails_etcds_checksum_is_aborted_not_completed():
    data = bytearray(snapshot_bytes(PART * 5))
    data[PART * 2] ^= 0xFF
    store = MemoryStore()
    with pytest.raises(SnapshotCorrupt):
        await stream_to_s3(FakeStream(bytes(data)), store, "k", PART, concurrency=2)
    assert store.aborted and store.completed is None


async def test_a_failed_part_aborts_the_upload_and_stops_the_reader():
    stream = FakeStream(snapshot_bytes(PART * 40))
    store = MemoryStore(fail_part=3)
    with pytest.raises(OSError):
        await stream_to_s3(stream, store, "k", PART, concurrency=2)
    assert store.aborted and store.completed is None and stream.cancelled


# --- the operator-wide memory budget ----------------------------------------------------


async def test_concurrent_uploads_never_hold_more_than_the_budget():
    budget = MemoryBudget(PART * 4)
    stores = [MemoryStore() for _ in range(5)]
    datas = [snapshot_bytes(PART * 12 + i) for i in range(5)]
    results = await asyncio.gather(
        *(
            stream_to_s3(FakeStream(d), st, "k", PART, concurrency=3, budget=budget)
            for d, st in zip(datas, stores, strict=True)
        )
    )
    assert [st.object() for st in stores] == datas
    assert all(r.size == len(d) for r, d in zip(results, datas, strict=True))
    assert budget.peak <= budget.limit
    assert budget.peak > PART  # several uploads did run at once
    assert budget.used == 0  # everything was given back


async def test_budget_is_given_back_after_a_failed_upload():
    budget = MemoryBudget(PART * 2)
    with pytest.raises(OSError):
        await stream_to_s3(
            FakeStream(snapshot_bytes(PART * 10)), MemoryStore(fail_part=3), "k", PART, concurrency=2, budget=budget
        )
    assert budget.used == 0


async def test_a_part_larger_than_the_budget_is_refused_before_anything_starts():
    budget = MemoryBudget(PART - 1)
    store, stream = MemoryStore(), FakeStream(snapshot_bytes(PART * 2))
    with pytest.raises(BudgetTooSmall):
        await stream_to_s3(stream, store, "k", PART, concurrency=2, budget=budget)
    assert stream.cancelled and store.parts == {} and budget.used == 0


async def test_budget_waiters_are_served_in_order_and_a_cancelled_waiter_leaves_nothing_taken():
    budget = MemoryBudget(10)
    await budget.acquire(8)
    order: list[str] = []

    async def take(name: str, size: int) -> None:
        await budget.acquire(size)
        order.append(name)

    first = asyncio.create_task(take("first", 5))
    cancelled = asyncio.create_task(take("cancelled", 5))
    second = asyncio.create_task(take("second", 2))
    await asyncio.sleep(0)
    assert not budget.try_acquire(1)  # someone waits: no overtaking
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    budget.release(8)
    await asyncio.gather(first, second)
    assert order == ["first", "second"] and budget.used == 7
    budget.release(7)
    assert budget.used == 0 and budget.try_acquire(10)


async def test_budget_released_from_another_thread_wakes_the_waiter():
    budget = MemoryBudget(4)
    assert budget.try_acquire(4)
    waiter = asyncio.create_task(budget.acquire(3))
    await asyncio.sleep(0)
    await asyncio.to_thread(budget.release, 4)
    await asyncio.wait_for(waiter, 5)
    assert budget.used == 3


def test_a_backup_whose_part_exceeds_the_budget_fails_for_good_and_is_not_retried():
    from etcd_operator.controllers.backup.failure import as_failure

    failure = as_failure(BudgetTooSmall("a part of 64 MiB exceeds the budget"))
    assert failure.permanent and failure.reason == "MemoryBudgetTooSmall"


def test_the_budget_is_read_from_the_environment_with_a_default():
    from etcd_operator.core.buffer_budget import DEFAULT_LIMIT_BYTES
    from etcd_operator.runtime.config import OperatorConfig

    assert OperatorConfig.from_env({}).memory_budget_bytes == DEFAULT_LIMIT_BYTES
    assert OperatorConfig.from_env({"MEMORY_BUDGET_BYTES": "16777216"}).memory_budget_bytes == 16 << 20


def test_the_reader_keeps_reading_while_a_part_is_being_hashed(monkeypatch):
    """sha256 runs in its own thread: while the first part's hash is held up, the reader
    still fills the pool's other buffers from the stream."""
    hashing = threading.Event()
    release = threading.Event()
    original = digest.SnapshotDigest.update

    def slow_update(self, data):
        hashing.set()
        assert release.wait(10), "the hash was never released"
        original(self, data)

    monkeypatch.setattr(digest.SnapshotDigest, "update", slow_update)
    data = snapshot_bytes(PART * 3 - 32)
    consumed = []

    class WatchedStream(FakeStream):
        def __iter__(self):
            for chunk in super().__iter__():
                consumed.append(len(chunk))
                yield chunk

    watched = WatchedStream(data)
    stop = threading.Event()
    cutter = stream_module._PartCutter(watched, PART, 4, stop, MemoryBudget(PART * 4))
    reader = threading.Thread(target=cutter.run)
    hasher = threading.Thread(target=cutter.hash_parts)
    reader.start()
    hasher.start()
    try:
        assert hashing.wait(10)
        reader.join(5)
        assert not reader.is_alive(), "the reader waited for the hash"
        assert sum(consumed) == len(data)
    finally:
        release.set()
        hasher.join(10)
        stop.set()
    parts = []
    while (item := cutter.parts.get(timeout=1)) is not stream_module._END:
        parts.append(bytes(item))
    assert b"".join(parts) == data and cutter.digest.sha256 == hashlib.sha256(data).hexdigest()
