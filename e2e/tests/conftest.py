"""The test harness's own tests: the local control plane and its layout (e2e/localkube), the
node agent (e2e/nodeagent), the scale bench's pure parts (e2e/bench), and the sharing of the
real nodes between the runs of `make test` (tests/support/shared_real_nodes.py). Most are pure
and run with the unit tests; those marked `substrate` run on the node agent's substrate
(tests/support/substrate_fixtures.py), with tests/substrate."""

from __future__ import annotations

from tests.support import substrate_fixtures


def pytest_configure(config):
    substrate_fixtures.register(config)
