"""The Helm chart ships the same CRDs as crds/ (`make chart-crds` writes them into
templates/crds/ with the keep annotation); caught here before any substrate starts.
tests/nodes/host_operator/control_plane/test_helm_release.py renders them with helm."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from tests.support import hack_scripts

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRDS = sorted(p.name for p in (ROOT / "crds").glob("*.yaml") if p.name != "kustomization.yaml")
TEMPLATES = ROOT / "charts" / "etcd-operator" / "templates" / "crds"


def generator():
    return hack_scripts.load("chart_crds")


def test_the_chart_has_a_crd_template_for_each_crd_and_no_other():
    assert sorted(p.name for p in TEMPLATES.glob("*.yaml")) == CRDS
    legacy = ROOT / "charts" / "etcd-operator" / "crds"
    assert not legacy.exists(), "Helm installs a chart's crds/ once and never upgrades it"


@pytest.mark.parametrize("name", CRDS)
def test_the_committed_template_is_what_make_chart_crds_writes(name):
    assert (TEMPLATES / name).read_text() == generator().template(ROOT / "crds" / name), "run `make chart-crds`"


@pytest.mark.parametrize("name", CRDS)
def test_the_chart_ships_the_crds_of_crds_folder_with_only_the_keep_annotation_added(name):
    ours = yaml.safe_load((ROOT / "crds" / name).read_text())
    # The template's actions are whole lines: without them, the rest is the CRD itself.
    text = "".join(line for line in (TEMPLATES / name).read_text().splitlines(True) if not line.startswith("{{"))
    chart = yaml.safe_load(text)
    assert chart["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
    assert chart == ours, f"templates/crds/{name} differs from crds/{name}: run `make chart-crds`"


# Names other operators' kinds answer to in kubectl: etcd-druid's Etcd (etcds, short name etcd).
TAKEN_NAMES = {"etcd", "etcds"}


@pytest.mark.parametrize("name", CRDS)
def test_no_short_name_collides_with_another_operators_kind(name):
    names = yaml.safe_load((ROOT / "crds" / name).read_text())["spec"]["names"]
    assert not TAKEN_NAMES & set(names.get("shortNames") or []), names


def test_the_scale_subresource_gives_autoscalers_the_member_pods_selector():
    crd = yaml.safe_load((ROOT / "crds" / "etcdclusters.yaml").read_text())
    version = crd["spec"]["versions"][0]
    assert version["subresources"]["scale"]["labelSelectorPath"] == ".status.selector"
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["selector"]["type"] == "string"
