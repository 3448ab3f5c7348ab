"""The tests that need only the control plane of the shared real-node instance: the CRDs'
schema and rules, server-side dry runs of the manifests, the chart and every pod the operator
builds, the operator's start. They touch no node, so they do not wait for the other run's node
faults: in `make test` they run first in the host lane, while the other run faults nodes."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def nodes_kept():
    """No node is worked on here: the other run may fault nodes meanwhile."""
    yield
