"""Upgrading the operator as docs/operations/upgrading-the-operator.md tells users: a release of
the previous chart (its CRDs in the chart's crds/, which Helm installs once and never
upgrades), a running cluster, then `helm upgrade --take-ownership` to this checkout's chart,
whose CRDs are templates. The upgrade must update the CRDs (a field the old schema pruned is
kept afterwards) and leave the member pod alone (same pod, no container restart).

The previous chart is taken from git: the parent of the commit that deleted the chart's crds/.
Its CRDs equal crds/ but for the chart's keep annotation, so `spec.pod.imagePullSecrets` is
taken out of its EtcdCluster schema to stand for a field an older release did not know; that
field rolls no member (builders.pod_spec_hash leaves it out), so only the upgrade itself could.
The CRDs are shared with the other tests on the nodes: they get back the full schema and the
Helm owner they had."""

from __future__ import annotations

import json
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.support import chart_release, claims
from tests.support.clusters import PLAINTEXT, get_cluster, member_pods, patch_spec, wait_healthy
from tests.support.helm import CHART, helm
from tests.support.kubectl import kubectl, kubectl_json

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_release, pytest.mark.usefixtures("kubectl_on_real_nodes")]

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "upgrade-test"
CRD = "etcdclusters.etcd.operator.dev"
LEGACY_CRD = "charts/etcd-operator/crds/etcdclusters.yaml"
CRDS = [f"{plural}.etcd.operator.dev" for plural in ("etcdclusters", "etcdbackups", "etcdrestores")]
# What ties a CRD to a Helm release, and the keep policy.
HELM_ANNOTATIONS = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace", "helm.sh/resource-policy")
HELM_LABEL = "app.kubernetes.io/managed-by"


def previous_chart(into: Path) -> Path:
    """The chart as of the last commit whose CRDs sat in its crds/ folder, with the EtcdCluster
    schema lacking spec.pod.imagePullSecrets."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True)

    deleted = git("log", "-1", "--diff-filter=D", "--format=%H", "--", LEGACY_CRD).stdout.decode().strip()
    assert deleted, f"no commit deleted {LEGACY_CRD}"
    archive = into / "chart.tar"
    archive.write_bytes(git("archive", f"{deleted}^:charts/etcd-operator").stdout)
    chart = into / "etcd-operator"
    with tarfile.open(archive) as tar:
        tar.extractall(chart, filter="data")
    crd_file = chart / "crds" / "etcdclusters.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    pod = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["pod"]
    del pod["properties"]["imagePullSecrets"]
    crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def pull_secrets(namespace: str, name: str) -> list | None:
    return (get_cluster(namespace, name)["spec"].get("pod") or {}).get("imagePullSecrets")


def helm_metadata() -> dict[str, tuple[dict, str | None]]:
    """Each CRD's Helm annotations and label: the release that holds the CRDs (the session's)
    gets them back, so that its next install or upgrade finds them its own."""
    found = {}
    for name in CRDS:
        metadata = kubectl_json("get", "crd", name)["metadata"]
        crd_annotations = metadata.get("annotations") or {}
        found[name] = (
            {key: crd_annotations.get(key) for key in HELM_ANNOTATIONS},
            (metadata.get("labels") or {}).get(HELM_LABEL),
        )
    return found


def put_back(metadata: dict[str, tuple[dict, str | None]]) -> None:
    for name, (crd_annotations, label) in metadata.items():
        changes = [f"{key}={value}" if value is not None else f"{key}-" for key, value in crd_annotations.items()]
        kubectl("annotate", "crd", name, "--overwrite", *changes)
        kubectl("label", "crd", name, "--overwrite", f"{HELM_LABEL}={label}" if label is not None else f"{HELM_LABEL}-")


def members(namespace: str, name: str) -> dict[str, list[int]]:
    return {
        pod["metadata"]["uid"]: [c["restartCount"] for c in pod["status"].get("containerStatuses", [])]
        for pod in member_pods(namespace, name)
    }


def test_helm_upgrade_from_the_previous_chart_updates_the_crds_and_restarts_no_member(real_nodes, namespace):
    kubeconfig = str(real_nodes.kubeconfig)
    values = {
        "replicas": 1,
        "watchNamespaces": [namespace],
        "shard": {"name": RELEASE, "selector": claims.shard_env(RELEASE)["SHARD_SELECTOR"]},
    }
    kubectl("apply", "--server-side", "-k", str(ROOT / "crds"))  # as the session's release finds them
    kubectl("wait", "--for=condition=Established", *(f"crd/{name}" for name in CRDS), "--timeout=60s")
    found = helm_metadata()
    with tempfile.TemporaryDirectory() as tmp:
        old_chart = previous_chart(Path(tmp))
        values_file = Path(tmp) / "values.json"
        values_file.write_text(json.dumps(values))
        # The cluster as a user of the previous chart has it: its CRDs, which Helm created
        # from crds/ without any owner of its own.
        old_crd = yaml.safe_load((old_chart / "crds" / "etcdclusters.yaml").read_text())
        old_crd["metadata"]["resourceVersion"] = kubectl_json("get", "crd", CRD)["metadata"]["resourceVersion"]
        kubectl("replace", "-f", "-", input=json.dumps(old_crd))
        kubectl("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=60s")
        chart_release.restricted_namespace(RELEASE)
        release = ["-n", RELEASE, "--kubeconfig", kubeconfig, "-f", str(values_file), "--wait", "--timeout", "180s"]
        try:
            helm("install", RELEASE, str(old_chart), *release)
            manifest = {
                "apiVersion": "etcd.operator.dev/v1alpha1",
                "kind": "EtcdCluster",
                "metadata": {"name": "up", "namespace": namespace},
                "spec": {**PLAINTEXT, "size": 1, "storage": {"size": "1Gi"}},
            }
            kubectl("apply", "-f", "-", input=json.dumps(claims.claim(manifest, RELEASE)))
            wait_healthy(namespace, "up", 1, timeout=300)
            patch_spec(namespace, "up", {"pod": {"imagePullSecrets": [{"name": "registry-before"}]}})
            assert pull_secrets(namespace, "up") is None, "the previous schema should prune the field"
            before = members(namespace, "up")
            assert len(before) == 1, before

            helm("upgrade", RELEASE, str(CHART), "--take-ownership", *release)

            patch_spec(namespace, "up", {"pod": {"imagePullSecrets": [{"name": "registry-after"}]}})
            assert pull_secrets(namespace, "up") == [{"name": "registry-after"}], "the upgrade left the old schema"
            crd_annotations = kubectl_json("get", "crd", CRD)["metadata"].get("annotations") or {}
            assert crd_annotations.get("helm.sh/resource-policy") == "keep", crd_annotations
            assert crd_annotations.get("meta.helm.sh/release-name") == RELEASE, crd_annotations
            wait_healthy(namespace, "up", 1, timeout=120)
            assert members(namespace, "up") == before, "the upgrade restarted a member"

            kubectl("delete", "etcdcluster", "up", "-n", namespace, "--timeout=120s")
            helm("uninstall", RELEASE, "-n", RELEASE, "--kubeconfig", kubeconfig, "--wait")
            assert kubectl("get", "crd", CRD, check=False).returncode == 0, "uninstalling the chart took the CRDs"
        finally:
            kubectl("delete", "etcdclusters", "--all", "-n", namespace, "--timeout=120s", check=False)
            helm("uninstall", RELEASE, "-n", RELEASE, "--kubeconfig", kubeconfig, "--wait", check=False)
            chart_release.delete_namespace(RELEASE)
            # The CRDs as every other test expects them, whatever happened above.
            kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "crds"))
            put_back(found)
