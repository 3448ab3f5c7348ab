"""An in-place restore under a real watch client: a kube-apiserver on the host keeps its objects
in a cluster the operator runs. As the Kubernetes docs describe, the API server is stopped,
etcd restored, and the API server started again; the store must never hand out a revision it
handed out before, so a watch resumed from a resourceVersion read before the restore is refused
with 410 Gone instead of being served other data (etcd's restore guide: --bump-revision and
--mark-compacted)."""

from __future__ import annotations

import pytest

from tests.support.backups import apply_backup, apply_restore, get_backup, wait_phase
from tests.support.clusters import apply_cluster, get_cluster, member_endpoints, wait_healthy
from tests.support.kube_apiserver import KubeAPIServer
from tests.support.s3 import create_credentials_secret, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane5]

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
KEPT, LATER, DELETED = 20, 30, 5


def configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"name": name}}


def ours(listed: dict) -> set[str]:
    return {i["metadata"]["name"] for i in listed["items"] if i["metadata"]["name"].startswith(("kept-", "later-"))}


def refused_as_gone(status: int, event: dict | None) -> bool:
    """410 Gone, as the HTTP status or as the watch's first (ERROR) event."""
    if status == 410:
        return True
    return bool(event) and event.get("type") == "ERROR" and (event.get("object") or {}).get("code") == 410


def test_a_watch_from_before_an_in_place_restore_is_refused_with_410_gone(real_nodes, namespace, operator, tmp_path):
    apply_cluster(namespace, "kube", {"size": 1, "storage": {"size": "1Gi"}})
    wait_healthy(namespace, "kube", 1)
    create_credentials_secret(real_nodes, namespace)

    api = KubeAPIServer(real_nodes, member_endpoints(namespace, "kube"), tmp_path).start()
    try:
        for i in range(KEPT):
            api.create(CONFIGMAPS, configmap(f"kept-{i}"))
        apply_backup(
            namespace,
            "before",
            {"clusterRef": {"name": "kube"}, "storage": s3_storage_spec(real_nodes, f"tests/{namespace}")},
        )
        wait_for(lambda: get_backup(namespace, "before")["status"].get("phase") == "Completed", 120, what="backup")
        for i in range(LATER):
            api.create(CONFIGMAPS, configmap(f"later-{i}"))
        for i in range(DELETED):
            api.delete(f"{CONFIGMAPS}/kept-{i}")
        listed = api.get(CONFIGMAPS)
        assert ours(listed) == {f"kept-{i}" for i in range(DELETED, KEPT)} | {f"later-{i}" for i in range(LATER)}
        read_before = listed["metadata"]["resourceVersion"]
    finally:
        api.stop()

    # The restore compares its bump with the revision the cluster's status reports last.
    wait_for(
        lambda: (
            max(
                (m.get("revision") or 0 for m in get_cluster(namespace, "kube")["status"].get("members") or []),
                default=0,
            )
            >= int(read_before)
        ),
        60,
        what="the cluster's status reports the API server's last revision",
    )
    apply_restore(
        namespace,
        "inplace",
        {"source": {"backupRef": {"name": "before"}}, "target": {"inPlace": {"clusterName": "kube", "confirm": True}}},
    )
    restore = wait_phase(namespace, "inplace", "Completed", timeout=400)
    wait_healthy(namespace, "kube", 1)

    api = KubeAPIServer(real_nodes, member_endpoints(namespace, "kube"), tmp_path).start()
    try:
        listed = wait_for(lambda: api.get(CONFIGMAPS), 30, what="the API server lists ConfigMaps")
        # Exactly the backup's objects: the deleted ones back, the later ones gone.
        assert ours(listed) == {f"kept-{i}" for i in range(KEPT)}
        assert int(listed["metadata"]["resourceVersion"]) > int(read_before), "the store's revision went back"
        status, event = api.first_watch_answer(CONFIGMAPS, read_before)
        assert refused_as_gone(status, event), (status, event)
    finally:
        api.stop()
    # What status says of it: the snapshot's revision, the bump, and where the store started.
    recorded = restore["status"]
    # No spec.revisionBump: the restore chose one, 10^9 above the highest revision the cluster served.
    chosen = max(int(recorded["targetRevisionBefore"]) - recorded["restoredRevision"], 0) + 1_000_000_000
    assert recorded["revisionBump"] == chosen, recorded
    assert recorded["bumpedRevision"] == recorded["restoredRevision"] + recorded["revisionBump"], recorded
    assert recorded["bumpedRevision"] > int(read_before), recorded
    assert int(recorded["targetRevisionBefore"]) >= int(read_before), recorded
