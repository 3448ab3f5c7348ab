"""What `make release` ships besides code, checked against its sources: the chart's Artifact Hub
annotations against crds/, examples/ and values.yaml; the versions against pyproject.toml; the
image's lock file against the operator's dependencies; the plugin's own dependencies against
the operator's floors; and the LICENSE that pyproject.toml declares."""

from __future__ import annotations

import pathlib
import re
import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from etcd_operator import DEFAULT_OPERATOR_IMAGE

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = yaml.safe_load((ROOT / "charts/etcd-operator/Chart.yaml").read_text())
VALUES = yaml.safe_load((ROOT / "charts/etcd-operator/values.yaml").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PLUGIN = tomllib.loads((ROOT / "packaging/kubectl-etcd/pyproject.toml").read_text())
ANNOTATIONS = CHART["annotations"]


def test_chart_plugin_and_operator_carry_one_version():
    version = PYPROJECT["project"]["version"]
    assert CHART["version"] == CHART["appVersion"] == PLUGIN["project"]["version"] == version


def test_the_chart_states_the_kubernetes_floor_the_cel_rules_need():
    assert CHART["kubeVersion"] == ">=1.30.0-0"
    assert "1.30" in (ROOT / "docs/install.md").read_text()


def test_the_image_annotation_is_the_image_the_chart_defaults_to():
    default = f"{VALUES['image']['repository']}:{CHART['appVersion']}"
    assert VALUES["image"]["tag"] == ""  # the chart's appVersion
    assert yaml.safe_load(ANNOTATIONS["artifacthub.io/images"]) == [{"name": "etcd-operator", "image": default}]
    assert DEFAULT_OPERATOR_IMAGE == default


def test_the_crd_annotation_describes_the_crds():
    described = []
    for path in sorted((ROOT / "crds").glob("etcd*.yaml")):
        crd = yaml.safe_load(path.read_text())
        (version,) = crd["spec"]["versions"]
        described.append(
            {
                "kind": crd["spec"]["names"]["kind"],
                "version": version["name"],
                "name": crd["metadata"]["name"],
                "description": version["schema"]["openAPIV3Schema"]["description"],
            }
        )
    annotated = [
        {k: v for k, v in crd.items() if k != "displayName"}
        for crd in yaml.safe_load(ANNOTATIONS["artifacthub.io/crds"])
    ]
    assert sorted(annotated, key=lambda c: c["kind"]) == sorted(described, key=lambda c: c["kind"])
    assert ANNOTATIONS["artifacthub.io/operator"] == "true"
    assert ANNOTATIONS["artifacthub.io/license"] == PYPROJECT["project"]["license"]


def example(name: str, kind: str) -> dict:
    (found,) = [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if d and d["kind"] == kind]
    return found


def test_the_crd_examples_are_the_examples_folders():
    assert yaml.safe_load(ANNOTATIONS["artifacthub.io/crdsExamples"]) == [
        example("etcdcluster.yaml", "EtcdCluster"),
        example("backup-minio-scheduled.yaml", "EtcdBackup"),
        example("restore-new-cluster.yaml", "EtcdRestore"),
    ]


LOCKED = re.compile(
    r"^(?P<name>[a-z0-9._-]+)==(?P<version>\S+)(?P<hashes>( \\\n    --hash=sha256:[0-9a-f]{64})+)$", re.MULTILINE
)


def locked() -> dict[str, str]:
    text = (ROOT / "packaging/image/requirements.lock").read_text()
    entries = {canonicalize_name(m["name"]): m["version"] for m in LOCKED.finditer(text)}
    assert len(entries) == text.count("=="), "an entry of the lock file has no sha256 hash"
    return entries


def test_the_image_lock_pins_every_dependency_of_the_operator_within_its_range():
    pins = locked()
    for line in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in packaging/image/requirements.lock; run packaging/image/lock.sh"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {requirement.specifier}"


def test_the_plugin_asks_for_no_older_libraries_than_the_operator():
    operator = {
        canonicalize_name(Requirement(r).name): Requirement(r).specifier for r in PYPROJECT["project"]["dependencies"]
    }
    for line in PLUGIN["project"]["dependencies"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        if name in operator:
            assert requirement.specifier == operator[name], name
    assert PLUGIN["project"]["scripts"] == PYPROJECT["project"]["scripts"]


def test_the_license_pyproject_declares_is_at_the_root():
    text = (ROOT / "LICENSE").read_text()
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
