"""One operator-wide budget for the bytes held in snapshot part buffers.

Every backup draws its part buffers from this budget, so all backups together never hold
more than `limit` bytes of parts, however many run at once. A backup waits (without
blocking the event loop) for its first buffer; further buffers are taken only when they
are free right now, so a backup that holds one buffer always makes progress by reusing
it, and backups never deadlock waiting for each other. Waiters are served in order.

Thread-safe: the snapshot reader thread takes extra buffers with `try_acquire`; waiting
happens on the event loop with `acquire`."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading

DEFAULT_LIMIT_BYTES = 48 << 20
# The Deployment's limit is 256Mi: the operator itself takes ~165 MiB managing a few clusters
# (boto3 loaded), 4 concurrent backups ~22 MiB beyond their parts; 48 MiB of parts leaves ~20 MiB.


class BudgetTooSmall(Exception):
    """One buffer is larger than the whole budget: it could never be granted."""


@dataclasses.dataclass
class _Waiter:
    size: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]


class MemoryBudget:
    def __init__(self, limit: int):
        if limit <= 0:
            raise ValueError("a memory budget is a positive number of bytes")
        self.limit = limit
        self._used = 0
        self._peak = 0
        self._lock = threading.Lock()
        self._waiters: collections.deque[_Waiter] = collections.deque()

    @property
    def used(self) -> int:
        return self._used

    @property
    def peak(self) -> int:
        """The most bytes ever granted at once (for tests and metrics)."""
        return self._peak

    def _take(self, size: int) -> None:
        self._used += size
        self._peak = max(self._peak, self._used)

    def check(self, size: int) -> None:
        if size > self.limit:
            raise BudgetTooSmall(
                f"a part of {size} bytes exceeds the operator's memory budget for part buffers "
                f"({self.limit} bytes, MEMORY_BUDGET_BYTES); use a smaller partSizeBytes"
            )

    def try_acquire(self, size: int) -> bool:
        """Takes `size` bytes if they are free now and nobody waits before us."""
        self.check(size)
        with self._lock:
            if self._waiters or self._used + size > self.limit:
                return False
            self._take(size)
            return True

    async def acquire(self, size: int) -> None:
        """Waits until `size` bytes are free, then takes them."""
        self.check(size)
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._waiters and self._used + size <= self.limit:
                self._take(size)
                return
            waiter = _Waiter(size, loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                    granted = False
                else:
                    granted = True
            if granted:
                self.release(size)  # granted just as we were cancelled: hand it on
            else:
                self._grant_waiters()  # we may have been blocking smaller waiters behind us
            raise

    def release(self, size: int) -> None:
        if size <= 0:
            return
        with self._lock:
            if size > self._used:
                raise RuntimeError(f"released {size} bytes while only {self._used} are taken")
            self._used -= size
        self._grant_waiters()

    def _grant_waiters(self) -> None:
        granted: list[_Waiter] = []
        with self._lock:
            while self._waiters and self._used + self._waiters[0].size <= self.limit:
                waiter = self._waiters.popleft()
                self._take(waiter.size)
                granted.append(waiter)
        for waiter in granted:
            waiter.loop.call_soon_threadsafe(_resolve, waiter.future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
    # a cancelled future's waiter gives the bytes back itself (see acquire)


_process_budget: MemoryBudget | None = None


def configure(limit: int) -> MemoryBudget:
    """Sets the operator-wide budget (at start-up, from OperatorConfig)."""
    global _process_budget
    _process_budget = MemoryBudget(limit)
    return _process_budget


def process_budget() -> MemoryBudget:
    """The operator-wide budget; the default one until `configure` was called."""
    global _process_budget
    if _process_budget is None:
        _process_budget = MemoryBudget(DEFAULT_LIMIT_BYTES)
    return _process_budget
