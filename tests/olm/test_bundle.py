"""The OLM bundle of `make bundle` (hack/olm_bundle.py): accepted by the operator-framework API
module's validators (testbin's olm-bundle-validate, e2e/testbin/olm), and a faithful copy of
the sources it is made from: the CRDs of crds/, deploy/'s Deployment and RBAC, examples/
that fit their CRD's schema, pyproject's version."""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import tomllib

import pytest
import yaml

from localkube import layout as localkube_layout
from tests.support.structural_schema import crd_schema, violations

ROOT = pathlib.Path(__file__).resolve().parents[2]
KINDS = {"EtcdCluster", "EtcdBackup", "EtcdRestore"}
MIN_KUBE_VERSION = "1.30.0"
# Findings of the validator that stand, each with why (none: kopf posts core v1 Events only).
ACCEPTED_WARNINGS: tuple[str, ...] = ()


def load_all(path: pathlib.Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module")
def bundle() -> pathlib.Path:
    subprocess.run(["make", "-s", "bundle"], cwd=ROOT, check=True, capture_output=True, timeout=300)
    return ROOT / "build" / "bundle"


@pytest.fixture(scope="module")
def csv(bundle) -> dict:
    (document,) = load_all(bundle / "manifests" / "etcd-operator.clusterserviceversion.yaml")
    return document


def validate(directory: pathlib.Path) -> subprocess.CompletedProcess:
    binary = localkube_layout.testbin_dir() / "olm" / "olm-bundle-validate"
    return subprocess.run(
        [binary, "-k8s-version", MIN_KUBE_VERSION, directory], capture_output=True, text=True, timeout=120
    )


def test_the_operator_framework_validators_accept_the_bundle(bundle):
    result = validate(bundle)
    assert result.returncode == 0, result.stdout + result.stderr
    findings = [line for line in result.stdout.splitlines() if line.startswith(("Error", "Warning"))]
    unexplained = [line for line in findings if not any(reason in line for reason in ACCEPTED_WARNINGS)]
    assert unexplained == []
    assert "bundle etcd-operator.v0.1.0 valid" in result.stdout


def test_the_validator_refuses_an_example_of_a_kind_the_bundle_does_not_own(bundle, csv, tmp_path):
    broken = tmp_path / "bundle"
    subprocess.run(["cp", "-r", bundle, broken], check=True)
    changed = copy.deepcopy(csv)
    examples = json.loads(changed["metadata"]["annotations"]["alm-examples"])
    examples[0]["kind"] = "EtcdCluter"
    changed["metadata"]["annotations"]["alm-examples"] = json.dumps(examples)
    (broken / "manifests" / "etcd-operator.clusterserviceversion.yaml").write_text(yaml.safe_dump(changed))
    result = validate(broken)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Error OperationFailed : example must have a provided API" in result.stdout


def test_the_bundle_crds_are_the_files_of_crds(bundle):
    listed = yaml.safe_load((ROOT / "crds" / "kustomization.yaml").read_text())["resources"]
    for name in listed:
        assert (bundle / "manifests" / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), name
    in_bundle = [
        path.name
        for path in (bundle / "manifests").glob("*.yaml")
        if any(doc["kind"] == "CustomResourceDefinition" for doc in load_all(path))
    ]
    assert sorted(in_bundle) == sorted(listed)


def crds_by_kind() -> dict[str, dict]:
    crds = [doc for path in (ROOT / "crds").glob("etcd*.yaml") for doc in load_all(path)]
    return {crd["spec"]["names"]["kind"]: crd for crd in crds}


def test_every_alm_example_fits_its_crd_schema(csv):
    crds = crds_by_kind()
    examples = json.loads(csv["metadata"]["annotations"]["alm-examples"])
    assert {example["kind"] for example in examples} == KINDS
    for example in examples:
        group, version = example["apiVersion"].split("/")
        crd = crds[example["kind"]]
        assert crd["spec"]["group"] == group
        assert violations(example, crd_schema(crd, version)) == [], example["metadata"]["name"]


def test_the_schema_check_finds_an_unknown_field_a_wrong_type_and_a_missing_requirement():
    crd = crds_by_kind()["EtcdCluster"]
    (example,) = load_all(ROOT / "examples" / "etcdcluster.yaml")
    schema = crd_schema(crd, "v1alpha1")
    assert violations(example, schema) == []
    typo = copy.deepcopy(example)
    typo["spec"]["sise"] = 3
    assert violations(typo, schema) == ["spec.sise: unknown field (the server would prune it)"]
    wrong_type = copy.deepcopy(example)
    wrong_type["spec"]["size"] = "3"
    assert violations(wrong_type, schema) == ["spec.size: '3' is not of type integer"]
    too_big = copy.deepcopy(example)
    too_big["spec"]["size"] = 99
    assert [v for v in violations(too_big, schema) if "above" in v] == ["spec.size: 99 is above 9"]
    backup = crds_by_kind()["EtcdBackup"]
    assert "spec: clusterRef is required" in violations({"spec": {}}, crd_schema(backup, "v1alpha1"))


def test_the_csv_deployment_is_deploys_with_the_watched_namespaces_from_olm(csv):
    (deployment,) = load_all(ROOT / "deploy" / "deployment.yaml")
    (installed,) = csv["spec"]["install"]["spec"]["deployments"]
    assert installed["name"] == deployment["metadata"]["name"]
    spec = copy.deepcopy(installed["spec"])
    env = spec["template"]["spec"]["containers"][0]["env"]
    watch = [entry for entry in env if entry["name"] == "WATCH_NAMESPACES"]
    assert watch == [
        {
            "name": "WATCH_NAMESPACES",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['olm.targetNamespaces']"}},
        }
    ]
    env.remove(watch[0])
    assert spec == deployment["spec"]


def rule_set(rules: list[dict]) -> set[tuple]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_csv_permissions_are_deploys_rbac_split_by_scope(csv):
    rbac = load_all(ROOT / "deploy" / "rbac.yaml")
    (cluster_role,) = [doc for doc in rbac if doc["kind"] == "ClusterRole"]
    (leader_role,) = [doc for doc in rbac if doc["kind"] == "Role"]
    strategy = csv["spec"]["install"]["spec"]
    (cluster_permissions,) = strategy["clusterPermissions"]
    (permissions,) = strategy["permissions"]
    (account,) = load_all(ROOT / "deploy" / "serviceaccount.yaml")
    assert cluster_permissions["serviceAccountName"] == permissions["serviceAccountName"] == account["metadata"]["name"]
    # AllNamespaces: OLM binds both cluster-wide, which is deploy/ (plus leases everywhere).
    assert rule_set(cluster_permissions["rules"]) | rule_set(permissions["rules"]) == rule_set(
        cluster_role["rules"]
    ) | rule_set(leader_role["rules"])
    # Other modes: permissions become a Role per watched namespace, the watched Role of
    # deploy-namespaced/ (plus the leases of leader election).
    (watched_role,) = [doc for doc in load_all(ROOT / "deploy-namespaced/watched/role.yaml") if doc["kind"] == "Role"]
    assert rule_set(permissions["rules"]) == rule_set(watched_role["rules"]) | rule_set(leader_role["rules"])
    # ... and the cluster-wide rest is deploy-namespaced/'s discovery, plus reading PVs and Nodes.
    (discovery,) = [doc for doc in load_all(ROOT / "deploy-namespaced/discovery.yaml") if doc["kind"] == "ClusterRole"]
    assert rule_set(cluster_permissions["rules"]) == rule_set(discovery["rules"]) | {
        ("", "persistentvolumes", "get"),
        ("", "nodes", "list"),
    }


def test_the_csv_names_the_release_and_what_the_operator_supports(csv):
    release = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert csv["metadata"]["name"] == f"etcd-operator.v{release}"
    assert csv["spec"]["version"] == release
    assert csv["spec"]["minKubeVersion"] == MIN_KUBE_VERSION
    image = f"ghcr.io/etcd-operator/etcd-operator:{release}"
    assert csv["metadata"]["annotations"]["containerImage"] == image
    assert (
        csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"][0]["image"] == image
    )
    assert csv["metadata"]["annotations"]["capabilities"] == "Deep Insights"
    chart = yaml.safe_load((ROOT / "charts/etcd-operator/Chart.yaml").read_text())
    assert chart["annotations"]["artifacthub.io/operatorCapabilities"] == "Deep Insights", "one level, chart and CSV"
    modes = {mode["type"]: mode["supported"] for mode in csv["spec"]["installModes"]}
    assert modes == {"OwnNamespace": True, "SingleNamespace": True, "MultiNamespace": True, "AllNamespaces": True}
    owned = {crd["kind"]: crd for crd in csv["spec"]["customresourcedefinitions"]["owned"]}
    assert set(owned) == KINDS
    for kind, crd in crds_by_kind().items():
        assert owned[kind]["name"] == crd["metadata"]["name"]
        assert owned[kind]["description"] == crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"]
        assert all(d["description"] for d in owned[kind]["specDescriptors"] + owned[kind]["statusDescriptors"])


def test_make_bundle_writes_the_same_bytes_twice(bundle, tmp_path):
    again = tmp_path / "bundle"
    subprocess.run(
        [".venv/bin/python", "hack/olm_bundle.py", "--out", again], cwd=ROOT, check=True, capture_output=True
    )
    first = sorted(p.relative_to(bundle) for p in bundle.rglob("*") if p.is_file())
    second = sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert first == second
    for path in first:
        assert (bundle / path).read_bytes() == (again / path).read_bytes(), path
