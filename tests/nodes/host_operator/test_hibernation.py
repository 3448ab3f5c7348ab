"""Hibernation on the real nodes, with the operator as a process on the host: a cluster put
to sleep runs no member pod and keeps its PVCs; woken, it is the same cluster (cluster ID,
member IDs) with every key written before; a scheduled EtcdBackup takes a snapshot holding
the cluster's last writes before the members stop, and skips the cluster while asleep."""

from __future__ import annotations

import json

import pytest

from etcd_operator.core.cluster import naming
from tests.support import doc_commands
from tests.support.backups import apply_backup, get_backup
from tests.support.cluster_checks import etcdctl, read_prefix
from tests.support.clusters import (
    FAST_RECOVERY,
    apply_cluster,
    events,
    get_cluster,
    member_endpoints,
    member_pods,
    patch_spec,
    wait_condition,
    wait_healthy,
)
from tests.support.etcd_data import put_markers
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.s3 import create_credentials_secret, s3_storage_spec
from tests.support.waiting import holds_throughout, wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane6]


def identity(endpoints: list[str]) -> tuple[int, frozenset[int]]:
    """(cluster ID, member IDs) as etcd's member list says."""
    listed = json.loads(etcdctl(endpoints, "member", "list", "-w", "json"))
    return listed["header"]["cluster_id"], frozenset(m["ID"] for m in listed["members"])


def member_pvcs(namespace: str, cluster: str) -> set[str]:
    selector = naming.label_selector(naming.selector_labels(cluster))
    return {p["metadata"]["name"] for p in kubectl_json("get", "pvc", "-n", namespace, "-l", selector)["items"]}


def wait_asleep(namespace: str, cluster: str) -> dict:
    wait_condition(namespace, cluster, "Hibernated", "True", timeout=240)
    assert member_pods(namespace, cluster) == []
    return get_cluster(namespace, cluster)


def test_hibernate_and_wake_keeps_every_key_and_the_identity(namespace, operator):
    # Fast recovery timeouts: asleep longer than both, nothing is replaced or recovered.
    spec = {"size": 3, "storage": {"size": "1Gi"}, "recovery": {**FAST_RECOVERY, "automaticQuorumRecovery": True}}
    apply_cluster(namespace, "sleepy", spec)
    wait_healthy(namespace, "sleepy", 3)
    endpoints = member_endpoints(namespace, "sleepy")
    markers = put_markers(endpoints, "/before-sleep/", 100)
    cluster_id, member_ids = identity(endpoints)
    pvcs = member_pvcs(namespace, "sleepy")
    assert len(pvcs) == 3

    # The commands as docs/operations/hibernation.md prints them.
    _, sleep = doc_commands.command(
        "docs/operations/hibernation.md",
        """kubectl patch etcdcluster NAME --type=merge -p '{"spec":{"hibernation":{"enabled":true""",
        NAME="sleepy",
    )
    _, wake = doc_commands.command(
        "docs/operations/hibernation.md",
        """kubectl patch etcdcluster NAME --type=merge -p '{"spec":{"hibernation":{"enabled":false""",
        NAME="sleepy",
    )
    kubectl(*sleep[1:], "-n", namespace)
    asleep = wait_asleep(namespace, "sleepy")
    assert asleep["status"]["phase"] == "Hibernated"
    recorded = asleep["status"]["hibernation"]
    assert recorded["clusterID"] == f"{cluster_id:x}"
    assert {int(m["id"], 16) for m in recorded["members"]} == member_ids
    assert member_pvcs(namespace, "sleepy") == pvcs, "a PVC went with its pod"

    def still_asleep() -> None:
        assert member_pods(namespace, "sleepy") == []
        assert member_pvcs(namespace, "sleepy") == pvcs
        assert get_cluster(namespace, "sleepy")["status"]["phase"] == "Hibernated"

    holds_throughout(still_asleep, 45, what="asleep past the recovery timeouts, nothing is healed")

    kubectl(*wake[1:], "-n", namespace)
    wait_condition(namespace, "sleepy", "Hibernated", "False", timeout=60)
    awake = wait_healthy(namespace, "sleepy", 3, timeout=300)
    wait_for(lambda: not get_cluster(namespace, "sleepy")["status"].get("hibernation"), 120, what="record dropped")
    endpoints = member_endpoints(namespace, "sleepy")
    assert identity(endpoints) == (cluster_id, member_ids), "woke up as another cluster or with other members"
    assert read_prefix(endpoints, "/before-sleep/") == markers
    assert awake["status"]["clusterID"] == f"{cluster_id:x}"
    reasons = {e["reason"] for e in events(namespace, "sleepy")}
    assert {"Hibernating", "Hibernated", "Waking", "Awake"} <= reasons, reasons
    assert not reasons & {"QuorumLost", "QuorumRecoveryStarted"}, reasons


def test_a_scheduled_backup_snapshots_before_the_members_stop_and_skips_the_cluster_asleep(
    real_nodes, namespace, operator
):
    apply_cluster(namespace, "napping", {"size": 3, "storage": {"size": "1Gi"}})
    wait_healthy(namespace, "napping", 3)
    create_credentials_secret(real_nodes, namespace)
    apply_backup(
        namespace,
        "hourly",
        {
            "clusterRef": {"name": "napping"},
            "schedule": "0 * * * *",
            "verification": {"enabled": False},
            "storage": s3_storage_spec(real_nodes, f"tests/{namespace}"),
        },
    )
    endpoints = member_endpoints(namespace, "napping")
    put_markers(endpoints, "/before-sleep/", 20)
    revision = json.loads(etcdctl(endpoints[:1], "endpoint", "status", "-w", "json"))[0]["Status"]["header"]["revision"]

    patch_spec(namespace, "napping", {"hibernation": {"enabled": True}})
    asleep = wait_asleep(namespace, "napping")
    assert asleep["status"]["hibernation"]["revision"] >= revision
    last = get_backup(namespace, "hourly")["status"]["lastBackup"]
    assert last["revision"] >= asleep["status"]["hibernation"]["revision"], last
    assert last["clusterID"] == asleep["status"]["clusterID"]
    assert "HibernatingWithoutSnapshot" not in {e["reason"] for e in events(namespace, "napping")}

    def skipped() -> bool:
        progressing = next(
            (
                c
                for c in get_backup(namespace, "hourly")["status"].get("conditions") or []
                if c["type"] == "Progressing"
            ),
            {},
        )
        return progressing.get("reason") == "ClusterHibernated"

    # The next due slot (forced by a schedule that fires every 10 s) waits, and says why.
    patch_backup = {"spec": {"schedule": "* * * * * */10"}}
    kubectl_json("patch", "etcdbackup", "hourly", "-n", namespace, "--type=merge", "-p", json.dumps(patch_backup))
    wait_for(skipped, 60, what="the backup skips the hibernated cluster")

    patch_spec(namespace, "napping", {"hibernation": {"enabled": False}})
    wait_healthy(namespace, "napping", 3, timeout=300)
    wait_for(lambda: not skipped(), 120, what="the backup runs again once the cluster is awake")
