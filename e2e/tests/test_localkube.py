"""The local control plane itself: a real API server that is ready, a namespace
controller that finishes deletions, and an idempotent `up`."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from localkube import controlplane, processes
from tests.support.kubectl import kubectl

pytestmark = pytest.mark.substrate


def test_readyz_is_ok(substrate):
    assert kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


def test_namespace_create_and_delete_completes(substrate):
    kubectl("create", "namespace", "localkube-ns-check")
    kubectl("delete", "namespace", "localkube-ns-check", "--wait=true", "--timeout=60s")
    gone = kubectl("get", "namespace", "localkube-ns-check", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_controller_manager_creates_default_service_account(namespace):
    kubectl(
        "wait", "--for=jsonpath={.metadata.name}=default", "-n", namespace, "serviceaccount/default", "--timeout=30s"
    )


def test_up_twice_is_harmless(substrate):
    before = controlplane.status(substrate)
    controlplane.up(substrate)
    assert controlplane.status(substrate) == before


def test_taken_port_is_named_clearly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(processes.PortTaken) as taken:
            processes.require_free_ports("kube-apiserver", {"https": port}, patience=0.5)
    assert f"port {port}" in str(taken.value) and "kube-apiserver" in str(taken.value)


def test_the_demo_refuses_the_node_agent_and_says_how_to_get_real_nodes(substrate):
    """`make demo` runs on real nodes; on a substrate left in node-agent mode (`make up
    NODES=agent`) it changes nothing and names the way out."""
    root = controlplane.REPO_ROOT
    env = {**os.environ, "LOCALKUBE_STATE_DIR": str(substrate.state_dir), "DEMO_NAMESPACE": "demo-refused"}
    run = subprocess.run([str(root / "e2e" / "demo.sh")], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "runs the node agent" in run.stderr and "make down" in run.stderr, run.stderr
    assert kubectl("get", "namespace", "demo-refused", check=False).returncode != 0
