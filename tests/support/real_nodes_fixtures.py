"""The session's real nodes and the operator the chart installs on them, as pytest fixtures:
a plugin, registered by the tiers that run there (tests/nodes/conftest.py, e2e/tests/conftest.py,
e2e/journeys and e2e/scenarios through e2e/target.py), not by the root conftest, so that the pure tiers
(tests/unit, tests/sim) load nothing of the harness. Registered once per session however
many tiers ask (`register`), so that the tiers of one session share one instance and one release."""

from __future__ import annotations

import sys

import pytest

from localkube import controlplane
from localkube import layout as localkube_layout
from tests.support import chart_release, shared_real_nodes
from tests.support.needs import faults_nodes

REAL_NODES_ROOT = localkube_layout.REAL_NODES_TEST_ROOT
_USE: dict[str, shared_real_nodes.SharedUse] = {}  # the session's `real_nodes_use`, for the teardown hook


def register(config: pytest.Config) -> None:
    """From a conftest's pytest_configure: these fixtures, for the whole session (a plugin's
    fixtures are seen everywhere, as the root conftest's are), once."""
    this = sys.modules[__name__]
    if not config.pluginmanager.is_registered(this):
        config.pluginmanager.register(this, __name__)


@pytest.fixture(scope="session")
def real_nodes_use(request):
    """Real nodes (`localkube up`), rooted in <checkout>/.localkube/realnodes-test, so that the
    checkout's own instance (`make up`) can run beside it; shared with the other pytest runs of
    `make test` that use it at the same time (tests/support/shared_real_nodes.py); `make down`
    stops it too. e2e/tests/test_real_nodes.py takes it down after everything else on it, to
    check the host. A session with node faults runs them first (conftest.py) and takes the
    nodes before it joins."""
    faults_first = any(faults_nodes(item) for item in request.session.items)
    with shared_real_nodes.used(REAL_NODES_ROOT, faults_first) as use:
        _USE["use"] = use
        try:
            yield use
        finally:
            _USE.pop("use", None)


@pytest.fixture(scope="session")
def real_nodes(real_nodes_use):
    return real_nodes_use.where


@pytest.fixture(scope="session")
def host_before(real_nodes_use):
    """The host as found, before the real nodes started."""
    return real_nodes_use.host_before()


@pytest.fixture(scope="module")
def nodes_to_the_module(real_nodes_use):
    """For a module that stops, partitions, drains or deletes nodes: the other runs' tests on
    the nodes (tests/nodes/host_operator) wait until it is done (tests/support/shared_real_nodes.py).
    The hold lasts until a test that faults no node comes next (`pytest_runtest_teardown`), so
    that the faulting tests, run one after the other (conftest.py), wait for the other runs once."""
    real_nodes_use.take_the_nodes()
    yield


@pytest.fixture(scope="module")
def nodes_kept_for_the_module(real_nodes_use):
    """For a module of tests/nodes that `make test` runs in a host lane, beside the run whose
    tests fault nodes: no node is stopped, partitioned, drained or deleted while it runs (in
    the run that faults them, its faults are over before it starts)."""
    with real_nodes_use.nodes_kept():
        yield


@pytest.fixture
def nodes_to_the_test(real_nodes_use):
    """As `nodes_to_the_module`, for one test."""
    real_nodes_use.take_the_nodes()
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test that faulted nodes (its fixtures torn down): the nodes go back to the other
    runs unless the next test faults nodes too."""
    try:
        return (yield)
    finally:
        use = _USE.get("use")
        if use is not None and faults_nodes(item) and not faults_nodes(nextitem):
            use.give_the_nodes_back()


# While a test marked `sets_the_operator_aside` has the session's release uninstalled: the
# kubeconfig to install it again with, before the next test that needs it.
_ASIDE: dict[str, object] = {}


def set_the_release_aside(kubeconfig) -> None:
    """For a test marked `sets_the_operator_aside`: the session's release uninstalled, once for
    any number of such tests in a row (conftest.py runs them last of the real-node tests). It
    is installed again before the next test that needs it as installed (`pytest_runtest_setup`),
    and not at all when none comes."""
    if "kubeconfig" not in _ASIDE:
        chart_release.uninstall(kubeconfig)
        _ASIDE["kubeconfig"] = kubeconfig


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before a test that needs the session's release (`needs_release`) and does not set it
    aside itself, and before its fixtures: the release set aside is installed again."""
    if (
        "kubeconfig" in _ASIDE
        and item.get_closest_marker("needs_release")
        and not item.get_closest_marker("sets_the_operator_aside")
    ):
        chart_release.install(_ASIDE.pop("kubeconfig"))


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
    # (e2e/tests/test_real_nodes.py takes the nodes down before this teardown) goes first.
    chart_release.uninstall(real_nodes.kubeconfig)
    chart_release.install(real_nodes.kubeconfig)
    yield chart_release.RELEASE
    if controlplane.apiserver_ready(real_nodes):  # else test_real_nodes.py took the nodes down
        chart_release.uninstall(real_nodes.kubeconfig)
