"""Restores in a sharded install: an in-place restore waits, touching nothing, while its target
cluster belongs to another shard; a restore into a new cluster hands the new cluster its own
labels, so that the shard that took the restore takes the cluster too."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.controllers.restore import executor
from etcd_operator.controllers.restore.observer import target_cluster
from etcd_operator.core.restore import builders
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.spec import RestoreStatus
from etcd_operator.core.shard import Shard, shard_from_settings
from tests.unit.test_restore_planner import IN_PLACE, READ_ONLY, VERIFIED, cluster, observed, step_for

SHARD_A = shard_from_settings("a", "shard=a")


def cluster_object(labels: dict | None = None, finalizers: list | None = None) -> dict:
    return {
        "metadata": {
            "name": "keep",
            "uid": "cluster-uid",
            "resourceVersion": "42",
            "labels": labels or {},
            "finalizers": finalizers or [],
        },
        "spec": {"size": 1},
    }


@pytest.mark.parametrize("status", [RestoreStatus(), RestoreStatus(phase="Pending"), VERIFIED])
def test_an_in_place_restore_of_a_cluster_outside_the_shard_waits_and_touches_nothing(status):
    outside = dataclasses.replace(cluster(), outside_shard="its labels do not match the selector 'shard=a'")
    step = step_for(IN_PLACE, status, observed(outside))
    assert isinstance(step, s.Wait) and isinstance(step, READ_ONLY)
    assert step.code == "TargetOutsideShard"
    assert "Label this EtcdRestore like its cluster" in step.reason


def test_an_in_place_restore_of_a_cluster_in_the_shard_goes_on():
    assert isinstance(step_for(IN_PLACE, VERIFIED, observed(cluster())), s.BeginRestore)


@pytest.mark.parametrize(
    "labels, finalizers, outside",
    [
        ({"shard": "a"}, ["etcd.operator.dev/finalizer-a"], None),
        ({"shard": "a"}, [], None),
        ({"shard": "b"}, ["etcd.operator.dev/finalizer-b"], "do not match the selector 'shard=a'"),
        ({}, [], "do not match the selector 'shard=a'"),
        ({"shard": "a"}, ["etcd.operator.dev/finalizer-b"], "another operator instance holds it"),
    ],
)
def test_the_observer_says_why_a_target_is_outside_the_shard(labels, finalizers, outside):
    found = target_cluster(cluster_object(labels, finalizers), SHARD_A).outside_shard
    assert (found is None) if outside is None else (outside in found), found


def test_an_unsharded_operator_owns_every_target_it_alone_holds():
    assert target_cluster(cluster_object({"any": "x"}, ["etcd.operator.dev/finalizer"]), Shard()).outside_shard is None


def test_the_new_cluster_of_a_restore_carries_the_restores_labels():
    manifest = builders.new_cluster("r1", "ns", "fresh", {"size": 1}, {"shard": "a", "team": "x"})
    assert manifest["metadata"]["labels"] == {"shard": "a", "team": "x"}
    assert "labels" not in builders.new_cluster("r1", "ns", "fresh", {"size": 1})["metadata"]


class RecordingKube:
    def __init__(self):
        self.created: list[dict] = []

    async def create(self, resource, namespace, manifest, dry_run=False):
        self.created.append(manifest)


@pytest.mark.parametrize("shard", [SHARD_A, Shard()])
def test_the_new_cluster_of_a_restore_is_held_by_the_restoring_instance_from_its_creation(shard):
    """An unsharded instance beside a shard (or two shards with overlapping selectors) would
    otherwise both see an unclaimed cluster; the first finalizer decides, and here it is set
    by the create itself."""
    import asyncio

    from etcd_operator.controllers.restore.reconciler import RestoreReconciler
    from etcd_operator.core.restore.spec import RestoreSpec

    kube_client = RecordingKube()
    controller = RestoreReconciler(kube_client, "operator-image", lambda *_: None, shard=shard)
    body = {"metadata": {"name": "r1", "namespace": "ns", "uid": "uid-r1", "labels": {"shard": "a"}}, "spec": {}}
    spec = RestoreSpec.from_dict(
        {"source": {"backupRef": {"name": "nightly"}}, "target": {"newCluster": {"name": "fresh", "spec": {"size": 1}}}}
    )
    runner = executor.RestoreExecutor(kube_client, "operator-image", body, lambda *_: None, controller.finalizer)
    outcome = asyncio.run(runner.run(s.CreateTargetCluster("creating fresh"), spec, VERIFIED, observed()))
    assert outcome.done
    (manifest,) = kube_client.created
    assert manifest["metadata"]["finalizers"] == [shard.finalizer]
    assert manifest["metadata"]["labels"] == {"shard": "a"}
