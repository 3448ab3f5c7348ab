"""What a restore pass creates is decided by the live target, not by its copy: right before
each seed PVC or restore pod, the executor reads the EtcdCluster again and creates nothing
for one that is gone, replaced or being deleted (restore/fence.py), and a namespace being
deleted ends the step, not the pass. The observer lists the PVCs set aside from the target,
so that the planner counts them whatever copy of its status it reads
(tests/unit/test_restore_planner.py)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.restore import executor
from etcd_operator.controllers.restore.observer import RestoreObserver
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import Outcome
from etcd_operator.core.restore import builders, fence
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.observed import Observed, TargetCluster
from etcd_operator.core.restore.spec import RestoreSpec, RestoreStatus

NAMESPACE, RESTORE, RESTORE_UID, CLUSTER_UID = "ns", "r1", "uid-r1", "uid-keep"
SPEC = RestoreSpec.from_dict(
    {"source": {"backupRef": {"name": "nightly"}}, "target": {"inPlace": {"clusterName": "keep", "confirm": True}}}
)
STATUS = RestoreStatus(
    phase="Restoring",
    source_key="ns/nightly/1.db",
    sha256="ab" * 32,
    snapshot_size=4096,
    snapshot_version="3.6.16",
    target="keep",
    seed_members=("keep-3", "keep-4"),
    revision_bump=1_000_000_000,  # recorded when the restore began
)
BODY = {"metadata": {"name": RESTORE, "namespace": NAMESPACE, "uid": RESTORE_UID}, "spec": {}}
BACKUP = {
    "spec": {
        "storage": {"s3": {"bucket": "b", "endpoint": "http://minio:9000", "credentialsSecretRef": {"name": "s3"}}}
    }
}
TARGET = TargetCluster(
    "keep",
    CLUSTER_UID,
    "42",
    ClusterSpec.from_dict({"size": 2}),
    None,
    RESTORE,
    RESTORE_UID,
    (RESTORE, RESTORE_UID),
    (),
    None,
    None,
    False,
    3,
    "Running",
    False,
    0,
    None,
)
SEEN = Observed(NAMESPACE, RESTORE, RESTORE_UID, 1, TARGET)


def live(uid: str = CLUSTER_UID, deleting: bool = False) -> dict:
    meta = {"name": "keep", "namespace": NAMESPACE, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T10:00:00Z"
    return {"metadata": meta}


ALIVE, DELETING, REPLACED = live(), live(deleting=True), live(uid="uid-another-keep")


# --- the pure decision ------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, refusal",
    [
        (None, "EtcdCluster keep is gone"),
        (REPLACED, "EtcdCluster keep is another object now (uid uid-another-keep, not uid-keep)"),
        (DELETING, "EtcdCluster keep is being deleted"),
    ],
)
def test_nothing_is_created_for_a_target_gone_replaced_or_being_deleted(answer, refusal):
    assert fence.creation_refusal(TARGET, answer) == refusal


def test_the_object_the_pass_decided_on_gets_its_objects():
    assert fence.creation_refusal(TARGET, ALIVE) is None


# --- the executor -----------------------------------------------------------------------


class LiveTarget:
    """Answers GETs of the EtcdCluster in turn (the last answer repeats) and records every
    call; `refuse` is raised by each create."""

    def __init__(self, *answers: dict | None, refuse: Exception | None = None):
        self.answers = list(answers)
        self.refuse = refuse
        self.calls: list[tuple[str, str, str]] = []

    @property
    def created(self) -> list[tuple[str, str]]:
        return [(plural, name) for verb, plural, name in self.calls if verb == "create"]

    async def get(self, resource, namespace, name):
        self.calls.append(("get", resource.plural, name))
        if resource == kube.ETCDCLUSTERS:
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if resource == kube.ETCDBACKUPS:
            return BACKUP
        return None

    async def create(self, resource, namespace, manifest, dry_run=False):
        self.calls.append(("create", resource.plural, manifest["metadata"]["name"]))
        if self.refuse is not None:
            raise self.refuse


def run(kube_client: LiveTarget, step: s.Step) -> Outcome:
    events: list[tuple[str, str, str]] = []
    runner = executor.RestoreExecutor(kube_client, "operator-image", BODY, lambda *e: events.append(e))
    return asyncio.run(runner.run(step, SPEC, STATUS, SEEN))


VOLUMES = s.CreateSeedVolumes("creating", members=("keep-3", "keep-4"))
PODS = s.StartSeedPods("restoring", members=("keep-3", "keep-4"))


@pytest.mark.parametrize("step, kind", [(VOLUMES, "persistentvolumeclaims"), (PODS, "pods")])
def test_a_live_target_gets_every_object_each_after_its_own_check(step, kind):
    kube_client = LiveTarget(ALIVE)
    outcome = run(kube_client, step)
    assert outcome.done
    assert [plural for plural, _ in kube_client.created] == [kind, kind]
    gets = [c for c in kube_client.calls if c[:2] == ("get", "etcdclusters")]
    assert len(gets) == 2, "one live read per create"


@pytest.mark.parametrize("step", [VOLUMES, PODS])
@pytest.mark.parametrize("answer, why", [(DELETING, "being deleted"), (None, "is gone"), (REPLACED, "another object")])
def test_a_target_deleted_after_the_pass_read_it_gets_nothing(step, answer, why):
    kube_client = LiveTarget(answer)
    outcome = run(kube_client, step)
    assert not outcome.done and outcome.failure is None
    assert kube_client.created == []
    assert outcome.message.startswith(f"{step.kind}: EtcdCluster keep ") and why in outcome.message
    assert outcome.message.endswith("nothing is created for it")


def test_a_deletion_between_two_creates_stops_the_second():
    kube_client = LiveTarget(ALIVE, DELETING)
    outcome = run(kube_client, VOLUMES)
    assert not outcome.done
    assert kube_client.created == [("persistentvolumeclaims", naming.pvc_name("keep-3"))]


@pytest.mark.parametrize("step", [VOLUMES, PODS, s.CreateTargetCluster("creating keep")])
def test_a_namespace_being_deleted_ends_the_step_not_the_pass(step):
    refused = kube.NamespaceTerminating(403, "Forbidden", "namespace ns is being terminated")
    outcome = run(LiveTarget(ALIVE, refuse=refused), step)
    assert not outcome.done and outcome.failure is None
    assert outcome.retry_after == executor.WHILE_NAMESPACE_TERMINATING
    assert "namespace ns is being deleted" in outcome.message


# --- the observer -----------------------------------------------------------------------


class Listing:
    """An API server with the target, one member PVC and PVCs set aside from it and from another cluster."""

    def __init__(self):
        self.selectors: list[tuple[str, str | None]] = []
        member = {"metadata": {"name": "data-keep-2", "uid": "u2", "labels": naming.selector_labels("keep")}}
        self.pvcs = [member] + [
            {
                "metadata": {
                    "name": name,
                    "uid": f"u-{name}",
                    "labels": {builders.LABEL_PRESERVED_FROM: cluster, builders.LABEL_PRESERVED_BY: "r0"},
                }
            }
            for name, cluster in (("data-keep-0", "keep"), ("data-keep-1", "keep"), ("data-other-0", "other"))
        ]

    async def get(self, resource, namespace, name):
        if resource == kube.ETCDCLUSTERS:
            return {**live(), "spec": {"size": 1}}
        return None

    async def list(self, resource, namespace, selector=None):
        self.selectors.append((resource.plural, selector))
        if resource != kube.PVCS:
            return []
        wanted = dict(pair.split("=", 1) for pair in (selector or "").split(",") if pair)
        return [p for p in self.pvcs if wanted.items() <= p["metadata"]["labels"].items()]


def test_the_observation_lists_the_pvcs_set_aside_from_the_target():
    api = Listing()
    status = dataclasses.replace(STATUS, seed_members=())
    seen = asyncio.run(RestoreObserver(api).observe(BODY, SPEC, status))
    assert [p.name for p in seen.pvcs] == ["data-keep-2"]
    assert sorted(p.name for p in seen.preserved_pvcs) == ["data-keep-0", "data-keep-1"]
    assert dict(seen.preserved_pvcs[0].labels)[builders.LABEL_PRESERVED_BY] == "r0"
    assert ("persistentvolumeclaims", f"{builders.LABEL_PRESERVED_FROM}=keep") in api.selectors


# --- the fault point the substrate test uses (tests/nodes/host_operator/test_restore.py) -----------


def test_a_stalled_pass_waits_until_an_async_condition_holds(monkeypatch):
    from etcd_operator.controllers import faults

    monkeypatch.setenv("ETCD_OPERATOR_FAULTS", faults.STALE_RESTORE_PASS)
    monkeypatch.setenv(faults.STALE_PASS_LAG, "0")
    monkeypatch.setattr(faults, "STALL_POLL", 0.0)
    monkeypatch.setattr(faults, "_stalled", set())
    answers = [False, False, True]

    async def deleted() -> bool:
        return answers.pop(0)

    asyncio.run(faults.stall_once(faults.STALE_RESTORE_PASS, "ns/r1", deleted))
    assert answers == []
    asyncio.run(faults.stall_once(faults.STALE_RESTORE_PASS, "ns/r1", deleted))  # once per key: not asked again
