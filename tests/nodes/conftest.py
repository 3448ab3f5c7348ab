"""Fixtures for the tests on the session's real nodes (those of the real nodes themselves and
of the chart's release: tests/support/real_nodes_fixtures.py)."""

from __future__ import annotations

import pytest

from tests.support import chart_release, real_nodes_fixtures
from tests.support.diagnostics import fresh_namespace_name, print_events, print_operator_pod_logs
from tests.support.kubectl import kubectl


def pytest_configure(config):
    real_nodes_fixtures.register(config)


@pytest.fixture
def namespace(request, nodes_api, kubectl_on_real_nodes):
    """A fresh namespace on the real nodes for one test, labelled for restricted Pod Security
    as the operator's own; on failure its events and the operator pods' logs are printed.
    Its deletion is left to the API server and the operator, so the next test starts at once."""
    from kubernetes import client

    name = fresh_namespace_name("n", request.node.name)
    chart_release.restricted_namespace(name)
    yield name
    if any(getattr(getattr(request.node, f"rep_{when}", None), "failed", False) for when in ("setup", "call")):
        print_events(client.CoreV1Api(nodes_api), name)
        print_operator_pod_logs(chart_release.NAMESPACE)
    kubectl("delete", "namespace", name, "--wait=false", check=False)
