"""Where the e2e tiers (journeys, scenarios) run: their fixtures, which e2e/journeys/conftest.py
and e2e/scenarios/conftest.py take from here.

- unset E2E_TARGET: on the session's real nodes (`real_nodes`, tests/support/real_nodes_fixtures.py,
  shared with tests/nodes), against the operator the chart installs there (`operator_release`:
  every namespace watched, two replicas, restricted Pod Security), with the substrate's MinIO,
  which pods on the real nodes reach on the bridge's host address.
- E2E_TARGET=external (or kind): whatever KUBECONFIG points at, the operator installed
  already (in E2E_OPERATOR_NAMESPACE, default etcd-operator), S3 from E2E_S3_ENDPOINT,
  E2E_S3_BUCKET, E2E_S3_ACCESS_KEY, E2E_S3_SECRET_KEY (and E2E_S3_REGION)."""

from __future__ import annotations

import os

import pytest

from localkube import controlplane
from tests.support import chart_release, real_nodes_fixtures
from tests.support.diagnostics import print_events
from tests.support.kubectl import kubectl

EXTERNAL = os.environ.get("E2E_TARGET") in ("external", "kind")


def pytest_configure(config):
    real_nodes_fixtures.register(config)


@pytest.fixture(scope="session")
def e2e_nodes(request):
    """The real nodes' layout, or None when external."""
    return None if EXTERNAL else request.getfixturevalue("real_nodes")


@pytest.fixture(scope="session")
def kube_api(e2e_nodes):
    from kubernetes import config

    kubeconfig = str(e2e_nodes.kubeconfig) if e2e_nodes else os.environ.get("KUBECONFIG")
    return config.new_client_from_config(config_file=kubeconfig)


@pytest.fixture(scope="module", autouse=True)
def e2e_kubeconfig(e2e_nodes):
    """kubectl and helm follow KUBECONFIG: on the real nodes, pointed there for each module."""
    if e2e_nodes is None:
        yield os.environ.get("KUBECONFIG")
        return
    with chart_release.kubeconfig_env(e2e_nodes.kubeconfig):
        yield str(e2e_nodes.kubeconfig)


@pytest.fixture(scope="session")
def operator_namespace(request) -> str:
    """Where the operator under test runs (installed here unless external)."""
    if EXTERNAL:
        return os.environ.get("E2E_OPERATOR_NAMESPACE", "etcd-operator")
    request.getfixturevalue("operator_release")
    return chart_release.NAMESPACE


@pytest.fixture(scope="session")
def s3_settings(e2e_nodes) -> dict[str, str]:
    if e2e_nodes is None:
        return {k: os.environ[f"E2E_S3_{k.upper()}"] for k in ("endpoint", "bucket", "access_key", "secret_key")} | {
            "region": os.environ.get("E2E_S3_REGION", "us-east-1")
        }
    env = controlplane.s3_environment(e2e_nodes)
    return {
        "endpoint": env["S3_ENDPOINT"],
        "bucket": env["S3_BUCKET"],
        "access_key": env["AWS_ACCESS_KEY_ID"],
        "secret_key": env["AWS_SECRET_ACCESS_KEY"],
        "region": env["S3_REGION"],
    }


@pytest.fixture(scope="session")
def explain_failure(operator_namespace):
    """A failed test's namespace: its events, the logs of its pods and of the operator's."""

    def explain(core, namespace: str) -> None:
        print_events(core, namespace)
        for where, selector in (
            (operator_namespace, "app.kubernetes.io/name=etcd-operator"),
            (namespace, "app.kubernetes.io/name"),
        ):
            logs = kubectl(
                "logs",
                "-n",
                where,
                "-l",
                selector,
                "--all-containers",
                "--prefix",
                "--tail=80",
                "--max-log-requests=20",
                check=False,
            )
            print(f"----- pods in {where} -----\n{logs.stdout}{logs.stderr}")

    return explain
