"""The journeys: what a new user does first, done the way they do it, against whatever
KUBECONFIG points at. Each journey has its own namespace.

- unset E2E_TARGET: the local substrate; this conftest installs the operator with the Helm
  chart (watching exactly the journeys' namespaces, by name) and removes it afterwards.
- E2E_TARGET=external: the operator is installed already, watching every namespace (or the
  `journey-*` names), with S3 settings from E2E_S3_ENDPOINT, E2E_S3_BUCKET,
  E2E_S3_ACCESS_KEY and E2E_S3_SECRET_KEY."""

from __future__ import annotations

import dataclasses
import os

import pytest

from localkube import controlplane
from tests.support.finalizers import release_finalizers
from tests.support.helm import CHART, helm
from tests.support.journeys import JOURNEYS, RELEASE, install_values, journey_namespace
from tests.support.kubectl import kubectl
from tests.support.waiting import wait_for

EXTERNAL = os.environ.get("E2E_TARGET") in ("external", "kind")
@dataclasses.dataclass(frozen=True)
class Operator:
    namespace: str
    release: str | None  # None: installed by someone else (E2E_TARGET=external)

    @property
    def deployment(self) -> str:
        return self.release or "etcd-operator"

    def scale(self, replicas: int) -> None:
        kubectl("scale", f"deployment/{self.deployment}", "-n", self.namespace, f"--replicas={replicas}")
        if replicas:
            kubectl("rollout", "status", f"deployment/{self.deployment}", "-n", self.namespace, "--timeout=180s")
        else:
            wait_for(lambda: not kubectl("get", "pods", "-n", self.namespace, "-o", "name",
                                         "-l", f"app.kubernetes.io/name={CHART.name}").stdout.strip(),
                     120, what="the operator's pods gone")


@pytest.fixture(scope="session")
def operator(request) -> Operator:
    if EXTERNAL:
        yield Operator(os.environ.get("E2E_OPERATOR_NAMESPACE", "etcd-operator"), None)
        return
    request.getfixturevalue("substrate")
    helm("install", RELEASE, str(CHART), "-n", RELEASE, "--create-namespace", *install_values(),
         "--wait", "--timeout", "180s")
    yield Operator(RELEASE, RELEASE)
    helm("uninstall", RELEASE, "-n", RELEASE, "--wait", check=False)
    kubectl("delete", "namespace", RELEASE, "--ignore-not-found", "--timeout=120s", check=False)


@pytest.fixture(scope="session")
def s3_settings(request) -> dict[str, str]:
    if EXTERNAL:
        return {k: os.environ[f"E2E_S3_{k}"] for k in ("ENDPOINT", "BUCKET", "ACCESS_KEY", "SECRET_KEY")} | {
            "REGION": os.environ.get("E2E_S3_REGION", "us-east-1")}
    env = controlplane.s3_environment(request.getfixturevalue("substrate"))
    return {"ENDPOINT": env["S3_ENDPOINT"], "BUCKET": env["S3_BUCKET"], "ACCESS_KEY": env["AWS_ACCESS_KEY_ID"],
            "SECRET_KEY": env["AWS_SECRET_ACCESS_KEY"], "REGION": env["S3_REGION"]}


@pytest.fixture(autouse=True)
def leave_no_namespace_behind(request, kube_api):
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
