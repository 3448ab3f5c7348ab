"""`python -m etcd_operator` starts against the real API server and serves liveness."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.substrate


def test_operator_starts_and_serves_liveness(substrate, tmp_path):
    port = substrate.ports.operator_health
    log = open(tmp_path / "operator.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "etcd_operator"],
        env={**os.environ, "KUBECONFIG": str(substrate.kubeconfig), "HEALTH_PORT": str(port)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    status = r.status
                    break
            except OSError:
                time.sleep(0.3)
        assert status == 200, (tmp_path / "operator.log").read_text()
    finally:
        proc.terminate()
        proc.wait(30)
