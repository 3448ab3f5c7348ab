"""Fixtures for the tests on the session's real nodes."""

from __future__ import annotations

import uuid

import pytest

from tests.support import chart_release
from tests.support.diagnostics import print_events
from tests.support.kubectl import kubectl


@pytest.fixture
def namespace(request, nodes_api, kubectl_on_real_nodes):
    """A fresh namespace on the real nodes for one test, labelled for restricted Pod Security
    as the operator's own; on failure its events and the operator pods' logs are printed.
    Its deletion is left to the API server and the operator, so the next test starts at once."""
    from kubernetes import client

    name = f"n-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(c for c in name if c.isalnum() or c == "-")
    chart_release.restricted_namespace(name)
    yield name
    if any(getattr(getattr(request.node, f"rep_{when}", None), "failed", False) for when in ("setup", "call")):
        print_events(client.CoreV1Api(nodes_api), name)
        logs = kubectl("logs", "-n", chart_release.NAMESPACE, "-l", "app.kubernetes.io/name=etcd-operator",
                       "--prefix", "--tail=100", check=False)
        print(f"----- operator pods in {chart_release.NAMESPACE} -----\n{logs.stdout}{logs.stderr}")
    kubectl("delete", "namespace", name, "--wait=false", check=False)
