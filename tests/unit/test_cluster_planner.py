"""The membership planner, table-driven and by property."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import HealthState
from etcd_operator.core.cluster.observed import PodView, VolumePin
from etcd_operator.core.cluster.planner import QUORUM_RECOVERY
from etcd_operator.core.cluster.recorded import Operation
from tests.unit.cluster_scenarios import HASH, RECORDED, M, health_of, observed, plan_accepting, recorded, spec


def next_step(s, o, st=RECORDED, **kwargs):
    kwargs.setdefault("desired_hash", HASH)
    return plan_accepting(s, o, health_of(s, o, st), st, **kwargs)


def test_empty_cluster_bootstraps_member_zero():
    step = next_step(spec(3), observed([]), recorded(bootstrapped=False))
    assert isinstance(step, a.BootstrapMembers) and step.members == ("c-0", "c-1", "c-2")


def test_a_cluster_that_existed_and_vanished_entirely_is_not_silently_recreated():
    s = spec(3)
    o, st = observed([]), recorded(bootstrapped=True)
    assert health_of(s, o, st).state == HealthState.QUORUM_LOST
    assert isinstance(next_step(s, o, st), a.Wait)


def test_first_member_is_settled_once_it_has_joined():
    step = next_step(spec(3), observed([M(0, settled=False)]))
    assert isinstance(step, a.SettleMemberPod) and step.member == "c-0"


def test_scale_up_adds_one_learner_with_the_next_ordinal():
    step = next_step(spec(3), observed([M(0), M(1)]))
    assert isinstance(step, a.AddLearner) and step.member == "c-2"


def test_added_member_without_pod_gets_its_pod_with_the_full_initial_cluster():
    step = next_step(spec(3), observed([M(0), M(1), M(2, started=False, learner=True, pod=False, pvc=False)]))
    assert isinstance(step, a.CreateMemberPod) and step.member == "c-2" and not step.joined_before
    assert step.initial_cluster.count("=") == 3 and "c-2=" in step.initial_cluster


def test_learner_that_answers_is_promoted():
    step = next_step(spec(3), observed([M(0), M(1), M(2, learner=True)]))
    assert isinstance(step, a.PromoteLearner) and step.member == "c-2"


def test_nothing_is_added_while_a_learner_catches_up():
    step = next_step(spec(5), observed([M(0), M(1), M(2, learner=True, healthy=False, unhealthy_for=5)]))
    assert isinstance(step, a.Wait)


def test_stuck_learner_is_removed_after_the_timeout():
    step = next_step(spec(5), observed([M(0), M(1), M(2, learner=True, healthy=False, unhealthy_for=61)]))
    assert isinstance(step, a.RemoveMember) and step.member == "c-2"


def test_scale_down_removes_the_highest_follower_never_the_leader():
    step = next_step(spec(1), observed([M(0), M(1), M(2)], leader=2))
    assert isinstance(step, a.RemoveMember) and step.member == "c-1"


def test_scale_down_removes_an_unhealthy_member_first():
    step = next_step(spec(3), observed([M(0), M(1, healthy=False, unhealthy_for=1), M(2), M(3), M(4)]))
    assert isinstance(step, a.RemoveMember) and step.member == "c-1"


def test_removed_members_pod_then_pvc_are_deleted():
    o = observed(
        [M(0), M(1)],
        extra_pods=[PodView("c-2", "u", 0x102, "Running", True, False, "10.0.0.2", HASH, "existing", "", False)],
    )
    o = dataclasses.replace(o, pvcs={**o.pvcs, "data-c-2": dataclasses.replace(o.pvcs["data-c-1"], name="data-c-2")})
    step = next_step(spec(2), o)
    assert step == a.DeleteMemberPod(step.reason, "c-2")
    o = dataclasses.replace(o, pods={k: v for k, v in o.pods.items() if k != "c-2"})
    step = next_step(spec(2), o)
    assert step == a.DeleteMemberPVC(step.reason, "c-2")


def test_nothing_is_deleted_on_a_member_list_not_from_the_leader():
    o = observed(
        [M(0), M(1)],
        extra_pods=[PodView("c-2", "u", 0x102, "Running", True, False, "10.0.0.2", HASH, "existing", "", False)],
    )
    o = dataclasses.replace(o, etcd=dataclasses.replace(o.etcd, from_leader=False))
    assert not isinstance(next_step(spec(2), o), (a.DeleteMemberPod, a.DeleteMemberPVC))


def test_member_whose_pod_is_gone_rejoins_on_its_pvc():
    step = next_step(spec(3), observed([M(0), M(1), M(2, pod=False, healthy=False)]))
    assert isinstance(step, a.CreateMemberPod) and step.joined_before and step.member == "c-2"
    assert step.initial_cluster == f"c-2={naming.peer_url('c', 'ns', 'c-2')}"


def test_member_whose_pod_and_pvc_are_gone_is_removed_for_replacement():
    step = next_step(spec(3), observed([M(0), M(1), M(2, pod=False, pvc=False, healthy=False)]))
    assert isinstance(step, a.RemoveMember) and step.replacing and step.member == "c-2"


def test_unhealthy_member_is_replaced_only_after_the_timeout():
    assert isinstance(next_step(spec(3), observed([M(0), M(1), M(2, healthy=False, unhealthy_for=10)])), a.Wait)
    step = next_step(spec(3), observed([M(0), M(1), M(2, healthy=False, unhealthy_for=61)]))
    assert isinstance(step, a.RemoveMember) and step.replacing


def test_a_member_whose_pod_is_pending_on_its_kept_pvc_is_not_replaced_after_the_timeout():
    """A drained node's member: its pod, re-created, waits for the node its volume is pinned to."""
    for waiting in (None, "ContainerCreating"):
        o = observed([M(0), M(1), M(2, healthy=False, unhealthy_for=600, pod_phase="Pending", waiting=waiting)])
        step = next_step(spec(3), o)
        assert isinstance(step, a.Wait) and "c-2" in step.reason and "PVC" in step.reason


def test_a_member_pending_on_a_volume_whose_node_is_gone_from_the_api_is_replaced_after_the_timeout():
    """The Node its PV pins the data to was deleted: the data is out of reach for good."""
    gone = VolumePin("node-2", node_gone=True)
    o = observed([M(0), M(1), M(2, healthy=False, unhealthy_for=61, pod_phase="Pending", pin=gone)])
    step = next_step(spec(3), o)
    assert isinstance(step, a.RemoveMember) and step.replacing and step.member == "c-2"
    assert "node node-2 is gone from the API (its PV pins the member's data there)" in step.reason


def test_a_member_pending_on_a_volume_whose_node_still_exists_waits_for_it():
    """A cordoned or NotReady node is still in the API: it may come back with the data."""
    there = VolumePin("node-2")
    o = observed([M(0), M(1), M(2, healthy=False, unhealthy_for=600, pod_phase="Pending", pin=there)])
    step = next_step(spec(3), o)
    assert isinstance(step, a.Wait) and "c-2 not running for longer than memberUnhealthyTimeout" in step.reason


def test_a_member_pending_on_a_volume_whose_node_is_unknown_waits_and_says_why():
    """No rights to read PVs or Nodes (a namespaced install), or an error: no evidence."""
    for unknown in (
        VolumePin(None, unknown="cannot read PersistentVolume pv-2: 403 Forbidden: no"),
        VolumePin("node-2", node_gone=True, unknown="cannot read Nodes: 403 Forbidden: no"),
    ):
        o = observed([M(0), M(1), M(2, healthy=False, unhealthy_for=600, pod_phase="Pending", pin=unknown)])
        step = next_step(spec(3), o)
        assert isinstance(step, a.Wait) and "c-2 not running for longer than memberUnhealthyTimeout" in step.reason
        assert f"c-2: {unknown.unknown}" in step.reason


def test_a_member_pending_on_a_volume_whose_node_is_gone_waits_for_the_timeout():
    gone = VolumePin("node-2", node_gone=True)
    o = observed([M(0), M(1), M(2, healthy=False, unhealthy_for=59, pod_phase="Pending", pin=gone)])
    assert isinstance(next_step(spec(3), o), a.Wait)


def test_a_member_pending_on_a_gone_node_is_not_replaced_when_its_removal_would_lose_quorum():
    gone = VolumePin("node-2", node_gone=True)
    o = observed(
        [
            M(0),
            M(1, healthy=False, unhealthy_for=600),
            M(2, healthy=False, unhealthy_for=600, pod_phase="Pending", pin=gone),
        ]
    )
    assert not isinstance(next_step(spec(3), o), a.RemoveMember)


def test_a_member_whose_pod_is_pending_without_its_data_is_still_replaced_after_the_timeout():
    o = observed([M(0), M(1), M(2, healthy=False, unhealthy_for=61, pod_phase="Pending", pvc=False)])
    step = next_step(spec(3), o)
    assert isinstance(step, a.RemoveMember) and step.replacing and step.member == "c-2"
    on_empty_dir = dataclasses.replace(spec(3), storage=dataclasses.replace(spec(3).storage, empty_dir=True))
    o = observed([M(0), M(1), M(2, healthy=False, unhealthy_for=61, pod_phase="Pending")])
    step = next_step(on_empty_dir, o)
    assert isinstance(step, a.RemoveMember) and step.replacing


def test_no_quorum_means_no_membership_change():
    o = observed([M(0), M(1, healthy=False, unhealthy_for=600), M(2, healthy=False, unhealthy_for=600)])
    assert isinstance(next_step(spec(3), o), a.Wait)


def test_quorum_loss_without_approval_only_waits_and_says_how_to_recover():
    o = observed([M(0), M(1, healthy=False), M(2, healthy=False)], leader=None, no_quorum_for=600)
    step = next_step(spec(3), o)
    assert isinstance(step, a.Wait) and naming.ANNOTATION_APPROVE_QUORUM_RECOVERY in step.reason


def test_approved_quorum_recovery_starts_from_the_member_with_the_highest_applied_index():
    members = [
        M(0, healthy=False, applied=50),
        M(1, healthy=False, applied=90),
        M(2, healthy=False, pod=False, pvc=False),
    ]
    o = observed(members, leader=None, no_quorum_for=600)
    # Members that answer without a leader: give them statuses as the observer would.
    o = _answering_without_leader(o, members)
    step = next_step(spec(3), o, recovery_allowed=True)
    assert isinstance(step, a.BeginQuorumRecovery) and step.member == "c-1"


def _answering_without_leader(o, members):
    from etcd_operator.core.cluster.observed import MemberStatus

    statuses = {
        m.id: MemberStatus(1, m.id, 0, "3.6.16", 1, 1, m.applied, m.applied, m.applied, 3, False, ())
        for m in members
        if m.pod
    }
    return dataclasses.replace(
        o,
        etcd=dataclasses.replace(
            o.etcd,
            statuses=statuses,
            members=tuple(
                __import__("etcd_operator.clients.etcd.client", fromlist=["Member"]).Member(
                    m.id, m.name, (naming.peer_url("c", "ns", m.name),), (), False
                )
                for m in members
            ),
        ),
    )


def test_quorum_recovery_stops_others_keeps_their_data_aside_then_forces_a_new_cluster_then_finishes():
    op = Operation(QUORUM_RECOVERY, "c-1", 0x101, 0)
    o = observed([M(0, healthy=False), M(1, healthy=False), M(2, healthy=False)], leader=None)
    st = recorded(operation=op)
    step = next_step(spec(3), o, st)
    assert step == a.StopMemberPod(step.reason, "c-0")
    o = dataclasses.replace(o, pods={"c-1": o.pods["c-1"]})
    step = next_step(spec(3), o, st)
    assert step == a.SetAsideMemberData(step.reason, "c-0", min_ordinal=3)
    o = dataclasses.replace(o, pvcs={"data-c-1": o.pvcs["data-c-1"]})
    step = next_step(spec(3), o, st)
    assert isinstance(step, a.ForceNewCluster) and step.member == "c-1"
    alone = observed([M(1)], leader=1)
    forced = dataclasses.replace(alone.pods["c-1"], force_new_cluster=True)
    alone = dataclasses.replace(alone, pods={"c-1": forced})
    assert isinstance(next_step(spec(3), alone, st), a.FinishQuorumRecovery)


def test_rolling_update_restarts_followers_before_the_leader_then_moves_leadership():
    step = next_step(spec(3), observed([M(0, outdated=True), M(1, outdated=True), M(2)], leader=0))
    assert step == a.RollMember(step.reason, "c-1")
    step = next_step(spec(3), observed([M(0, outdated=True), M(1), M(2)], leader=0))
    assert isinstance(step, a.MoveLeader) and step.from_id == 0x100


def test_rolling_update_waits_for_a_healthy_cluster():
    o = observed([M(0, outdated=True), M(1, outdated=True), M(2, healthy=False, unhealthy_for=1)])
    assert isinstance(next_step(spec(3), o), a.Wait)


def test_a_rolled_member_still_answering_while_its_pod_stops_is_not_rolled_again_nor_is_another():
    """Between a roll's pod deletion and the pod being gone, etcd still answers: the next
    pass waits instead of rolling a member again or another one (two members down at once)."""
    o = observed([M(0, outdated=True), M(1, outdated=True, stopping=True), M(2, outdated=True)], leader=0)
    health = health_of(spec(3), o)
    assert health.state == HealthState.DEGRADED and "c-1" in health.message
    step = next_step(spec(3), o)
    assert isinstance(step, a.Wait) and "c-1" in step.reason


def test_no_defragmentation_while_a_members_pod_stops():
    big = dict(db_size=512 << 20, db_in_use=100 << 20)
    o = observed([M(0, **big), M(1, **big), M(2, stopping=True)], leader=0)
    assert isinstance(next_step(spec(3), o), a.Wait)


def test_scale_down_waits_while_another_members_pod_stops():
    """Removing c-2 leaves 2 voters, quorum 2, and c-1's pod is stopping: one would stay."""
    o = observed([M(0), M(1, stopping=True), M(2)], leader=0)
    step = next_step(spec(1), o)
    assert isinstance(step, a.Wait), step
    assert isinstance(next_step(spec(1), observed([M(0), M(1), M(2)], leader=0)), a.RemoveMember)


def test_defragmentation_picks_a_fragmented_follower_before_the_leader():
    big = dict(db_size=512 << 20, db_in_use=100 << 20)
    step = next_step(spec(3), observed([M(0, **big), M(1, **big), M(2)], leader=0))
    assert step == a.Defragment(step.reason, "c-1", 0x101)


def test_paused_cluster_is_left_alone():
    s = dataclasses.replace(spec(3), paused=True)
    assert isinstance(next_step(s, observed([M(0), M(1)])), a.Wait)


def test_all_pods_gone_restarts_members_from_their_pvcs():
    o = observed([M(0, pod=False, healthy=False), M(1, pod=False, healthy=False)])
    step = next_step(spec(2), o)
    assert isinstance(step, a.CreateMemberPod) and step.joined_before and step.member == "c-0"


# --- properties -------------------------------------------------------------------------

usually = st.sampled_from([True, True, True, True, False])
rarely = st.sampled_from([False, False, False, False, True])
member_strategy = st.builds(
    M,
    ordinal=st.integers(0, 0),  # replaced below
    started=usually,
    learner=rarely,
    healthy=usually,
    pod=usually,
    pvc=usually,
    settled=usually,
    outdated=rarely,
    unhealthy_for=st.one_of(st.none(), st.floats(0, 1000)),
    applied=st.integers(0, 1000),
)


@st.composite
def scenarios(draw):
    members = draw(st.lists(member_strategy, min_size=1, max_size=7))
    for i, m in enumerate(members):
        m.ordinal = i
        if not m.started:
            m.learner, m.settled = True, False
    leader = draw(st.one_of(st.none(), st.integers(0, len(members) - 1)))
    if leader is not None and (members[leader].learner or not members[leader].healthy or not members[leader].pod):
        leader = None
    size = draw(st.integers(1, 9))
    return (
        spec(size),
        observed(members, leader=leader, no_quorum_for=draw(st.one_of(st.none(), st.floats(0, 100)))),
        members,
    )


@settings(max_examples=400, deadline=None)
@given(scenarios(), st.booleans())
def test_removals_never_break_quorum_or_take_the_leader(scenario, recovery_allowed):
    s, o, members = scenario
    health = health_of(s, o)
    step = plan_accepting(s, o, health, desired_hash=HASH, recovery_allowed=recovery_allowed)
    if isinstance(step, a.RemoveMember):
        assert step.member_id != health.leader_id
        removed = next(m for m in health.members if m.id == step.member_id)
        if not removed.is_learner:
            remaining = [m for m in health.voters if m.id != removed.id]
            healthy = [m for m in remaining if health.is_healthy(m)]
            assert len(healthy) >= naming.quorum(len(remaining))
        # Never a healthy voter while an unhealthy one exists.
        if health.is_healthy(removed) and not removed.is_learner:
            assert all(health.is_healthy(m) for m in health.voters)


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_members_are_added_only_to_a_fully_healthy_cluster_without_learners(scenario):
    s, o, _ = scenario
    health = health_of(s, o)
    step = plan_accepting(s, o, health, desired_hash=HASH)
    if isinstance(step, a.AddLearner):
        assert not health.learners
        assert all(health.is_healthy(m) for m in health.members)
        assert len(health.voters) < s.size
        assert step.member not in o.pods and naming.pvc_name(step.member) not in o.pvcs


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_deletions_only_touch_objects_of_members_absent_from_the_leaders_list(scenario):
    s, o, _ = scenario
    health = health_of(s, o)
    step = plan_accepting(s, o, health, desired_hash=HASH)
    if isinstance(step, (a.DeleteMemberPod, a.DeleteMemberPVC)):
        assert o.etcd.from_leader
        names = {m.name for m in health.members if m.name}
        assert step.member not in names


def test_restored_members_start_with_the_full_initial_cluster_of_their_data():
    from etcd_operator.core.cluster.observed import PVCView

    restored = tuple(PVCView(naming.pvc_name(f"c-{i}"), f"pvc-{i}", None, False, None, restored=True) for i in range(3))
    o = observed([], extra_pvcs=restored)
    step = next_step(spec(3), o, recorded(bootstrapped=False))
    full = ",".join(f"c-{i}={naming.peer_url('c', o.namespace, f'c-{i}')}" for i in range(3))
    # All of them in one step: none can elect a leader alone.
    assert isinstance(step, a.StartRestoredMembers) and step.members == ("c-0", "c-1", "c-2")
    assert step.initial_cluster == full
    plain = tuple(dataclasses.replace(p, restored=False) for p in restored)
    step = next_step(spec(3), observed([], extra_pvcs=plain), recorded(bootstrapped=False))
    assert isinstance(step, a.BootstrapFirstMember) and step.initial_cluster == ""  # itself only


def test_a_restored_member_started_after_the_others_joined_gets_every_restored_member():
    """Found by the simulator (restore_race, seed 612): a restored member whose data was lost
    before it started never joined; the others did (their PVCs carry their member IDs). When
    no member answers and it is started again, a list naming only itself would make etcd, on
    its empty data directory, bootstrap a new one-member cluster serving no data. It gets the
    full initial cluster the restore wrote, with which it never reaches a quorum of its own."""
    from etcd_operator.core.cluster.observed import PVCView

    restored = (
        PVCView("data-c-0", "pvc-0", None, False, None, restored=True),
        PVCView("data-c-1", "pvc-1", 0x101, False, None, restored=True),
        PVCView("data-c-2", "pvc-2", 0x102, False, None, restored=True),
    )
    o = observed([], no_quorum_for=5, extra_pvcs=restored)
    step = next_step(spec(3), o, recorded(bootstrapped=True))
    full = ",".join(f"c-{i}={naming.peer_url('c', o.namespace, f'c-{i}')}" for i in range(3))
    assert isinstance(step, a.StartRestoredMembers) and step.members == ("c-0",)
    assert step.initial_cluster == full


def test_restored_members_whose_pods_exist_are_not_started_again():
    """An operator killed while starting restored members: the next pass starts only the rest."""
    from etcd_operator.core.cluster.observed import PVCView

    restored = tuple(PVCView(naming.pvc_name(f"c-{i}"), f"pvc-{i}", None, False, None, restored=True) for i in range(3))
    o = observed(
        [],
        extra_pvcs=restored,
        extra_pods=(PodView("c-1", "uid-c-1", None, "Running", False, False, "10.0.0.1", HASH, "new", "x", False),),
    )
    st = recorded(bootstrapped=False)
    step = next_step(spec(3), o, st)
    assert isinstance(step, a.StartRestoredMembers) and step.members == ("c-0", "c-2")
    assert step.initial_cluster.count("=") == 3  # still every member the data holds
    going = tuple(dataclasses.replace(p, deleting=True) if p.name == "data-c-2" else p for p in restored)
    step = next_step(spec(3), dataclasses.replace(o, pvcs={p.name: p for p in going}), st)
    assert isinstance(step, a.StartRestoredMembers) and step.members == ("c-0",)  # never on a PVC being deleted
