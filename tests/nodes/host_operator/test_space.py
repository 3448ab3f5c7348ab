"""Space on the real nodes: member PVCs grow with spec.storage.size (a StorageClass of the
local-path provisioner that allows expansion, with the resizer of tests/support/volume_resizer.py
in place of a CSI driver's), the quota derived from the volume follows once every volume grew,
shrinking and a quota larger than the volume are refused, and a defragmentation asked for by
annotation covers every member once."""

from __future__ import annotations

import json

import pytest

from etcd_operator.core.cluster import naming, quota
from tests.support.clusters import (
    apply_cluster,
    condition,
    events,
    get_cluster,
    member_endpoints,
    member_pods,
    patch_spec,
    wait_healthy,
)
from tests.support.etcd_data import put_markers, read_keys
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.volume_resizer import expandable_class
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process]


def quota_arg(namespace: str, cluster: str) -> set[int]:
    found = set()
    for pod in member_pods(namespace, cluster):
        for arg in pod["spec"]["containers"][0]["args"]:
            if arg.startswith("--quota-backend-bytes="):
                found.add(int(arg.split("=", 1)[1]))
    return found


def pvc_sizes(namespace: str, cluster: str) -> list[tuple[str, str | None]]:
    selector = naming.label_selector(naming.selector_labels(cluster))
    items = kubectl_json("get", "pvc", "-n", namespace, "-l", selector)["items"]
    return [
        (p["spec"]["resources"]["requests"]["storage"], ((p.get("status") or {}).get("capacity") or {}).get("storage"))
        for p in items
    ]


def refused(namespace: str, name: str, spec: dict) -> str:
    patch = json.dumps({"spec": spec})
    result = kubectl("patch", "etcdcluster", name, "-n", namespace, "--type=merge", "-p", patch, check=False)
    assert result.returncode != 0, f"{spec} was accepted"
    return result.stderr


@pytest.fixture
def expandable(namespace):
    with expandable_class(namespace) as resizer:
        yield resizer
    assert resizer.error is None, resizer.error


def test_member_pvcs_grow_with_the_spec_and_the_quota_follows(namespace, expandable, operator):
    apply_cluster(
        namespace, "grow", {"size": 1, "storage": {"size": "1Gi", "storageClassName": expandable.storage_class}}
    )
    wait_healthy(namespace, "grow", 1)
    assert quota_arg(namespace, "grow") == {quota.quota_for_disk(1 << 30)}
    markers = put_markers(member_endpoints(namespace, "grow"), "/grow/", 3)

    patch_spec(namespace, "grow", {"storage": {"size": "2Gi"}})
    wait_for(
        lambda: pvc_sizes(namespace, "grow") == [("2Gi", "2Gi")],
        120,
        interval=1.0,
        what="the member PVC expanded to 2Gi",
    )
    # Only once the volume grew does the derived quota grow (the member restarts on its data).
    wait_for(
        lambda: quota_arg(namespace, "grow") == {quota.quota_for_disk(2 << 30)},
        120,
        interval=1.0,
        what="the quota derived from the grown volume",
    )
    obj = wait_healthy(namespace, "grow", 1)
    assert condition(obj, "StorageResized")["status"] == "True", condition(obj, "StorageResized")
    assert any(e["reason"] == "VolumeExpansionRequested" for e in events(namespace, "grow"))
    assert read_keys(member_endpoints(namespace, "grow"), list(markers)) == markers

    assert "cannot shrink" in refused(namespace, "grow", {"storage": {"size": "1Gi"}})
    assert "larger than the volume can hold" in refused(namespace, "grow", {"etcd": {"quotaBackendBytes": 1 << 30}})
    assert pvc_sizes(namespace, "grow") == [("2Gi", "2Gi")]
    assert expandable.resized == [(naming.pvc_name(naming.member_name("grow", 0)), "2Gi")]


def test_requested_defragmentation_covers_every_member_once(namespace, operator):
    apply_cluster(namespace, "defrag", {"size": 1, "storage": {"size": "1Gi"}})
    wait_healthy(namespace, "defrag", 1)
    kubectl("annotate", "etcdcluster", "defrag", "-n", namespace, f"{naming.ANNOTATION_DEFRAGMENT}=first")

    def done():
        obj = get_cluster(namespace, "defrag")
        return obj if ((obj.get("status") or {}).get("defragmentation") or {}).get("lastToken") == "first" else None

    wait_for(done, 60, interval=1.0, what="status.defragmentation.lastToken=first")
    reasons = [e["reason"] for e in events(namespace, "defrag")]
    assert reasons.count("MemberDefragmented") == 1 and "DefragmentationDone" in reasons, reasons
