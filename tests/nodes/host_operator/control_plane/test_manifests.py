"""Every shipped manifest passes server-side dry-run against the real API server."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.support.kubectl import kubectl

pytestmark = [pytest.mark.needs_cluster, pytest.mark.lane4]
ROOT = pathlib.Path(__file__).resolve().parents[4]


def kubernetes_manifests(folder: str) -> list[pathlib.Path]:
    """YAML files holding Kubernetes objects (kustomization files are checked through -k)."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if (
            docs
            and all(isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in docs)
            and not any(d["kind"] == "Kustomization" for d in docs)
            and not any(d["apiVersion"].startswith("monitoring.coreos.com/") for d in docs)
        ):
            # (deploy/monitoring/ needs the Prometheus Operator's CRDs: tests/nodes/host_operator/test_monitoring.py)
            found.append(path)
    return found


def test_the_kustomize_base_passes_server_side_dry_run(namespace):
    """The whole base as kustomize renders it, moved into this test's namespace (a dry
    run does not create the base's own Namespace for the objects that follow it)."""
    rendered = kubectl("kustomize", str(ROOT / "deploy")).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    assert {d["kind"] for d in docs} >= {
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
    }
    for doc in docs:
        if doc["kind"] == "Namespace":
            doc["metadata"]["name"] = namespace
        if doc["metadata"].get("namespace") == "etcd-operator":
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects") or []:
            subject["namespace"] = namespace
    result = kubectl("apply", "--dry-run=server", "-f", "-", check=False, input=yaml.safe_dump_all(docs))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "path", kubernetes_manifests("crds") + kubernetes_manifests("deploy"), ids=lambda p: str(p.relative_to(ROOT))
)
def test_deploy_and_crd_manifests_pass_server_side_dry_run(path):
    # Namespaced objects in deploy/ get their namespace from kustomize; use it here too.
    result = kubectl("apply", "--dry-run=server", "-n", "default", "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", kubernetes_manifests("examples"), ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_pass_server_side_dry_run(namespace, path):
    result = kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr
