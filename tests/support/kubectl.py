"""Runs the testbin kubectl against the substrate's KUBECONFIG; a plain `get` as JSON is read in
the process instead (tests/support/api_reads.py), with kubectl's output and errors."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess

from localkube import layout as localkube_layout
from tests.support import api_reads


def kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    if input is None and args[-2:] == ("-o", "json"):
        try:
            answer = _read_in_process(args[:-2])
        except subprocess.CalledProcessError as refused:
            if check:
                raise
            return subprocess.CompletedProcess(refused.cmd, refused.returncode, refused.output, refused.stderr)
        if answer is not None:
            return subprocess.CompletedProcess(["kubectl", *args], 0, json.dumps(answer), "")
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


def _read_in_process(args: tuple[str, ...]) -> dict | None:
    """What `kubectl ARGS -o json` prints, read by this process; None when kubectl must run."""
    query = api_reads.parse_get(args)
    reader = api_reads.reader() if query else None
    return reader.get(query, ["kubectl", *args, "-o", "json"]) if reader and query else None


def secret_bytes(namespace: str, name: str) -> dict[str, bytes]:
    """A Secret's data, decoded."""
    data = kubectl_json("get", "secret", name, "-n", namespace)["data"]
    return {k: base64.b64decode(v) for k, v in data.items()}
