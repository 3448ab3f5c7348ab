"""Bounded polling: tests wait on conditions, never on fixed sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

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


def holds_throughout(
    check: Callable[[], object], seconds: float, interval: float = 1.0, what: str = "invariant"
) -> int:
    """Calls check() every interval for a bounded observation window; an AssertionError
    from check() fails at once. For "X never happens" properties. Returns the number of checks."""
    deadline = time.monotonic() + seconds
    checks = 0
    while True:
        try:
            check()
        except AssertionError as e:
            raise AssertionError(f"{what}: violated after {checks} good checks: {e}") from None
        checks += 1
        if time.monotonic() >= deadline:
            return checks
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def wait_for_holding(
    predicate: Callable[[], T],
    invariant: Callable[[], object],
    timeout: float,
    interval: float = 1.0,
    what: str = "condition",
) -> T:
    """Like wait_for, but invariant() runs before every poll and an AssertionError (from
    either) fails at once, so damage is reported when it happens instead of being waited
    out. Other errors only mean "could not look this time"."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            invariant()
            result = predicate()
            if result:
                return result
        except AssertionError:
            raise
        except Exception as e:  # could not look this time (the object may not exist yet)
            last_error = e
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout:.0f}s (last error: {last_error})")
        time.sleep(interval)
