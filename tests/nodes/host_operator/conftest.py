"""The operator as a process on the host against the real nodes, for the tests that kill it at
fault points, freeze it, run several replicas or shards of it, or crash, freeze and wipe its
members' containers; and, in control_plane/, the tests that need only the control plane. They
are marked needs_operator_process (control_plane/: needs_cluster), so `make test` runs them in its
five host lanes (split by the markers lane2, lane4, lane5 and lane6, tests/run.sh; one marked lane3 would run
after the chart's tests, in their run), while the chart's tests use the same real nodes in the other run. The
instance is shared (tests/support/shared_real_nodes.py), from this package's first test to its
last, and the other run's node faults wait for the tests that run here.

Each operator process is a shard of its own (`claims.HOST_OPERATOR_SHARD`), and every
EtcdCluster, EtcdBackup and EtcdRestore a test creates is claimed for it (tests/support/claims.py),
so that the session's chart release, which watches every namespace, leaves them alone."""

from __future__ import annotations

import contextlib
import functools
import types
import uuid

import pytest

from localkube import containerfaults
from localkube.layout import REAL_NODES_TEST_ROOT
from tests.support import claims, crds, shared_real_nodes
from tests.support.chart_release import kubeconfig_env, restricted_namespace
from tests.support.diagnostics import fresh_namespace_name, print_events, print_tail
from tests.support.finalizers import release_finalizers
from tests.support.kubectl import kubectl
from tests.support.operator_process import OperatorProcess


@pytest.fixture(scope="package")
def real_nodes_use():
    with shared_real_nodes.used(REAL_NODES_TEST_ROOT) as use:
        yield use


@pytest.fixture(scope="package")
def real_nodes(real_nodes_use):
    return real_nodes_use.where


@pytest.fixture(autouse=True)
def nodes_kept(real_nodes_use):
    """No node is stopped, partitioned, drained or deleted by the other run while a test here
    runs."""
    with real_nodes_use.nodes_kept():
        yield


@pytest.fixture(scope="package")
def nodes_api(real_nodes):
    from kubernetes import config

    return config.new_client_from_config(config_file=str(real_nodes.kubeconfig))


@pytest.fixture(scope="package")
def kube_api(nodes_api):
    return nodes_api


@pytest.fixture(scope="package")
def kubectl_on_real_nodes(real_nodes):
    with kubeconfig_env(real_nodes.kubeconfig):
        yield real_nodes.kubeconfig


@pytest.fixture(scope="package", autouse=True)
def crds_installed(kubectl_on_real_nodes):
    """The CRDs, whether or not the other run's chart release installed them yet."""
    crds.install()


@pytest.fixture(scope="package", autouse=True)
def created_for_the_host_shard():
    """What the tests here create is claimed for the host's shard, the release leaves it."""
    with claims.creating_for(claims.HOST_OPERATOR_SHARD):
        yield


@pytest.fixture
def namespace(request, real_nodes, nodes_api, kubectl_on_real_nodes):
    """A fresh namespace for one test, restricted Pod Security as the operator's own.
    Afterwards it is deleted and, its operator process being gone, the finalizers left are
    removed by hand; on failure its events and the operator processes' logs are printed first."""
    from kubernetes import client

    name = fresh_namespace_name("h", request.node.name)
    restricted_namespace(name)
    yield name
    if any(getattr(getattr(request.node, f"rep_{when}", None), "failed", False) for when in ("setup", "call")):
        print_events(client.CoreV1Api(nodes_api), name)
        for log in sorted(real_nodes.logs_dir.glob(f"operator-{name}*.log")):
            print_tail(log)
    kubectl("delete", "namespace", name, "--wait=false", check=False)
    release_finalizers(nodes_api, name)


@pytest.fixture(scope="package")
def operator_process(real_nodes):
    """Makes operator processes of the host's shard for a namespace (not started): the host's
    network, which routes pod IPs, and the nodes' DNS for the members' names. They poll a
    steady cluster every 15 s without backing off (STEADY_POLL_MAX_SECONDS): these tests change
    etcd behind the operator's back (alarms, users, metrics) right after it went quiet. The
    chart's release, which the other real-node tests use, runs the default backoff."""
    settings = {**claims.shard_env(claims.HOST_OPERATOR_SHARD), "STEADY_POLL_MAX_SECONDS": "15"}

    def make(namespace: str, env: dict[str, str] | None = None, **kwargs) -> OperatorProcess:
        return OperatorProcess(
            real_nodes,
            namespace,
            env={**settings, **(env or {})},
            resolver=real_nodes.node_network.dns_address,
            **kwargs,
        )

    return make


@pytest.fixture(scope="package")
def module_namespace(operator_process, kubectl_on_real_nodes, kube_api):
    """Opens a restricted namespace shared by one module's tests, with an operator process
    watching it; on leaving, the operator stops and the namespace is deleted."""

    @contextlib.contextmanager
    def opened(prefix: str):
        name = f"{prefix}-{uuid.uuid4().hex[:5]}"
        restricted_namespace(name)
        process = operator_process(name).start()
        try:
            yield name
        finally:
            process.stop()
            kubectl("delete", "namespace", name, "--wait=false", check=False)
            release_finalizers(kube_api, name)

    return opened


@pytest.fixture
def operator(operator_process, namespace):
    """The operator as a process on the host, watching only this test's namespace."""
    process = operator_process(namespace).start()
    yield process
    process.stop()


@pytest.fixture(scope="package")
def container_faults(real_nodes):
    """Container faults on the real nodes (localkube.containerfaults), for this package's tests."""
    bind = functools.partial
    return types.SimpleNamespace(
        crash_container=bind(containerfaults.crash, real_nodes),
        freeze_container=bind(containerfaults.freeze, real_nodes),
        thaw_container=bind(containerfaults.thaw, real_nodes),
        container_pid=bind(containerfaults.pid, real_nodes),
        read_log=bind(containerfaults.read_log, real_nodes),
        lose_member_disk=bind(containerfaults.lose_member_disk, real_nodes),
        flood_log=bind(containerfaults.flood_log, real_nodes),
    )
