"""The backup executor's live fence (backup/fence.py, executor._fence): nothing is uploaded and
no scratch pod is created for a backup, or a run's cluster, that the live object shows gone or
being deleted, whatever the pass's copy said (issue 25; FIXED
backup_creates_on_a_copy_from_before_the_deletion in tests/sim/findings.py)."""

from __future__ import annotations

import asyncio

import pytest

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.backup import executor
from etcd_operator.controllers.backup.executor import BackupExecutor
from etcd_operator.core import prerequisites as p
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.fence import creation_refusal

UID = "backup-uid"
BACKUP = {"metadata": {"namespace": "ns", "name": "b", "uid": UID}}
DELETING = {"deletionTimestamp": "2026-11-26T00:00:00Z"}
CLUSTER = {"metadata": {"name": "db"}}


@pytest.mark.parametrize(
    "backup, cluster_name, cluster, words",
    [
        (None, "db", CLUSTER, "EtcdBackup is gone"),
        ({"metadata": {"uid": "another"}}, "db", CLUSTER, "another object"),
        ({"metadata": {"uid": UID, **DELETING}}, "db", CLUSTER, "EtcdBackup is being deleted"),
        ({"metadata": {"uid": UID, **DELETING}}, None, None, "EtcdBackup is being deleted"),
        (BACKUP, "db", None, "EtcdCluster db is gone"),
        (BACKUP, "db", {"metadata": {"name": "db", **DELETING}}, "EtcdCluster db is being deleted"),
    ],
)
def test_nothing_is_created_for_what_the_live_objects_show_gone_or_being_deleted(backup, cluster_name, cluster, words):
    assert words in creation_refusal(UID, backup, cluster_name, cluster)


def test_a_live_backup_and_cluster_let_creating_go_on():
    assert creation_refusal(UID, BACKUP, "db", CLUSTER) is None
    assert creation_refusal(UID, BACKUP, None, None) is None  # a scratch pod: the cluster does not matter


class FakeKube:
    def __init__(self, objects):
        self.objects = objects
        self.created = []

    async def get(self, resource, namespace, name):
        return self.objects.get((resource, name))

    async def create(self, resource, namespace, body):
        self.created.append(body)
        return body


BODY = {
    "metadata": {"namespace": "ns", "name": "b", "uid": UID},
    "spec": {"clusterRef": {"name": "db"}, "storage": {"s3": {"bucket": "x"}}},
    "status": {"pendingUploads": [{"key": "k", "uploadId": "u"}]},
}


def test_a_run_decided_before_the_backups_deletion_uploads_nothing(monkeypatch):
    def no_runner(*args, **kwargs):
        raise AssertionError("the runner must not start")

    monkeypatch.setattr(executor, "BackupRunner", no_runner)
    live = FakeKube(
        {(kube.ETCDBACKUPS, "b"): {"metadata": {"uid": UID, **DELETING}}, (kube.ETCDCLUSTERS, "db"): CLUSTER}
    )
    # Not a failed attempt (no retry spent, no Degraded): nothing started, status unchanged,
    # so the pending uploads are still aborted by the next run.
    outcome = asyncio.run(BackupExecutor(live, {}, BODY).run(s.RunBackup(slot="x", one_shot=False)))
    assert outcome == s.RunNotStarted(message="no snapshot taken: the EtcdBackup is being deleted")
    live = FakeKube(
        {
            (kube.ETCDBACKUPS, "b"): {"metadata": {"uid": UID}},
            (kube.ETCDCLUSTERS, "db"): {"metadata": {"name": "db", **DELETING}},
        }
    )
    outcome = asyncio.run(BackupExecutor(live, {}, BODY).run(s.RunBackup(slot="x", one_shot=False)))
    assert outcome == s.RunNotStarted(message="no snapshot taken: EtcdCluster db is being deleted")


def test_a_scratch_pod_decided_before_the_backups_deletion_is_not_created(monkeypatch):
    def no_verifier(*args, **kwargs):
        raise AssertionError("no pod may be built")

    monkeypatch.setattr(executor, "BackupVerifier", no_verifier)
    live = FakeKube({(kube.ETCDBACKUPS, "b"): {"metadata": {"uid": UID, **DELETING}}})
    assert asyncio.run(BackupExecutor(live, {}, BODY).run(s.CreateScratchPod(key="k"))) is s.NOTHING_DONE
    assert live.created == []


def test_a_cluster_being_deleted_makes_a_due_run_wait():
    """FIXED backup_runs_for_an_object_being_deleted: the deletion is read from the body, and a run waits."""
    readiness = p.ClusterReadiness.from_body(
        {
            "metadata": DELETING,
            "status": {"phase": "Running", "readyMembers": 3, "conditions": [{"type": "Available", "status": "True"}]},
        }
    )
    assert readiness.deleting and not readiness.bootstrapping
    wait = p.cluster_wait("ns", "db", readiness, "the backup")
    assert wait.reason == p.WAITING_FOR_CLUSTER and "is being deleted" in wait.message
    assert p.cluster_wait("ns", "db", p.ClusterReadiness("Running", True, 3), "the backup") is None
