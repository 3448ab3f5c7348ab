"""Hashing a downloaded snapshot in a worker thread while the next chunk downloads keeps
the chunks in order and stops at the first failure."""

from __future__ import annotations

import asyncio
import hashlib
import threading

import pytest

from etcd_operator.controllers.backup import snapshot_integrity as verify
from etcd_operator.controllers.backup.snapshot_integrity import consume_in_order
from etcd_operator.core.buffer_budget import MemoryBudget
from tests.unit.test_snapshot_upload import snapshot_bytes


async def chunks(n: int, fail_at: int | None = None):
    for i in range(n):
        if i == fail_at:
            raise ConnectionError("store gone")
        await asyncio.sleep(0)
        yield bytes([i]) * (1000 + i)


def test_every_chunk_is_taken_in_order_off_the_event_loop():
    seen, threads = [], set()

    def sink(chunk: bytes) -> None:
        threads.add(threading.current_thread())
        seen.append(chunk)

    asyncio.run(consume_in_order(chunks(50), sink))
    assert seen == [bytes([i]) * (1000 + i) for i in range(50)]
    assert threading.main_thread() not in threads
    whole = hashlib.sha256(b"".join(seen)).hexdigest()
    assert whole == hashlib.sha256(b"".join(bytes([i]) * (1000 + i) for i in range(50))).hexdigest()


def test_a_failed_download_fails_after_the_chunk_in_hand_is_taken():
    seen = []
    with pytest.raises(ConnectionError):
        asyncio.run(consume_in_order(chunks(10, fail_at=4), seen.append))
    assert seen == [bytes([i]) * (1000 + i) for i in range(4)]


class RangedStore:
    """Answers ranged reads of one object, out of order, and counts the reads in flight."""

    def __init__(self, data: bytes):
        self.data = data
        self.in_flight = 0
        self.most_in_flight = 0

    async def read_range(self, key: str, offset: int, length: int) -> bytes:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.001 * (7 - offset // verify.RANGE_BYTES % 7))  # later ranges may finish first
        self.in_flight -= 1
        return self.data[offset : offset + length]


def test_ranged_reads_come_back_in_order_with_a_few_in_flight():
    data = bytes(range(256)) * (verify.RANGE_BYTES * 9 // 256 + 3)  # 9 full ranges and a short one
    store = RangedStore(data)
    seen = []
    asyncio.run(consume_in_order(verify.ranged_chunks(store, "k", len(data)), seen.append))
    assert b"".join(seen) == data and len(seen) == 10
    assert 1 < store.most_in_flight <= verify.RANGES_IN_FLIGHT


def test_an_object_that_shrinks_while_read_is_refused():
    data = bytes(verify.RANGE_BYTES * 2)
    store = RangedStore(data[:-1])
    with pytest.raises(verify.VerificationFailed) as failed:
        asyncio.run(consume_in_order(verify.ranged_chunks(store, "k", len(data)), lambda chunk: None))
    assert failed.value.reason == "ChecksumMismatch"


class BudgetedStore(RangedStore):
    """Also answers the object's size, and records the budget held during each read."""

    def __init__(self, data: bytes, budget: MemoryBudget):
        super().__init__(data)
        self.budget = budget
        self.held_while_reading: set[int] = set()

    async def size(self, key: str) -> int:
        return len(self.data)

    async def read_range(self, key: str, offset: int, length: int) -> bytes:
        self.held_while_reading.add(self.budget.used)
        return await super().read_range(key, offset, length)


def test_verification_reads_hold_their_memory_in_the_budget_and_give_it_back():
    budget = MemoryBudget(48 << 20)
    store = BudgetedStore(snapshot_bytes(3 * verify.RANGE_BYTES), budget)
    asyncio.run(verify.verify_snapshot(store, "k", None, budget))
    assert store.held_while_reading == {verify.RANGE_BYTES * verify.CHUNKS_HELD}
    assert budget.used == 0
    whole = snapshot_bytes(3 * verify.RANGE_BYTES)
    # The last byte flipped, never set: a random digest ends in any given byte 1 time in 256.
    broken = BudgetedStore(whole[:-1] + bytes([whole[-1] ^ 0xFF]), budget)
    with pytest.raises(verify.VerificationFailed):
        asyncio.run(verify.verify_snapshot(broken, "k", None, budget))
    assert budget.used == 0


def test_verification_waits_for_the_budget_a_backup_holds():
    async def scenario():
        budget = MemoryBudget(32 << 20)
        await budget.acquire(24 << 20)  # a backup's part buffers
        store = BudgetedStore(snapshot_bytes(2 * verify.RANGE_BYTES), budget)
        verifying = asyncio.ensure_future(verify.verify_snapshot(store, "k", None, budget))
        await asyncio.sleep(0.05)
        assert not verifying.done() and not store.held_while_reading
        budget.release(24 << 20)
        await verifying
        assert max(store.held_while_reading) <= budget.limit

    asyncio.run(scenario())


def test_a_small_budget_reads_in_smaller_ranges():
    assert verify.range_size(48 << 20) == verify.RANGE_BYTES
    assert verify.range_size(8 << 20) == 2 << 20
    assert verify.range_size(5 << 20) == 1 << 20
    assert verify.range_size(3 << 20) == verify.MIN_RANGE_BYTES
