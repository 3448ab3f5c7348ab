"""The session's real nodes and the operator the chart installs on them, as pytest fixtures:
a plugin, registered by the tiers that run there (tests/nodes/conftest.py, e2e/tests/conftest.py,
e2e/journeys and e2e/scenarios through e2e/target.py), not by the root conftest, so that the pure tiers
(tests/unit, tests/sim) load nothing of the harness. Registered once per session however
many tiers ask (`register`), so that the tiers of one session share one instance and one release."""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys

import pytest

from localkube import controlplane
from localkube import layout as localkube_layout
from tests.support import chart_release, measured, needs, shared_real_nodes
from tests.support.needs import disturbs_the_release, faults_nodes
from tests.support.shared_release import SharedRelease

REAL_NODES_ROOT = localkube_layout.REAL_NODES_TEST_ROOT
_USE: dict[str, shared_real_nodes.SharedUse] = {}  # the session's `real_nodes_use`, for the teardown hook
_RELEASE: dict[str, SharedRelease] = {}  # the session's `shared_release`, for the teardown hook
HOST_OPERATOR_TESTS = pathlib.Path(__file__).resolve().parents[1] / "nodes" / "host_operator"
# The e2e tiers against the cluster and operator KUBECONFIG names (`make e2e-kind`, or
# E2E_TARGET=external): nothing of the real nodes is used, nor shared.
EXTERNAL = os.environ.get("E2E_TARGET") in ("external", "kind")


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


@pytest.fixture
def nodes_to_the_test(real_nodes_use):
    """As `nodes_to_the_module`, for one test."""
    real_nodes_use.take_the_nodes()
    yield


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test that faulted nodes (its fixtures torn down): the nodes go back to the other
    runs unless the next test faults nodes too. The same for a test that disturbed the release,
    after everything else (tryfirst: the outermost wrapper), so after the journeys' hook has
    installed a release set aside again."""
    try:
        return (yield)
    finally:
        use = _USE.get("use")
        if use is not None and faults_nodes(item) and not faults_nodes(nextitem):
            use.give_the_nodes_back()
        release = _RELEASE.get("release")
        if release is not None and disturbs_the_release(item) and not disturbs_the_release(nextitem):
            release.give_the_release_back()


def _module_items(request) -> list:
    return [item for item in request.session.items if item.module is request.module]


@pytest.fixture(scope="module", autouse=True)
def kept_for_the_module(request):
    """For a module of the real-node runs (not tests/nodes/host_operator, whose conftest holds
    its own): from its first fixture to its last teardown, no other run faults a node unless the
    module faults them itself, and no other run disturbs the release its tests rely on unless
    one of them disturbs it (those take it test by test: `release_for_the_test`)."""
    if EXTERNAL or HOST_OPERATOR_TESTS in request.path.parents:
        yield
        return
    items = _module_items(request)
    if not any(needs.on_the_instance(item) for item in items):
        yield
        return
    with contextlib.ExitStack() as kept:
        if not any(faults_nodes(item) for item in items):
            kept.enter_context(request.getfixturevalue("real_nodes_use").nodes_kept())
        relies = any(item.get_closest_marker("needs_release") for item in items)
        if relies and not any(disturbs_the_release(item) for item in items):
            request.getfixturevalue("operator_release")  # this run joins the release's users first
            kept.enter_context(request.getfixturevalue("shared_release").release_kept())
        yield


@pytest.fixture(autouse=True)
def release_for_the_test(request):
    """In a module with a test that disturbs the release: that test holds it to its run
    (until a test that does not disturb it comes next, `pytest_runtest_teardown`), and the
    module's other tests that rely on it keep it for themselves."""
    item = request.node
    if (
        EXTERNAL
        or not item.get_closest_marker("needs_release")
        or not any(disturbs_the_release(other) for other in _module_items(request))
    ):
        yield
        return
    request.getfixturevalue("operator_release")  # this run joins the release's users first
    release = request.getfixturevalue("shared_release")
    if disturbs_the_release(item):
        release.take_the_release()
        yield
        return
    with release.release_kept():
        yield


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
def shared_release(real_nodes_use):
    """This run's use of the session's release, which the other real-node run of `make test`
    may share (tests/support/shared_release.py)."""
    release = SharedRelease(REAL_NODES_ROOT)
    _RELEASE["release"] = release
    try:
        yield release
    finally:
        release.give_the_release_back()
        _RELEASE.pop("release", None)
        measured.report(f"chart release: this run's tests waited {release.waited:.0f}s for the other run's use of it")


@pytest.fixture(scope="session")
def operator_release(real_nodes, shared_release):
    """The operator on the real nodes as users install it: the chart from this checkout, the
    image built here, restricted Pod Security (tests/support/chart_release.py). Installed by
    the first run that uses it, uninstalled by the last."""

    def afresh() -> None:
        # The instance keeps its data between sessions: a release an earlier session left
        # (e2e/tests/test_real_nodes.py takes the nodes down before this teardown) goes first.
        chart_release.uninstall(real_nodes.kubeconfig)
        chart_release.install(real_nodes.kubeconfig)

    def uninstall() -> None:
        if controlplane.apiserver_ready(real_nodes):  # else test_real_nodes.py took the nodes down
            chart_release.uninstall(real_nodes.kubeconfig)

    shared_release.join(afresh)
    yield chart_release.RELEASE
    shared_release.leave(uninstall)
