"""`kubectl etcd` (the plugin pip installs beside the operator) against a 3-member TLS cluster
on the real nodes, run by the chart's release as users run it: status, a snapshot and the
backups it lists from the EtcdBackup's status, a restore that asks first, a defragmentation
request and an approval of quorum recovery that asks first. One cluster serves the module,
in file order."""

from __future__ import annotations

import json

import pytest

from etcd_operator_kubectl.views import human_bytes
from tests.support import chart_release
from tests.support.clusters import GROUP, apply_cluster, get_cluster, wait_healthy
from tests.support.diagnostics import fresh_namespace_name
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.kubectl_etcd import member_table, plugin, plugin_json
from tests.support.s3 import create_credentials_secret, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.needs_store,
    pytest.mark.usefixtures("kubectl_on_real_nodes", "operator_release"),
]


@pytest.fixture(scope="module")
def cluster_namespace(real_nodes, operator_release, kubectl_on_real_nodes):
    """A restricted namespace with a 3-member cluster `app` (TLS, as the CRD defaults it) and
    S3 credentials; deleted afterwards, its data with it."""
    name = fresh_namespace_name("n", "kubectl-etcd")
    chart_release.restricted_namespace(name)
    apply_cluster(name, "app", {"size": 3, "storage": {"size": "1Gi"}, "reclaimPolicy": "Delete"})
    create_credentials_secret(real_nodes, name)
    wait_healthy(name, "app", 3)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_kubectl_etcd_status_shows_every_member_and_the_conditions(cluster_namespace):
    table = plugin("status", "app", "-n", cluster_namespace)
    assert table.returncode == 0, table.stderr
    view = plugin_json("status", "app", "-n", cluster_namespace)
    names = [m["name"] for m in view["members"]]
    assert len(names) == 3 and all(n in table.stdout for n in names)
    assert {m["role"] for m in view["members"]} == {"leader", "follower"}
    assert all(m["healthy"] and m["revisionLag"] >= 0 and m["dbSize"] > 0 for m in view["members"])
    # The quota and the alarms are the operator's, as it wrote them in the object's status.
    recorded = get_cluster(cluster_namespace, "app")["status"]
    quota = recorded["quota"]["backendBytes"]  # no spec.etcd.quotaBackendBytes: derived from the volume
    assert isinstance(quota, int) and quota > 0, recorded["quota"]
    assert view["quotaBytes"] == quota and [m["quotaBytes"] for m in view["members"]] == [quota] * 3, (quota, view)
    assert f"quota {human_bytes(quota)}" in table.stdout
    assert recorded["alarms"] == [] and view["alarms"] == [], (recorded["alarms"], view["alarms"])
    rows = member_table(table.stdout)
    assert sorted(rows) == sorted(names) and {r["ALARMS"] for r in rows.values()} == {"-"}, rows
    assert all(f" / {human_bytes(quota)}" in r["DB SIZE / QUOTA"] for r in rows.values()), rows
    assert all(m["alarms"] == [] for m in view["members"]) and "ALARMS RAISED" not in table.stdout
    assert {"Available"} <= {c["type"] for c in view["conditions"]} and "Available" in table.stdout
    missing = plugin("status", "nope", "-n", cluster_namespace)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr, missing.stderr
    assert missing.stderr.startswith('error: etcdclusters.etcd.operator.dev "nope" not found'), missing.stderr


def test_kubectl_etcd_snapshot_then_backups_lists_it_from_the_status(real_nodes, cluster_namespace):
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": GROUP,
                "kind": "EtcdBackup",
                "metadata": {"name": "first", "namespace": cluster_namespace},
                "spec": {
                    "clusterRef": {"name": "app"},
                    "storage": s3_storage_spec(real_nodes, f"plugin/{cluster_namespace}"),
                },
            }
        ),
    )
    created = plugin_json("snapshot", "app", "--storage-from", "first", "--name", "now", "-n", cluster_namespace)
    assert created["spec"]["clusterRef"] == {"name": "app"} and "schedule" not in created["spec"]
    done = wait_for(
        lambda: (
            (b := kubectl_json("get", "etcdbackup", "now", "-n", cluster_namespace))["status"].get("phase")
            in ("Completed", "Failed")
            and b
        ),
        180,
        what="the snapshot taken",
    )
    assert done["status"]["phase"] == "Completed", done["status"]
    entries = plugin_json("backups", "now", "-n", cluster_namespace)["snapshots"]
    assert [e["key"] for e in entries] == [done["status"]["lastBackup"]["key"]]
    assert entries[0]["revision"] == done["status"]["lastBackup"]["revision"]
    assert entries[0]["size"] == done["status"]["lastBackup"]["size"] and entries[0]["verification"]
    table = plugin("backups", "now", "-n", cluster_namespace)
    assert str(entries[0]["revision"]) in table.stdout


def test_kubectl_etcd_restore_asks_first_then_creates_the_restore(cluster_namespace):
    refused = plugin("restore", "now", "--new-cluster", "copy", "--size", "1", "-n", cluster_namespace, input="")
    assert refused.returncode == 1 and "into a NEW cluster copy" in refused.stderr
    assert not kubectl_json("get", "etcdrestore", "-n", cluster_namespace)["items"]

    restore = plugin_json(
        "restore", "now", "--new-cluster", "copy", "--size", "1", "--name", "to-copy", "--yes", "-n", cluster_namespace
    )
    key = kubectl_json("get", "etcdbackup", "now", "-n", cluster_namespace)["status"]["lastBackup"]["key"]
    assert restore["spec"]["source"]["backupRef"] == {"name": "now", "key": key}
    done = wait_for(
        lambda: (
            (r := kubectl_json("get", "etcdrestore", "to-copy", "-n", cluster_namespace))["status"].get("phase")
            in ("Completed", "Failed")
            and r
        ),
        300,
        what="restore finished",
    )
    assert done["status"]["phase"] == "Completed", done["status"]
    wait_healthy(cluster_namespace, "copy", 1)


def test_kubectl_etcd_defrag_sets_a_new_token(cluster_namespace):
    annotation = "etcd.operator.dev/defragment"
    kubectl("annotate", "etcdcluster", "app", "-n", cluster_namespace, f"{annotation}=an-earlier-request")
    token = plugin_json("defrag", "app", "-n", cluster_namespace)[annotation]
    assert token not in ("an-earlier-request", "")
    assert get_cluster(cluster_namespace, "app")["metadata"]["annotations"][annotation] == token


def test_kubectl_etcd_approve_recovery_asks_first_then_annotates(cluster_namespace):
    annotation = "etcd.operator.dev/approve-quorum-recovery"
    refused = plugin("approve-recovery", "app", "-n", cluster_namespace, input="")
    assert refused.returncode == 1 and "force-new-cluster" in refused.stderr
    assert annotation not in (get_cluster(cluster_namespace, "app")["metadata"].get("annotations") or {})
    assert plugin_json("approve-recovery", "app", "--yes", "-n", cluster_namespace)[annotation] == "true"
    kubectl("annotate", "etcdcluster", "app", "-n", cluster_namespace, f"{annotation}-")
