"""How a new cluster is created (cluster/bootstrap.py): every member at once with etcd's
static bootstrap, only when nothing of the cluster exists and nothing was recorded; the
record then decides every later pass."""

from __future__ import annotations

import dataclasses

from etcd_operator.core.cluster import bootstrap, naming, tls_plan
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.adoption_record import AdoptionRecord
from etcd_operator.core.cluster.observed import Member, PodView, PVCView, TLSView
from etcd_operator.core.cluster.recorded import BootstrapRecord
from etcd_operator.core.cluster.status import restore_hold_fields
from tests.unit.cluster_scenarios import HASH, NOW, M, decide_accepting, health_of, observed, plan_accepting, recorded
from tests.unit.cluster_scenarios import spec as spec_of

NEW = recorded(bootstrapped=False)


def peer(name: str, tls: bool = False) -> str:
    return naming.peer_url("c", "ns", name, tls)


FULL = ",".join(f"c-{i}={peer(f'c-{i}')}" for i in range(3))
STATIC = BootstrapRecord(bootstrap.STATIC, FULL)


def step_for(s, o, st=NEW):
    return plan_accepting(s, o, health_of(s, o, st), st, desired_hash=HASH)


def pvc(name: str, member_id: int | None = None) -> PVCView:
    return PVCView(naming.pvc_name(name), f"pvc-{name}", member_id, False, None)


def new_pod(name: str, initial_cluster: str = FULL) -> PodView:
    """A static member's pod that runs but has no quorum yet (not ready)."""
    return PodView(name, f"uid-{name}", None, "Running", False, False, "10.0.0.9", HASH, "new", initial_cluster, False)


# --- the choice of the path ----------------------------------------------------------------


def test_a_new_cluster_records_the_static_path_with_every_member_before_creating_anything():
    step = step_for(spec_of(3), observed([], leader=None))
    assert step == a.RecordBootstrap(step.reason, FULL)


def test_a_new_tls_cluster_names_its_members_at_their_https_peer_urls():
    o = dataclasses.replace(observed([], leader=None), tls=TLSView(transport=tls_plan.HTTPS))
    cluster = bootstrap.initial_cluster(spec_of(3), NEW, o)
    assert cluster == ",".join(f"c-{i}={peer(f'c-{i}', tls=True)}" for i in range(3))


def test_then_every_member_is_created_at_once_with_the_recorded_initial_cluster():
    step = step_for(spec_of(3), observed([], leader=None), recorded(bootstrapped=False, bootstrap=STATIC))
    assert step == a.BootstrapMembers(step.reason, ("c-0", "c-1", "c-2"), FULL)


def test_a_pvc_that_exists_before_anything_was_recorded_means_the_learner_path():
    """Guard: no PVC of the cluster. It may hold data (a retained volume, an older operator's
    first member): the first member starts on it as its data says, never as part of a new
    static cluster."""
    for member_id in (None, 0x100):
        o = observed([], leader=None, extra_pvcs=(pvc("c-0", member_id),))
        step = step_for(spec_of(3), o)
        assert not isinstance(step, (a.RecordBootstrap, a.BootstrapMembers)), step
        assert isinstance(step, (a.BootstrapFirstMember, a.CreateMemberPod)) and step.member == "c-0"
        assert bootstrap.static_refusal(spec_of(3), NEW, o).startswith("a PVC of the cluster exists")


def test_a_pod_that_exists_before_anything_was_recorded_means_the_learner_path():
    """Guard: no member pod. On emptyDir storage there is no PVC: a first member started by
    the learner path (an older operator) would otherwise run beside a new static cluster."""
    s = spec_of(3)
    s = dataclasses.replace(s, storage=dataclasses.replace(s.storage, empty_dir=True))
    o = observed([], leader=None, extra_pods=(new_pod("c-0", f"c-0={peer('c-0')}"),))
    step = step_for(s, o)
    assert not isinstance(step, (a.RecordBootstrap, a.BootstrapMembers)), step


def test_a_cluster_that_served_never_takes_the_static_path():
    """Guard: status.clusterID. (The planner waits earlier for a cluster that served and lost
    everything; the guard keeps the static path closed whatever comes before it.)"""
    assert bootstrap.static_refusal(spec_of(3), recorded(), observed([], leader=None)) is not None
    assert isinstance(step_for(spec_of(3), observed([], leader=None), recorded()), a.Wait)


def test_a_recorded_learner_path_stays_the_learner_path():
    """Guard: a path recorded. The first member's PVC went before it served: the cluster is
    created again as recorded."""
    st = recorded(bootstrapped=False, bootstrap=BootstrapRecord(bootstrap.LEARNERS))
    step = step_for(spec_of(3), observed([], leader=None), st)
    assert isinstance(step, a.BootstrapFirstMember) and step.member == "c-0"


def test_answering_members_restores_and_adoptions_refuse_the_static_path():
    s, o = spec_of(3), observed([], leader=None)
    answering = dataclasses.replace(o, etcd=dataclasses.replace(o.etcd, members=(Member(1, "x", ("u",), (), False),)))
    assert bootstrap.static_refusal(s, NEW, answering) == "a member answers"
    assert bootstrap.static_refusal(s, NEW, dataclasses.replace(o, restoring="r1")) is not None
    adopting = recorded(bootstrapped=False, adoption=AdoptionRecord(0xABC, ("x",)))
    assert bootstrap.static_refusal(s, adopting, o) is not None


# --- converging on the record ------------------------------------------------------------------


def test_an_operator_killed_between_pod_creations_creates_the_rest_with_the_same_initial_cluster():
    st = recorded(bootstrapped=False, bootstrap=STATIC)
    o = observed([], leader=None, extra_pods=(new_pod("c-0"), new_pod("c-1")), extra_pvcs=(pvc("c-0"), pvc("c-1")))
    step = step_for(spec_of(3), o, st)
    assert step == a.BootstrapMembers(step.reason, ("c-2",), FULL)
    # Killed after c-2's PVC, before its pod: the same.
    o = dataclasses.replace(o, pvcs={**o.pvcs, naming.pvc_name("c-2"): pvc("c-2")})
    assert step_for(spec_of(3), o, st) == a.BootstrapMembers(step.reason, ("c-2",), FULL)


def test_a_member_whose_pod_goes_mid_bootstrap_gets_the_whole_initial_cluster_again():
    """Its data directory, if any, keeps its identity (etcd ignores the flags over data); an
    empty one joins the same bootstrap. Without the record it would restart as a first
    member naming itself only: a cluster of its own."""
    st = recorded(bootstrapped=False, bootstrap=STATIC)
    o = observed(
        [], leader=None, extra_pods=(new_pod("c-0"), new_pod("c-2")), extra_pvcs=tuple(pvc(f"c-{i}") for i in range(3))
    )
    step = step_for(spec_of(3), o, st)
    assert step == a.BootstrapMembers(step.reason, ("c-1",), FULL)


def test_a_static_member_that_never_started_is_created_not_replaced_once_the_others_serve():
    """etcd lists a member of the initial cluster before it started (by name since 3.6, never
    with client URLs): it is given its pod, not removed as a member that lost its data."""
    st = recorded(bootstrap=STATIC)
    o = observed([M(0), M(1), M(2, healthy=False, pod=False, pvc=False, unhealthy_for=120)])
    unstarted = Member(M(2).id, "c-2", (peer("c-2"),), (), False)
    members = tuple(unstarted if m.id == M(2).id else m for m in o.etcd.members)
    o = dataclasses.replace(o, etcd=dataclasses.replace(o.etcd, members=members))
    step = step_for(spec_of(3), o, st)
    assert step == a.BootstrapMembers(step.reason, ("c-2",), FULL)


def test_a_static_member_never_restarts_as_a_lone_first_member_once_the_bootstrap_completed():
    """Found by the simulator (main, seed 4998): a member of a completed static bootstrap lost
    its pod before its PVC got its member ID, while no member answered. It restarts on its
    data naming itself only with state=existing (etcd ignores both over data; over an empty
    directory it fails loudly), never as a first member (state=new: a cluster of its own)."""
    st = recorded(bootstrap=dataclasses.replace(STATIC, completed=True))
    o = observed([], leader=None, extra_pods=(new_pod("c-0"),), extra_pvcs=(pvc("c-0", 0x100), pvc("c-1")))
    step = step_for(spec_of(2), o, st)
    assert isinstance(step, a.CreateMemberPod) and step.member == "c-1" and step.joined_before
    assert step.initial_cluster == f"c-1={peer('c-1')}" and step.member_id == 0


def test_a_static_member_that_started_rejoins_on_its_pvc_like_any_member():
    st = recorded(bootstrap=STATIC)
    step = step_for(spec_of(3), observed([M(0), M(1), M(2, healthy=False, pod=False)]), st)
    assert isinstance(step, a.CreateMemberPod) and step.member == "c-2" and step.joined_before


def test_a_static_member_removed_from_the_cluster_is_not_created_again():
    st = recorded(bootstrap=STATIC)
    step = step_for(spec_of(2), observed([M(0), M(1)]), st)
    assert not isinstance(step, a.BootstrapMembers)


def test_later_members_join_as_learners():
    st = recorded(bootstrap=dataclasses.replace(STATIC, completed=True))
    step = step_for(spec_of(5), observed([M(0), M(1), M(2)]), st)
    assert isinstance(step, a.AddLearner) and step.member == "c-3"


# --- the record --------------------------------------------------------------------------------


def test_the_record_is_completed_once_the_leaders_list_shows_every_member_started():
    st = recorded(bootstrap=STATIC)
    assert decide_accepting(spec_of(3), observed([M(0), M(1), M(2)]), st=st, now=NOW).bootstrap.completed
    halfway = observed([M(0), M(1), M(2, started=False, pod=False, pvc=False)])
    assert not decide_accepting(spec_of(3), halfway, st=st).bootstrap.completed


def test_the_record_is_written_with_every_pass_and_dropped_under_a_restore_hold():
    st = recorded(bootstrap=STATIC)
    decision = decide_accepting(spec_of(3), observed([M(0), M(1), M(2)]), st=st)
    assert decision.status_fields()["bootstrap"]["mode"] == "Static"
    held = dataclasses.replace(observed([M(0), M(1), M(2)]), restoring="r1")
    assert decide_accepting(spec_of(3), held, st=st).status_fields()["bootstrap"] is None
    assert restore_hold_fields(held)["bootstrap"] is None


def test_the_learner_path_is_recorded_with_its_first_member():
    o = observed([], leader=None, extra_pvcs=(pvc("c-0"),))
    decision = decide_accepting(spec_of(3), o, st=NEW)
    assert isinstance(decision.action, a.BootstrapFirstMember)
    assert decision.bootstrap == BootstrapRecord(bootstrap.LEARNERS)


def test_the_record_reads_back_as_written():
    assert BootstrapRecord.from_dict(STATIC.to_dict()) == STATIC
    assert STATIC.members == ("c-0", "c-1", "c-2") and STATIC.peer_url("c-1") == peer("c-1")
    assert BootstrapRecord.from_dict(None) is None and BootstrapRecord.from_dict({}) is None


# --- the executor ------------------------------------------------------------------------------


class CreatingKube:
    def __init__(self):
        self.created = []

    async def create(self, resource, namespace, manifest):
        self.created.append(manifest)


BODY = {
    "apiVersion": "etcd.operator.dev/v1alpha1",
    "kind": "EtcdCluster",
    "metadata": {"name": "c", "namespace": "ns", "uid": "the-uid"},
}


def _execute(action):
    import asyncio

    from etcd_operator.controllers.cluster.executor import ClusterExecutor

    kube = CreatingKube()
    executor = ClusterExecutor(kube, None, BODY, lambda *_: None, status=NEW, now=NOW)
    return asyncio.run(executor.run(action, spec_of(3), observed([], leader=None))), kube


def test_recording_writes_status_only():
    outcome, kube = _execute(a.RecordBootstrap("new", FULL))
    assert outcome.done and not kube.created
    assert outcome.status_fields == {"bootstrap": {"mode": "Static", "initialCluster": FULL, "completed": False}}


def test_each_member_starts_with_the_whole_initial_cluster_state_new_and_the_clusters_token():
    outcome, kube = _execute(a.BootstrapMembers("new", ("c-0", "c-1", "c-2"), FULL))
    assert outcome.done
    pods = {m["metadata"]["name"]: m for m in kube.created if m["kind"] == "Pod"}
    assert sorted(pods) == ["c-0", "c-1", "c-2"]
    assert {m["metadata"]["name"] for m in kube.created if m["kind"] == "PersistentVolumeClaim"} == {
        naming.pvc_name(n) for n in pods
    }
    for pod in pods.values():
        notes = pod["metadata"]["annotations"]
        assert notes[naming.ANNOTATION_INITIAL_CLUSTER] == FULL
        assert notes[naming.ANNOTATION_INITIAL_STATE] == "new"
        args = pod["spec"]["containers"][0]["args"]
        assert "--initial-cluster-token=the-uid" in args
        assert "initContainers" not in pod["spec"]  # no join: nobody to resolve it first
