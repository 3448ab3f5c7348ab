"""Version lifecycle on real nodes, with the operator the chart installed: the 3.5 -> 3.6
upgrade gate under a put/get load from the host (to the members' pod IPs) with zero failed
requests, an image no node has and no registry serves (the kubelet's ErrImagePull) rolled
back automatically on its own PVC (size 3 and size 1), and a 3.6 -> 3.5 downgrade through
etcd's downgrade API, on one shared cluster. Each test has a namespace of its own."""

from __future__ import annotations

import asyncio
import json

import pytest

from etcd_operator.clients.etcd.client import EtcdMemberClient
from tests.support.clusters import (
    apply_cluster,
    condition,
    events,
    get_cluster,
    member_endpoints,
    member_pods,
    patch_spec,
    wait_condition,
    wait_healthy,
)
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.load import BoundedLoad
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.usefixtures("kubectl_on_real_nodes", "operator_release"),
]

OLD_PATCH = "3.5.21"  # e2e/testbin/etcd-3.5-old: below the 3.5.32 that 3.6 requires
BAD_REPOSITORY = "registry.invalid/etcd-missing"  # imported into no node; the pull fails: ErrImagePull


def pvc_uids(namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in kubectl_json("get", "pvc", "-n", namespace)["items"]}


def images(namespace: str, cluster: str) -> set[str]:
    return {p["spec"]["containers"][0]["image"] for p in member_pods(namespace, cluster)}


def missing_keys(endpoints: list[str], keys: list[str]) -> list[str]:
    async def read():
        async with EtcdMemberClient(endpoints[0]) as client:
            return [k for k in keys if await client.get(k.encode()) != k.encode()]

    return asyncio.run(read())


def all_on(namespace: str, cluster: str, size: int, version: str, seen_mixed: list[bool]):
    obj = get_cluster(namespace, cluster)
    seen_mixed.append(bool((obj.get("status") or {}).get("mixedVersions")))
    status = obj.get("status") or {}
    versions = {m.get("version") for m in status.get("members") or []}
    return (
        wait_healthy(namespace, cluster, size)
        if versions == {version} and images(namespace, cluster) == {f"gcr.io/etcd-development/etcd:v{version}"}
        else None
    )


def wait_rolled_back(namespace: str, cluster: str, size: int) -> dict:
    def check():
        obj = get_cluster(namespace, cluster)
        paused = condition(obj, "RollPaused") or {}
        good = images(namespace, cluster) == {"gcr.io/etcd-development/etcd:v3.6.16"}
        return obj if paused.get("reason") == "RolledBack" and good and wait_healthy(namespace, cluster, size) else None

    return wait_for(check, 240, interval=1.0, what=f"{cluster} rolled back to the last good pod spec")


def test_upgrade_through_the_gate_under_load_then_a_bad_image_rolls_back(namespace):
    # etcd's own raft timing: no request may fail while each member restarts.
    apply_cluster(namespace, "v", {"size": 3, "version": OLD_PATCH, "storage": {"size": "1Gi"}}, raft=None)
    obj = wait_healthy(namespace, "v", 3)
    assert obj["status"]["currentVersion"] == OLD_PATCH
    load = BoundedLoad(lambda: member_endpoints(namespace, "v")).start()

    # The gate: 3.6 needs 3.5.32 first; nothing is touched.
    uids = {p["metadata"]["uid"] for p in member_pods(namespace, "v")}
    patch_spec(namespace, "v", {"version": "3.6.16"})
    refused = wait_condition(namespace, "v", "SpecAccepted", "False", timeout=60)
    assert condition(refused, "SpecAccepted")["reason"] == "UpgradeNeedsPatch"
    assert "3.5.32" in condition(refused, "SpecAccepted")["message"]
    assert {p["metadata"]["uid"] for p in member_pods(namespace, "v")} == uids

    seen_mixed: list[bool] = []
    patch_spec(namespace, "v", {"version": "3.5.35"})
    wait_for(lambda: all_on(namespace, "v", 3, "3.5.35", seen_mixed), 300, interval=1.0, what="all on 3.5.35")
    patch_spec(namespace, "v", {"version": "3.6.16"})
    obj = wait_for(lambda: all_on(namespace, "v", 3, "3.6.16", seen_mixed), 300, interval=1.0, what="all on 3.6.16")
    load.stop()
    assert not load.failed, f"{len(load.failed)} failed requests, e.g. {load.failed[:3]}"
    assert len(load.written) >= 10, "the load barely ran"
    assert missing_keys(member_endpoints(namespace, "v"), load.written) == []
    assert obj["status"]["clusterVersion"] == "3.6.0" and obj["status"]["mixedVersions"] is False
    assert any(seen_mixed), "a mixed-version cluster was never reported during the rolls"

    # A bad image: the first rolled member cannot start; it goes back on its own PVC.
    pvcs = pvc_uids(namespace)
    patch_spec(namespace, "v", {"repository": BAD_REPOSITORY})
    obj = wait_rolled_back(namespace, "v", 3)
    assert pvc_uids(namespace) == pvcs, "a PVC was deleted or replaced for a failed roll"
    assert obj["status"]["rollout"]["failedMember"]
    assert any(e["reason"] == "RollFailed" and e["type"] == "Warning" for e in events(namespace, "v"))
    assert missing_keys(member_endpoints(namespace, "v"), load.written) == []
    patch_spec(namespace, "v", {"repository": None})
    wait_condition(namespace, "v", "RollPaused", "False", timeout=60)
    assert pvc_uids(namespace) == pvcs

    # A downgrade through etcd's API: enable, cluster version drops, members roll, leader last.
    patch_spec(namespace, "v", {"version": "3.5.35"})
    obj = wait_for(lambda: all_on(namespace, "v", 3, "3.5.35", []), 300, interval=1.0, what="all on 3.5.35 again")
    wait_for(
        lambda: not (get_cluster(namespace, "v").get("status") or {}).get("downgrade"),
        60,
        what="the downgrade finished",
    )
    assert missing_keys(member_endpoints(namespace, "v"), load.written) == []
    reasons = [e["reason"] for e in events(namespace, "v")]
    assert "DowngradeEnabled" in reasons and "DowngradeFinished" in reasons
    assert pvc_uids(namespace) == pvcs


def test_size_one_bad_image_rolls_back_and_a_revert_keeps_it(namespace):
    apply_cluster(namespace, "one", {"size": 1, "version": "3.6.16", "storage": {"size": "1Gi"}})
    wait_healthy(namespace, "one", 1)
    wait_for(
        lambda: (get_cluster(namespace, "one").get("status") or {}).get("rollout", {}).get("lastGoodSpec"),
        60,
        what="the last good spec recorded",
    )
    keys = [f"/one/{i}" for i in range(20)]

    async def write():
        async with EtcdMemberClient(member_endpoints(namespace, "one")[0]) as client:
            for k in keys:
                await client.put(k.encode(), k.encode())

    asyncio.run(write())
    pvcs = pvc_uids(namespace)

    patch_spec(namespace, "one", {"repository": BAD_REPOSITORY})
    wait_rolled_back(namespace, "one", 1)
    assert pvc_uids(namespace) == pvcs
    assert missing_keys(member_endpoints(namespace, "one"), keys) == []

    patch_spec(namespace, "one", {"repository": None})
    wait_condition(namespace, "one", "RollPaused", "False", timeout=60)
    wait_healthy(namespace, "one", 1)
    assert pvc_uids(namespace) == pvcs
    assert missing_keys(member_endpoints(namespace, "one"), keys) == []


def test_known_bad_patches_are_refused_by_the_schema(namespace):
    manifest = {
        "apiVersion": "etcd.operator.dev/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": {"name": "bad", "namespace": namespace},
        "spec": {"version": "3.5.1"},
    }
    refused = kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
    assert refused.returncode != 0 and "3.5.0-3.5.2 can lose data consistency" in refused.stderr, refused.stderr
