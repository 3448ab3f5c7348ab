"""`python -m etcd_operator` starts against the real API server and serves liveness. On the
shared real nodes it is the host's shard and watches only this test's namespace, so the
session's chart release and it never share a cluster or a Lease."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support import claims
from tests.support.operator_process import free_port

pytestmark = [pytest.mark.needs_cluster, pytest.mark.needs_operator_process, pytest.mark.lane4]


def test_operator_starts_and_serves_liveness(real_nodes, namespace, tmp_path):
    port = free_port()
    log = open(tmp_path / "operator.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "etcd_operator"],
        env={
            **os.environ,
            **claims.shard_env(claims.HOST_OPERATOR_SHARD),
            "KUBECONFIG": str(real_nodes.kubeconfig),
            "WATCH_NAMESPACES": namespace,
            "POD_NAMESPACE": namespace,
            "HEALTH_PORT": str(port),
            "METRICS_PORT": str(free_port()),
        },
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
