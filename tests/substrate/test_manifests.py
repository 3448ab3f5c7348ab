"""Every shipped manifest passes server-side dry-run against the real API server."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.support.kubectl import kubectl

pytestmark = pytest.mark.substrate
ROOT = pathlib.Path(__file__).resolve().parents[2]


def kubernetes_manifests(folder: str) -> list[pathlib.Path]:
    """YAML files holding Kubernetes objects (kustomization files are checked through -k)."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if docs and all(isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in docs) \
                and not any(d["kind"] == "Kustomization" for d in docs):
            found.append(path)
    return found


def test_the_kustomize_base_passes_server_side_dry_run(substrate):
    result = kubectl("apply", "-k", str(ROOT / "deploy"), "--dry-run=server", check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", kubernetes_manifests("crds") + kubernetes_manifests("deploy"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_deploy_and_crd_manifests_pass_server_side_dry_run(substrate, path):
    # Namespaced objects in deploy/ get their namespace from kustomize; use it here too.
    result = kubectl("apply", "--dry-run=server", "-n", "default", "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", kubernetes_manifests("examples"), ids=lambda p: str(p.relative_to(ROOT)))
def test_examples_pass_server_side_dry_run(substrate, namespace, path):
    result = kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr
