"""Runs the testbin kubectl against the substrate's KUBECONFIG."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess

from localkube import layout as localkube_layout


def kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    binary = localkube_layout.testbin_dir() / "kube" / "kubectl"
    if not binary.exists():  # on kind (make e2e-kind), testbin is not built
        binary = shutil.which("kubectl") or "kubectl"
    return subprocess.run(
        [str(binary), *args],
        input=input,
        capture_output=True,
        text=True,
        check=check,
        env={**os.environ},
        timeout=120,
    )


def kubectl_json(*args: str) -> dict:
    return json.loads(kubectl(*args, "-o", "json").stdout)


def secret_bytes(namespace: str, name: str) -> dict[str, bytes]:
    """A Secret's data, decoded."""
    data = kubectl_json("get", "secret", name, "-n", namespace)["data"]
    return {k: base64.b64decode(v) for k, v in data.items()}
