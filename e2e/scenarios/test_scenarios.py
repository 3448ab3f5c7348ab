"""What a user does with the operator, end to end, against the operator running as a pod under
its ServiceAccount, as the Helm chart installs it (so the real API server enforces the shipped
RBAC). Portable: no node fault helpers and no direct access to pod IPs, so the same file
runs on kind. Where it runs: e2e/target.py.

`make test` runs this file directly on the session's real nodes (E2E_TARGET unset: it brings
up the real nodes and installs the chart itself), and one scenario again in external mode, in
a separate pytest process (tests/nodes/test_e2e_scenarios_on_real_nodes.py), so that the mode
`make e2e-kind` uses stays proven."""

from __future__ import annotations

import json

import pytest

from tests.support.clusters import events, get_cluster, member_pods, patch_spec, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.waiting import wait_for

GROUP = "etcd.operator.dev/v1alpha1"
pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.needs_store,
    pytest.mark.usefixtures("operator_namespace"),
]


def apply(namespace: str, kind: str, name: str, spec: dict) -> None:
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {"apiVersion": GROUP, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        ),
    )


def owned_leftovers(namespace: str) -> list[str]:
    kinds = "pods,persistentvolumeclaims,services,poddisruptionbudgets,etcdclusters,etcdbackups,etcdrestores"
    items = kubectl_json("get", kinds, "-n", namespace)["items"]
    return [
        f"{i['kind']}/{i['metadata']['name']}"
        for i in items
        if i["kind"] != "Service" or i["metadata"]["name"] != "kubernetes"
    ]


def s3_spec(s3: dict, namespace: str) -> dict:
    return {
        "s3": {
            "bucket": s3["bucket"],
            "prefix": f"e2e/{namespace}",
            "endpoint": s3["endpoint"],
            "forcePathStyle": True,
            "insecure": s3["endpoint"].startswith("http://"),
            "credentialsSecretRef": {"name": "s3"},
        }
    }


def test_create_scale_kill_and_delete_leaving_nothing_behind(namespace):
    apply(
        namespace,
        "EtcdCluster",
        "app",
        {
            "size": 3,
            "storage": {"size": "1Gi"},
            "reclaimPolicy": "Delete",
            "recovery": {"memberUnhealthyTimeout": "30s"},
        },
    )
    wait_healthy(namespace, "app", 3)
    patch_spec(namespace, "app", {"size": 5})
    wait_healthy(namespace, "app", 5, timeout=300)
    patch_spec(namespace, "app", {"size": 3})
    wait_healthy(namespace, "app", 3, timeout=300)

    # A removed member's pod may still be terminating (a real kubelet takes a moment): not a victim.
    live = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in member_pods(namespace, "app")
        if not p["metadata"].get("deletionTimestamp")
    }
    victim = sorted(live)[-1]
    uid = live[victim]
    kubectl("delete", "pod", victim, "-n", namespace, "--grace-period=0", "--force")
    wait_for(
        lambda: any(
            p["metadata"]["uid"] != uid and p["metadata"]["name"] == victim for p in member_pods(namespace, "app")
        ),
        120,
        what="killed member back",
    )
    wait_healthy(namespace, "app", 3)
    reasons = {e["reason"] for e in events(namespace, "app")}
    assert {"MemberAdded", "MemberPromoted", "MemberRemoved"} <= reasons

    kubectl("delete", "etcdcluster", "app", "-n", namespace, "--timeout=180s")
    wait_for(lambda: not owned_leftovers(namespace), 180, what="nothing left behind")


def test_scheduled_backup_then_restore_into_a_new_cluster_then_delete_everything(namespace, s3_settings):
    kubectl(
        "create",
        "secret",
        "generic",
        "s3",
        "-n",
        namespace,
        f"--from-literal=accessKeyID={s3_settings['access_key']}",
        f"--from-literal=secretAccessKey={s3_settings['secret_key']}",
    )
    apply(namespace, "EtcdCluster", "src", {"size": 1, "storage": {"size": "1Gi"}, "reclaimPolicy": "Delete"})
    wait_healthy(namespace, "src", 1)
    apply(
        namespace,
        "EtcdBackup",
        "every10s",
        {
            "clusterRef": {"name": "src"},
            "schedule": "* * * * * */10",
            "retention": {"maxBackups": 2},
            "storage": s3_spec(s3_settings, namespace),
        },
    )
    backup = wait_for(
        lambda: (
            (b := kubectl_json("get", "etcdbackup", "every10s", "-n", namespace))["status"].get("lastSuccessfulTime")
            and b
        ),
        120,
        what="a scheduled backup",
    )
    kubectl("patch", "etcdbackup", "every10s", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')

    apply(
        namespace,
        "EtcdRestore",
        "to-new",
        {
            "source": {"backupRef": {"name": "every10s"}},
            "target": {
                "newCluster": {
                    "name": "copy",
                    "spec": {"size": 3, "storage": {"size": "1Gi"}, "reclaimPolicy": "Delete"},
                }
            },
        },
    )
    restore = wait_for(
        lambda: (
            (r := kubectl_json("get", "etcdrestore", "to-new", "-n", namespace))["status"].get("phase")
            in ("Completed", "Failed")
            and r
        ),
        400,
        what="restore finished",
    )
    assert restore["status"]["phase"] == "Completed", restore["status"]
    assert restore["status"]["restoredRevision"] >= 1
    assert restore["status"]["sha256"] in {
        b["sha256"] for b in kubectl_json("get", "etcdbackup", "every10s", "-n", namespace)["status"]["recentBackups"]
    } | {backup["status"]["lastBackup"]["sha256"]}
    wait_healthy(namespace, "copy", 3)
    assert get_cluster(namespace, "copy")["status"]["clusterID"] != get_cluster(namespace, "src")["status"]["clusterID"]

    kubectl("delete", "etcdrestore,etcdbackup,etcdcluster", "--all", "-n", namespace, "--timeout=180s")
    wait_for(lambda: not owned_leftovers(namespace), 180, what="nothing left behind")
