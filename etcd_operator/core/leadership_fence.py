"""Whether this replica may act right now: the write fence of leader election. Pure: the
clock is injected, nothing here talks to Kubernetes.

Invariants:
- The right to act is measured on this process's monotonic clock from the moment a
  renewal was SENT, never from when its answer came back: valid until
  sent + stop_acting_seconds, and stop_acting_seconds < lease_seconds.
- A candidate counts another holder's lease as expired only after the Lease record has not
  changed for a full lease duration on the candidate's own monotonic clock. Wall clocks
  of different machines are never compared, so the holder's acting window always ends a
  margin (lease - stop_acting) before any candidate can take over.
- Losing the right to act is final for the process: a deadline that passed, a renewal
  that came back after the deadline, a lease taken by another replica. The process then
  exits and comes back as a standby.
- Every mutating Kubernetes and etcd call asks `permit_write` first; a refused call raises
  LeadershipLost and sends nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger(__name__)
# Every mutating call this replica lets through, at DEBUG (LOG_WRITES=true turns it on).
writes_logger = logging.getLogger("etcd_operator.writes")

Clock = Callable[[], float]


def monotonic_clock() -> float:
    """CLOCK_BOOTTIME where the platform has it: like CLOCK_MONOTONIC, but it also runs
    while the machine is suspended, so a suspended leader never thinks less time passed
    than its rivals saw."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


class LeadershipLost(Exception):
    """A mutating call was refused: this replica does not (or no longer) hold a valid lease."""


class WriteGuard(Protocol):
    def check(self, what: str) -> None:
        """Raises LeadershipLost unless this replica may act now."""

    def time_left(self) -> float:
        """Seconds this replica may still act (math.inf when unbounded)."""


class AlwaysActs:
    """The guard of a replica without leader election (LEADER_ELECTION=false, tests)."""

    def check(self, what: str) -> None:
        return None

    def time_left(self) -> float:
        return math.inf


@dataclasses.dataclass(frozen=True)
class LeaseTiming:
    lease_seconds: float = 15.0
    renew_every: float = 2.0
    stop_acting_seconds: float = 12.0  # after the last successful renewal was sent
    attempt_timeout: float = 5.0  # one renewal attempt (read + write of the Lease)

    def __post_init__(self) -> None:
        if not 0 < self.renew_every < self.stop_acting_seconds < self.lease_seconds:
            raise ValueError(
                "leader election needs 0 < renew period < stop-acting deadline < lease duration, got "
                f"{self.renew_every} / {self.stop_acting_seconds} / {self.lease_seconds} s"
            )
        if self.attempt_timeout <= 0:
            raise ValueError("a renewal attempt needs a positive timeout")


class LeaseClock:
    """This replica's right to act, from its own lease renewals. Also its WriteGuard."""

    def __init__(self, timing: LeaseTiming, clock: Clock = monotonic_clock):
        self.timing = timing
        self.now = clock
        self._valid_until: float | None = None
        self._ended: str | None = None

    @property
    def ended(self) -> str | None:
        """Why this replica may no longer act, once it may not; None while it may (or never did)."""
        self.may_act()
        return self._ended

    def renewed(self, sent_at: float) -> bool:
        """A renewal (or the acquisition) sent at `sent_at` succeeded. Returns whether this
        replica may act now. A renewal that comes back after the deadline revives nothing."""
        if self._ended is not None:
            return False
        if self._valid_until is not None and self.now() >= self._valid_until:
            self.end(f"a renewal came back {self.now() - self._valid_until:.1f}s after the stop-acting deadline")
            return False
        until = sent_at + self.timing.stop_acting_seconds
        self._valid_until = until if self._valid_until is None else max(self._valid_until, until)
        return self.may_act()

    def end(self, reason: str) -> None:
        if self._ended is None:
            self._ended = reason

    def may_act(self) -> bool:
        if self._ended is not None or self._valid_until is None:
            return False
        if self.now() >= self._valid_until:
            self.end(f"no successful renewal within {self.timing.stop_acting_seconds:g}s (the stop-acting deadline)")
            return False
        return True

    def time_left(self) -> float:
        if not self.may_act() or self._valid_until is None:
            return 0.0
        return self._valid_until - self.now()

    def check(self, what: str) -> None:
        if not self.may_act():
            reason = self._ended or "this replica has not acquired the lease"
            logger.error("refused %s: this replica may not act (%s)", what, reason)
            raise LeadershipLost(f"refused {what}: {reason}")

    def attempt_timeout(self) -> float:
        """How long the next renewal attempt may take: never past the deadline."""
        if self._valid_until is None:
            return self.timing.attempt_timeout  # acquiring: nothing to protect yet
        return max(0.0, min(self.timing.attempt_timeout, self.time_left()))

    def delay_before_next_attempt(self, last_attempt_sent: float) -> float:
        """Renew every `renew_every` from the previous attempt's start; wake no later than
        the deadline, so that a lapse is noticed at once."""
        delay = max(0.0, last_attempt_sent + self.timing.renew_every - self.now())
        if self._valid_until is not None:
            delay = min(delay, max(0.0, self._valid_until - self.now()))
        return delay


class RivalLease:
    """Another replica's lease seen from a candidate: expired once its record has not
    changed for `duration` seconds of the candidate's own clock, from the first time the
    candidate saw that record."""

    def __init__(self, clock: Clock = monotonic_clock):
        self.now = clock
        self._record: object = None
        self._since: float | None = None

    def seconds_until_expiry(self, record: object, duration: float) -> float:
        """`record` identifies one write of the Lease (its resourceVersion); <= 0 means expired."""
        if self._since is None or record != self._record:
            self._record, self._since = record, self.now()
        return self._since + duration - self.now()


_installed_write_guard: WriteGuard | None = None


def install_process_write_guard(guard: WriteGuard | None) -> None:
    """Set once at start-up by `python -m etcd_operator` when leader election is on; every
    client without a guard of its own asks this one. None (the default) allows every write."""
    global _installed_write_guard
    _installed_write_guard = guard


def process_write_guard() -> WriteGuard:
    return _installed_write_guard if _installed_write_guard is not None else AlwaysActs()


def permit_write(what: str, guard: WriteGuard | None = None) -> float:
    """Raises LeadershipLost unless `guard` (default: the process's) allows acting now;
    returns the seconds this replica may still act, to bound the call's own deadline."""
    guard = guard if guard is not None else process_write_guard()
    guard.check(what)
    left = guard.time_left()
    if left <= 0:  # the deadline fell between the check and now
        guard.check(what)
        raise LeadershipLost(f"refused {what}: the stop-acting deadline passed")
    writes_logger.debug("sending %s", what)
    return left
