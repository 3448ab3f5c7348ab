"""Real nodes (`localkube up --nodes real`) for these tests: a substrate instance of its own,
rooted in <checkout>/.localkube/realnodes-test, so that the checkout's default substrate
(the node agent) can keep running beside it. `make down` stops it too."""

from __future__ import annotations

import pytest

from localkube import controlplane, hoststate, layout as localkube_layout

TEST_ROOT = localkube_layout.REPO_ROOT / ".localkube" / "realnodes-test"


@pytest.fixture(scope="session")
def host_before():
    """The host as found, before the real nodes of these tests start."""
    return hoststate.snapshot()


@pytest.fixture(scope="session")
def real_nodes(host_before):
    """One instance for all of tests/nodes; test_real_nodes.py takes it down last, to check the host."""
    TEST_ROOT.mkdir(parents=True, exist_ok=True)
    where = localkube_layout.current(TEST_ROOT)
    controlplane.up(where, nodes="real")
    yield where
    controlplane.down(where)


@pytest.fixture(scope="session")
def nodes_api(real_nodes):
    from kubernetes import config

    return config.new_client_from_config(config_file=str(real_nodes.kubeconfig))
