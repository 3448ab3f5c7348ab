"""The restore executor's dispatch table and the status a pass writes."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect

import pytest

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.restore import executor
from etcd_operator.controllers.restore.observer import RestoreObserver
from etcd_operator.core.outcome import Outcome
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.observed import Observed
from etcd_operator.core.restore.planner import plan
from etcd_operator.core.restore.spec import RestoreSpec, RestoreStatus
from etcd_operator.core.restore.status import build_status
from etcd_operator.core.status_patch import changed_fields as changed

NOW = "2026-11-21T12:00:00Z"


def test_every_step_type_has_a_handler():
    defined = {
        obj for _, obj in inspect.getmembers(s, inspect.isclass) if issubclass(obj, s.Step) and obj is not s.Step
    }
    assert defined == set(s.ALL_STEPS)
    assert set(executor.HANDLERS) == defined
    assert all(inspect.iscoroutinefunction(h) for h in executor.HANDLERS.values())


def test_an_unknown_step_is_an_error_never_done():
    @dataclasses.dataclass(frozen=True)
    class Unplanned(s.Step):
        pass

    body = {"metadata": {"name": "r1", "namespace": "ns", "uid": "u"}, "spec": {}}
    runner = executor.RestoreExecutor(None, "image", body, lambda *_: None)
    spec = RestoreSpec.from_dict({"source": {}, "target": {"inPlace": {"clusterName": "c", "confirm": True}}})
    with pytest.raises(executor.UnknownStep):
        asyncio.run(runner.run(Unplanned(), spec, RestoreStatus(), Observed("ns", "r1", "u", 1, None)))


def conditions_of(status: dict) -> dict:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_failure_ends_the_restore_with_its_reason():
    status = build_status({"phase": "Verifying"}, s.Fail("nope", code="TargetDataExists"), Outcome(), 1, NOW)
    assert status["phase"] == "Failed" and status["completionTime"] == NOW and status["progress"] == "nope"
    assert conditions_of(status) == {
        "Progressing": ("False", "TargetDataExists"),
        "Failed": ("True", "TargetDataExists"),
        "Completed": ("False", "NotYet"),
        "Ready": ("False", "Failed"),
        "Stalled": ("True", "TargetDataExists"),
    }


def test_already_applied_is_its_own_terminal_phase_not_a_failure():
    status = build_status({"phase": "Pending"}, s.SkipAlreadyApplied("applied at T"), Outcome(), 1, NOW)
    assert status["phase"] == "AlreadyApplied"
    assert conditions_of(status) == {
        "Progressing": ("False", "AlreadyApplied"),
        "Failed": ("False", "NoFailure"),
        "Completed": ("False", "AlreadyApplied"),
        "Ready": ("True", "AlreadyApplied"),
        "Stalled": ("False", "NotStalled"),
    }


def test_verification_facts_and_failures_come_from_the_outcome():
    facts = (("sha256", "ab"), ("snapshotEtcdVersion", "3.6.0"))
    status = build_status({"phase": "Verifying"}, s.VerifySnapshot("v"), Outcome(status_fields=dict(facts)), 1, NOW)
    assert status["phase"] == "Verifying" and status["sha256"] == "ab" and status["snapshotEtcdVersion"] == "3.6.0"
    failed = build_status(
        {"phase": "Verifying"}, s.VerifySnapshot("v"), Outcome(failure=("ChecksumMismatch", "bad")), 1, NOW
    )
    assert failed["phase"] == "Failed" and conditions_of(failed)["Failed"] == ("True", "ChecksumMismatch")


def test_a_step_not_taken_changes_only_the_progress():
    previous = {"phase": "Restoring", "progress": "x"}
    status = build_status(previous, s.ChooseMembers("seed", members=("c-3",)), Outcome(False, "conflict"), 1, NOW)
    assert changed(previous, status) == {"progress": "conflict"}


def test_status_fields_follow_the_step():
    status = build_status({"phase": "Restoring"}, s.RecordPreservedData("r", pvcs=("data-c-0",)), Outcome(), 1, NOW)
    assert status["preservedData"] == ["data-c-0"] and status["phase"] == "Restoring"
    status = build_status({"phase": "Verifying"}, s.BeginRestore("b", target="c"), Outcome(), 1, NOW)
    assert status["targetCluster"] == "c" and status["phase"] == "Restoring"
    status = build_status({"phase": "Restoring"}, s.ChooseMembers("m", members=("c-0", "c-1")), Outcome(), 1, NOW)
    assert status["seedMembers"] == ["c-0", "c-1"]
    status = build_status(
        status, s.MarkSeedsRestored("m", pvcs=("data-c-1",), timings=(("c-1", "c0", "t0", "t1"),)), Outcome(), 1, NOW
    )
    status = build_status(
        status, s.MarkSeedsRestored("m", pvcs=("data-c-0",), timings=(("c-0", "c1", "t2", "t3"),)), Outcome(), 1, NOW
    )
    assert status["seedPods"] == [
        {"member": "c-1", "createdAt": "c0", "startedAt": "t0", "finishedAt": "t1"},
        {"member": "c-0", "createdAt": "c1", "startedAt": "t2", "finishedAt": "t3"},
    ]
    status = build_status({"phase": "Restoring"}, s.Complete("1/1", cluster_id="abc"), Outcome(), 1, NOW)
    assert status["phase"] == "Completed" and status["clusterID"] == "abc"
    assert conditions_of(status)["Completed"] == ("True", "Restored")


class PatchRecorder:
    def __init__(self):
        self.patches: list[tuple[str, str, dict, str | None]] = []

    async def merge_patch(self, resource, namespace, name, patch, subresource=None):
        self.patches.append((resource.plural, name, patch, subresource))


@pytest.mark.parametrize("operation, approval", [(True, False), (False, True), (True, True)])
def test_a_recorded_quorum_recovery_is_left_to_the_clusters_controller(operation, approval):
    """Only the approval annotation is removed; status.operation is the cluster's to drop, and
    the step is done only once it is gone (the next pass observes it)."""
    kube_client = PatchRecorder()
    body = {"metadata": {"name": "r1", "namespace": "ns", "uid": "u"}, "spec": {}}
    runner = executor.RestoreExecutor(kube_client, "image", body, lambda *_: None)
    spec = RestoreSpec.from_dict({"source": {}, "target": {"inPlace": {"clusterName": "c", "confirm": True}}})
    step = s.ClearQuorumRecovery("stale recovery", clear_operation=operation, clear_approval=approval)
    outcome = asyncio.run(runner.run(step, spec, RestoreStatus(), Observed("ns", "r1", "u", 1, None)))
    assert [sub for *_, sub in kube_client.patches] == ([None] if approval else [])
    assert outcome.done is not operation and outcome.failure is None


# --- a new cluster's Secret names, looked up before anything is created -------------------


class SecretsAround:
    """A namespace without the target, whose Secrets are read by name only."""

    def __init__(self, secrets: set[str]):
        self.secrets = secrets
        self.secrets_read: list[str] = []
        self.secrets_listed = False

    async def get(self, resource, namespace, name):
        if resource == kube.SECRETS:
            self.secrets_read.append(name)
            return {"metadata": {"name": name, "uid": f"uid-{name}"}} if name in self.secrets else None
        return None

    async def list(self, resource, namespace, selector=None):
        self.secrets_listed = self.secrets_listed or resource == kube.SECRETS
        return []

    async def create(self, resource, namespace, body, dry_run=False):
        return body


def test_a_new_cluster_is_refused_when_a_secret_it_would_create_exists():
    spec = RestoreSpec.from_dict(
        {
            "source": {"s3": {"bucket": "b", "key": "k.db"}},
            "target": {
                "newCluster": {
                    "name": "keep",
                    "spec": {"size": 1, "auth": {"users": [{"name": "app", "certificate": True}]}},
                }
            },
        }
    )
    api = SecretsAround({"keep-client-tls", "keep-other"})
    body = {"metadata": {"name": "r1", "namespace": "ns", "uid": "uid-r1"}}
    seen = asyncio.run(RestoreObserver(api).observe(body, spec, RestoreStatus()))
    created = ["keep-ca", "keep-member-tls", "keep-operator-tls", "keep-client-tls", "keep-user-app"]
    assert [n for n in api.secrets_read if n.startswith("keep-")] == created and not api.secrets_listed
    assert [o.ref for o in seen.namespace_objects] == ["Secret keep-client-tls"]
    step = plan(spec, RestoreStatus(), seen, 1_800_000_000.0)
    assert isinstance(step, s.Fail) and step.code == "SecretNameTaken"
