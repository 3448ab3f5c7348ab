"""The Helm chart ships the same CRDs as crds/ (`make chart-crds` copies them); caught here
before any substrate starts. tests/nodes/host_operator/control_plane/test_helm_release.py
compares the rendered chart."""

from __future__ import annotations

import pathlib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRDS = sorted(p.name for p in (ROOT / "crds").glob("*.yaml") if p.name != "kustomization.yaml")


@pytest.mark.parametrize("name", CRDS)
def test_the_chart_ships_the_crds_of_crds_folder(name):
    ours = yaml.safe_load((ROOT / "crds" / name).read_text())
    chart = yaml.safe_load((ROOT / "charts" / "etcd-operator" / "crds" / name).read_text())
    assert chart == ours, f"charts/etcd-operator/crds/{name} differs from crds/{name}: run `make chart-crds`"


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
