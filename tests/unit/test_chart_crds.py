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
