"""The test harness's own tests: the local control plane and its layout (e2e/localkube), the
node agent (e2e/nodeagent), the real nodes (e2e/localkube/realnodes: test_real_nodes.py), the
images and their OCI writer (e2e/images), the pure parts of the scale and continuous benches
(e2e/bench), and the sharing of the real nodes between the runs of `make test`
(tests/support/shared_real_nodes.py).
Most are pure and run with the unit tests; those marked `substrate` run on the node agent's
substrate (tests/support/substrate_fixtures.py), with tests/substrate, and those marked
`real_nodes` on the session's real nodes (tests/support/real_nodes_fixtures.py)."""

from __future__ import annotations

from tests.support import real_nodes_fixtures, substrate_fixtures


def pytest_configure(config):
    substrate_fixtures.register(config)
    real_nodes_fixtures.register(config)
