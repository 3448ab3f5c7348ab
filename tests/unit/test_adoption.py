"""Adoption of a running cluster (spec.adoption, status.adoption): the foreign cluster is
checked before anything joins it, own members join one at a time as learners, and the
foreign members leave only when asked, once every own member is a healthy voter, one at a
time, the leader last after leadership moved. The ordinary planner never sees foreign
members as its own."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.core.cluster import adoption, naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.adoption_record import AdoptionRecord
from etcd_operator.core.cluster.decision import plan
from etcd_operator.core.cluster.health import diagnose
from etcd_operator.core.cluster.observed import EtcdView, Member, MemberStatus, Observed, PodView
from etcd_operator.core.cluster.planner import next_step
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import Adoption, ClusterSpec

CLUSTER, NS = "c", "ns"
CLUSTER_ID = 0xC1
FOREIGN = ("infra0", "infra1", "infra2")
ENDPOINTS = tuple(f"http://10.1.0.{i}:2379" for i in range(3))


def spec(
    remove: bool = False, version: str = "3.6.16", cluster_id: int | None = CLUSTER_ID, endpoints=ENDPOINTS
) -> ClusterSpec:
    base = ClusterSpec.from_dict({"size": 3, "version": version, "tls": {"enabled": False}})
    return dataclasses.replace(base, adoption=Adoption(endpoints, remove, cluster_id))


@dataclasses.dataclass
class Own:
    ordinal: int
    learner: bool = False
    started: bool = True
    healthy: bool = True
    pod: bool = True
    settled: bool = True
    stopping: bool = False  # its pod is being deleted

    @property
    def name(self) -> str:
        return naming.member_name(CLUSTER, self.ordinal)

    @property
    def id(self) -> int:
        return 0x100 + self.ordinal


def foreign_id(index: int) -> int:
    return 0x900 + index


def status_of(member_id: int, leader: int, version: str = "3.6.16", learner: bool = False, errors=()) -> MemberStatus:
    return MemberStatus(CLUSTER_ID, member_id, leader, version, 1000, 1000, 50, 50, 50, 2, learner, tuple(errors))


def observe(
    own: list[Own] = (),
    foreign: tuple[str, ...] = FOREIGN,
    leader: int = foreign_id(0),
    silent: tuple[str, ...] = (),
    version: str = "3.6.16",
    cluster_id: int = CLUSTER_ID,
    other_cluster: dict[str, int] | None = None,
    alarms: tuple[str, ...] = (),
) -> Observed:
    members, statuses, endpoints, pods = [], {}, {}, {}
    for i, name in enumerate(FOREIGN):
        if name not in foreign:
            continue
        fid = foreign_id(i)
        members.append(Member(fid, name, (f"http://10.1.0.{i}:2380",), (ENDPOINTS[i],), False))
        if name not in silent:
            statuses[fid] = status_of(fid, leader, version, errors=alarms)
            endpoints[fid] = f"10.1.0.{i}:2379"
    for m in own:
        peer = naming.peer_url(CLUSTER, NS, m.name)
        members.append(Member(m.id, m.name if m.started else "", (peer,), (), m.learner))
        if m.healthy and m.started and m.pod:
            statuses[m.id] = status_of(m.id, leader, learner=m.learner)
            endpoints[m.id] = f"10.0.0.{m.ordinal}:2379"
        if m.pod:
            self_only = f"{m.name}={peer}"
            pods[m.name] = PodView(
                m.name,
                f"uid-{m.name}",
                m.id,
                "Running",
                m.healthy,
                m.stopping,
                f"10.0.0.{m.ordinal}",
                "h",
                "existing" if m.settled else "new",
                self_only if m.settled else "x",
                False,
            )
    etcd = EtcdView(
        tuple(members),
        statuses,
        cluster_id,
        leader,
        leader in statuses,
        {},
        endpoints,
        other_cluster or {},
    )
    return Observed(CLUSTER, NS, "uid", pods, {}, etcd, {}, None, "3.6.16")


RECORD = AdoptionRecord(CLUSTER_ID, FOREIGN)


def status(record: AdoptionRecord | None = RECORD) -> ClusterStatus:
    return ClusterStatus(bootstrapped=True, recorded_cluster_id=CLUSTER_ID, adoption=record)


def step(s: ClusterSpec, o: Observed, st: ClusterStatus | None = None) -> a.Step:
    st = status() if st is None else st
    return adoption.next_step(s, st, o, diagnose(s, st, o))


OWN_VOTERS = [Own(0), Own(1), Own(2)]


def test_the_foreign_cluster_id_and_members_are_recorded_before_anything_joins():
    chosen = step(spec(), observe(), ClusterStatus())
    assert isinstance(chosen, a.RecordAdoption)
    assert chosen.record == AdoptionRecord(CLUSTER_ID, FOREIGN)


def test_the_first_own_member_joins_the_foreign_cluster_as_a_learner():
    chosen = step(spec(), observe())
    assert isinstance(chosen, a.AddLearner) and chosen.member == "c-0"


def test_an_added_member_starts_with_the_foreign_members_in_its_initial_cluster():
    chosen = step(spec(), observe([Own(0, learner=True, started=False, pod=False)]))
    assert isinstance(chosen, a.CreateMemberPod) and chosen.member == "c-0" and not chosen.joined_before
    assert chosen.initial_cluster == ",".join(
        [f"c-0={naming.peer_url(CLUSTER, NS, 'c-0')}"] + [f"infra{i}=http://10.1.0.{i}:2380" for i in range(3)]
    )


def test_a_learner_that_serves_is_promoted_and_the_next_member_waits_for_it():
    assert isinstance(step(spec(), observe([Own(0, learner=True)])), a.PromoteLearner)
    waiting = step(spec(), observe([Own(0, learner=True, healthy=False)]))
    assert isinstance(waiting, a.WaitForLearner)


def test_an_own_learner_held_at_a_snapshot_of_the_foreign_leader_gets_one_entry():
    o = observe([Own(0, learner=True, started=False, healthy=False)])
    leader = o.etcd.statuses[o.etcd.leader_id]
    busy = dataclasses.replace(leader, raft_index=20_000, raft_applied_index=20_000)
    o = dataclasses.replace(
        o,
        etcd=dataclasses.replace(o.etcd, statuses={**o.etcd.statuses, leader.member_id: busy}),
        unhealthy_for={"c-0": 10.0},
    )
    chosen = step(spec(), o)
    assert isinstance(chosen, a.AppendEntryForLearner) and chosen.member_id == Own(0).id, chosen
    assert chosen.peer_urls == (naming.peer_url(CLUSTER, NS, "c-0"),)


def test_own_members_join_up_to_size_one_at_a_time():
    assert isinstance(step(spec(), observe([Own(0)])), a.AddLearner)
    assert step(spec(), observe([Own(0), Own(1)])).member == "c-2"


def test_an_unhealthy_foreign_member_stops_the_adoption():
    chosen = step(spec(), observe(silent=("infra1",)))
    assert isinstance(chosen, a.Wait) and "infra1" in chosen.reason


def test_an_alarm_stops_the_adoption():
    chosen = step(spec(), observe(alarms=("memberID:2304 alarm:NOSPACE ",)))
    assert isinstance(chosen, a.Wait) and "NOSPACE" in chosen.reason


def test_a_version_of_another_minor_is_refused_with_a_condition():
    s, st, o = spec(version="3.5.21"), status(), observe()
    chosen = step(s, o, st)
    assert isinstance(chosen, a.Wait) and "3.6.16" in chosen.reason
    cond = adoption.condition(s, st, o, diagnose(s, st, o), chosen)
    assert cond is not None and (cond.status, cond.reason) == (False, "VersionMismatch")


def test_a_changed_cluster_id_stops_the_adoption():
    s, st = spec(), status()
    for seen in (observe(cluster_id=0xBAD), observe(other_cluster={"10.1.0.2:2379": 0xBAD})):
        chosen = step(s, seen, st)
        assert isinstance(chosen, a.Wait) and "bad" in chosen.reason
        assert adoption.condition(s, st, seen, diagnose(s, st, seen), chosen).reason == "ClusterIDMismatch"


# --- the pin: spec.adoption.clusterID and the namespace of the endpoints --------------------

# Steps that send something to etcd: none is taken while the adoption is refused.
SENDS = (a.AddLearner, a.PromoteLearner, a.RemoveMember, a.MoveLeader, a.CreateMemberPod, a.RecordAdoption)


def test_a_cluster_answering_with_another_id_than_the_spec_pins_is_not_adopted():
    """Before anything is recorded: whatever cluster answers, only the pinned one is adopted."""
    s, st = spec(cluster_id=0xABC), ClusterStatus()
    for seen in (observe(), observe(other_cluster={"10.1.0.1:2379": CLUSTER_ID})):
        chosen = step(s, seen, st)
        assert isinstance(chosen, a.Wait) and not isinstance(chosen, SENDS)
        assert "abc" in chosen.reason and "c1" in chosen.reason
        cond = adoption.condition(s, st, seen, diagnose(s, st, seen), chosen)
        assert (cond.status, cond.reason) == (False, "ClusterIDMismatch")
    # The whole pass, through the planner: the same refusal, and the condition.
    decision = plan(s, st, observe(), 0.0)
    assert isinstance(decision.action, a.Wait)
    assert {c.type: c.reason for c in decision.conditions}["Adopted"] == "ClusterIDMismatch"


def test_an_adoption_recorded_for_another_id_than_the_spec_pins_stops():
    chosen = step(spec(cluster_id=0xABC), observe([Own(0)]), status())
    assert isinstance(chosen, a.Wait) and "abc" in chosen.reason


def test_without_a_cluster_id_nothing_is_dialled_or_sent():
    s = spec(cluster_id=None)
    assert adoption.dial_endpoints(s, ClusterStatus(), NS) == ()
    chosen = step(s, observe(), ClusterStatus())
    assert isinstance(chosen, a.Wait) and "spec.adoption.clusterID" in chosen.reason
    assert adoption.condition(
        s, ClusterStatus(), observe(), diagnose(s, ClusterStatus(), observe()), chosen
    ).reason == ("ClusterIDRequired")


def test_the_observer_trusts_only_answers_with_the_pinned_id_before_one_is_recorded():
    assert adoption.expected_cluster_id(spec(cluster_id=0xABC), ClusterStatus()) == 0xABC
    assert adoption.expected_cluster_id(spec(cluster_id=0xABC), status()) == CLUSTER_ID  # recorded: it decides
    plain = ClusterSpec.from_dict({"size": 3})
    assert adoption.expected_cluster_id(plain, ClusterStatus()) is None


@pytest.mark.parametrize(
    "endpoint, namespace",
    [
        ("http://etcd-0.etcd.kube-system.svc:2379", "kube-system"),
        ("https://etcd-0.etcd.kube-system.svc.cluster.local:2379", "kube-system"),
        ("http://etcd.kube-system.svc.cluster.local.:2379", "kube-system"),
        ("http://etcd-client.tenant-b:2379", "tenant-b"),  # the search path makes it tenant-b's Service
        ("http://etcd-client.ns.svc:2379", "ns"),
        ("http://10.1.0.1:2379", None),
        ("http://[fd00::1]:2379", None),
        ("http://etcd1.corp.example.com:2379", None),
        ("http://etcd1:2379", None),
    ],
)
def test_the_namespace_an_endpoint_names(endpoint, namespace):
    (dialled,) = Adoption((endpoint,), cluster_id=CLUSTER_ID).dial_endpoints
    assert adoption.endpoint_namespace(dialled) == namespace


def test_an_endpoint_of_another_namespace_is_refused_unless_the_install_allows_it():
    elsewhere = (*ENDPOINTS[:2], "http://etcd-2.etcd.kube-system.svc:2379")
    s, st = spec(endpoints=elsewhere), ClusterStatus()
    assert adoption.dial_endpoints(s, st, NS) == ()  # nothing is sent to any of them
    assert adoption.dial_endpoints(s, st, NS, cross_namespace_allowed=True) == Adoption(elsewhere).dial_endpoints
    assert adoption.dial_endpoints(spec(), st, NS) == Adoption(ENDPOINTS).dial_endpoints
    chosen = step(s, observe(), st)
    assert isinstance(chosen, a.Wait) and "kube-system" in chosen.reason
    cond = adoption.condition(s, st, observe(), diagnose(s, st, observe()), chosen)
    assert (cond.status, cond.reason) == (False, "CrossNamespaceEndpoint")
    allowed = dataclasses.replace(observe(), adoption_cross_namespace=True)
    assert isinstance(step(s, allowed, st), a.RecordAdoption)
    same_namespace = spec(endpoints=("http://etcd-0.etcd.ns.svc:2379",))
    assert isinstance(step(same_namespace, observe(), st), a.RecordAdoption)


def test_foreign_members_stay_without_remove_foreign_members():
    chosen = step(spec(remove=False), observe(OWN_VOTERS))
    assert isinstance(chosen, a.Steady) and "removeForeignMembers" in chosen.reason


def test_foreign_non_leaders_are_removed_first_one_at_a_time():
    chosen = step(spec(remove=True), observe(OWN_VOTERS))
    assert isinstance(chosen, a.RemoveMember) and chosen.member_id == foreign_id(1)


@pytest.mark.parametrize(
    "own",
    [
        [Own(0), Own(1), Own(2, healthy=False)],
        [Own(0), Own(1), Own(2, learner=True)],
        [Own(0), Own(1)],
        [Own(0), Own(1), Own(2, pod=False)],
        [Own(0), Own(1, stopping=True), Own(2)],
    ],
    ids=["unhealthy", "learner", "missing", "pod-gone", "stopping"],
)
def test_no_foreign_member_is_removed_while_an_own_member_is_not_a_healthy_voter(own):
    chosen = step(spec(remove=True), observe(own))
    assert not isinstance(chosen, a.RemoveMember) and not isinstance(chosen, a.MoveLeader)


def test_the_leader_is_removed_last_after_leadership_moved_to_an_own_member():
    remaining = observe(OWN_VOTERS, foreign=("infra0",))
    moved = step(spec(remove=True), remaining, status(AdoptionRecord(CLUSTER_ID, ("infra0",))))
    assert isinstance(moved, a.MoveLeader) and moved.from_id == foreign_id(0) and moved.to_id == Own(0).id
    led = observe(OWN_VOTERS, foreign=("infra0",), leader=Own(0).id)
    removed = step(spec(remove=True), led, status(AdoptionRecord(CLUSTER_ID, ("infra0",))))
    assert isinstance(removed, a.RemoveMember) and removed.member_id == foreign_id(0)


def test_a_removal_is_weighed_against_the_quorum_of_the_remaining_voters():
    # The checks before it (every foreign member answers, every own member a healthy voter)
    # stop first in any observed state; the arithmetic itself is checked here: with only 3
    # of 6 voters healthy, removing a healthy one leaves 2 of 5.
    o = observe(OWN_VOTERS)
    h = diagnose(spec(remove=True), status(), o)
    h = dataclasses.replace(h, healthy_ids=frozenset({foreign_id(1), Own(0).id, Own(1).id}))
    victim = next(m for m in h.members if m.id == foreign_id(1))
    assert not adoption._keeps_quorum(h, victim)
    assert adoption._keeps_quorum(diagnose(spec(remove=True), status(), o), victim)


def test_no_foreign_member_is_removed_while_other_foreign_voters_are_silent():
    chosen = step(spec(remove=True), observe(OWN_VOTERS, silent=("infra1", "infra2")))
    assert isinstance(chosen, a.Wait)


def test_the_adoption_completes_once_no_foreign_member_is_left():
    st = status(AdoptionRecord(CLUSTER_ID, ()))
    chosen = step(spec(remove=True), observe(OWN_VOTERS, foreign=(), leader=Own(0).id), st)
    assert isinstance(chosen, a.RecordAdoption) and chosen.record.completed


def test_after_completion_the_ordinary_planner_decides_and_a_restart_does_not_reopen_it():
    s = spec(remove=True)
    st = status(AdoptionRecord(CLUSTER_ID, (), completed=True))
    assert not adoption.owns(s, st)
    assert adoption.dial_endpoints(s, st, NS) == ()
    o = observe(OWN_VOTERS, foreign=(), leader=Own(0).id)
    decided = plan(s, st, o, 0.0)
    assert decided.action.kind in {"Steady", "CheckPodSpec", "RollMember"}
    cond = next(cond for cond in decided.conditions if cond.type == "Adopted")
    assert (cond.status, cond.reason) == (True, "ForeignMembersRemoved")


def test_the_ordinary_planner_never_removes_foreign_members_while_adopting():
    s, st = spec(remove=False), status()
    o = observe(OWN_VOTERS)
    h = diagnose(s, st, o)
    chosen = next_step(s, st, o, h, 0.0, desired_hash="h")
    assert not isinstance(chosen, (a.RemoveMember, a.DeleteMemberPod))
    # Without the adoption module, the planner would take them for members that lost their data.
    bare = dataclasses.replace(s, adoption=None)
    unowned = next_step(bare, ClusterStatus(bootstrapped=True, recorded_cluster_id=CLUSTER_ID), o, h, 0.0, "h")
    assert isinstance(unowned, a.RemoveMember)


def test_status_adoption_round_trips():
    assert AdoptionRecord.from_dict(RECORD.to_dict()) == RECORD
    assert ClusterStatus.from_dict({"adoption": RECORD.to_dict()}).adoption == RECORD


def test_dropping_spec_adoption_midway_never_hands_foreign_members_to_the_ordinary_planner():
    s = dataclasses.replace(spec(), adoption=None)
    st, o = status(), observe(OWN_VOTERS)
    assert adoption.owns(s, st)
    chosen = next_step(s, st, o, diagnose(s, st, o), 0.0, desired_hash="h")
    assert isinstance(chosen, a.Wait) and "spec.adoption was removed" in chosen.reason


@pytest.mark.parametrize("value, allowed", [(None, False), ("false", False), ("true", True), ("TRUE", True)])
def test_the_operator_setting_that_allows_adopting_across_namespaces(value, allowed):
    from etcd_operator.runtime.config import OperatorConfig

    env = {} if value is None else {"ADOPTION_ALLOW_CROSS_NAMESPACE": value}
    assert OperatorConfig.from_env(env).adoption_cross_namespace is allowed
