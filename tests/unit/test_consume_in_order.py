"""Hashing a downloaded snapshot in a worker thread while the next chunk downloads keeps
the chunks in order and stops at the first failure."""

from __future__ import annotations

import asyncio
import hashlib
import threading

import pytest

from etcd_operator.backup import verify
from etcd_operator.backup.verify import consume_in_order


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
        return self.data[offset:offset + length]


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
