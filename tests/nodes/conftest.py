"""Real nodes (`localkube up --nodes real`) for these tests: a substrate instance of its own,
rooted in <checkout>/.localkube/realnodes-test, so that the checkout's default substrate
(the node agent) can keep running beside it. `make down` stops it too."""

from __future__ import annotations

import json
import os

import pytest

from localkube import controlplane, hoststate, layout as localkube_layout, processes
from tests.support.helm import CHART, helm
from tests.support.kubectl import kubectl

TEST_ROOT = localkube_layout.REPO_ROOT / ".localkube" / "realnodes-test"
RELEASE = "etcd-operator"
OPERATOR_NAMESPACE = "etcd-operator"


@pytest.fixture(scope="session")
def host_before():
    """The host as found, before the real nodes of these tests start."""
    return hoststate.snapshot()


@pytest.fixture(scope="session")
def real_nodes(host_before):
    """One instance for all of tests/nodes; test_real_nodes.py takes it down last, to check the host."""
    TEST_ROOT.mkdir(parents=True, exist_ok=True)
    where = localkube_layout.current(TEST_ROOT)
    controlplane.up(where, nodes="real")
    yield where
    controlplane.down(where)


@pytest.fixture(scope="session")
def nodes_api(real_nodes):
    from kubernetes import config

    return config.new_client_from_config(config_file=str(real_nodes.kubeconfig))


@pytest.fixture(scope="session")
def kubeconfig(real_nodes):
    """tests.support's kubectl helpers follow KUBECONFIG: point it at the real nodes."""
    before = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(real_nodes.kubeconfig)
    yield real_nodes.kubeconfig
    if before is None:
        os.environ.pop("KUBECONFIG", None)
    else:
        os.environ["KUBECONFIG"] = before


def restricted_namespace(name: str) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    kubectl("apply", "-f", "-", input=json.dumps(namespace))


def delete_namespace(name: str) -> None:
    kubectl("delete", "namespace", name, "--ignore-not-found", "--timeout=120s", check=False)


def instance_running(layout) -> bool:
    """False once test_real_nodes.py took the instance down: nothing is left to clean up then."""
    return bool(processes.running(layout.run_dir, "kube-apiserver"))


@pytest.fixture(scope="session")
def operator_release(real_nodes, kubeconfig):
    """The chart installed once, as users install it, for every module that runs clusters."""
    kubectl("apply", "--server-side", "-k", str(localkube_layout.REPO_ROOT / "crds"))
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    restricted_namespace(OPERATOR_NAMESPACE)
    # The instance keeps its API objects across `down`: an earlier session that ended with
    # test_real_nodes.py's `down` left its release there.
    helm("uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--kubeconfig", str(kubeconfig), "--wait",
         "--ignore-not-found", check=False)
    helm("install", RELEASE, str(CHART), "-n", OPERATOR_NAMESPACE, "--kubeconfig", str(kubeconfig),
         "--wait", "--timeout", "180s")
    yield RELEASE
    if instance_running(real_nodes):
        helm("uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--kubeconfig", str(kubeconfig), "--wait", check=False)
        delete_namespace(OPERATOR_NAMESPACE)
