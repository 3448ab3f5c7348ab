"""A new cluster's members start together (static bootstrap), and only over volumes the
bootstrap created and no member can have voted on and lost (cluster/bootstrap.py)."""

from __future__ import annotations

import dataclasses

from etcd_operator.controllers.cluster.observer import pvc_view
from etcd_operator.core.cluster import builders, naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.bootstrap import members_of
from tests.unit.cluster_scenarios import CLUSTER, NAMESPACE, M, observed, recorded, spec
from tests.unit.test_cluster_planner import next_step

NEW = recorded(bootstrapped=False)
THREE = ("c-0", "c-1", "c-2")
INITIAL = ",".join(f"{m}={naming.peer_url(CLUSTER, NAMESPACE, m)}" for m in THREE)


def bootstrap_pvc(member: str, phase: str = "Pending", selected_node: str | None = None, initial: str = INITIAL):
    """The PVC as the bootstrap step creates it, read back the way the observer reads it."""
    manifest = builders.member_pvc(spec(3), CLUSTER, NAMESPACE, member, None, initial)
    manifest["metadata"]["uid"] = f"pvc-{member}"
    if selected_node:
        manifest["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] = selected_node
    manifest["status"] = {"phase": phase}
    return pvc_view(manifest)


def bootstrap_pod(member: str):
    """A bootstrap member's pod that has not answered yet."""
    o = observed([M(int(member.split("-")[1]), healthy=False, settled=False, pvc=False)], leader=None)
    return dataclasses.replace(o.pods[member], initial_cluster=INITIAL, ready=False)


def nothing_answers(pods=(), pvcs=()):
    return observed([], leader=None, extra_pods=pods, extra_pvcs=pvcs)


def test_a_new_cluster_on_volumes_starts_every_member_at_once_with_one_initial_cluster():
    step = next_step(spec(3), observed([], leader=None), NEW)
    assert step == a.BootstrapMembers(step.reason, THREE, INITIAL)
    assert members_of(step.initial_cluster) == THREE


def test_a_new_cluster_on_empty_dirs_starts_one_member_and_adds_the_others_as_learners():
    s = spec(3, storage=dataclasses.replace(spec(3).storage, empty_dir=True))
    step = next_step(s, observed([], leader=None), NEW)
    assert step == a.BootstrapFirstMember(step.reason, "c-0")


def test_the_bootstrap_pvc_carries_its_initial_cluster_and_no_member_id():
    view = bootstrap_pvc("c-1")
    assert view.initial_cluster == INITIAL and view.member_id is None and not view.bound
    assert bootstrap_pvc("c-1", phase="Bound").bound
    assert bootstrap_pvc("c-1", selected_node="node-2").bound


def test_killed_between_two_pvcs_the_bootstrap_resumes_while_no_member_can_have_run():
    seen = nothing_answers(pvcs=[bootstrap_pvc("c-0"), bootstrap_pvc("c-1")])
    step = next_step(spec(3), seen, NEW)
    assert step == a.BootstrapMembers(step.reason, THREE, INITIAL)


def test_a_lost_bootstrap_pvc_is_not_created_again_once_a_member_may_have_run_on_the_others():
    for others in (
        [bootstrap_pvc("c-0", phase="Bound"), bootstrap_pvc("c-1", phase="Bound")],
        [bootstrap_pvc("c-0", selected_node="n1"), bootstrap_pvc("c-1")],
    ):
        step = next_step(spec(3), nothing_answers(pods=[bootstrap_pod("c-0"), bootstrap_pod("c-1")], pvcs=others), NEW)
        assert isinstance(step, a.Wait) and "c-2" in step.reason and "voted" in step.reason, step
    # Its pod is gone too: c-1, whose PVC was never bound, starts as bootstrapped; c-2's PVC is never created.
    seen = nothing_answers(pods=[bootstrap_pod("c-0")], pvcs=[bootstrap_pvc("c-0", "Bound"), bootstrap_pvc("c-1")])
    step = next_step(spec(3), seen, NEW)
    assert step == a.BootstrapMembers(step.reason, ("c-1",), INITIAL)


def test_with_no_member_answering_a_member_never_seen_running_starts_as_bootstrapped_one_seen_as_itself():
    pvcs = [bootstrap_pvc(m, phase="Bound") for m in THREE]
    step = next_step(spec(3), nothing_answers(pods=[bootstrap_pod("c-0"), bootstrap_pod("c-2")], pvcs=pvcs), NEW)
    assert step == a.BootstrapMembers(step.reason, ("c-1",), INITIAL)
    pvcs[1] = dataclasses.replace(pvcs[1], member_id=0x101)  # its ID was recorded: it ran
    step = next_step(spec(3), nothing_answers(pods=[bootstrap_pod("c-0"), bootstrap_pod("c-2")], pvcs=pvcs), NEW)
    assert isinstance(step, a.CreateMemberPod) and step.member == "c-1" and step.joined_before
    assert step.initial_cluster == f"c-1={naming.peer_url(CLUSTER, NAMESPACE, 'c-1')}"


def test_members_seen_running_get_their_ids_recorded_at_once_before_anything_else():
    members = [
        M(0, settled=False, pvc=False),
        M(1, settled=False, pvc=False, pod=False, healthy=False),
        M(2, pvc=False),
    ]
    pvcs = [bootstrap_pvc(m, "Bound") for m in THREE]
    step = next_step(spec(3), observed(members, extra_pvcs=pvcs), NEW)
    # c-1 has no pod and does not answer, but etcd lists it published (it ran): recorded too.
    assert step == a.SettleStartedMembers(step.reason, (("c-0", 0x100), ("c-1", 0x101), ("c-2", 0x102)))


def unpublished(o, member: str):
    """`o` where etcd lists `member` as it lists a static member that never started: its
    name, no client URLs."""
    members = tuple(dataclasses.replace(m, client_urls=()) if m.name == member else m for m in o.etcd.members)
    return dataclasses.replace(o, etcd=dataclasses.replace(o.etcd, members=members))


def test_a_member_never_seen_running_gets_the_bootstraps_flags_once_the_others_formed_the_cluster():
    members = [M(0), M(1, settled=False, pvc=False, pod=False, healthy=False), M(2)]
    seen = unpublished(observed(members, extra_pvcs=[bootstrap_pvc("c-1", "Bound")]), "c-1")
    step = next_step(spec(3), seen, NEW)
    assert step == a.BootstrapMembers(step.reason, ("c-1",), INITIAL)


def test_a_settled_member_without_its_pod_rejoins_as_itself_not_with_the_bootstraps_flags():
    members = [M(0), M(1, pod=False, healthy=False), M(2)]
    step = next_step(spec(3), observed(members))
    assert isinstance(step, a.CreateMemberPod) and step.member == "c-1" and step.joined_before


def test_a_bootstrap_member_whose_pvc_is_gone_after_the_cluster_formed_is_replaced_through_the_member_api():
    members = [M(0), M(1, pvc=False, pod=False, healthy=False), M(2)]
    step = next_step(spec(3), observed(members), NEW)
    assert isinstance(step, a.RemoveMember) and step.member == "c-1" and step.replacing


def test_no_bootstrap_over_a_volume_it_did_not_create():
    # A PVC of the cluster's labels and a member ID (a member ran on it): it is never bootstrapped over.
    step = next_step(
        spec(3), nothing_answers(pvcs=[dataclasses.replace(bootstrap_pvc("c-0"), initial_cluster="", member_id=7)]), NEW
    )
    assert not isinstance(step, a.BootstrapMembers) and isinstance(step, a.CreateMemberPod)
    # A restored PVC starts as the restore wrote it, never as a bootstrap member.
    restored = dataclasses.replace(bootstrap_pvc("c-0"), restored=True)
    step = next_step(spec(3), nothing_answers(pvcs=[restored]), NEW)
    assert isinstance(step, a.StartRestoredMembers)


def test_pvcs_that_name_different_initial_clusters_stop_the_bootstrap():
    other = INITIAL.replace("c-2", "c-9")
    seen = nothing_answers(pvcs=[bootstrap_pvc("c-0"), bootstrap_pvc("c-1", initial=other)])
    step = next_step(spec(3), seen, NEW)
    assert isinstance(step, a.Wait) and "different initial clusters" in step.reason
