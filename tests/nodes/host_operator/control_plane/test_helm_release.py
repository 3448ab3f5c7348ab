"""The Helm chart without a release: lint and render every values preset (server-side
dry-run against the API server; no nodes), and compare the chart with deploy/. The chart is
installed, upgraded and uninstalled on the real nodes (`operator_release` in
tests/support/real_nodes_fixtures.py, e2e/journeys, tests/nodes/test_operator_on_real_nodes.py),
where `kubectl etcd` runs too (tests/nodes/test_kubectl_etcd.py)."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.support import rendered
from tests.support.helm import CHART, helm
from tests.support.kubectl import kubectl

pytestmark = [pytest.mark.needs_cluster, pytest.mark.lane4]
ROOT = pathlib.Path(__file__).resolve().parents[4]
PRESETS = [None] + sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))
RELEASE = "etcd-operator-chart"  # not "etcd-operator": never adopts objects of deploy/


def render(*args: str) -> list[dict]:
    out = helm("template", RELEASE, str(CHART), *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_helm_lint_passes_for_every_preset():
    for preset in PRESETS:
        extra = ["-f", str(CHART / "ci" / preset)] if preset else []
        result = helm("lint", "--strict", str(CHART), *extra, check=False)
        assert result.returncode == 0, f"{preset}: {result.stdout}{result.stderr}"


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p or "default")
def test_every_values_preset_passes_server_side_dry_run(preset):
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


def test_namespaced_rbac_refuses_globs():
    result = helm(
        "template",
        RELEASE,
        str(CHART),
        "--set",
        "rbac.scope=namespaced",
        "--set",
        "watchNamespaces={e2e-*}",
        check=False,
    )
    assert result.returncode != 0 and "plain namespace names" in result.stderr


def deploy_variants() -> list[pathlib.Path]:
    """The kustomize installs: deploy/ (cluster-wide) and deploy-namespaced/ (deploy/monitoring/
    is an add-on, not an install)."""
    return [ROOT / "deploy", ROOT / "deploy-namespaced"]


@pytest.mark.parametrize("variant", deploy_variants(), ids=lambda p: str(p.relative_to(ROOT)))
def test_chart_and_deploy_grant_and_run_the_same(variant):
    """No drift between the chart and deploy/: the same permissions, the same pod spec, the
    same CRDs and the same kinds of objects. The chart's values are read off the variant."""
    deploy = [d for d in yaml.safe_load_all(kubectl("kustomize", str(variant)).stdout) if d]
    deployment = rendered.the(deploy, "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    watched = [n for n in (env.get("WATCH_NAMESPACES") or "").split(",") if n]
    namespaced = any(
        d["kind"] == "Role" and any("etcdclusters" in r.get("resources", []) for r in d["rules"]) for d in deploy
    )
    values = [
        "--set",
        f"replicas={deployment['spec']['replicas']}",
        "--set",
        f"image.tag={deployment['spec']['template']['spec']['containers'][0]['image'].rsplit(':', 1)[1]}",
    ]
    if watched:
        values += ["--set", "watchNamespaces={" + ",".join(watched) + "}"]
    if namespaced:
        values += ["--set", "rbac.scope=namespaced"]
    chart = render("-n", deployment["metadata"]["namespace"], "--set", "fullnameOverride=etcd-operator", *values)

    assert rendered.kinds(chart) == rendered.kinds(deploy)
    assert rendered.permissions(chart) == rendered.permissions(deploy)
    assert rendered.deployment_differences(rendered.the(chart, "Deployment"), deployment) == []

    def crds(docs):
        return {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "CustomResourceDefinition"}

    assert crds(chart) == crds(deploy), "charts/etcd-operator/templates/crds/ differs from crds/: run `make chart-crds`"


def crd_documents(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}


def test_the_chart_renders_the_crds_of_crds_folder_kept_on_uninstall():
    """The CRDs are templates (so `helm upgrade` updates them), each as in crds/ with only the
    keep policy added (so `helm uninstall` leaves them, and with them every cluster)."""
    ours = crd_documents([yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("etcd*.yaml"))])
    rendered_crds = crd_documents(render())
    assert sorted(rendered_crds) == sorted(ours) and len(ours) == 3
    for name, crd in rendered_crds.items():
        assert crd["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}, name
        assert crd == ours[name], f"{name}: the chart's copy differs from crds/: run `make chart-crds`"


def test_the_crds_are_left_out_for_users_who_manage_them():
    assert crd_documents(render("--set", "crds.install=false")) == {}
    assert rendered.the(render("--set", "crds.install=false"), "Deployment")
