"""Hashing a downloaded snapshot in a worker thread while the next chunk downloads keeps
the chunks in order and stops at the first failure."""

from __future__ import annotations

import asyncio
import hashlib
import threading

import pytest

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
