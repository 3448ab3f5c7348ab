"""The pinned helm of the testbin, with its caches kept inside the checkout."""

from __future__ import annotations

import os
import pathlib
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


def helm(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
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
