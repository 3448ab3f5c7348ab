"""The journeys: what a new user does first, done the way they do it, each in its own
namespace. Where they run: e2e/target.py. On the real nodes they share the session's one
release (`operator_release`, watching every namespace); the journeys that need it gone or
reinstalled (README's quickstart, helm) put it back as it was. E2E_TARGET=external: the
operator is installed already, watching every namespace (or the `journey-*` names)."""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib

import pytest
from target import (  # noqa: F401  (fixtures and the hook that registers the real nodes' fixtures)
    e2e_kubeconfig,
    e2e_nodes,
    explain_failure,
    kube_api,
    operator_namespace,
    pytest_configure,
    s3_settings,
)

from tests.support import chart_release, real_nodes_fixtures
from tests.support.finalizers import release_finalizers
from tests.support.journeys import JOURNEYS, journey_namespace
from tests.support.kubectl import kubectl


@dataclasses.dataclass(frozen=True)
class Operator:
    namespace: str
    release: str | None  # None: installed by someone else (E2E_TARGET=external)
    kubeconfig: pathlib.Path | None = None

    @property
    def deployment(self) -> str:
        return self.release or "etcd-operator"

    def replicas(self) -> int:
        return chart_release.replicas(self.deployment, self.namespace)

    def scale(self, replicas: int) -> None:
        chart_release.scale(replicas, self.deployment, self.namespace)

    def install(self) -> None:
        """The session's release installed again, as operator_release installs it."""
        chart_release.install(self.kubeconfig)

    @contextlib.contextmanager
    def set_aside(self):
        """No operator on the cluster for a while (the release and its namespace gone); the
        session's release comes back before the next test that needs it
        (tests/support/real_nodes_fixtures.py), so consecutive journeys marked
        `sets_the_operator_aside` uninstall it once."""
        real_nodes_fixtures.set_the_release_aside(self.kubeconfig)
        yield


@pytest.fixture(scope="session")
def operator(request, operator_namespace, e2e_nodes) -> Operator:  # noqa: F811 (fixtures of target.py)
    if e2e_nodes is None:
        return Operator(operator_namespace, None)
    return Operator(operator_namespace, request.getfixturevalue("operator_release"), e2e_nodes.kubeconfig)


@pytest.fixture(autouse=True)
def leave_no_namespace_behind(request, kube_api):  # noqa: F811 (a fixture of target.py)
    """After a journey, pass or fail: its namespace is deleted, and if the operator did not
    release its objects in time (the journey has failed already), their finalizers are
    removed by hand so that nothing outlives the session."""
    yield
    for journey in JOURNEYS:
        namespace = journey_namespace(journey)
        if kubectl("get", "namespace", namespace, check=False).returncode != 0:
            continue
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        gone = kubectl("wait", "--for=delete", f"namespace/{namespace}", "--timeout=90s", check=False)
        if gone.returncode != 0:
            release_finalizers(kube_api, namespace)
