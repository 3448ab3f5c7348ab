"""The test harness's own tests: the local control plane and its layout (e2e/localkube), the
real nodes (e2e/localkube/realnodes: test_real_nodes.py, test_localkube.py), the images and
their OCI writer (e2e/images), the pure parts of the scale and continuous benches (e2e/bench),
and the sharing of the real nodes between the runs of `make test`
(tests/support/shared_real_nodes.py).
Most are pure and run with the unit tests; those marked needs_nodes or needs_cluster run on the
session's real nodes (tests/support/real_nodes_fixtures.py); test_containerd_import.py, marked
needs_containerd, runs a containerd of its own in the second host lane (tests/run.sh)."""

from __future__ import annotations

from tests.support import real_nodes_fixtures


def pytest_configure(config):
    real_nodes_fixtures.register(config)
