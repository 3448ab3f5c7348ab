"""Deletion, its pure parts and the cluster pass's guards: what happens to member PVCs in each
propagation policy and reclaimPolicy, and that nothing is created for an EtcdCluster that
is being deleted or whose namespace is."""

from __future__ import annotations

import asyncio
import json

import pytest

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster.reconciler import WHILE_DELETED, ClusterReconciler
from etcd_operator.core.cluster.reclaim import reclaim
from etcd_operator.runtime.config import OperatorConfig
from tests.unit.cluster_scenarios import M
from tests.unit.cluster_scenarios import observed as scenario
from tests.unit.test_watch_reconcile import BODY, RecordingKube, current

UID = "uid-c"


def pvc(name: str) -> dict:
    return {"metadata": {"name": name}}


def member_pod(name: str, claim: str, owner: str | None = UID, deleting: bool = False) -> dict:
    meta: dict = {"name": name, "ownerReferences": [{"uid": owner}] if owner else []}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-25T10:00:00Z"
    return {"metadata": meta, "spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}


PVCS = [pvc("data-c-1"), pvc("data-c-0")]
POLICIES = [
    # (reclaimPolicy, the cluster's finalizers, its pods) -> (deleted, kept, reason)
    ("Retain", [], [member_pod("c-0", "data-c-0")], (), ("data-c-0", "data-c-1"), "DataRetained"),
    ("Retain", ["foregroundDeletion"], [], (), ("data-c-0", "data-c-1"), "DataRetained"),
    ("Retain", ["orphan"], [], (), ("data-c-0", "data-c-1"), "DataRetained"),
    ("Delete", [], [member_pod("c-0", "data-c-0")], ("data-c-0", "data-c-1"), (), "DataDeleted"),
    ("Delete", ["foregroundDeletion"], [], ("data-c-0", "data-c-1"), (), "DataDeleted"),
    # Orphan propagation: the collector has not orphaned the pods yet, or it has.
    ("Delete", ["orphan"], [member_pod("c-0", "data-c-0")], (), ("data-c-0", "data-c-1"), "DataOrphaned"),
    ("Delete", [], [member_pod("c-0", "data-c-0", owner=None)], ("data-c-1",), ("data-c-0",), "DataDeleted"),
    # A pod without the owner that is itself going away holds nothing.
    (
        "Delete",
        [],
        [member_pod("c-0", "data-c-0", owner=None, deleting=True)],
        ("data-c-0", "data-c-1"),
        (),
        "DataDeleted",
    ),
]


@pytest.mark.parametrize("policy,finalizers,pods,deleted,kept,reason", POLICIES)
def test_reclaim_follows_the_policy_and_never_deletes_what_orphaned_members_use(
    policy, finalizers, pods, deleted, kept, reason
):
    outcome = reclaim(policy, {"uid": UID, "finalizers": finalizers}, PVCS, pods)
    assert (outcome.delete, outcome.keep, outcome.reason) == (deleted, kept, reason)


def test_member_pvcs_are_created_without_an_owner_and_pods_with_one():
    kube_client = RecordingCreates()
    reconciler = ClusterReconciler(kube_client, None, lambda *_: None)
    reconciler.observer = StaticView([M(0), M(1), M(2, pod=False)])
    asyncio.run(reconciler.reconcile(BODY))
    created = dict(kube_client.created)
    assert set(created) == {"persistentvolumeclaims", "pods", "services", "poddisruptionbudgets"}
    assert not created["persistentvolumeclaims"]["metadata"].get("ownerReferences")
    assert [o["uid"] for o in created["pods"]["metadata"]["ownerReferences"]] == [UID]


@pytest.mark.parametrize(
    "names,names_only",
    [
        ("", False),
        ("demo", True),
        ("demo,prod", True),
        ("e2e-*", False),
        ("demo,team-?", False),
        ("!kube-system", False),
    ],
)
def test_only_plain_namespace_names_turn_kopf_namespace_scanning_off(names, names_only):
    assert OperatorConfig.from_env({"WATCH_NAMESPACES": names}).names_only is names_only


def test_a_create_refused_in_a_terminating_namespace_is_told_apart():
    body = json.dumps(
        {
            "kind": "Status",
            "status": "Failure",
            "reason": "Forbidden",
            "code": 403,
            "message": 'pods "c-2" is forbidden: unable to create new content in namespace demo because '
            "it is being terminated",
            "details": {
                "name": "c-2",
                "kind": "pods",
                "causes": [
                    {
                        "reason": "NamespaceTerminating",
                        "message": "namespace demo is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            },
        }
    )
    with pytest.raises(kube.NamespaceTerminating):
        kube._raise_for(403, body, "Forbidden")
    with pytest.raises(kube.ApiError) as plain:
        kube._raise_for(403, json.dumps({"reason": "Forbidden", "message": "RBAC says no"}), "Forbidden")
    assert not isinstance(plain.value, kube.NamespaceTerminating)


# --- the guards of the cluster pass ---------------------------------------------------


class RecordingCreates(RecordingKube):
    def __init__(self, refuse: Exception | None = None):
        super().__init__()
        self.created: list[tuple[str, dict]] = []
        self.refuse = refuse

    async def create(self, resource, namespace, body, dry_run=False):
        if self.refuse is not None:
            raise self.refuse
        self.created.append((resource.plural, body))
        await super().create(resource, namespace, body, dry_run)

    async def get(self, resource, namespace, name):
        return None


class StaticView:
    """The observer: a cluster whose third member has no pod (the plan creates it)."""

    def __init__(self, members):
        self.members = members
        self.calls = 0

    async def observe(self, body, now, children=None, live_secrets=True):
        self.calls += 1
        return current(scenario(self.members))


def reconciler_for(kube_client, being_deleted=lambda: False) -> tuple[ClusterReconciler, StaticView]:
    reconciler = ClusterReconciler(kube_client, None, lambda *_: None, being_deleted=being_deleted)
    view = StaticView([M(0), M(1), M(2, pod=False)])
    reconciler.observer = view
    return reconciler, view


def test_a_cluster_marked_for_deletion_gets_no_pass():
    kube_client = RecordingCreates()
    reconciler, view = reconciler_for(kube_client)
    deleting = {**BODY, "metadata": {**BODY["metadata"], "deletionTimestamp": "2026-11-25T10:00:00Z"}}
    assert asyncio.run(reconciler.reconcile(deleting)) == WHILE_DELETED
    assert view.calls == 0 and kube_client.writes == []


def test_a_deletion_that_arrives_during_the_pass_stops_every_create():
    kube_client = RecordingCreates()
    marked = []
    reconciler, view = reconciler_for(kube_client, being_deleted=lambda: bool(marked))

    async def observe_then_mark(body, status, children=None, live_secrets=True):
        marked.append(True)  # the live body gains its deletionTimestamp while the pass decides
        return current(scenario(view.members))

    reconciler.observer.observe = observe_then_mark
    assert asyncio.run(reconciler.reconcile(BODY)) == WHILE_DELETED
    assert [w for w in kube_client.writes if w[0] in ("create", "apply")] == []


def test_after_the_namespace_refused_a_create_no_pass_runs_again():
    refused = kube.NamespaceTerminating(403, "Forbidden", "namespace demo is being terminated")
    kube_client = RecordingCreates(refuse=refused)
    reconciler, view = reconciler_for(kube_client)
    assert asyncio.run(reconciler.reconcile(BODY)) == WHILE_DELETED
    assert view.calls == 1
    assert asyncio.run(reconciler.reconcile(BODY)) == WHILE_DELETED
    assert view.calls == 1, "a pass ran in a namespace being deleted"
