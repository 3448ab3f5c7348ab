"""The lease clock (the write fence of leader election), on an injected monotonic clock."""

from __future__ import annotations

import math

import pytest

from etcd_operator.core.leadership_fence import (
    AlwaysActs,
    LeadershipLost,
    LeaseClock,
    LeaseTiming,
    RivalLease,
    install_process_write_guard,
    permit_write,
    process_write_guard,
)

TIMING = LeaseTiming(lease_seconds=15, renew_every=2, stop_acting_seconds=12, attempt_timeout=5)


class FakeClock:
    def __init__(self, start: float = 1000.0):
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock():
    return FakeClock()


def leading(clock: FakeClock) -> LeaseClock:
    lease = LeaseClock(TIMING, clock)
    assert lease.renewed(clock())
    return lease


def test_timing_must_stop_acting_before_the_lease_ends():
    for lease, renew, stop in [(15, 2, 15), (15, 2, 16), (15, 12, 12), (15, 0, 12)]:
        with pytest.raises(ValueError):
            LeaseTiming(lease_seconds=lease, renew_every=renew, stop_acting_seconds=stop)


def test_no_right_to_act_before_the_first_renewal(clock):
    lease = LeaseClock(TIMING, clock)
    assert not lease.may_act()
    assert lease.ended is None  # never led: nothing was lost
    with pytest.raises(LeadershipLost):
        lease.check("POST /api/v1/pods")


def test_acting_window_runs_from_the_send_time_of_the_last_successful_renewal(clock):
    lease = leading(clock)
    clock.advance(11.9)
    assert lease.may_act() and lease.time_left() == pytest.approx(0.1)
    sent = clock()
    clock.advance(0.05)  # the renewal returns quickly
    assert lease.renewed(sent)
    assert lease.time_left() == pytest.approx(12 - 0.05)
    clock.advance(12 - 0.05)
    assert not lease.may_act()
    assert "stop-acting deadline" in lease.ended


def test_a_renewal_that_returns_late_counts_from_when_it_was_sent(clock):
    lease = leading(clock)
    clock.advance(2)
    sent = clock()
    clock.advance(9)  # slow, but back before the deadline of the previous renewal (at 12)
    assert lease.renewed(sent)
    assert lease.time_left() == pytest.approx(12 - 9)  # not 12: the window starts at the send


def test_a_renewal_that_returns_after_the_deadline_revives_nothing(clock):
    lease = leading(clock)
    clock.advance(2)
    sent = clock()
    clock.advance(10.5)  # back at 12.5, after the deadline at 12, nobody looked in between
    assert not lease.renewed(sent)
    assert not lease.may_act()
    assert "after the stop-acting deadline" in lease.ended


def test_resumed_after_a_freeze_longer_than_the_lease(clock):
    lease = leading(clock)
    clock.advance(1)
    sent = clock()  # a renewal is in flight when the process is frozen
    clock.advance(40)  # SIGSTOP ... SIGCONT
    with pytest.raises(LeadershipLost):
        lease.check("MemberAdd on 10.0.0.1:2379")  # the first thing after resuming is refused
    assert not lease.renewed(sent)  # the renewal that was in flight comes back: still over
    assert not lease.renewed(clock())  # and so is any later one: losing is final
    assert not lease.may_act() and lease.time_left() == 0


def test_losing_the_lease_ends_acting_at_once(clock):
    lease = leading(clock)
    lease.end("the lease is now held by b")
    assert not lease.may_act()
    assert not lease.renewed(clock())
    assert lease.ended == "the lease is now held by b"


def test_each_renewal_attempt_is_bounded_by_the_deadline(clock):
    lease = LeaseClock(TIMING, clock)
    assert lease.attempt_timeout() == 5  # acquiring
    lease.renewed(clock())
    assert lease.attempt_timeout() == 5
    clock.advance(9)
    assert lease.attempt_timeout() == pytest.approx(3)
    clock.advance(3)
    assert lease.attempt_timeout() == 0


def test_renewals_every_period_and_a_wake_up_no_later_than_the_deadline(clock):
    lease = leading(clock)
    sent = clock()
    clock.advance(0.5)
    assert lease.delay_before_next_attempt(sent) == pytest.approx(1.5)
    clock.advance(3)
    assert lease.delay_before_next_attempt(sent) == 0  # late: at once
    # Without success, renewals keep coming every period, and the last wake-up is the deadline.
    clock.advance(8.4)  # at 11.9
    assert lease.delay_before_next_attempt(clock() - 0.1) == pytest.approx(0.1)  # deadline at 12


def test_a_rival_lease_expires_only_after_it_stays_unchanged_for_a_full_duration(clock):
    rival = RivalLease(clock)
    assert rival.seconds_until_expiry("rv1", 15) == 15
    clock.advance(10)
    assert rival.seconds_until_expiry("rv1", 15) == 5
    assert rival.seconds_until_expiry("rv2", 15) == 15  # renewed: start over
    clock.advance(15)
    assert rival.seconds_until_expiry("rv2", 15) <= 0


def test_the_holder_stops_acting_before_any_rival_can_take_over(clock):
    """Whatever the delays, the leader's window (from the send) ends before a candidate that
    saw the renewal's record (written after the send) counts a full lease."""
    leader = leading(clock)
    rival = RivalLease(clock)
    for write_delay in (0.0, 0.5, 4.9):
        sent = clock()
        clock.advance(write_delay)  # the API server applies the renewal
        record = f"rv-{sent}"
        rival_expiry = clock() + rival.seconds_until_expiry(record, TIMING.lease_seconds)
        clock.advance(0.1)
        leader.renewed(sent)
        leader_deadline = clock() + leader.time_left()
        assert leader_deadline <= rival_expiry - (TIMING.lease_seconds - TIMING.stop_acting_seconds)


def test_permit_write_uses_the_installed_guard_and_allows_all_without_one(clock):
    assert isinstance(process_write_guard(), AlwaysActs)
    assert permit_write("DELETE /api/v1/namespaces/x/pods/y") == math.inf
    lease = leading(clock)
    try:
        install_process_write_guard(lease)
        assert permit_write("PATCH x") == pytest.approx(12)
        clock.advance(12)
        with pytest.raises(LeadershipLost):
            permit_write("PATCH x")
        assert permit_write("PATCH x", guard=AlwaysActs()) == math.inf  # an explicit guard wins
    finally:
        install_process_write_guard(None)
    assert isinstance(process_write_guard(), AlwaysActs)
