"""The linearizability checker (e2e/testbin/porcupine) on crafted histories: it must refuse a
stale read, a lost acknowledged write and a read of a put before its call, and accept
concurrent operations, a put of unknown outcome that was read, and one that never was."""

from __future__ import annotations

from tests.support.history import NOT_LINEARIZABLE, Operation, check


def put(client, key, value, call, returned):
    return Operation(client, "put", key, value, call, returned)


def get(client, key, value, call, returned):
    return Operation(client, "get", key, value, call, returned)


def test_a_stale_read_is_not_linearizable():
    history = [
        put(0, "k", "a", 0, 10),
        put(0, "k", "b", 20, 30),
        get(1, "k", "b", 40, 50),
        get(2, "k", "a", 60, 70),
    ]  # "b" was read before: stale
    verdict = check(history)
    assert not verdict.linearizable and verdict.status == NOT_LINEARIZABLE, verdict.report
    assert 'key "k": NOT linearizable' in verdict.report
    assert 'client 2 get -> "a"' in verdict.report.split("fit nowhere")[1], verdict.report


def test_a_lost_acknowledged_write_is_not_linearizable():
    history = [put(0, "k", "a", 0, 10), get(1, "k", None, 20, 30)]
    verdict = check(history)
    assert verdict.status == NOT_LINEARIZABLE, verdict.report
    assert "get -> (absent)" in verdict.report


def test_a_put_of_unknown_outcome_cannot_be_read_before_its_call():
    history = [get(1, "k", "a", 0, 10), put(0, "k", "a", 20, None)]
    assert check(history).status == NOT_LINEARIZABLE


def test_concurrent_operations_and_unknown_outcomes_are_linearizable():
    history = [
        put(0, "k", "a", 0, 10),
        put(1, "k", "b", 15, 40),  # concurrent with both reads below
        get(2, "k", "b", 20, 30),  # the put took effect before it returned
        get(3, "k", "b", 35, 45),
        put(0, "k", "c", 50, None),  # unknown outcome, read later: it happened
        get(1, "k", "b", 60, 70),  # ...but not yet here
        get(2, "k", "c", 80, 90),
        put(3, "j", "x", 0, None),  # unknown outcome, never read: it may not have happened
        get(3, "j", None, 100, 110),
    ]
    verdict = check(history)
    assert verdict.linearizable, verdict.report
    assert "9 operations on 2 keys; 2 puts of unknown outcome, 1 of them never read" in verdict.report


def test_a_malformed_history_is_refused():
    verdict = check([Operation(0, "delete", "k", None, 0, 10)])
    assert verdict.status == 3 and "bad history" in verdict.report
