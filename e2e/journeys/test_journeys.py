"""The first things a user does, done as they do them: everything applied at once in one
manifest (in either order of arrival), applied again unchanged, deleted in every way (each
propagation policy, the namespace, with the operator down, the finalizer removed by hand),
and the chart upgraded and uninstalled with a cluster in place. Portable: kubectl and helm
only, no node faults and no pod IPs, so the same file runs on any cluster.

The journeys that run the docs' install commands as printed (README's quickstart, the
install and sharding pages) and the helm journey uninstall and reinstall the operator: they
stay last."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import string
import subprocess
import time

import pytest
import yaml

from localkube import layout as localkube_layout
from tests.support import doc_commands
from tests.support.clusters import condition, member_pods
from tests.support.helm import CHART, helm, helm_environment
from tests.support.journeys import journey_namespace
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.waiting import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
GROUP = "etcd.operator.dev/v1alpha1"
pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.needs_store,
    pytest.mark.usefixtures("operator"),
]


# --- what a user writes -------------------------------------------------------------------


def base64_text(value: str) -> str:
    """Secret data as `data:` (`kubectl apply` of stringData reports a change every time)."""
    return base64.b64encode(value.encode()).decode()


def resource(kind: str, name: str, namespace: str, spec: dict) -> dict:
    return {"apiVersion": GROUP, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def storage(s3: dict, namespace: str) -> dict:
    return {
        "s3": {
            "bucket": s3["bucket"],
            "prefix": namespace,
            "endpoint": s3["endpoint"],
            "region": s3["region"],
            "forcePathStyle": True,
            "insecure": s3["endpoint"].startswith("http://"),
            "credentialsSecretRef": {"name": "s3-credentials"},
        }
    }


def everything(namespace: str, s3: dict) -> dict[str, dict]:
    """One of each: a namespace, the S3 Secret, a cluster, a scheduled and a one-shot backup,
    and a restore of the one-shot backup into a new cluster."""
    return {
        "namespace": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        "secret": {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3-credentials", "namespace": namespace},
            "data": {"accessKeyID": base64_text(s3["access_key"]), "secretAccessKey": base64_text(s3["secret_key"])},
        },
        "cluster": resource("EtcdCluster", "app", namespace, {"size": 1, "storage": {"size": "1Gi"}}),
        "schedule": resource(
            "EtcdBackup",
            "hourly",
            namespace,
            {"clusterRef": {"name": "app"}, "schedule": "0 * * * *", "storage": storage(s3, namespace)},
        ),
        "backup": resource(
            "EtcdBackup", "first", namespace, {"clusterRef": {"name": "app"}, "storage": storage(s3, namespace)}
        ),
        "restore": resource(
            "EtcdRestore",
            "copy",
            namespace,
            {
                "source": {"backupRef": {"name": "first"}},
                "target": {"newCluster": {"name": "copy", "spec": {"size": 1, "storage": {"size": "1Gi"}}}},
            },
        ),
    }


def apply(*documents: dict) -> list[str]:
    """`kubectl apply` of one manifest; the lines it printed, one per object."""
    out = kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents)).stdout
    return [line for line in out.splitlines() if line.strip()]


def assert_unchanged(lines: list[str]) -> None:
    assert lines and all(line.endswith(" unchanged") for line in lines), lines


# --- what a user looks at -----------------------------------------------------------------


def get(kind: str, namespace: str, name: str) -> dict | None:
    result = kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def phase(kind: str, namespace: str, name: str) -> str | None:
    return ((get(kind, namespace, name) or {}).get("status") or {}).get("phase")


def wait_phase(kind: str, namespace: str, name: str, wanted: str, timeout: float = 300) -> dict:
    final = {"Completed", "Failed"}
    obj = wait_for(
        lambda: phase(kind, namespace, name) in {wanted} | final and get(kind, namespace, name),
        timeout,
        what=f"{kind} {name} {wanted}",
    )
    assert obj["status"]["phase"] == wanted, f"{kind} {name}: {json.dumps(obj['status'])}"
    return obj


def wait_available(namespace: str, name: str, size: int, timeout: float = 300) -> dict:
    def available():
        obj = get("etcdcluster", namespace, name)
        cond = condition(obj or {}, "Available")
        ready = (obj or {}).get("status", {}).get("readyMembers")
        return cond is not None and cond["status"] == "True" and ready == size and obj

    return wait_for(available, timeout, what=f"EtcdCluster {name} Available with {size} ready members")


def pvc_uids(namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in kubectl_json("get", "pvc", "-n", namespace)["items"]}


def pod_uids(namespace: str, cluster: str) -> set[str]:
    return {p["metadata"]["uid"] for p in member_pods(namespace, cluster)}


def operator_pods(release: str) -> set[str]:
    """The names of a release's operator pods in etcd-operator, those being deleted left out."""
    pods = kubectl_json("get", "pods", "-n", "etcd-operator", "-l", f"app.kubernetes.io/instance={release}")
    return {p["metadata"]["name"] for p in pods["items"] if not p["metadata"].get("deletionTimestamp")}


def delete_namespace(namespace: str, timeout: float = 120) -> float:
    """Deletes the namespace as a user does and waits until it is gone: no finalizer is
    removed by hand. Returns the seconds it took."""
    started = time.monotonic()
    kubectl("delete", "namespace", namespace, "--wait=false")
    wait_for(
        lambda: kubectl("get", "namespace", namespace, check=False).returncode != 0,
        timeout,
        what=f"namespace {namespace} gone",
    )
    return time.monotonic() - started


# --- the journeys -------------------------------------------------------------------------


def test_the_demo_manifest_applied_at_once_ends_with_a_completed_first_backup(s3_settings):
    namespace = journey_namespace("demo")
    settings = {
        "NAMESPACE": namespace,
        "S3_BUCKET": s3_settings["bucket"],
        "S3_ENDPOINT": s3_settings["endpoint"],
        "S3_REGION": s3_settings["region"],
        "ACCESS_KEY_ID_BASE64": base64_text(s3_settings["access_key"]),
        "SECRET_ACCESS_KEY_BASE64": base64_text(s3_settings["secret_key"]),
    }
    manifest = string.Template((ROOT / "e2e" / "demo" / "demo.yaml").read_text()).substitute(settings)
    kubectl("apply", "-f", "-", input=manifest)
    wait_available(namespace, "demo", 3)
    first = wait_phase("etcdbackup", namespace, "demo-first-backup", "Completed")
    assert first["status"]["lastBackup"]["key"]
    wait_phase("etcdbackup", namespace, "demo-backup", "Scheduled", timeout=120)
    assert_unchanged(kubectl("apply", "-f", "-", input=manifest).stdout.splitlines())
    print(f"namespace {namespace} deleted in {delete_namespace(namespace):.1f}s")


def converge_everything(namespace: str, objects: dict[str, dict]) -> None:
    wait_available(namespace, "app", 1)
    wait_phase("etcdbackup", namespace, "first", "Completed")
    wait_phase("etcdbackup", namespace, "hourly", "Scheduled", timeout=120)
    wait_phase("etcdrestore", namespace, "copy", "Completed")
    wait_available(namespace, "copy", 1)
    assert_unchanged(apply(*objects.values()))


def test_everything_applied_at_once_with_the_backups_and_restore_before_their_cluster(s3_settings):
    namespace = journey_namespace("before-cluster")
    objects = everything(namespace, s3_settings)
    order = ("namespace", "secret", "restore", "backup", "schedule", "cluster")
    apply(*(objects[k] for k in order))
    converge_everything(namespace, objects)
    seconds = delete_namespace(namespace)
    print(f"namespace {namespace} with 2 clusters, 2 backups and a restore deleted in {seconds:.1f}s")
    assert seconds <= 60, f"deleting the namespace took {seconds:.0f}s"


def test_everything_applied_at_once_with_the_secret_last(s3_settings):
    namespace = journey_namespace("before-secret")
    objects = everything(namespace, s3_settings)
    apply(*(objects[k] for k in ("namespace", "cluster", "schedule", "backup", "restore")))

    def waits_for_the_secret():
        backup = get("etcdbackup", namespace, "first") or {}
        status = backup.get("status") or {}
        said = " ".join(c.get("message", "") for c in status.get("conditions") or [])
        return status.get("phase") == "Pending" and "s3-credentials" in said

    wait_for(waits_for_the_secret, 180, what="the one-shot backup Pending, waiting for Secret s3-credentials")
    apply(*objects.values())  # the Secret arrives
    converge_everything(namespace, objects)
    delete_namespace(namespace)


POLICIES = [
    (reclaim, cascade) for reclaim in ("Retain", "Delete") for cascade in ("background", "foreground", "orphan")
]


def test_each_propagation_policy_keeps_or_deletes_the_pvcs_as_reclaim_policy_says():
    namespace = journey_namespace("propagation")
    names = {policy: f"{policy[0].lower()}-{policy[1]}" for policy in POLICIES}
    apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        *(
            resource("EtcdCluster", name, namespace, {"size": 1, "storage": {"size": "1Gi"}, "reclaimPolicy": reclaim})
            for (reclaim, _), name in names.items()
        ),
    )
    for name in names.values():
        wait_available(namespace, name, 1)
    before = pvc_uids(namespace)
    running = {name: pod_uids(namespace, name) for name in names.values()}
    for (_, cascade), name in names.items():
        kubectl("delete", "etcdcluster", name, "-n", namespace, f"--cascade={cascade}", "--timeout=120s")
    keeps = {f"data-{name}-0": reclaim == "Retain" or cascade == "orphan" for (reclaim, cascade), name in names.items()}
    # A deleted PVC goes once no pod mounts it (pvc-protection); under a background cascade the
    # member pod is collected only after the EtcdCluster is gone.
    wait_for(
        lambda: not set(pvc_uids(namespace)) & {pvc for pvc, kept in keeps.items() if not kept},
        120,
        what="the PVCs of reclaimPolicy Delete gone",
    )
    after = {
        p["metadata"]["name"]: (p["metadata"]["uid"], bool(p["metadata"].get("deletionTimestamp")))
        for p in kubectl_json("get", "pvc", "-n", namespace)["items"]
    }
    for (reclaim, cascade), name in names.items():
        pvc = f"data-{name}-0"
        kept = after.get(pvc) == (before[pvc], False)
        print(
            f"reclaimPolicy {reclaim}, --cascade={cascade}: PVC {pvc} uid {before[pvc]} "
            f"{'kept' if kept else 'deleted' if pvc not in after else 'now ' + str(after[pvc])}"
        )
        assert kept is keeps[pvc], (reclaim, cascade, before[pvc], after.get(pvc))
    orphan = names[("Retain", "orphan")]
    assert pod_uids(namespace, orphan) == running[orphan], "an orphaned member pod did not run on"
    delete_namespace(namespace)


def test_deleting_with_the_operator_down_or_the_finalizer_removed_keeps_retained_data(operator):
    namespace = journey_namespace("operator-down")
    clusters = {"kept": "Retain", "dropped": "Delete", "forced": "Retain"}
    apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        *(
            resource("EtcdCluster", name, namespace, {"size": 1, "storage": {"size": "1Gi"}, "reclaimPolicy": reclaim})
            for name, reclaim in clusters.items()
        ),
    )
    for name in clusters:
        wait_available(namespace, name, 1)
    before = pvc_uids(namespace)

    replicas = operator.replicas()
    operator.scale(0)
    kubectl("delete", "etcdcluster", "kept", "dropped", "-n", namespace, "--cascade=foreground", "--wait=false")
    kubectl(
        "patch",
        "etcdcluster",
        "forced",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"metadata": {"finalizers": None}}),
    )
    kubectl("delete", "etcdcluster", "forced", "-n", namespace, "--cascade=foreground", "--timeout=120s")
    wait_for(
        lambda: not any(member_pods(namespace, name) for name in clusters),
        180,
        what="the garbage collector took every member pod",
    )
    assert pvc_uids(namespace) == before, "a PVC went while the operator was down"

    operator.scale(replicas)
    wait_for(
        lambda: not kubectl_json("get", "etcdclusters", "-n", namespace)["items"],
        180,
        what="the operator released the deleted clusters",
    )
    after = pvc_uids(namespace)
    assert after == {p: uid for p, uid in before.items() if p != "data-dropped-0"}, (before, after)
    delete_namespace(namespace)


def run_as_printed(block: doc_commands.Block, kubeconfig: str | None = None) -> subprocess.CompletedProcess:
    """A shell block of the docs run from the repository's root, as after `source
    .localkube/env` with testbin's helm on PATH too; it must succeed."""
    testbin = localkube_layout.testbin_dir()
    env = {**os.environ, **helm_environment(), "PATH": f"{testbin / 'helm'}:{testbin / 'kube'}:{os.environ['PATH']}"}
    if kubeconfig:
        env["KUBECONFIG"] = kubeconfig
    script = "set -euxo pipefail\n" + block.text
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{block.page}:{block.line}\n" + result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.sets_the_operator_aside
def test_the_readme_quickstart_runs_as_printed(operator):
    if operator.release is None:
        pytest.skip("the quickstart installs the chart itself (E2E_TARGET=external)")
    # The quickstart installs the release `etcd-operator` itself, on a cluster without an operator.
    with operator.set_aside():
        try:
            result = run_as_printed(doc_commands.block("README.md", "helm install etcd-operator"))
            assert "demo" in result.stdout and "Running" in result.stdout, result.stdout
        finally:
            helm("uninstall", "etcd-operator", "-n", "etcd-operator", check=False)
            kubectl(
                "delete",
                "namespace",
                "etcd-quickstart",
                "etcd-operator",
                "--ignore-not-found",
                "--timeout=120s",
                check=False,
            )


@pytest.mark.sets_the_operator_aside
def test_the_install_page_commands_run_as_printed(operator):
    """docs/install.md's Helm install, then its restricted label: the operator's pods, made
    again under that label, are admitted."""
    if operator.release is None:
        pytest.skip("the install page installs the chart itself (E2E_TARGET=external)")
    with operator.set_aside():
        try:
            run_as_printed(doc_commands.block("docs/install.md", "helm install etcd-operator"))
            labels = kubectl_json("get", "namespace", "etcd-operator")["metadata"]["labels"]
            assert labels.get("pod-security.kubernetes.io/enforce") == "restricted", labels
            before = operator_pods("etcd-operator")
            kubectl("rollout", "restart", "deployment/etcd-operator", "-n", "etcd-operator")
            kubectl("rollout", "status", "deployment/etcd-operator", "-n", "etcd-operator", "--timeout=110s")
            after = operator_pods("etcd-operator")
            assert after and not after & before, (before, after)
        finally:
            helm("uninstall", "etcd-operator", "-n", "etcd-operator", check=False)
            kubectl("delete", "namespace", "etcd-operator", "--ignore-not-found", "--timeout=120s", check=False)


@pytest.mark.sets_the_operator_aside
def test_the_sharding_page_commands_run_as_printed(operator, tmp_path):
    """docs/operations/sharding.md's two releases and its cluster of shard b: shard b claims
    the cluster and its backup with its own finalizer and runs it, shard a leaves them alone.
    kubectl's namespace is the journey's (the page's `kubectl apply` names none)."""
    if operator.release is None:
        pytest.skip("the sharding page installs the chart itself (E2E_TARGET=external)")
    namespace = journey_namespace("sharding")
    kubectl("create", "namespace", namespace)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(pathlib.Path(os.environ["KUBECONFIG"]).read_text())
    kubectl("config", "set-context", "--current", f"--namespace={namespace}", f"--kubeconfig={kubeconfig}")
    printed = doc_commands.block("docs/operations/sharding.md", "helm install etcd-shard-a")
    with operator.set_aside():
        try:
            run_as_printed(printed, str(kubeconfig))
            for release in ("etcd-shard-a", "etcd-shard-b"):
                kubectl(
                    "wait",
                    "deployment",
                    "-n",
                    "etcd-operator",
                    "-l",
                    f"app.kubernetes.io/instance={release}",
                    "--for=condition=Available",
                    "--timeout=110s",
                )
            cluster = wait_available(namespace, "orders", 3)
            backup = get("etcdbackup", namespace, "orders-hourly")
            for obj in (cluster, backup):
                finalizers = obj["metadata"].get("finalizers") or []
                assert "etcd.operator.dev/finalizer-b" in finalizers, finalizers
                assert "etcd.operator.dev/finalizer-a" not in finalizers, finalizers
            # Deleted while shard b runs, so that it releases them.
            kubectl("delete", "etcdbackups,etcdclusters", "--all", "-n", namespace, "--timeout=110s")
        finally:
            for release in ("etcd-shard-a", "etcd-shard-b"):
                helm("uninstall", release, "-n", "etcd-operator", check=False)
            kubectl("delete", "namespace", "etcd-operator", "--ignore-not-found", "--timeout=120s", check=False)


def test_helm_upgrade_and_uninstall_leave_a_running_cluster_alone(operator):
    if operator.release is None:
        pytest.skip("the operator was installed by someone else (E2E_TARGET=external)")
    namespace = journey_namespace("helm")
    apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        resource("EtcdCluster", "app", namespace, {"size": 3, "storage": {"size": "1Gi"}}),
    )
    wait_available(namespace, "app", 3)
    members = pod_uids(namespace, "app")

    revision = json.loads(helm("status", operator.release, "-n", operator.namespace, "-o", "json").stdout)["version"]
    helm(
        "upgrade",
        operator.release,
        str(CHART),
        "-n",
        operator.namespace,
        "--set",
        "logLevel=DEBUG",
        "--wait",
        "--timeout",
        "180s",
    )
    kubectl("rollout", "status", f"deployment/{operator.deployment}", "-n", operator.namespace, "--timeout=180s")
    upgraded = json.loads(helm("status", operator.release, "-n", operator.namespace, "-o", "json").stdout)
    assert upgraded["version"] == revision + 1
    container = get("deployment", operator.namespace, operator.deployment)["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"]: e.get("value") for e in container["env"]}["LOG_LEVEL"] == "DEBUG"
    assert wait_available(namespace, "app", 3) and pod_uids(namespace, "app") == members

    helm("uninstall", operator.release, "-n", operator.namespace, "--wait", "--timeout", "180s")
    assert get("etcdcluster", namespace, "app") is not None, "uninstalling the chart deleted a cluster"
    assert pod_uids(namespace, "app") == members, "uninstalling the chart touched a member"
    left = kubectl_json(
        "get",
        "deployments,serviceaccounts,roles,rolebindings",
        "-n",
        operator.namespace,
        "-l",
        f"app.kubernetes.io/instance={operator.release}",
    )["items"]
    assert not left, [f"{o['kind']}/{o['metadata']['name']}" for o in left]
    assert kubectl("get", "clusterrole", operator.deployment, check=False).returncode != 0
    assert kubectl("get", "crd", "etcdclusters.etcd.operator.dev", check=False).returncode == 0, (
        "uninstalling the chart took the CRDs"
    )

    operator.install()
    wait_available(namespace, "app", 3)
    assert pod_uids(namespace, "app") == members
    delete_namespace(namespace)
