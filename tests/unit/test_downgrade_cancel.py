"""A downgrade whose spec went back to the higher minor is cancelled (CancelDowngrade), but
never in place of a step the planner chose to keep or regain quorum, members or data, and
without a reachable leader (etcd's cancel goes to the leader) the pass just waits."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.core.cluster import builders
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.spec import ClusterSpec
from tests.unit.cluster_scenarios import M, decide_accepting, observed, recorded

# Back on 3.6 while etcd's downgrade to 3.5 is enabled (status.downgrade.target).
REVERTED = {
    "size": 3,
    "version": "3.6.16",
    "recovery": {"memberUnhealthyTimeout": "60s", "quorumLossTimeout": "30s", "automaticQuorumRecovery": True},
    "etcd": {"quotaBackendBytes": 128 * 1024 * 1024},
}
CURRENT = builders.pod_spec_hash(ClusterSpec.from_dict(REVERTED))
NOSPACE = ((0x100, "NOSPACE"),)
DOWNGRADING = recorded(downgrade_target="3.5")  # what status records while the downgrade is enabled


def downgrading(o: Observed, outdated: set[str] = frozenset()) -> Observed:
    pods = {
        name: dataclasses.replace(p, spec_hash="old" if name in outdated else CURRENT) for name, p in o.pods.items()
    }
    return dataclasses.replace(o, pods=pods, cluster_version="3.5.0")


ROWS = [
    # (name, observed, the step expected)
    (
        "quorum_recovery_goes_first",
        downgrading(observed([M(0), M(1, healthy=False), M(2, healthy=False)], leader=None, no_quorum_for=600)),
        a.BeginQuorumRecovery,
    ),
    (
        "without_a_leader_the_cancel_waits",
        downgrading(observed([M(0), M(1, healthy=False), M(2, healthy=False)], leader=None, no_quorum_for=5)),
        a.Wait,
    ),
    (
        "a_failed_pod_is_restarted_first",
        downgrading(observed([M(0), M(1), M(2, healthy=False, pod_phase="Failed")])),
        a.RestartFailedPod,
    ),
    (
        "a_lost_pod_is_recreated_first",
        downgrading(observed([M(0), M(1), M(2, healthy=False, pod=False)])),
        a.CreateMemberPod,
    ),
    (
        "a_failed_member_is_replaced_first",
        downgrading(observed([M(0), M(1), M(2, healthy=False, unhealthy_for=600)])),
        a.RemoveMember,
    ),
    ("nospace_is_remediated_first", downgrading(observed([M(0), M(1), M(2)], alarms=NOSPACE)), a.BeginSpaceRecovery),
    # Ordinary steps wait for the cancel: the roll back up starts once etcd's downgrade is off.
    ("a_healthy_cluster_cancels", downgrading(observed([M(0), M(1), M(2)])), a.CancelDowngrade),
    ("a_roll_waits_for_the_cancel", downgrading(observed([M(0), M(1), M(2)]), outdated={"c-2"}), a.CancelDowngrade),
]


@pytest.mark.parametrize("name,o,expected", ROWS, ids=[r[0] for r in ROWS])
def test_a_downgrade_cancel_never_displaces_a_safety_step(name, o, expected):
    action = decide_accepting(ClusterSpec.from_dict(REVERTED), o, REVERTED, DOWNGRADING).action
    assert type(action) is expected, f"{action.kind}: {action.reason}"


def test_without_a_leader_the_pass_says_the_cancel_waits():
    o = downgrading(observed([M(0), M(1, healthy=False), M(2, healthy=False)], leader=None, no_quorum_for=5))
    action = decide_accepting(ClusterSpec.from_dict(REVERTED), o, REVERTED, DOWNGRADING).action
    assert "cancelling the downgrade to 3.5 waits for a reachable leader" in action.reason
