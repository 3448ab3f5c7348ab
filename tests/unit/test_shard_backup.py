"""Backups in a sharded install: a backup whose cluster is not its shard's is refused with
ClusterOutsideShard before anything is read from etcd; the cluster of its own shard is used."""

from __future__ import annotations

import asyncio

import pytest

from etcd_operator.controllers.backup.failure import as_failure
from etcd_operator.controllers.backup.source_candidates import SourceUnavailable, find_candidates
from etcd_operator.core.shard import Shard, shard_from_settings

SHARD_A = shard_from_settings("a", "shard=a")


class ClusterOnlyKube:
    """Answers the two reads find_candidates makes: the EtcdCluster, and its pods."""

    def __init__(self, labels: dict, finalizers: list):
        self.cluster = {
            "metadata": {"name": "c", "namespace": "ns", "labels": labels, "finalizers": finalizers},
            "status": {"members": [{"name": "c-0", "healthy": True, "role": "leader"}]},
        }
        self.pods_listed = False

    async def get(self, resource, namespace, name):
        return self.cluster

    async def list(self, resource, namespace, selector=""):
        self.pods_listed = True
        return [{"metadata": {"name": "c-0"}, "status": {"podIP": "10.0.0.1"}}]


@pytest.mark.parametrize(
    "labels, finalizers, why",
    [
        ({"shard": "b"}, ["etcd.operator.dev/finalizer-b"], "do not match the selector 'shard=a'"),
        ({"shard": "a"}, ["etcd.operator.dev/finalizer-b"], "another operator instance holds it"),
    ],
)
def test_a_backup_of_a_cluster_outside_the_shard_is_refused_before_etcd_is_asked(labels, finalizers, why):
    kube = ClusterOnlyKube(labels, finalizers)
    with pytest.raises(SourceUnavailable) as refused:
        asyncio.run(find_candidates(kube, "ns", "c", SHARD_A))
    assert refused.value.permanent and refused.value.reason == "ClusterOutsideShard"
    assert why in str(refused.value) and "Label this EtcdBackup like its cluster" in str(refused.value)
    assert not kube.pods_listed
    failure = as_failure(refused.value)
    assert (failure.reason, failure.permanent) == ("ClusterOutsideShard", True)


def test_a_backup_of_a_cluster_of_its_own_shard_finds_its_source():
    candidates, _ = asyncio.run(
        find_candidates(ClusterOnlyKube({"shard": "a"}, ["etcd.operator.dev/finalizer-a"]), "ns", "c", SHARD_A)
    )
    assert [c.endpoint for c in candidates] == ["10.0.0.1:2379"]


def test_an_unsharded_operator_backs_up_any_cluster_it_holds():
    candidates, _ = asyncio.run(
        find_candidates(ClusterOnlyKube({}, ["etcd.operator.dev/finalizer"]), "ns", "c", Shard())
    )
    assert [c.name for c in candidates] == ["c-0"]


def test_the_other_source_failures_keep_their_reasons():
    assert as_failure(SourceUnavailable("gone", permanent=True)).reason == "ClusterNotFound"
    assert as_failure(SourceUnavailable("no healthy member")).reason == "NoHealthyMember"
