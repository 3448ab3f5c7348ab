"""The pinned helm of the testbin, with its caches kept inside the checkout."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess

from localkube import layout as localkube_layout

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "etcd-operator"


def helm_binary() -> pathlib.Path:
    return localkube_layout.testbin_dir() / "helm" / "helm"


def helm_environment() -> dict[str, str]:
    """Helm's caches and configuration inside the checkout, never the user's."""
    return {
        "HELM_CACHE_HOME": str(ROOT / ".helm" / "cache"),
        "HELM_CONFIG_HOME": str(ROOT / ".helm" / "config"),
        "HELM_DATA_HOME": str(ROOT / ".helm" / "data"),
    }


def pinned_kube_version() -> str:
    """The Kubernetes version of the testbin (e2e/testbin/kube/go.mod)."""
    go_mod = (ROOT / "e2e" / "testbin" / "kube" / "go.mod").read_text()
    found = re.search(r"^require k8s\.io/kubernetes v(\S+)$", go_mod, re.MULTILINE)
    assert found, "e2e/testbin/kube/go.mod pins no k8s.io/kubernetes"
    return found.group(1)


def helm(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    # The testbin's helm is built without the Kubernetes version ldflags, so its offline
    # render assumes v1.20, which the chart's kubeVersion (>=1.30) refuses: render for the
    # pinned Kubernetes instead, unless the caller names a version.
    if args[:1] == ("template",) and "--kube-version" not in args:
        args = (*args, "--kube-version", pinned_kube_version())
    result = subprocess.run(
        [str(helm_binary()), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **helm_environment()},
    )
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
    return result
