"""The CRDs from this checkout, applied to the cluster KUBECONFIG names."""

from __future__ import annotations

import pathlib

from tests.support.kubectl import kubectl

CRDS = pathlib.Path(__file__).resolve().parents[2] / "crds"


def install() -> None:
    """Applied server-side and Established, so tests never run against stale schemas."""
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(CRDS))
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
