"""The data-safety rules of the cluster's pure core: alarms, evidence of quorum loss,
failed and starting pods, reverted rolls, foreign answers, the PDB and the step table."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.core.cluster import builders
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import HealthState, quorum_loss_timeout
from etcd_operator.core.cluster.identity import split_foreign
from etcd_operator.core.cluster.observed import MemberStatus
from etcd_operator.core.cluster.status import cluster_conditions
from etcd_operator.core.cluster.timers import Sightings, carry_timers
from tests.unit.cluster_scenarios import HASH, NOW, RECORDED, M, health_of, observed, plan_accepting, recorded, spec

NOSPACE = ((0x100, "NOSPACE"),)
IN_PLACE_SPACE_STEPS = (a.Wait, a.BeginSpaceRecovery, a.CompactRevisions, a.DefragmentForSpace, a.DisarmNoSpaceAlarm)


def next_step(s, o, st=RECORDED, recovery_allowed=False):
    return plan_accepting(s, o, health_of(s, o, st), st, desired_hash=HASH, recovery_allowed=recovery_allowed)


def auto_recovery(size=3):
    s = spec(size)
    return dataclasses.replace(s, recovery=dataclasses.replace(s.recovery, automatic_quorum_recovery=True))


# --- alarms -------------------------------------------------------------------------


def test_a_member_that_answers_with_an_alarm_is_alive():
    o = observed([M(0), M(1), M(2)], alarms=NOSPACE)
    health = health_of(spec(3), o)
    assert health.state == HealthState.NO_SPACE
    assert len(health.healthy_voters) == 3 and health.has_quorum
    assert health.alarm_names == ("NOSPACE",)


def test_nospace_never_removes_replaces_or_recovers():
    s = auto_recovery(3)
    # Even with a member long unhealthy and a learner stuck, an alarm holds everything.
    o = observed([M(0), M(1), M(2, healthy=False, unhealthy_for=10_000)], alarms=NOSPACE, no_quorum_for=10_000)
    step = next_step(s, o, recovery_allowed=True)
    # Only in-place remediation (tests/unit/test_space.py walks it through).
    assert isinstance(step, IN_PLACE_SPACE_STEPS), step
    assert not step.changes_membership


def test_nospace_does_not_remove_a_member_whose_data_is_gone():
    o = observed([M(0), M(1), M(2, pod=False, pvc=False)], alarms=NOSPACE)
    step = next_step(spec(3), o)
    assert not isinstance(step, a.RemoveMember)


def test_nospace_sets_the_alarm_condition_and_keeps_quorum_lost_false():
    s, o = spec(3), observed([M(0), M(1), M(2)], alarms=NOSPACE)
    health = health_of(s, o)
    conditions = {c.type: c for c in cluster_conditions(s, RECORDED, o, health, next_step(s, o), [])}
    assert conditions["Alarm"].status is True and conditions["Alarm"].reason == "NoSpace"
    assert conditions["QuorumLost"].status is False
    assert conditions["Available"].status is True


def test_corrupt_alarm_holds_everything():
    o = observed([M(0), M(1), M(2), M(3)], alarms=((0x101, "CORRUPT"),))
    assert health_of(spec(3), o).state == HealthState.CORRUPT
    assert isinstance(next_step(spec(3), o), a.Wait)


# --- quorum loss only on evidence ----------------------------------------------------


def test_a_reachable_member_that_reports_a_leader_means_quorum_may_hold():
    # The operator reaches only c-2, which follows the leader c-0 that the operator cannot reach.
    o = observed([M(0), M(1), M(2)], leader=0, reachable={2}, no_quorum_for=10_000)
    s = auto_recovery(3)
    health = health_of(s, o)
    assert health.state == HealthState.UNREACHABLE
    assert isinstance(next_step(s, o, recovery_allowed=True), a.Wait)


def test_unreachable_members_with_ready_pods_are_not_evidence_of_quorum_loss():
    o = observed([M(0), M(1), M(2)], leader=None, reachable={2}, no_quorum_for=10_000)
    # c-0 and c-1 do not answer the operator, but the kubelet finds their pods ready.
    assert health_of(auto_recovery(3), o).state == HealthState.UNREACHABLE


def test_the_quorum_loss_clock_does_not_start_without_evidence():
    o = observed([M(0), M(1), M(2)], leader=0, reachable={2})
    timed, seen = carry_timers(RECORDED, o, Sightings(at=997.0, quorum_loss_since=900.0), 1000.0)
    assert timed.no_quorum_for is None and seen.quorum_loss_since is None
    lost = observed([M(0), M(1, healthy=False), M(2, healthy=False)], leader=None)
    timed, seen = carry_timers(RECORDED, lost, Sightings(), 1000.0)
    assert timed.no_quorum_for == 0.0 and seen.quorum_loss_since == 1000.0


def test_the_quorum_loss_clock_is_this_process_own():
    # A new process starts from zero; a running one continues from what it saw itself.
    lost = observed([M(0), M(1, healthy=False), M(2, healthy=False)], leader=None)
    assert carry_timers(RECORDED, lost, Sightings(), 1000.0)[0].no_quorum_for == 0.0
    assert carry_timers(RECORDED, lost, Sightings(at=997.0, quorum_loss_since=970.0), 1000.0)[0].no_quorum_for == 30.0


def test_quorum_loss_with_evidence_and_approval_starts_recovery():
    o = observed([M(0), M(1, healthy=False), M(2, healthy=False)], leader=None, no_quorum_for=600)
    step = next_step(spec(3), o, recovery_allowed=True)
    assert isinstance(step, a.BeginQuorumRecovery) and step.member == "c-0"


def test_quorum_lost_while_a_learner_is_pending_still_reaches_recovery():
    members = [M(0), M(1, healthy=False), M(2, healthy=False), M(3, learner=True)]
    o = observed(members, leader=None, no_quorum_for=600)
    assert health_of(spec(3), o).state == HealthState.QUORUM_LOST
    step = next_step(spec(3), o, recovery_allowed=True)
    assert isinstance(step, a.BeginQuorumRecovery) and step.member == "c-0"


@pytest.mark.parametrize("configured, election_ms, floor", [(1.0, None, 11.0), (1.0, 5000, 15.0), (120.0, None, 120.0)])
def test_the_quorum_loss_timeout_has_a_floor(configured, election_ms, floor):
    s = spec(3)
    s = dataclasses.replace(
        s,
        recovery=dataclasses.replace(s.recovery, quorum_loss_timeout=configured),
        etcd=dataclasses.replace(s.etcd, election_timeout_ms=election_ms),
    )
    assert quorum_loss_timeout(s) == floor
    o = observed([M(0), M(1, healthy=False), M(2, healthy=False)], leader=None, no_quorum_for=floor - 0.5)
    assert health_of(s, o).state == HealthState.NO_QUORUM


# --- failed and starting pods ----------------------------------------------------------


# An evicted pod ends Failed (reason Evicted), or Succeeded when etcd exits 0 on the kubelet's
# SIGTERM: a 1.35 kubelet wrote Succeeded for the member evicted in tests/nodes/host_operator/test_evicted_member.py.
@pytest.mark.parametrize("phase", ["Failed", "Succeeded"])
def test_an_ended_pod_is_deleted_so_it_restarts_on_its_pvc(phase):
    o = observed([M(0), M(1, healthy=False, pod_phase=phase, unhealthy_for=10_000), M(2)])
    step = next_step(spec(3), o)
    assert step == a.RestartFailedPod(step.reason, "c-1")


def test_a_member_with_a_failed_pod_is_not_replaced_while_its_data_is_intact():
    o = observed([M(0), M(1, healthy=False, pod_phase="Failed", unhealthy_for=10_000), M(2)])
    failed_pod = dataclasses.replace(o.pods["c-1"], deleting=True)
    o = dataclasses.replace(o, pods={**o.pods, "c-1": failed_pod})
    step = next_step(spec(3), o)
    assert not isinstance(step, a.RemoveMember)


def test_a_member_inside_its_startup_budget_is_not_replaced():
    o = observed([M(0), M(1), M(2, healthy=False, starting=True, unhealthy_for=10_000)])
    step = next_step(spec(3), o)
    assert isinstance(step, a.Wait)
    running = observed([M(0), M(1), M(2, healthy=False, unhealthy_for=10_000)])
    assert isinstance(next_step(spec(3), running), a.RemoveMember)


def test_failed_pods_restart_even_when_no_member_answers():
    o = observed([M(0, healthy=False, pod_phase="Failed")], leader=None)
    step = next_step(spec(1), o)
    assert step == a.RestartFailedPod(step.reason, "c-0")


# --- a bad roll, reverted --------------------------------------------------------------


def test_a_reverted_bad_roll_is_rolled_back_on_size_one():
    # The only member crash-loops with the old (bad) pod spec; the spec was reverted.
    o = observed([M(0, healthy=False, outdated=True, waiting="CrashLoopBackOff")], leader=None)
    step = next_step(spec(1), o)
    assert step == a.RollMember(step.reason, "c-0")


def test_a_reverted_bad_roll_is_rolled_back_before_anything_is_replaced():
    o = observed([M(0), M(1), M(2, healthy=False, outdated=True, unhealthy_for=10_000, waiting="ImagePullBackOff")])
    step = next_step(spec(3), o)
    assert step == a.RollMember(step.reason, "c-2")


def test_an_outdated_member_that_runs_but_has_no_leader_yet_is_not_rolled():
    # Found by the simulator (seed 153): etcd runs, is not ready only because no leader is
    # elected yet; restarting it would take away a quorum that is forming.
    o = observed(
        [M(0, healthy=False, outdated=True), M(1, healthy=False, outdated=True), M(2, healthy=False, outdated=True)],
        leader=None,
    )
    assert not isinstance(next_step(spec(3), o), a.RollMember)


def test_a_broken_outdated_member_is_not_rolled_on_empty_dir():
    s = spec(1)
    s = dataclasses.replace(s, storage=dataclasses.replace(s.storage, empty_dir=True))
    o = observed([M(0, healthy=False, outdated=True, waiting="CrashLoopBackOff")], leader=None)
    assert not isinstance(next_step(s, o), a.RollMember)


# --- foreign answers, PDB, step table ------------------------------------------------


def _status(cluster_id: int, member_id: int) -> MemberStatus:
    return MemberStatus(cluster_id, member_id, member_id, "3.6.16", 1, 1, 1, 1, 1, 1, False, ())


def test_answers_from_another_cluster_are_not_trusted_once_an_id_is_recorded():
    answers = {"a:2379": _status(7, 1), "b:2379": _status(9, 2)}
    ours, foreign = split_foreign(answers, recorded=7)
    assert list(ours) == ["a:2379"] and foreign == {"b:2379": 9}
    assert split_foreign(answers, recorded=None) == (answers, {})


@pytest.mark.parametrize("size, voters, min_available", [(3, 5, 3), (5, 3, 3), (3, None, 2), (1, 3, 2)])
def test_the_disruption_budget_follows_the_current_voters(size, voters, min_available):
    pdb = builders.disruption_budget(spec(size), "c", "ns", voters)
    assert pdb["spec"]["minAvailable"] == min_available


def test_every_step_has_an_executor_handler():
    from etcd_operator.controllers.cluster.executor import ClusterExecutor

    executor = ClusterExecutor(
        None, None, {"metadata": {"name": "c", "namespace": "ns", "uid": "u"}}, None, status=RECORDED, now=NOW
    )
    steps = {cls for cls in vars(a).values() if isinstance(cls, type) and issubclass(cls, a.Step) and cls is not a.Step}
    assert steps == set(executor.handlers())


async def test_an_unknown_step_is_an_error_not_done():
    from etcd_operator.controllers.cluster.executor import ClusterExecutor

    @dataclasses.dataclass(frozen=True)
    class Unknown(a.Step):
        pass

    executor = ClusterExecutor(
        None, None, {"metadata": {"name": "c", "namespace": "ns", "uid": "u"}}, None, status=RECORDED, now=NOW
    )
    with pytest.raises(TypeError):
        await executor.run(Unknown("?"), spec(3), observed([M(0)]))


def test_a_leader_reported_by_a_reachable_member_holds_even_when_other_pods_are_not_ready():
    # c-0 follows c-1; the operator reaches only c-0, and the kubelet finds c-1 and c-2 not ready.
    o = observed([M(0), M(1, pod_ready=False), M(2, pod_ready=False)], leader=1, reachable={0}, no_quorum_for=10_000)
    s = auto_recovery(3)
    assert health_of(s, o).state == HealthState.UNREACHABLE
    assert carry_timers(RECORDED, o, Sightings(), 1000.0)[0].no_quorum_for is None
    assert isinstance(next_step(s, o, recovery_allowed=True), a.Wait)


def test_a_restore_in_progress_clears_the_cluster_identity_and_any_recovery():
    from etcd_operator.core.cluster.planner import QUORUM_RECOVERY
    from etcd_operator.core.cluster.recorded import Operation
    from etcd_operator.core.cluster.status import build_status

    s = spec(3)
    o = observed([])
    st = recorded(bootstrapped=True, operation=Operation(QUORUM_RECOVERY, "c-0", 0x100, 0))
    o = dataclasses.replace(o, restoring="r1", pods={}, pvcs={})
    health = health_of(s, o, st)
    step = next_step(s, o, st)
    assert isinstance(step, a.Wait)
    status = build_status(s, st, o, NOW, health, step, [], {"clusterID": "1"}, 1)
    assert status["clusterID"] is None and status["operation"] is None


def test_a_crash_looping_member_is_not_taken_for_a_starting_one():
    o = observed([M(0), M(1), M(2, healthy=False, starting=True, unhealthy_for=10_000)])
    crashing = dataclasses.replace(o.pods["c-2"], waiting_reason="CrashLoopBackOff")
    o = dataclasses.replace(o, pods={**o.pods, "c-2": crashing})
    step = next_step(spec(3), o)
    assert step == a.RemoveMember(step.reason, "c-2", 0x102, replacing=True)


def _recovery():
    from etcd_operator.core.cluster.planner import QUORUM_RECOVERY
    from etcd_operator.core.cluster.recorded import Operation

    return recorded(operation=Operation(QUORUM_RECOVERY, "c-0", 0x100, 0))


def test_a_recovery_is_called_off_when_quorum_comes_back_before_the_survivor_is_forced():
    o = observed([M(0), M(1), M(2)], leader=1)
    step = next_step(spec(3), o, _recovery())
    assert isinstance(step, a.AbandonQuorumRecovery)


def test_a_recovery_is_called_off_when_the_survivor_lost_its_data():
    o = observed([M(0, healthy=False, pvc=False), M(1, healthy=False), M(2, healthy=False)], leader=None)
    assert isinstance(next_step(spec(3), o, _recovery()), a.AbandonQuorumRecovery)


def test_a_recovery_goes_on_while_quorum_is_still_lost():
    o = observed([M(0), M(1, healthy=False), M(2, healthy=False)], leader=None)
    step = next_step(spec(3), o, _recovery())
    assert step == a.StopMemberPod(step.reason, "c-1")


def test_quorum_is_never_recovered_on_empty_dir():
    s = auto_recovery(3)
    s = dataclasses.replace(s, storage=dataclasses.replace(s.storage, empty_dir=True))
    o = observed([M(0), M(1, healthy=False), M(2, healthy=False)], leader=None, no_quorum_for=600)
    step = next_step(s, o, recovery_allowed=True)
    assert isinstance(step, a.Wait) and "EtcdRestore" in step.reason


def _forced_survivor(**pod_changes):
    o = observed(
        [M(0, healthy=False), M(1, healthy=False, pod=False, pvc=False), M(2, healthy=False, pod=False, pvc=False)],
        leader=None,
    )
    survivor = dataclasses.replace(o.pods["c-0"], force_new_cluster=True, **pod_changes)
    return dataclasses.replace(o, pods={"c-0": survivor})


def test_a_failed_survivor_pod_is_forced_again_during_recovery():
    step = next_step(spec(3), _forced_survivor(phase="Failed"), _recovery())
    assert step == a.ForceNewCluster(step.reason, "c-0", 0x100)


def test_a_survivor_that_does_not_start_after_forcing_ends_the_recovery_and_says_where_the_data_is():
    step = next_step(spec(3), _forced_survivor(waiting_reason="CrashLoopBackOff", ready=False), _recovery())
    assert isinstance(step, a.AbandonQuorumRecovery) and "set-aside-from-cluster" in step.reason


def test_a_recovery_is_called_off_when_the_survivor_stops_starting_before_it_is_forced():
    o = observed(
        [M(0, healthy=False, waiting="CrashLoopBackOff"), M(1, healthy=False), M(2, healthy=False)], leader=None
    )
    assert isinstance(next_step(spec(3), o, _recovery()), a.AbandonQuorumRecovery)
