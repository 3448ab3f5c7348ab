"""How soon the next pass comes while a member is added or removed or after a certificate step
(cluster.pacing), and that the planner says when a learner is new."""

from __future__ import annotations

import pytest

from etcd_operator.core.cluster import pacing
from etcd_operator.core.cluster import steps as a
from tests.unit.cluster_scenarios import M, observed, spec
from tests.unit.test_cluster_planner import next_step


@pytest.mark.parametrize(
    "action, done, expected",
    [
        (a.RecordTransport("", "plaintext"), True, pacing.CHAIN_STEP),
        (a.BootstrapFirstMember("", "c-0"), True, pacing.POD_STARTING),
        (a.BootstrapMembers("", ("c-0", "c-1", "c-2"), ""), True, pacing.POD_STARTING),
        (a.AddLearner("", "c-1"), True, pacing.POD_STARTING),
        (a.AddLearner("", "c-1"), False, pacing.ADD_REFUSED),
        (a.CreateMemberPod("", "c-1", 1, "", joined_before=False), True, pacing.POD_STARTING),
        (a.SettleMemberPod("", "c-1", 1), True, pacing.CHAIN_STEP),
        (a.PromoteLearner("", "c-1", 1), True, pacing.CHAIN_STEP),
        (a.WaitForLearner("", 0.0), True, pacing.LEARNER_CATCHING_UP),
        (a.RemoveMember("", "c-1", 1), True, pacing.CHAIN_STEP),
        (a.DeleteMemberPod("", "c-1"), True, pacing.CHAIN_STEP),
        (a.DeleteMemberPVC("", "c-1"), True, pacing.CHAIN_STEP),
    ],
)
def test_a_membership_change_comes_back_sooner(action, done, expected):
    assert pacing.next_pass(action, done) == expected
    assert expected < 1.0  # the reconciler's default after a step


NEW_CLUSTER_CERTIFICATES = (("ca", ""), ("member", ""), ("operator", ""), ("client", ""))


@pytest.mark.parametrize(
    "action, done, expected",
    [
        (a.IssueCertificate("", NEW_CLUSTER_CERTIFICATES), True, pacing.CERTIFICATE_WRITTEN),
        (a.IssueCertificate("", (("operator", "renewing"),)), True, pacing.CERTIFICATE_WRITTEN),
        (a.SyncTrustBundle("", "member"), True, pacing.CERTIFICATE_WRITTEN),
    ],
)
def test_a_certificate_step_comes_back_sooner(action, done, expected):
    assert pacing.next_pass(action, done) == expected
    assert expected < 1.0  # the reconciler's default after a step


@pytest.mark.parametrize(
    "action, done",
    [
        (a.Steady(""), True),
        (a.IssueCertificate("", NEW_CLUSTER_CERTIFICATES), False),  # the CA Secret unreadable, or appeared since
        (a.UpdateCASecret("", "add-next"), True),  # members are rolled next, at the planner's pace
        (a.Wait("reconciliation is paused (spec.paused)"), True),
        (a.WaitForLearner("", pacing.NEW_LEARNER_WINDOW), True),  # stuck, not starting
        (a.CreateMemberPod("", "c-1", 1, "", joined_before=True), True),  # a restart on its data
        (a.SettleMemberPod("", "c-1", 1), False),
        (a.PromoteLearner("", "c-1", 1), False),  # a learner cut off from the leader is refused again and again
        (a.RemoveMember("", "c-1", 1), False),  # etcd refused: not safe yet
        (a.RollMember("", "c-1"), True),
        (a.BootstrapFirstMember("", "c-0"), False),
    ],
)
def test_everything_else_keeps_the_reconcilers_pace(action, done):
    assert pacing.next_pass(action, done) is None


def test_a_learner_catching_up_says_for_how_long():
    new = next_step(spec(5), observed([M(0), M(1), M(2, learner=True, healthy=False)]))
    assert isinstance(new, a.WaitForLearner) and new.catching_up_for == 0.0
    old = next_step(spec(5), observed([M(0), M(1), M(2, learner=True, healthy=False, unhealthy_for=12)]))
    assert isinstance(old, a.WaitForLearner) and old.catching_up_for == pytest.approx(12)
    assert pacing.next_pass(new, True) == pacing.LEARNER_CATCHING_UP
    assert pacing.next_pass(old, True) is None


def test_waits_right_after_a_bootstrap_come_sooner_for_a_bounded_time():
    started = 100.0
    assert pacing.members_starting(a.Wait("no member answered"), started, started + 1)
    assert not pacing.members_starting(a.Wait(""), started, started + pacing.BOOTSTRAP_WINDOW)
    assert not pacing.members_starting(a.Wait(""), None, started)  # this process started no bootstrap
    assert not pacing.members_starting(a.Steady(""), started, started + 1)
