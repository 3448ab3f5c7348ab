"""The Helm chart, installed for real, and everything that uses the operator it runs.

One release serves the whole module, in file order: lint and render every values preset
(server-side dry-run), compare the chart with deploy/, `helm install` with the operator
running as a pod (the node agent runs this checkout for the operator image), a cluster
brought to 3 voters, every `kubectl etcd` command against it, then `helm upgrade` and
`helm uninstall`. The e2e scenarios run on the real nodes instead
(tests/nodes/test_e2e_scenarios_on_real_nodes.py)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid

import pytest
import yaml

from tests.support.finalizers import release_finalizers
from tests.support import rendered
from tests.support.clusters import apply_cluster, get_cluster, wait_healthy
from tests.support.helm import CHART, helm
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.s3 import create_credentials_secret, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = pytest.mark.substrate
ROOT = pathlib.Path(__file__).resolve().parents[2]
PRESETS = [None] + sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
RELEASE = "etcd-operator-chart"  # not "etcd-operator": never adopts objects of deploy/
RELEASE_NAMESPACE = "etcd-operator-chart"
PLUGIN = pathlib.Path(sys.executable).parent / "kubectl-etcd"
GROUP = "etcd.operator.dev/v1alpha1"


def render(*args: str) -> list[dict]:
    out = helm("template", RELEASE, str(CHART), "--include-crds", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def plugin(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(PLUGIN), *args], capture_output=True, text=True, input=input, timeout=120,
                          env={**os.environ, "KUBECONFIG": os.environ["KUBECONFIG"]})


def plugin_json(*args: str):
    result = plugin(*args, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# ---- the chart without a release --------------------------------------------------------

def test_helm_lint_passes_for_every_preset(substrate):
    for preset in PRESETS:
        extra = ["-f", str(CHART / "ci" / preset)] if preset else []
        result = helm("lint", "--strict", str(CHART), *extra, check=False)
        assert result.returncode == 0, f"{preset}: {result.stdout}{result.stderr}"


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p or "default")
def test_every_values_preset_passes_server_side_dry_run(substrate, preset):
    extra = ["-f", str(CHART / "ci" / preset)] if preset else []
    docs = render("-n", "default", *extra)
    watched = {d["metadata"].get("namespace") for d in docs} - {None, "default"}
    for name in watched:  # namespaced RBAC goes into the watched namespaces, which must exist
        kubectl("create", "namespace", name, check=False)
    try:
        result = kubectl("apply", "--dry-run=server", "-f", "-", check=False, input=yaml.safe_dump_all(docs))
    finally:
        for name in watched:  # waited for, so the next run can create them again
            kubectl("delete", "namespace", name, "--timeout=120s", check=False)
    assert result.returncode == 0, result.stderr


def test_namespaced_rbac_refuses_globs(substrate):
    result = helm("template", RELEASE, str(CHART), "--set", "rbac.scope=namespaced",
                  "--set", "watchNamespaces={e2e-*}", check=False)
    assert result.returncode != 0 and "plain namespace names" in result.stderr


def deploy_variants() -> list[pathlib.Path]:
    """The kustomize installs: deploy/ (cluster-wide) and deploy-namespaced/ (deploy/monitoring/
    is an add-on, not an install)."""
    return [ROOT / "deploy", ROOT / "deploy-namespaced"]


@pytest.mark.parametrize("variant", deploy_variants(), ids=lambda p: str(p.relative_to(ROOT)))
def test_chart_and_deploy_grant_and_run_the_same(substrate, variant):
    """No drift between the chart and deploy/: the same permissions, the same pod spec, the
    same CRDs and the same kinds of objects. The chart's values are read off the variant."""
    deploy = [d for d in yaml.safe_load_all(kubectl("kustomize", str(variant)).stdout) if d]
    deployment = rendered.the(deploy, "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    watched = [n for n in (env.get("WATCH_NAMESPACES") or "").split(",") if n]
    namespaced = any(d["kind"] == "Role" and any("etcdclusters" in r.get("resources", []) for r in d["rules"])
                     for d in deploy)
    values = ["--set", f"replicas={deployment['spec']['replicas']}",
              "--set", f"image.tag={deployment['spec']['template']['spec']['containers'][0]['image'].rsplit(':', 1)[1]}"]
    if watched:
        values += ["--set", "watchNamespaces={" + ",".join(watched) + "}"]
    if namespaced:
        values += ["--set", "rbac.scope=namespaced"]
    chart = render("-n", deployment["metadata"]["namespace"], "--set", "fullnameOverride=etcd-operator", *values)

    assert rendered.kinds(chart) == rendered.kinds(deploy)
    assert rendered.permissions(chart) == rendered.permissions(deploy)
    assert rendered.deployment_differences(rendered.the(chart, "Deployment"), deployment) == []
    crds = lambda docs: {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert crds(chart) == crds(deploy), "charts/etcd-operator/crds/ differs from crds/: run `make chart-crds`"


# ---- one release for the rest of the module -----------------------------------------

@pytest.fixture(scope="module")
def release(substrate):
    helm("install", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--create-namespace",
         "-f", str(ROOT / "e2e" / "helm-local-values.yaml"), "--wait", "--timeout", "180s")
    wait_for(lambda: kubectl("get", "lease", "etcd-operator-leader", "-n", RELEASE_NAMESPACE,
                             "-o", "jsonpath={.spec.holderIdentity}", check=False).stdout.strip(),
             120, what="a leader elected")
    yield RELEASE
    helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", check=False)
    kubectl("delete", "namespace", RELEASE_NAMESPACE, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture(scope="module")
def cluster_namespace(release, kube_api):
    """A namespace the release watches (e2e-*), with a 3-member cluster and S3 credentials.
    The uninstall test empties it while the operator still runs; this is the safety net."""
    name = f"e2e-helm-{uuid.uuid4().hex[:5]}"
    kubectl("create", "namespace", name)
    apply_cluster(name, "app", {"size": 3, "storage": {"size": "1Gi"}, "reclaimPolicy": "Delete"})
    yield name
    kubectl("delete", "etcdrestore,etcdbackup,etcdcluster", "--all", "-n", name, "--wait=false", check=False)
    release_finalizers(kube_api, name)
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_helm_install_runs_the_operator_as_a_pod_that_brings_a_cluster_to_three_voters(release, cluster_namespace):
    pods = kubectl_json("get", "pods", "-n", RELEASE_NAMESPACE, "-l", "app.kubernetes.io/instance=" + RELEASE)["items"]
    assert len(pods) == 2 and all(p["spec"]["serviceAccountName"] == RELEASE for p in pods)
    obj = wait_healthy(cluster_namespace, "app", 3)
    assert sorted(m["role"] for m in obj["status"]["members"]).count("follower") == 2


# ---- kubectl etcd against that cluster -----------------------------------------------

def test_kubectl_etcd_status_shows_every_member_and_the_conditions(cluster_namespace):
    table = plugin("status", "app", "-n", cluster_namespace)
    assert table.returncode == 0, table.stderr
    view = plugin_json("status", "app", "-n", cluster_namespace)
    names = [m["name"] for m in view["members"]]
    assert len(names) == 3 and all(n in table.stdout for n in names)
    assert {m["role"] for m in view["members"]} == {"leader", "follower"}
    assert all(m["healthy"] and m["revisionLag"] >= 0 and m["dbSize"] > 0 and m["quotaBytes"] > 0
               for m in view["members"])
    assert {"Available"} <= {c["type"] for c in view["conditions"]} and "Available" in table.stdout
    missing = plugin("status", "nope", "-n", cluster_namespace)
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_kubectl_etcd_snapshot_then_backups_lists_it_from_the_manifest(substrate, cluster_namespace):
    create_credentials_secret(substrate, cluster_namespace)
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": GROUP, "kind": "EtcdBackup", "metadata": {"name": "first", "namespace": cluster_namespace},
        "spec": {"clusterRef": {"name": "app"}, "storage": s3_storage_spec(substrate, "plugin")}}))
    created = plugin_json("snapshot", "app", "--storage-from", "first", "--name", "now", "-n", cluster_namespace)
    assert created["spec"]["clusterRef"] == {"name": "app"} and "schedule" not in created["spec"]
    done = wait_for(lambda: (b := kubectl_json("get", "etcdbackup", "now", "-n", cluster_namespace))
                    ["status"].get("phase") in ("Completed", "Failed") and b, 180, what="the snapshot taken")
    assert done["status"]["phase"] == "Completed", done["status"]
    entries = plugin_json("backups", "now", "-n", cluster_namespace)
    assert [e["key"] for e in entries] == [done["status"]["lastBackup"]["key"]]
    assert entries[0]["revision"] == done["status"]["lastBackup"]["revision"]
    assert entries[0]["size"] == done["status"]["lastBackup"]["size"] and entries[0]["verification"]
    table = plugin("backups", "now", "-n", cluster_namespace)
    assert str(entries[0]["revision"]) in table.stdout


def test_kubectl_etcd_restore_asks_first_then_creates_the_restore(cluster_namespace):
    refused = plugin("restore", "now", "--new-cluster", "copy", "--size", "1", "-n", cluster_namespace, input="")
    assert refused.returncode == 1 and "into a NEW cluster copy" in refused.stderr
    assert not kubectl_json("get", "etcdrestore", "-n", cluster_namespace)["items"]

    restore = plugin_json("restore", "now", "--new-cluster", "copy", "--size", "1", "--name", "to-copy", "--yes",
                          "-n", cluster_namespace)
    key = kubectl_json("get", "etcdbackup", "now", "-n", cluster_namespace)["status"]["lastBackup"]["key"]
    assert restore["spec"]["source"]["backupRef"] == {"name": "now", "key": key}
    done = wait_for(lambda: (r := kubectl_json("get", "etcdrestore", "to-copy", "-n", cluster_namespace))
                    ["status"].get("phase") in ("Completed", "Failed") and r, 300, what="restore finished")
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


# ---- upgrade and uninstall -----------------------------------------------------------

def test_helm_upgrade_rolls_out_the_new_values_and_the_cluster_stays_healthy(release, cluster_namespace):
    helm("upgrade", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "-f", str(ROOT / "e2e" / "helm-local-values.yaml"),
         "--set", "logLevel=DEBUG", "--wait", "--timeout", "180s")
    deployment = kubectl_json("get", "deployment", RELEASE, "-n", RELEASE_NAMESPACE)
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LOG_LEVEL"] == "DEBUG"
    assert json.loads(helm("status", RELEASE, "-n", RELEASE_NAMESPACE, "-o", "json").stdout)["version"] == 2
    kubectl("rollout", "status", f"deployment/{RELEASE}", "-n", RELEASE_NAMESPACE, "--timeout=180s")
    wait_healthy(cluster_namespace, "app", 3)


def test_helm_uninstall_removes_the_operator_and_keeps_the_crds(release, cluster_namespace):
    # What a user does first: delete the clusters while the operator still runs its finalizers.
    kubectl("delete", "etcdrestore,etcdbackup,etcdcluster", "--all", "-n", cluster_namespace, "--timeout=150s")
    helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", "--timeout", "180s")
    assert not kubectl_json("get", "deployments,serviceaccounts,roles,rolebindings", "-n", RELEASE_NAMESPACE,
                            "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    assert kubectl("get", "clusterrole", RELEASE, check=False).returncode != 0
    assert kubectl("get", "crd", "etcdclusters.etcd.operator.dev", check=False).returncode == 0
