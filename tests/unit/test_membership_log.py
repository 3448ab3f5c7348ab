"""The scenario tests' reader of etcd's own membership record (tests/support/etcd_probes)."""

from __future__ import annotations

import json

import pytest

from tests.support.etcd_probes import MembershipChange, MembershipLog, replay, voter_counts


def line(msg: str, local: str = "a", **fields) -> str:
    return json.dumps({"level": "info", "msg": msg, "local-member-id": local, **fields})


class Logs:
    def __init__(self):
        self.text: dict[str, str] = {}

    def append(self, pod: str, *lines: str) -> None:
        self.text[pod] = self.text.get(pod, "") + "".join(f"{entry}\n" for entry in lines)

    def read(self, namespace: str, pod: str, container: str) -> str:
        return self.text.get(pod, "")


def test_replays_only_what_was_applied_after_the_mark():
    logs = Logs()
    logs.append("c-0", line("added member", **{"added-peer-id": "b", "added-peer-is-learner": False}))
    membership = MembershipLog("ns", ["c-0"], logs.read).mark()
    logs.append(
        "c-0",
        "not json: a Go panic trace or a plain line",
        line("added member", **{"added-peer-id": "c", "added-peer-is-learner": True}),
        line("promote member", **{"promoted-member-id": "c"}),
        line("removed member", **{"removed-remote-peer-id": "b"}),
    )
    start = frozenset({(0xA, False), (0xB, False)})
    configurations = membership.configurations(start, frozenset({(0xA, False), (0xC, False)}))
    assert configurations == [
        start,
        frozenset({(0xA, False), (0xB, False), (0xC, True)}),
        frozenset({(0xA, False), (0xB, False), (0xC, False)}),
        frozenset({(0xA, False), (0xC, False)}),
    ]
    assert voter_counts(configurations) == [2, 3, 2]


def test_a_witness_that_restarted_or_left_is_not_believed():
    logs = Logs()
    membership = MembershipLog("ns", ["c-0", "c-1"], logs.read).mark()
    # c-0 restarted as another member; c-1 saw only part of the history.
    logs.append("c-0", line("starting", local="a"), line("starting", local="d"))
    logs.append("c-1", line("removed member", local="b", **{"removed-remote-peer-id": "c"}))
    start = frozenset({(0xA, False), (0xB, False), (0xC, False)})
    with pytest.raises(AssertionError, match="no member recorded every change"):
        membership.configurations(start, frozenset({(0xA, False)}))


def test_a_change_that_does_not_fit_is_refused():
    with pytest.raises(ValueError, match="does not fit"):
        replay(frozenset({(1, False)}), [MembershipChange("added", 1, True)])
    with pytest.raises(ValueError, match="does not fit"):
        replay(frozenset({(1, False)}), [MembershipChange("promoted", 1)])
    with pytest.raises(ValueError, match="does not fit"):
        replay(frozenset({(1, False)}), [MembershipChange("removed", 2)])
