"""Hibernation (spec.hibernation, status.hibernation): going to sleep records the cluster's
identity, waits for the backups' snapshot and stops the pods one at a time, the leader
last; asleep, no healing path of the planner acts on the stopped members; waking starts
each recorded member on its own PVC as itself and is done only when the same cluster
answers. Backups take the snapshot first and skip a hibernated cluster."""

from __future__ import annotations

import dataclasses
import datetime
import pathlib

import pytest
import yaml

from etcd_operator.core import hibernation as h
from etcd_operator.core import prerequisites as p
from etcd_operator.core.backup import steps as bs
from etcd_operator.core.backup.continuous import ChainStart, ContinuousRecord, StreamView
from etcd_operator.core.backup.planner import plan as plan_backup
from etcd_operator.core.backup.segments import chain_id
from etcd_operator.core.backup.state import LastBackup, Prerequisites, RunState, ScheduleSpec
from etcd_operator.core.backup.state import Observed as BackupObserved
from etcd_operator.core.cluster import hibernation, naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.builders import pod_spec_hash
from etcd_operator.core.cluster.health import HealthState, diagnose
from etcd_operator.core.cluster.observed import BackupSnapshot
from etcd_operator.core.cluster.recorded import ClusterStatus, RollRecord
from etcd_operator.core.cluster.spec import HIBERNATION_ON_EMPTY_DIR, ClusterSpec, Hibernation, Storage, spec_problems
from etcd_operator.core.cluster.timers import Sightings, carry_timers
from etcd_operator.core.conditions import Condition
from tests.unit.cluster_scenarios import (
    HASH,
    M,
    decide_accepting,
    health_of,
    observed,
    plan_accepting,
    recorded,
    self_only_cluster,
    spec,
)

ASLEEP = Hibernation(enabled=True, snapshot_timeout=600.0)
MEMBERS = tuple((naming.member_name("c", i), 0x100 + i) for i in range(3))


def record(state: str, members=MEMBERS) -> h.HibernationRecord:
    return h.HibernationRecord(state, cluster_id=1, revision=100, members=members)


def sleeping(state: str, **fields) -> ClusterStatus:
    return recorded(hibernation=record(state), **fields)


def condition(decision, type_: str) -> Condition:
    return next(cond for cond in decision.conditions if cond.type == type_)


# Every step that heals, replaces, grows, rolls or recovers: none may come while asleep or waking.
HEALING = (
    a.RemoveMember,
    a.AddLearner,
    a.DeleteMemberPVC,
    a.DeleteMemberPod,
    a.RollMember,
    a.MoveLeader,
    a.BeginQuorumRecovery,
    a.ForceNewCluster,
    a.BootstrapFirstMember,
    a.BootstrapMembers,
    a.RestartFailedPod,
    a.Defragment,
)


# --- going to sleep ----------------------------------------------------------------------------


def test_going_to_sleep_first_records_the_cluster_id_every_member_id_and_the_leaders_revision():
    o = observed([M(0), M(1), M(2)])
    decision = decide_accepting(spec(hibernation=ASLEEP), o)
    assert decision.action == a.RecordHibernation(decision.action.reason, record(h.SNAPSHOTTING))
    assert decision.action.record is not None and decision.action.record.to_dict() == {
        "state": "Snapshotting",
        "clusterID": "1",
        "revision": 100,
        "members": [{"name": "c-0", "id": "100"}, {"name": "c-1", "id": "101"}, {"name": "c-2", "id": "102"}],
    }
    assert h.HibernationRecord.from_dict(decision.action.record.to_dict()) == decision.action.record


@pytest.mark.parametrize(
    "members, leader, words",
    [
        ([M(0), M(1, healthy=False), M(2, healthy=False)], 0, "a quorum"),
        ([M(0), M(1), M(2, started=False, learner=True)], 0, "c-2 to finish joining"),
        ([M(0), M(1), M(2)], None, "the leader"),
    ],
    ids=["no_quorum", "a_member_joining", "no_leader"],
)
def test_no_identity_is_recorded_without_the_leaders_member_list_a_quorum_and_every_member_joined(
    members, leader, words
):
    decision = decide_accepting(spec(hibernation=ASLEEP), observed(members, leader=leader))
    assert isinstance(decision.action, a.Wait) and words in decision.action.reason
    assert not isinstance(decision.action, HEALING)


def test_a_cluster_created_asleep_is_created_first():
    o = observed([], leader=None)
    decision = decide_accepting(spec(hibernation=ASLEEP), o, st=recorded(bootstrapped=False))
    assert isinstance(decision.action, a.BootstrapMembers)


def test_without_an_etcd_backup_the_members_stop_at_once():
    o = dataclasses.replace(observed([M(0), M(1), M(2)]), snapshot_backups=())
    decision = decide_accepting(spec(hibernation=ASLEEP), o, st=sleeping(h.SNAPSHOTTING))
    assert decision.action == a.RecordHibernation(decision.action.reason, record(h.STOPPING))


def test_the_members_wait_for_a_snapshot_that_holds_the_recorded_revision():
    old = BackupSnapshot("nightly", "1", 99)
    o = dataclasses.replace(observed([M(0), M(1), M(2)]), snapshot_backups=(old,), snapshot_wait_for=30.0)
    s = spec(hibernation=ASLEEP)
    waiting = decide_accepting(s, o, st=sleeping(h.SNAPSHOTTING))
    assert isinstance(waiting.action, a.Wait) and "nightly" in waiting.action.reason
    assert condition(waiting, "Hibernated").reason == "Hibernating"
    of_another_cluster = dataclasses.replace(o, snapshot_backups=(BackupSnapshot("nightly", "2", 500),))
    assert isinstance(decide_accepting(s, of_another_cluster, st=sleeping(h.SNAPSHOTTING)).action, a.Wait)
    not_read = dataclasses.replace(o, snapshot_backups=None)
    assert isinstance(decide_accepting(s, not_read, st=sleeping(h.SNAPSHOTTING)).action, a.Wait)
    taken = dataclasses.replace(o, snapshot_backups=(BackupSnapshot("nightly", "1", 100),))
    decision = decide_accepting(s, taken, st=sleeping(h.SNAPSHOTTING))
    assert decision.action == a.RecordHibernation(decision.action.reason, record(h.STOPPING))


def test_after_the_snapshot_timeout_the_members_stop_without_it_and_say_so():
    o = dataclasses.replace(
        observed([M(0), M(1), M(2)]), snapshot_backups=(BackupSnapshot("nightly", None, None),), snapshot_wait_for=600.0
    )
    step = decide_accepting(spec(hibernation=ASLEEP), o, st=sleeping(h.SNAPSHOTTING)).action
    assert isinstance(step, a.RecordHibernation) and step.record == record(h.STOPPING)
    assert step.without_snapshot == ("nightly",) and "snapshotTimeout" in step.reason


def test_the_snapshot_wait_is_timed_on_this_process_clock_and_starts_over_for_a_new_request():
    o = observed([M(0), M(1), M(2)])
    status = sleeping(h.SNAPSHOTTING)
    first, seen = carry_timers(status, o, Sightings(), 1000.0)
    later, seen = carry_timers(status, o, seen, 1050.0)
    assert (first.snapshot_wait_for, later.snapshot_wait_for) == (0.0, 50.0)
    again = recorded(hibernation=dataclasses.replace(record(h.SNAPSHOTTING), revision=200))
    renewed, _ = carry_timers(again, o, seen, 1060.0)
    assert renewed.snapshot_wait_for == 0.0
    awake, _ = carry_timers(recorded(), o, seen, 1060.0)
    assert awake.snapshot_wait_for is None


def test_pods_stop_one_at_a_time_followers_first_the_leader_last_and_pvcs_stay():
    s = spec(hibernation=ASLEEP)
    members = [M(0), M(1), M(2)]
    stopped: list[str] = []
    for _ in range(3):
        o = dataclasses.replace(observed(members, leader=0), snapshot_backups=())
        step = decide_accepting(s, o, st=sleeping(h.STOPPING)).action
        assert isinstance(step, a.StopMemberForHibernation)
        stopped.append(step.member)
        stopping = [dataclasses.replace(m, stopping=True) if m.name == step.member else m for m in members]
        waiting = decide_accepting(s, observed(stopping, leader=0), st=sleeping(h.STOPPING)).action
        assert isinstance(waiting, a.Wait) and step.member in waiting.reason
        members = [dataclasses.replace(m, pod=False) if m.name == step.member else m for m in members]
    assert stopped == ["c-2", "c-1", "c-0"]
    asleep = observed(members, leader=None)
    assert set(asleep.pvcs) == {naming.pvc_name(n) for n, _ in MEMBERS}
    decision = decide_accepting(s, asleep, st=sleeping(h.STOPPING))
    assert decision.action == a.RecordHibernation(decision.action.reason, record(h.HIBERNATED))


def test_a_member_stopped_on_the_way_to_sleep_is_not_restarted():
    members = [M(0), M(1), M(2, pod=False, healthy=False, unhealthy_for=600.0)]
    o = observed(members)
    step = decide_accepting(spec(hibernation=ASLEEP), o, st=sleeping(h.STOPPING)).action
    assert step == a.StopMemberForHibernation(step.reason, "c-1")


def chain(name: str, revision: int | None, cluster_id: str | None = "1") -> BackupSnapshot:
    """A continuous EtcdBackup whose chain holds revisions up to `revision` (its full snapshot at 100)."""
    return BackupSnapshot(name, "1", 100, continuous=True, chain_cluster_id=cluster_id, chain_revision=revision)


# The leader alone: c-2 and c-1 stopped, so no quorum of the three can acknowledge a write.
FENCED = [M(0, applied=140), M(1, pod=False, healthy=False), M(2, pod=False, healthy=False)]


def test_with_no_quorum_left_the_leader_stops_only_once_every_chain_holds_its_revision():
    s, st = spec(hibernation=ASLEEP), sleeping(h.STOPPING)
    behind = dataclasses.replace(observed(FENCED, leader=0), snapshot_backups=(chain("wal", 139),))
    step = decide_accepting(s, behind, st=st).action
    assert isinstance(step, a.Wait) and "wal to hold revision 140" in step.reason, step
    another_cluster = dataclasses.replace(behind, snapshot_backups=(chain("wal", 140, cluster_id="2"),))
    assert isinstance(decide_accepting(s, another_cluster, st=st).action, a.Wait)
    not_read = dataclasses.replace(behind, snapshot_backups=None)
    assert isinstance(decide_accepting(s, not_read, st=st).action, a.Wait)
    held = dataclasses.replace(behind, snapshot_backups=(chain("wal", 140), BackupSnapshot("nightly", "1", 100)))
    step = decide_accepting(s, held, st=st).action
    assert step == a.StopMemberForHibernation(step.reason, "c-0")


def test_while_a_quorum_runs_the_followers_stop_without_waiting_for_the_chain():
    """Writes are still acknowledged: waiting would not make the chain complete."""
    o = observed([M(0, applied=140), M(1, applied=140), M(2, pod=False, healthy=False)], leader=0)
    o = dataclasses.replace(o, snapshot_backups=(chain("wal", 120),))
    step = decide_accepting(spec(hibernation=ASLEEP), o, st=sleeping(h.STOPPING)).action
    assert step == a.StopMemberForHibernation(step.reason, "c-1")


def test_the_fenced_revision_waits_for_every_committed_entry_to_be_applied():
    o = dataclasses.replace(observed(FENCED, leader=None), snapshot_backups=(chain("wal", 140),))
    leader = o.etcd.statuses[0x100]
    applying = dataclasses.replace(leader, raft_index=leader.raft_applied_index + 3)
    o = dataclasses.replace(o, etcd=dataclasses.replace(o.etcd, statuses={0x100: applying}))
    step = decide_accepting(spec(hibernation=ASLEEP), o, st=sleeping(h.STOPPING)).action
    assert isinstance(step, a.Wait) and "c-0 to answer with every committed entry applied" in step.reason, step
    silent = dataclasses.replace(o, etcd=dataclasses.replace(o.etcd, statuses={}))
    assert isinstance(decide_accepting(spec(hibernation=ASLEEP), silent, st=sleeping(h.STOPPING)).action, a.Wait)


def test_after_the_snapshot_timeout_the_last_members_stop_with_a_warning_naming_the_chain():
    o = dataclasses.replace(observed(FENCED, leader=0), snapshot_backups=(chain("wal", 120),), snapshot_wait_for=600.0)
    step = decide_accepting(spec(hibernation=ASLEEP), o, st=sleeping(h.STOPPING)).action
    assert isinstance(step, a.StopMemberForHibernation) and step.member == "c-0"
    assert step.without_chain == ("wal",)


def test_the_chain_wait_is_timed_from_the_start_of_stopping():
    o = observed(FENCED, leader=0)
    _, seen = carry_timers(sleeping(h.SNAPSHOTTING), o, Sightings(), 1000.0)
    stopping, seen = carry_timers(sleeping(h.STOPPING), o, seen, 1500.0)
    later, _ = carry_timers(sleeping(h.STOPPING), o, seen, 1520.0)
    assert (stopping.snapshot_wait_for, later.snapshot_wait_for) == (0.0, 20.0)


def test_writes_are_fenced_once_fewer_pods_than_a_quorum_are_left():
    five = tuple((naming.member_name("c", i), 0x100 + i) for i in range(5))
    assert [h.writes_fenced(record(h.STOPPING, five), n) for n in (5, 3, 2, 1, 0)] == [False, False, True, True, False]
    assert [h.writes_fenced(record(h.STOPPING), n) for n in (2, 1)] == [False, True]
    assert not h.writes_fenced(record(h.SNAPSHOTTING), 1)
    one = (MEMBERS[0],)
    assert not h.writes_fenced(record(h.STOPPING, one), 1)  # one member: no fence short of stopping it


# --- asleep ------------------------------------------------------------------------------------

ALL_STOPPED = [M(i, pod=False, healthy=False, unhealthy_for=3600.0) for i in range(3)]


@pytest.mark.parametrize(
    "s",
    [
        spec(hibernation=ASLEEP),
        spec(size=5, hibernation=ASLEEP),  # a larger size adds nobody
        spec(hibernation=ASLEEP, recovery=dataclasses.replace(spec().recovery, automatic_quorum_recovery=True)),
        spec(hibernation=ASLEEP, version="3.6.17"),  # a new version rolls nobody
    ],
    ids=["plain", "size_5", "automatic_quorum_recovery", "new_version"],
)
def test_asleep_nothing_is_replaced_added_rolled_or_recovered(s):
    for members in (ALL_STOPPED, ALL_STOPPED[:2]):  # also with a member's PVC deleted while asleep
        o = observed(members, leader=None, no_quorum_for=3600.0)
        o = dataclasses.replace(o, recovery_approved=True)
        decision = decide_accepting(s, o, st=sleeping(h.HIBERNATED))
        assert isinstance(decision.action, a.Steady), decision.action
        assert decision.health.state == HealthState.HIBERNATED
        assert condition(decision, "Hibernated") == Condition("Hibernated", True, "Hibernated", decision.action.reason)
        assert condition(decision, "QuorumLost").status is False
        assert condition(decision, "Degraded").status is False
        assert condition(decision, "Available").reason == "Hibernated"


def test_asleep_there_is_no_evidence_of_a_lost_quorum_so_no_timer_runs():
    o = observed(ALL_STOPPED, leader=None)
    timed, _ = carry_timers(sleeping(h.HIBERNATED), o, Sightings(), 1000.0)
    assert timed.no_quorum_for is None
    assert diagnose(spec(hibernation=ASLEEP), sleeping(h.HIBERNATED), timed).state == HealthState.HIBERNATED


def test_a_pod_that_runs_while_hibernated_stops_again():
    o = observed([M(0), *ALL_STOPPED[1:]], leader=None)
    step = decide_accepting(spec(hibernation=ASLEEP), o, st=sleeping(h.HIBERNATED)).action
    assert step == a.RecordHibernation(step.reason, record(h.STOPPING))


def test_the_phase_says_hibernated():
    from etcd_operator.core.cluster.status import phase

    s = spec(hibernation=ASLEEP)
    o = observed(ALL_STOPPED, leader=None)
    for state, want in ((h.SNAPSHOTTING, "Hibernating"), (h.STOPPING, "Hibernating"), (h.HIBERNATED, "Hibernated")):
        decision = decide_accepting(s, o, st=sleeping(state))
        assert phase(s, decision.health, decision.action, sleeping(state), o) == want
    awake = spec()
    decision = decide_accepting(awake, o, st=sleeping(h.WAKING))
    assert phase(awake, decision.health, decision.action, sleeping(h.WAKING), o) == "Waking"


# --- waking ------------------------------------------------------------------------------------


def test_waking_starts_every_recorded_member_on_its_own_pvc_as_itself():
    s = spec()
    o = observed(ALL_STOPPED, leader=None, no_quorum_for=3600.0)
    first = decide_accepting(s, o, st=sleeping(h.HIBERNATED)).action
    assert first == a.RecordHibernation(first.reason, record(h.WAKING))
    members = list(ALL_STOPPED)
    started = []
    for _ in range(3):
        step = decide_accepting(s, observed(members, leader=None), st=sleeping(h.WAKING)).action
        assert isinstance(step, a.CreateMemberPod) and step.joined_before
        assert (step.member, step.member_id) in MEMBERS
        assert step.initial_cluster == self_only_cluster(sleeping(h.WAKING), o, step.member)
        started.append(step.member)
        # Its pod runs; no member answers until a quorum has started.
        members = [dataclasses.replace(m, pod=True) if m.name == step.member else m for m in members]
    assert started == ["c-0", "c-1", "c-2"]


def test_waking_without_a_quorum_waits_never_recovers_bootstraps_or_replaces():
    s = spec(recovery=dataclasses.replace(spec().recovery, automatic_quorum_recovery=True))
    waking = sleeping(h.WAKING)
    for members, leader in (
        ([dataclasses.replace(m, pod=True) for m in ALL_STOPPED], None),  # pods run, nobody answers
        ([M(0), M(1, healthy=False, unhealthy_for=3600.0), M(2, healthy=False, unhealthy_for=3600.0)], 0),
    ):
        o = dataclasses.replace(observed(members, leader=leader, no_quorum_for=3600.0), recovery_approved=True)
        decision = decide_accepting(s, o, st=waking)
        assert isinstance(decision.action, a.Wait), decision.action
        assert "waking" in decision.action.reason
        assert condition(decision, "Hibernated").reason == "Waking"
        assert condition(decision, "QuorumLost").status is False


def test_waking_is_done_only_when_the_same_cluster_answers_with_the_same_members():
    s = spec()
    o = observed([M(0), M(1), M(2)])
    done = decide_accepting(s, o, st=sleeping(h.WAKING)).action
    assert done == a.RecordHibernation(done.reason, None)
    other_cluster = recorded(hibernation=dataclasses.replace(record(h.WAKING), cluster_id=7))
    step = decide_accepting(s, o, st=other_cluster).action
    assert isinstance(step, a.Wait) and "not the recorded 7" in step.reason
    other_members = recorded(hibernation=record(h.WAKING, members=(*MEMBERS[:2], ("c-3", 0x103))))
    step = decide_accepting(s, observed([M(0), M(1), M(2)]), st=other_members).action
    assert isinstance(step, a.Wait) and "not the recorded" in step.reason


def test_members_wake_with_the_pod_settings_they_last_ran_and_a_change_made_asleep_rolls_after():
    last_good = RollRecord(last_good_spec={"size": 3, "version": "3.6.16"})
    newer = spec(version="3.6.17")
    o = observed(ALL_STOPPED, leader=None)
    waking = decide_accepting(newer, o, st=recorded(hibernation=record(h.WAKING), rollout=last_good))
    assert isinstance(waking.action, a.CreateMemberPod) and waking.acting_spec.version == "3.6.16"
    # Woken and healthy on the old settings: the new spec is not recorded as the last good one.
    woken = observed([M(0), M(1), M(2)])
    hashed = {n: dataclasses.replace(pod, spec_hash=pod_spec_hash(waking.acting_spec)) for n, pod in woken.pods.items()}
    done = decide_accepting(
        newer,
        dataclasses.replace(woken, pods=hashed),
        raw={"size": 3, "version": "3.6.17"},
        st=recorded(hibernation=record(h.WAKING), rollout=last_good),
    )
    assert isinstance(done.action, a.RecordHibernation) and done.rollout == last_good
    awake = decide_accepting(newer, observed([M(0), M(1), M(2)]), st=recorded(rollout=last_good))
    assert awake.acting_spec.version == "3.6.17"


def test_a_member_whose_pvc_was_deleted_while_asleep_is_not_started_empty():
    members = [dataclasses.replace(ALL_STOPPED[0], pvc=False), *ALL_STOPPED[1:]]
    step = decide_accepting(spec(), observed(members, leader=None), st=sleeping(h.WAKING)).action
    assert isinstance(step, a.CreateMemberPod) and step.member == "c-1"
    woken = [M(0, pod=False, pvc=False, healthy=False, unhealthy_for=5.0), M(1), M(2)]
    done = decide_accepting(spec(), observed(woken, leader=1), st=sleeping(h.WAKING)).action
    assert done == a.RecordHibernation(done.reason, None) and "c-0 lost its PVC" in done.reason


def test_asked_to_sleep_again_while_waking_the_members_stop_again():
    o = observed([M(0), *ALL_STOPPED[1:]], leader=None)
    step = decide_accepting(spec(hibernation=ASLEEP), o, st=sleeping(h.WAKING)).action
    assert step == a.RecordHibernation(step.reason, record(h.STOPPING))


# --- refused on emptyDir -----------------------------------------------------------------------


def test_hibernation_on_empty_dir_is_refused_and_the_members_keep_running():
    s = spec(hibernation=ASLEEP, storage=Storage("2Gi", None, empty_dir=True))
    assert [p.reason for p in spec_problems(s)] == ["HibernationRefused"]
    o = observed([M(0, pvc=False), M(1, pvc=False), M(2, pvc=False)])
    assert isinstance(plan_accepting(s, o, health_of(s, o), desired_hash=HASH), a.Steady)
    decision = decide_accepting(s, o)
    refused = condition(decision, "Hibernated")
    assert refused.status is False and refused.reason == "HibernationRefused" and "emptyDir" in refused.message
    assert condition(decision, "SpecAccepted").reason == "HibernationRefused"


def test_the_crd_refuses_hibernation_on_empty_dir_with_the_operators_own_words():
    crd = yaml.safe_load((pathlib.Path(__file__).resolve().parents[2] / "crds" / "etcdclusters.yaml").read_text())
    spec_rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    messages = [rule["message"] for rule in spec_rules["x-kubernetes-validations"]]
    assert HIBERNATION_ON_EMPTY_DIR in messages


def test_spec_hibernation_parses_with_its_defaults():
    assert ClusterSpec.from_dict({}).hibernation == Hibernation(False, 900.0)
    parsed = ClusterSpec.from_dict({"hibernation": {"enabled": True, "snapshotTimeout": "2m"}}).hibernation
    assert parsed == Hibernation(True, 120.0)


def test_an_unreadable_record_is_no_record():
    assert h.HibernationRecord.from_dict({"state": "Sleeping", "clusterID": "1", "members": []}) is None
    assert h.HibernationRecord.from_dict({"state": "Hibernated", "clusterID": "1", "members": []}) is None
    assert (
        h.HibernationRecord.from_dict({"state": "Hibernated", "clusterID": "zz", "members": [{"name": "a", "id": "1"}]})
        is None
    )


# --- which EtcdBackups take the snapshot -------------------------------------------------------


def backup_body(
    name: str,
    cluster: str = "c",
    deleting: bool = False,
    last: dict | None = None,
    continuous_status: dict | None = None,
    **spec_fields,
):
    meta = {"name": name, **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
    return {
        "metadata": meta,
        "spec": {"clusterRef": {"name": cluster}, **spec_fields},
        "status": {"lastBackup": last or {}, **({"continuous": continuous_status} if continuous_status else {})},
    }


def test_scheduled_and_continuous_backups_of_the_cluster_take_the_snapshot():
    bodies = [
        backup_body("nightly", schedule="0 3 * * *", last={"clusterID": "1", "revision": 90}),
        backup_body("stream", continuous={"enabled": True}),
        backup_body(
            "wal",
            continuous={"enabled": True},
            last={"clusterID": "1", "revision": 100},
            continuous_status={"chain": "1-100", "clusterID": "1", "baseKey": "k", "lastRevision": 140},
        ),
        backup_body("once"),  # a one-shot never runs again
        backup_body("paused", schedule="0 3 * * *", suspend=True),
        backup_body("elsewhere", cluster="other", schedule="0 3 * * *"),
        backup_body("leaving", schedule="0 3 * * *", deleting=True),
    ]
    assert hibernation.snapshot_backups("c", bodies) == (
        BackupSnapshot("nightly", "1", 90),
        BackupSnapshot("stream", None, None, continuous=True),
        BackupSnapshot("wal", "1", 100, continuous=True, chain_cluster_id="1", chain_revision=140),
    )


# --- the backup side ---------------------------------------------------------------------------

T0 = datetime.datetime(2026, 11, 21, 12, 0, 1, tzinfo=datetime.UTC)


def backup_seen(state: str | None, stream: StreamView | None = None) -> BackupObserved:
    readiness = p.ClusterReadiness("Running", True, 3, hibernation=record(state) if state else None)
    return BackupObserved(T0, 1, prerequisites=Prerequisites("ns", "c", readiness), stream=stream)


def at(minutes: float) -> float:
    return (T0 + datetime.timedelta(minutes=minutes)).timestamp()


def test_a_cluster_going_to_sleep_gets_a_full_snapshot_at_once():
    older = RunState(
        last_slot=datetime.datetime.fromtimestamp(at(10), datetime.UTC), last_backup=LastBackup("k", 99, "1")
    )
    step = plan_backup(ScheduleSpec("*/30 * * * *"), older, backup_seen(h.SNAPSHOTTING), at(15))
    assert isinstance(step, bs.StartSlot) and step.slot.startswith("full-") and "revision 100" in step.message
    holding = dataclasses.replace(older, last_backup=LastBackup("k", 100, "1"))
    assert isinstance(
        plan_backup(ScheduleSpec("*/30 * * * *"), holding, backup_seen(h.SNAPSHOTTING), at(15)), bs.WaitForSlot
    )


@pytest.mark.parametrize("state", [h.STOPPING, h.HIBERNATED, h.WAKING])
def test_a_hibernated_cluster_is_skipped_and_the_backup_says_so(state):
    due = RunState(last_slot=datetime.datetime.fromtimestamp(at(0), datetime.UTC))
    step = plan_backup(ScheduleSpec("*/10 * * * *"), due, backup_seen(state), at(25))
    assert isinstance(step, bs.WaitForPrerequisite) and step.reason == p.CLUSTER_HIBERNATED
    assert "hibernated" in step.message
    running = StreamView(chain="c1", last_revision=50)
    continuous = ScheduleSpec.from_dict({"continuous": {"enabled": True}})
    if state != h.STOPPING:
        assert isinstance(plan_backup(continuous, due, backup_seen(state, running), at(25)), bs.StopStream)


CONTINUOUS = ScheduleSpec.from_dict({"continuous": {"enabled": True}})
CHAIN = ChainStart(chain_id("1", 100), "1", "k", 100)
WRITING = RunState(last_backup=LastBackup("k", 100, "1"), continuous=ContinuousRecord(current=CHAIN, last_revision=120))


def test_while_the_members_stop_the_writer_writes_on():
    """Members still running acknowledge writes until fewer than a quorum are left: the
    chain must go on to hold them (issue 41, item 12b)."""
    running = StreamView(chain=CHAIN.chain, last_revision=120)
    step = plan_backup(CONTINUOUS, WRITING, backup_seen(h.STOPPING, running), at(25))
    assert isinstance(step, bs.Stream) and step.chain == CHAIN.chain, step
    started = plan_backup(CONTINUOUS, WRITING, backup_seen(h.STOPPING), at(25))
    assert started == bs.StartStream(start=CHAIN, message=started.message)


def test_while_the_members_stop_nothing_but_the_chain_is_written():
    """No full snapshot, slot or verification starts; a backup without a chain waits."""
    every_event = ScheduleSpec.from_dict(
        {"schedule": "*/10 * * * *", "continuous": {"enabled": True, "fullSnapshotAfter": {"events": 1}}}
    )
    full = dataclasses.replace(WRITING, continuous=dataclasses.replace(WRITING.continuous, events_since_full=5))
    running = StreamView(chain=CHAIN.chain, last_revision=120)
    assert isinstance(plan_backup(every_event, full, backup_seen(h.STOPPING, running), at(25)), bs.Stream)
    broken = dataclasses.replace(WRITING, continuous=ContinuousRecord(needs_base=True))
    step = plan_backup(CONTINUOUS, broken, backup_seen(h.STOPPING), at(25))
    assert isinstance(step, bs.WaitForPrerequisite) and step.reason == p.CLUSTER_HIBERNATED


@pytest.mark.parametrize("state", [h.HIBERNATED, h.WAKING])
def test_once_no_member_runs_the_writer_stops(state):
    running = StreamView(chain=CHAIN.chain, last_revision=140)
    assert isinstance(plan_backup(CONTINUOUS, WRITING, backup_seen(state, running), at(25)), bs.StopStream)
    step = plan_backup(CONTINUOUS, WRITING, backup_seen(state), at(25))
    assert isinstance(step, bs.WaitForPrerequisite) and step.reason == p.CLUSTER_HIBERNATED


def test_an_awake_cluster_is_not_waited_for():
    assert p.ClusterReadiness("Running", True, 3).asleep is False
    assert p.ClusterReadiness("Running", True, 3, hibernation=record(h.SNAPSHOTTING)).asleep is False
    assert (
        p.cluster_wait("ns", "c", p.ClusterReadiness("Running", True, 3, hibernation=record(h.SNAPSHOTTING)), "x")
        is None
    )


def test_no_downgrade_starts_while_the_cluster_goes_to_sleep():
    o = dataclasses.replace(
        observed([M(0), M(1), M(2)]), snapshot_backups=(BackupSnapshot("nightly", "1", 99),), snapshot_wait_for=1.0
    )
    s = spec(hibernation=ASLEEP, version="3.5.32")
    step = decide_accepting(s, o, st=sleeping(h.SNAPSHOTTING)).action
    assert isinstance(step, a.Wait) and "nightly" in step.reason
