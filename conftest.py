"""Shared hooks and the one shared fixture: the check of the tests' markers, the order of the
real-node tests, what they measured, each test's outcome for the fixtures that print
diagnostics, and a fresh namespace per test.

Nothing here imports the test harness (e2e/localkube, e2e/bench, e2e/images), so the pure
tiers (tests/unit, tests/sim) run without it (tests/unit/test_tiers_stand_alone.py).
The tiers that need the harness register its fixtures from their own conftest:
tests/support/real_nodes_fixtures.py (the session's real nodes and the chart's release:
tests/nodes, e2e/journeys, e2e/scenarios, and the harness's own tests in e2e/tests), or the
package's own (tests/nodes/host_operator). Neither is the instance `make up` runs: `make test`
leaves the demo alone."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import settings

from tests.support import needs
from tests.support.diagnostics import fresh_namespace_name
from tests.support.finalizers import release_finalizers

# Property tests check what the code decides, not how fast: a per-example time limit only
# measures this machine's load (the pure tests run niced beside the substrate's).
settings.register_profile("project", deadline=None)
settings.load_profile("project")


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


HOST_OPERATOR_TESTS = pathlib.Path(__file__).resolve().parent / "tests" / "nodes" / "host_operator"


def check_needs(items) -> None:
    """Every test carries the markers of what it uses (tests/support/needs.py), else it would
    run in the wrong run of `make test`."""
    problems: dict[str, list[str]] = {}
    for item in items:
        module = getattr(item, "module", None)  # None for an item of no Python module
        fixtures, module_globals = getattr(item, "fixturenames", ()), vars(module) if module else {}
        for problem in needs.missing(fixtures, module_globals, [mark.name for mark in item.iter_markers()]):
            problems.setdefault(f"{item.location[0]}: {problem}", []).append(item.name)
    if problems:
        raise pytest.UsageError(
            "tests without the markers of what they need (tests/support/needs.py):\n"
            + "\n".join(
                f"{problem} ({names[0]}{', …' if len(names) > 1 else ''})" for problem, names in problems.items()
            )
        )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """First, before `-m` selects, the check of the markers (check_needs). Then the order.
    Everything on the session's real-node instance (marked needs_cluster or needs_nodes,
    outside tests/nodes/host_operator) runs together, where the first of it was collected (so
    the session's real nodes are up only while needed): first the tests that fault nodes, one
    after the other so that one hold of the nodes covers them all (real_nodes_fixtures), the
    tests that set the session's release aside (`sets_the_operator_aside`) after the others, so
    that it is uninstalled once and never installed again, and what takes the nodes down,
    `needs_nodes(takes_them_down=True)`, last of all. The
    operator-process tests on the real nodes (tests/nodes/host_operator) run after the other
    tests of their run (in the real-node run, the modules marked lane3), those that need only
    the control plane (host_operator/control_plane, which hold no node) first. So, in `make
    test`, the node faults run while the other runs are on their etcd processes, their
    containerd and the control plane, and the runs wait for each other's hold on the nodes as
    little as can be (shared_real_nodes)."""
    check_needs(items)
    host_operator = [item for item in items if HOST_OPERATOR_TESTS in item.path.parents]
    items[:] = [item for item in items if item not in host_operator] + host_operator
    marked = [item for item in items if item not in host_operator and on_the_instance(item)]
    if not marked:
        return
    last = [
        item
        for item in marked
        if (mark := item.get_closest_marker("needs_nodes")) and mark.kwargs.get("takes_them_down")
    ]
    faulting = [item for item in marked if needs.faults_nodes(item) and item not in last]
    rest = [item for item in marked if item not in faulting and item not in last]
    aside = [item for item in rest if item.get_closest_marker("sets_the_operator_aside")]
    group = faulting + [item for item in rest if item not in aside] + aside
    start = items.index(marked[0])
    others = [item for item in items if item not in group and item not in last and item not in host_operator]
    items[:] = others[:start] + group + others[start:] + host_operator + last


def on_the_instance(item) -> bool:
    return any(item.get_closest_marker(name) for name in needs.ON_THE_INSTANCE)


@pytest.fixture
def namespace(request, kube_api, explain_failure):
    """A fresh namespace for one test, deleted afterwards; logs are dumped on failure. The tier
    gives `kube_api` and `explain_failure` (e2e/target.py)."""
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    # The deployed operator of the e2e scenarios watches e2e-* namespaces only.
    prefix = "e2e" if "scenarios" in request.node.path.parts else "t"
    name = fresh_namespace_name(prefix, request.node.name)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    failed = any(getattr(getattr(request.node, f"rep_{when}", None), "failed", False) for when in ("setup", "call"))
    if failed:
        explain_failure(core, name)
    core.delete_namespace(name)
    release_finalizers(kube_api, name)
