"""The local control plane itself, on the session's real nodes: a real API server that is
ready, a namespace controller that finishes deletions and a controller manager that makes
service accounts, and an idempotent `up`."""

from __future__ import annotations

import socket
import uuid

import pytest

from localkube import controlplane, processes
from tests.support.kubectl import kubectl

pytestmark = [pytest.mark.needs_cluster]


def test_readyz_is_ok(kubectl_on_real_nodes):
    assert kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


def test_namespace_create_and_delete_completes(kubectl_on_real_nodes):
    name = f"localkube-ns-check-{uuid.uuid4().hex[:5]}"
    kubectl("create", "namespace", name)
    kubectl("delete", "namespace", name, "--wait=true", "--timeout=60s")
    gone = kubectl("get", "namespace", name, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_controller_manager_creates_default_service_account(kubectl_on_real_nodes):
    name = f"localkube-sa-check-{uuid.uuid4().hex[:5]}"
    kubectl("create", "namespace", name)
    try:
        # --for=create: a jsonpath or condition wait fails at once on an object not there yet
        kubectl("wait", "--for=create", "-n", name, "serviceaccount/default", "--timeout=60s")
    finally:
        kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_up_twice_is_harmless(real_nodes, real_nodes_use):
    before = controlplane.status(real_nodes)
    real_nodes_use.up_again()
    assert controlplane.status(real_nodes) == before


def test_taken_port_is_named_clearly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(processes.PortTaken) as taken:
            processes.require_free_ports("kube-apiserver", {"https": port}, patience=0.5)
    assert f"port {port}" in str(taken.value) and "kube-apiserver" in str(taken.value)
