"""Bounded polling: tests wait on conditions, never on fixed sleeps."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, interval: float = 0.5, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except Exception as e:  # the object may not exist yet
            last_error = e
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout:.0f}s (last error: {last_error})")
        time.sleep(interval)
