"""The node agent's substrate for the tests that run operator processes or pods on it
(tests/substrate, and the harness's own tests in e2e/tests), as pytest fixtures: `substrate`,
and the `kube_api` and `explain_failure` that the root conftest's `namespace` uses there.
A plugin, registered by those tiers' conftests, not by the root conftest, so that the pure
tiers (tests/unit, tests/sim) load nothing of the harness. Registered once per session however
many tiers ask (`register`), so that they share one substrate.

With E2E_TARGET=external (or kind) nothing local is started: tests talk to whatever
KUBECONFIG points at, and a test that needs the local substrate is skipped."""

from __future__ import annotations

import os
import sys

import pytest

from localkube import controlplane
from localkube import layout as localkube_layout
from tests.support import crds
from tests.support.diagnostics import print_events, print_operator_pod_logs, print_tail

SUBSTRATE_LOGS = ("kube-apiserver", "kube-controller-manager", "node-agent", "minio", "operator")
PER_NAMESPACE_LOGS = ("operator-{namespace}*",)  # one per operator replica
EXTERNAL = os.environ.get("E2E_TARGET") in ("external", "kind")


def register(config: pytest.Config) -> None:
    """From a conftest's pytest_configure: these fixtures, for the whole session (a plugin's
    fixtures are seen everywhere, as the root conftest's are), once."""
    this = sys.modules[__name__]
    if not config.pluginmanager.is_registered(this):
        config.pluginmanager.register(this, __name__)


@pytest.fixture(scope="session")
def substrate():
    """The node agent's substrate for the tests that run operator processes (tests/substrate),
    rooted in <checkout>/.localkube/node-agent: started here unless an earlier session left it
    up (LOCALKUBE_KEEP=1 keeps it for the next one); `make down` stops it too."""
    if EXTERNAL:
        pytest.skip(f"E2E_TARGET={os.environ['E2E_TARGET']}: this test needs the local substrate")
    localkube_layout.NODE_AGENT_ROOT.mkdir(parents=True, exist_ok=True)
    where = localkube_layout.current(localkube_layout.NODE_AGENT_ROOT)
    started_here = not controlplane.apiserver_ready(where)
    controlplane.up(where, nodes="agent")
    os.environ["KUBECONFIG"] = str(where.kubeconfig)
    # Helpers that find the substrate without being given it (nodeagent.faults) look here.
    os.environ["LOCALKUBE_STATE_DIR"] = str(where.state_dir)
    crds.install()
    yield where
    if started_here and not os.environ.get("LOCALKUBE_KEEP"):
        controlplane.down(where)


@pytest.fixture(scope="session")
def kube_api(request):
    """A client for the target cluster: KUBECONFIG when external, else the local substrate."""
    from kubernetes import config

    if EXTERNAL:
        return config.new_client_from_config(config_file=os.environ.get("KUBECONFIG"))
    substrate = request.getfixturevalue("substrate")
    return config.new_client_from_config(config_file=str(substrate.kubeconfig))


@pytest.fixture(scope="session")
def explain_failure(request):
    """What a failed test prints about its namespace: events, then the substrate's logs (or,
    when external, the installed operator's pod logs). e2e/target.py has its own."""
    substrate = None if EXTERNAL else request.getfixturevalue("substrate")
    return lambda core, namespace: dump_diagnostics(substrate, core, namespace)


def dump_diagnostics(where, core, namespace: str) -> None:
    """Events, then local logs (substrate) or the installed operator's pod logs (external)."""
    print_events(core, namespace)
    if where is None:
        print_operator_pod_logs(os.environ.get("E2E_OPERATOR_NAMESPACE", "etcd-operator"))
        return
    for name in SUBSTRATE_LOGS:
        print_tail(where.logs_dir / f"{name}.log")
    for pattern in PER_NAMESPACE_LOGS:
        for log in sorted(where.logs_dir.glob(f"{pattern.format(namespace=namespace)}.log")):
            print_tail(log)
    pod_logs = where.state_dir / "pods" / namespace
    if pod_logs.exists():
        for log in sorted(pod_logs.rglob("*.log")):
            print_tail(log)
