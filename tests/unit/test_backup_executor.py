"""The backup executor: every step has a handler, an unknown step is an error, and the
verification steps delete only the scratch pod they were given, by its uid (a fake verifier)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime

import pytest

from etcd_operator.clients.kube.client import Conflict
from etcd_operator.clients.storage.s3 import StorageError
from etcd_operator.controllers.backup import executor
from etcd_operator.controllers.backup.executor import HANDLERS, BackupExecutor, UnknownStep
from etcd_operator.controllers.backup.reconciler import delay_after
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.status import build_status

BODY = {"metadata": {"namespace": "ns", "name": "b", "uid": "backup-uid"}, "spec": {}}
NOW = datetime.datetime(2026, 11, 21, tzinfo=datetime.UTC)


def all_step_types(base: type = s.Step) -> set[type]:
    found = set()
    for sub in base.__subclasses__():
        if sub.__module__ == s.__name__:
            found |= {sub} | all_step_types(sub)
    return found


def test_every_step_type_has_a_handler():
    """Every step class defined in backup/steps.py, listed or not."""
    assert all_step_types() == set(s.ALL_STEPS) == set(HANDLERS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mystery(s.Step):
    pass


def test_an_unknown_step_is_an_error_not_done():
    with pytest.raises(UnknownStep):
        asyncio.run(BackupExecutor(None, {}, BODY).run(Mystery()))
    with pytest.raises(TypeError):
        build_status(Mystery(), s.NOTHING_DONE, {}, 1, "2026-11-21T00:00:00Z")
    with pytest.raises(TypeError):
        delay_after(Mystery(), NOW)


@pytest.mark.parametrize(
    "step",
    [
        s.Idle(),
        s.Suspend(),
        s.RefuseSchedule(reason="InvalidSchedule"),
        s.WaitForSlot(next_slot=NOW),
        s.StartSlot(slot="x", slot_time=None, next_slot=None, one_shot=True),
    ],
)
def test_steps_without_io_change_nothing_but_status(step):
    assert asyncio.run(BackupExecutor(None, {}, BODY).run(step)) is s.NOTHING_DONE


@pytest.mark.parametrize("step", [s.StartVerification(key="k", attempt=1), s.WaitForScratchPod(key="k")])
def test_verification_steps_that_only_record_change_nothing_but_status(step):
    assert asyncio.run(BackupExecutor(None, {}, BODY).run(step)) is s.NOTHING_DONE


class FakeVerifier:
    """Records the calls the executor makes; `fail` makes create raise."""

    calls: list = []
    fail: Exception | None = None

    def __init__(self, *_):
        pass

    async def create_pod(self, key):
        FakeVerifier.calls.append(("create", key))
        if self.fail:
            raise self.fail
        return {"metadata": {"name": "b-verify", "uid": "u-new"}}

    async def record_verdict(self, key, verdict):
        FakeVerifier.calls.append(("record", key, verdict.verified))
        return "2026-11-21T00:00:00Z"

    async def delete_pod(self, name, uid):
        FakeVerifier.calls.append(("delete", name, uid))


@pytest.fixture
def verifier(monkeypatch):
    monkeypatch.setattr(executor, "BackupVerifier", FakeVerifier)
    FakeVerifier.calls, FakeVerifier.fail = [], None
    return FakeVerifier


def test_the_pods_verdict_is_recorded_and_the_pod_deleted_by_its_uid(verifier):
    checked = s.FinishVerification(
        key="k", pod_name="b-verify", pod_uid="u1", verified=True, reason="Verified", complete=True
    )
    done = asyncio.run(BackupExecutor(None, {}, BODY).run(checked))
    assert done.verified is True and verifier.calls == [("delete", "b-verify", "u1"), ("record", "k", True)]
    verifier.calls.clear()
    inconclusive = s.FinishVerification(
        key="k", pod_name="b-verify", pod_uid="u1", verified=None, reason="NoSourceHash", complete=True
    )
    done = asyncio.run(BackupExecutor(None, {}, BODY).run(inconclusive))
    assert (done.verified, done.complete) == (None, True)
    assert verifier.calls == [("delete", "b-verify", "u1"), ("record", "k", None)]


def test_finishing_deletes_the_recorded_pod_and_marks_only_a_verdict(verifier):
    refused = s.FinishVerification(
        key="k", pod_name="b-verify", pod_uid="u1", verified=False, reason="SnapshotNotRestorable"
    )
    done = asyncio.run(BackupExecutor(None, {}, BODY).run(refused))
    assert done.verified is False and verifier.calls == [("delete", "b-verify", "u1"), ("record", "k", False)]
    verifier.calls.clear()
    timeout = s.FinishVerification(
        key="k", pod_name="b-verify", pod_uid="u1", verified=None, reason="ScratchPodTimeout"
    )
    done = asyncio.run(BackupExecutor(None, {}, BODY).run(timeout))
    assert not done.complete and verifier.calls == [("delete", "b-verify", "u1")]
    verifier.calls.clear()
    foreign = s.FinishVerification(key="k", pod_name=None, pod_uid=None, verified=None, reason="ScratchPodNameTaken")
    asyncio.run(BackupExecutor(None, {}, BODY).run(foreign))
    assert verifier.calls == []


class LiveBackup:
    """The API server, for the executor's fence: the backup is there and not being deleted."""

    async def get(self, resource, namespace, name):
        return {"metadata": {"name": name, "uid": BODY["metadata"]["uid"]}}


def test_creating_reports_the_new_pod_or_an_incomplete_attempt(verifier):
    created = asyncio.run(BackupExecutor(LiveBackup(), {}, BODY).run(s.CreateScratchPod(key="k")))
    assert (created.pod_name, created.pod_uid) == ("b-verify", "u-new")
    verifier.fail = Conflict("exists")
    assert asyncio.run(BackupExecutor(LiveBackup(), {}, BODY).run(s.CreateScratchPod(key="k"))) is s.NOTHING_DONE
    verifier.fail = StorageError("store down")
    lost = asyncio.run(BackupExecutor(LiveBackup(), {}, BODY).run(s.CreateScratchPod(key="k")))
    assert (lost.verified, lost.complete, lost.reason) == (None, False, "StorageError")
