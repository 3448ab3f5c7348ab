"""Shared fixtures: the tests' node-agent substrate (an instance of its own, started once per
session), a fresh namespace per test, and log dumps on failure; the session's real nodes
(tests/nodes, e2e/journeys, e2e/scenarios) and the operator the chart installs on them.
Neither is the instance `make up` runs: `make test` leaves the demo alone.

With E2E_TARGET=external (or kind) nothing local is started: tests talk to whatever
KUBECONFIG points at, and a test that needs the local substrate is skipped."""

from __future__ import annotations

import os
import pathlib

import pytest

from localkube import controlplane, layout as localkube_layout
from tests.support import chart_release, crds, shared_real_nodes
from tests.support.diagnostics import print_events, print_operator_pod_logs, print_tail, fresh_namespace_name
from tests.support.finalizers import release_finalizers

SUBSTRATE_LOGS = ("kube-apiserver", "kube-controller-manager", "node-agent", "minio", "operator")
PER_NAMESPACE_LOGS = ("operator-{namespace}*",)  # one per operator replica
EXTERNAL = os.environ.get("E2E_TARGET") in ("external", "kind")
REAL_NODES_ROOT = localkube_layout.REAL_NODES_TEST_ROOT


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_terminal_summary(terminalreporter):
    """What the real-node tests measured, whether or not output was captured."""
    from tests.support import measured

    if measured.REPORTED:
        terminalreporter.section("measured on the real nodes")
        for line in measured.REPORTED:
            terminalreporter.write_line(line)


NODE_FAULT_FIXTURES = ("nodes_to_the_module", "nodes_to_the_test")  # tests/nodes/conftest.py
HOST_OPERATOR_TESTS = pathlib.Path(__file__).resolve().parent / "tests" / "nodes" / "host_operator"


def pytest_collection_modifyitems(config, items):
    """Everything marked real_nodes runs together, where the first of it was collected (so the
    session's real nodes are up only while needed): first the modules that fault nodes, and
    what takes the nodes down, `real_nodes(takes_them_down=True)`, after all of it. The
    operator-process tests on the real nodes (tests/nodes/host_operator) run after the other
    tests of their run. So, in `make test`, the node faults run while the other run is on the
    node agent, and neither waits for the other's hold on the nodes (shared_real_nodes)."""
    host_operator = [item for item in items if HOST_OPERATOR_TESTS in item.path.parents]
    items[:] = [item for item in items if item not in host_operator] + host_operator
    marked = [item for item in items if item.get_closest_marker("real_nodes")]
    if not marked:
        return
    last = [item for item in marked if item.get_closest_marker("real_nodes").kwargs.get("takes_them_down")]
    faulting = {item.path for item in marked if set(NODE_FAULT_FIXTURES) & set(item.fixturenames)}
    group = ([item for item in marked if item.path in faulting and item not in last]
             + [item for item in marked if item.path not in faulting and item not in last] + last)
    start = items.index(marked[0])
    others = [item for item in items if not item.get_closest_marker("real_nodes")]
    items[:] = others[:start] + group + others[start:]


@pytest.fixture(scope="session")
def real_nodes_use():
    """Real nodes (`localkube up --nodes real`), rooted in <checkout>/.localkube/realnodes-test,
    so that the checkout's own instance (`make up`) and the node agent's test instance can run
    beside it; shared with the other pytest runs of `make test` that use it at the same time
    (tests/support/shared_real_nodes.py); `make down` stops it too. tests/nodes/test_real_nodes.py
    takes it down after everything else on it, to check the host."""
    with shared_real_nodes.used(REAL_NODES_ROOT) as use:
        yield use


@pytest.fixture(scope="session")
def real_nodes(real_nodes_use):
    return real_nodes_use.where


@pytest.fixture(scope="session")
def host_before(real_nodes_use):
    """The host as found, before the real nodes started."""
    return real_nodes_use.host_before()


@pytest.fixture(scope="session")
def nodes_api(real_nodes):
    from kubernetes import config

    return config.new_client_from_config(config_file=str(real_nodes.kubeconfig))


@pytest.fixture(scope="module")
def kubectl_on_real_nodes(real_nodes):
    """For one module, tests.support's kubectl and helm talk to the real nodes."""
    with chart_release.kubeconfig_env(real_nodes.kubeconfig):
        yield real_nodes.kubeconfig


@pytest.fixture(scope="session")
def operator_release(real_nodes):
    """The operator on the real nodes as users install it: the chart from this checkout, the
    image built here, restricted Pod Security (tests/support/chart_release.py)."""
    # The instance keeps its data between sessions: a release an earlier session left
    # (test_real_nodes.py takes the nodes down before this teardown) goes first.
    chart_release.uninstall(real_nodes.kubeconfig)
    chart_release.install(real_nodes.kubeconfig)
    yield chart_release.RELEASE
    if controlplane.apiserver_ready(real_nodes):  # else test_real_nodes.py took the nodes down
        chart_release.uninstall(real_nodes.kubeconfig)


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
    when external, the installed operator's pod logs). e2e/conftest.py has its own."""
    substrate = None if EXTERNAL else request.getfixturevalue("substrate")
    return lambda core, namespace: dump_diagnostics(substrate, core, namespace)


@pytest.fixture
def namespace(request, kube_api, explain_failure):
    """A fresh namespace for one test, deleted afterwards; logs are dumped on failure."""
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    # The deployed operator of the e2e scenarios watches e2e-* namespaces only.
    prefix = "e2e" if "scenarios" in request.node.path.parts else "t"
    name = fresh_namespace_name(prefix, request.node.name)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    failed = any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
        for when in ("setup", "call")
    )
    if failed:
        explain_failure(core, name)
    core.delete_namespace(name)
    release_finalizers(kube_api, name)


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
