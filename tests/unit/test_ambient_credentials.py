"""Ambient credentials (a storage.s3 block without credentialsSecretRef) are used only in
the namespaces the install lists: the setting, the backup planner and status, the restore
planner. Pure. The real refusal is tests/nodes/host_operator/test_backup_storage.py."""

from __future__ import annotations

import datetime

from etcd_operator.controllers.backup.reconciler import delay_after
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.planner import plan
from etcd_operator.core.backup.state import Observed, RunState, ScheduleSpec
from etcd_operator.core.backup.status import build_status
from etcd_operator.core.restore import steps as restore_steps
from etcd_operator.core.restore.observed import Observed as RestoreObserved
from etcd_operator.core.restore.observed import SourceState
from etcd_operator.core.restore.planner import plan as plan_restore
from etcd_operator.core.restore.spec import RestoreSpec, RestoreStatus
from etcd_operator.core.storage_policy import AMBIENT_NOT_ALLOWED, StoragePolicy
from etcd_operator.runtime.config import OperatorConfig

T0 = datetime.datetime(2026, 11, 21, 12, 0, 1, tzinfo=datetime.UTC)
AMBIENT = {"bucket": "someone-elses", "endpoint": "https://s3.example"}
WITH_SECRET = {**AMBIENT, "credentialsSecretRef": {"name": "creds"}}


def condition(status, kind):
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_ambient_credentials_are_refused_unless_the_install_lists_the_namespace():
    default = OperatorConfig.from_env({}).storage_policy
    assert default.ambient_refusal("team-a", AMBIENT) is not None
    assert "team-a" in default.ambient_refusal("team-a", AMBIENT)
    assert default.ambient_refusal("team-a", WITH_SECRET) is None
    allowed = OperatorConfig.from_env({"AMBIENT_CREDENTIALS_NAMESPACES": "team-a, team-b"}).storage_policy
    assert allowed == StoragePolicy(frozenset({"team-a", "team-b"}))
    assert allowed.ambient_refusal("team-b", AMBIENT) is None
    assert allowed.ambient_refusal("team-c", AMBIENT) is not None


def test_a_refused_backup_runs_nothing_and_says_why_in_its_conditions():
    refusal = StoragePolicy().ambient_refusal("ns", AMBIENT)
    refused = Observed(T0, 1, credentials_refusal=refusal)
    for spec, state in [
        (ScheduleSpec(None), RunState()),
        (ScheduleSpec("0 * * * *"), RunState()),
        (ScheduleSpec("0 * * * *"), RunState(slot_in_progress="20261121T120000Z")),
    ]:
        step = plan(spec, state, refused, T0.timestamp())
        assert isinstance(step, s.RefuseCredentials) and step.reason == AMBIENT_NOT_ALLOWED
    assert delay_after(step, T0) is None  # only a new install setting or spec changes it
    status = build_status(step, s.NOTHING_DONE, {}, 1, "2026-11-21T12:00:01Z")
    assert status["phase"] == "Pending"
    degraded = condition(status, "Degraded")
    assert (degraded["status"], degraded["reason"], degraded["message"]) == ("True", AMBIENT_NOT_ALLOWED, refusal)
    # Allowed later, the one-shot backup still runs: the refusal did not fail it.
    allowed = plan(ScheduleSpec(None), RunState.from_dict(status), Observed(T0, 1), T0.timestamp())
    assert isinstance(allowed, s.StartSlot)


def test_a_refused_restore_waits_before_reading_its_source():
    spec = RestoreSpec.from_dict(
        {"source": {"s3": {**AMBIENT, "key": "k.db"}}, "target": {"newCluster": {"name": "keep", "spec": {"size": 1}}}}
    )
    refusal = StoragePolicy().ambient_refusal("ns", AMBIENT)
    seen = RestoreObserved("ns", "r1", "uid", 1, None, source=SourceState(credentials_refusal=refusal))
    for status in (RestoreStatus(), RestoreStatus(phase="Pending"), RestoreStatus(phase="Verifying")):
        step = plan_restore(spec, status, seen, 1_800_000_000.0)
        assert isinstance(step, restore_steps.Wait) and step.code == AMBIENT_NOT_ALLOWED and step.reason == refusal
