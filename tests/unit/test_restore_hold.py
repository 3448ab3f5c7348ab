"""The cluster's side of a restore's hold: a pass that decided on a copy of the EtcdCluster
without the hold creates no member pod or PVC and takes no member step once the live object
carries it (executor.HeldByRestore), and a pass on a copy with the hold acknowledges it in
status.restoreHold, which the restore waits for (tests/unit/test_restore_planner.py)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from etcd_operator.controllers.cluster.executor import PERMITTED_WHILE_HELD, ClusterExecutor, HeldByRestore
from etcd_operator.controllers.cluster.reconciler import AFTER_STEP, ClusterReconciler
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.planner import QUORUM_RECOVERY
from etcd_operator.core.cluster.recorded import Operation
from etcd_operator.core.cluster.status import restore_hold_ack
from tests.unit.cluster_scenarios import NOW, RECORDED, M
from tests.unit.cluster_scenarios import observed as scenario
from tests.unit.test_deletion import RecordingCreates, StaticView
from tests.unit.test_watch_reconcile import BODY, current

MEMBER_KINDS = ("pods", "persistentvolumeclaims")


class StatusRecorder(RecordingCreates):
    def __init__(self):
        super().__init__()
        self.status_patches: list[dict] = []

    async def merge_patch(self, resource, namespace, name, patch, subresource=None):
        if subresource == "status":
            self.status_patches.append(patch["status"])
        await super().merge_patch(resource, namespace, name, patch, subresource)


def reconciler_for(kube_client, held_by) -> tuple[ClusterReconciler, StaticView]:
    reconciler = ClusterReconciler(kube_client, None, lambda *_: None, held_by=held_by)
    view = StaticView([M(0), M(1), M(2, pod=False)])  # the plan creates the third member's pod and PVC
    reconciler.observer = view
    return reconciler, view


def test_without_a_hold_the_pass_creates_the_missing_member():
    """The scenario below is one where the pass does create: the fence is what stops it."""
    kube_client = RecordingCreates()
    reconciler, _ = reconciler_for(kube_client, held_by=lambda: None)
    asyncio.run(reconciler.reconcile(BODY))
    # The member's pod and PVC, and the Services and PDB (created: none existed).
    assert {plural for plural, _ in kube_client.created} == {*MEMBER_KINDS, "services", "poddisruptionbudgets"}


def test_a_hold_set_while_the_pass_decides_stops_every_member_create():
    kube_client = StatusRecorder()
    holds: list[str] = []
    reconciler, view = reconciler_for(kube_client, held_by=lambda: holds[-1] if holds else None)

    async def observe_then_hold(body, status, children=None, live_secrets=True):
        holds.append("r1")  # the restore holds the live object after this pass took its copy
        return current(scenario(view.members))

    reconciler.observer.observe = observe_then_hold
    assert asyncio.run(reconciler.reconcile(BODY)) == AFTER_STEP
    assert [c for c in kube_client.created if c[0] in MEMBER_KINDS] == []
    assert kube_client.status_patches == [], "a pass on a copy without the hold wrote status"


def test_a_pass_on_a_copy_with_the_hold_acknowledges_it_and_creates_nothing():
    kube_client = StatusRecorder()
    reconciler, view = reconciler_for(kube_client, held_by=lambda: "r1")

    async def observe_held(body, status, children=None, live_secrets=True):
        return dataclasses.replace(current(scenario(view.members)), restoring="r1", restore_hold="uid-r1")

    reconciler.observer.observe = observe_held
    asyncio.run(reconciler.reconcile(BODY))
    assert [c for c in kube_client.created if c[0] in MEMBER_KINDS] == []
    assert kube_client.status_patches[-1]["restoreHold"] == {"restore": "r1", "uid": "uid-r1"}


def test_the_pass_that_acknowledges_the_hold_drops_the_recorded_recovery_in_the_same_write():
    """The restore never writes the cluster's status: it waits to see status.operation gone."""
    kube_client = StatusRecorder()
    reconciler, view = reconciler_for(kube_client, held_by=lambda: "r1")
    recovery = Operation(QUORUM_RECOVERY, "c-0", 0x100, 0)

    async def observe_held(body, status, children=None, live_secrets=True):
        seen = current(scenario(view.members))
        return dataclasses.replace(seen, restoring="r1", restore_hold="uid-r1")

    reconciler.observer.observe = observe_held
    body = {**BODY, "status": {"operation": recovery.to_dict(), "clusterID": "1"}}
    asyncio.run(reconciler.reconcile(body))
    written = kube_client.status_patches[-1]
    assert written["restoreHold"] == {"restore": "r1", "uid": "uid-r1"}
    assert written["operation"] is None and written["clusterID"] is None


def test_the_acknowledgement_is_cleared_with_the_hold():
    seen = current(scenario([M(0)]))
    assert restore_hold_ack(seen) is None
    assert restore_hold_ack(dataclasses.replace(seen, restoring="r1", restore_hold="u")) == {
        "restore": "r1",
        "uid": "u",
    }


MEMBER_STEPS = [
    a.BootstrapFirstMember("x", member="c-0"),
    a.BootstrapMembers("x", members=("c-0", "c-1"), initial_cluster="c-0=http://c-0,c-1=http://c-1"),
    a.StartRestoredMembers("x", members=("c-3",), initial_cluster="c-3=http://c-3"),
    a.AddLearner("x", member="c-3"),
    a.CreateMemberPod("x", member="c-2", member_id=7),
    a.PromoteLearner("x", member="c-2", member_id=7),
    a.RemoveMember("x", member="c-2", member_id=7),
    a.DeleteMemberPod("x", member="c-2"),
    a.DeleteMemberPVC("x", member="c-2"),
    a.RollMember("x", member="c-2"),
    a.ForceNewCluster("x", member="c-0", member_id=7),
]


@pytest.mark.parametrize("step", MEMBER_STEPS, ids=lambda step: step.kind)
def test_no_member_step_is_taken_while_the_live_object_is_held(step):
    """Refused before any request: the stand-in clients would fail on the first call."""
    kube_client = RecordingCreates()
    executor = ClusterExecutor(kube_client, None, BODY, lambda *_: None, held_by=lambda: "r1", status=RECORDED, now=NOW)
    observed = current(scenario([M(0), M(1), M(2)]))
    with pytest.raises(HeldByRestore, match="EtcdRestore r1"):
        asyncio.run(executor.run(step, None, observed))
    assert kube_client.writes == [] and kube_client.created == []


def test_only_waiting_and_certificate_steps_are_permitted_while_held():
    names = sorted(t.__name__ for t in PERMITTED_WHILE_HELD)
    assert names == [
        "IssueCertificate",
        "RecordPeerIdentity",
        "RecordRotation",
        "RecordTransport",
        "Steady",
        "SyncTrustBundle",
        "UpdateCASecret",
        "Wait",
    ]
