"""The product on real nodes, installed as users install it: the chart runs the operator as a
pod from the image built here, with restricted Pod Security that runc enforces; a TLS cluster
spreads its members over the three nodes and serves the host by the names its certificates
carry; a node that stops costs its member, which is replaced once the operator itself saw it
unhealthy for memberUnhealthyTimeout, with the data kept. Every member that joins (two at the
cluster's creation, the replacement) starts its etcd once: the members it joins never refuse its
peer certificate for a name that does not resolve yet."""

from __future__ import annotations

import base64
import json
import subprocess
import time

import pytest

from etcd_operator.core.cluster import naming
from localkube import hoststate, nodefaults
from localkube import layout as localkube_layout
from tests.support import chart_release, measured
from tests.support.chart_release import delete_namespace, restricted_namespace
from tests.support.clusters import events, get_cluster, member_pods, wait_healthy
from tests.support.helm import CHART
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.usefixtures("nodes_to_the_module", "kubectl_on_real_nodes"),
]

OPERATOR_NAMESPACE = chart_release.NAMESPACE
OPERATOR_LEASE = "etcd-operator-leader"  # the chart's leader Lease: its holder is <pod name>_<random>
NAMESPACE = "on-real-nodes"
CLUSTER = "spread"
UNHEALTHY_TIMEOUT_SECONDS = 30  # the CRD's minimum
# What etcd logs when it refuses a peer whose certificate's names do not resolve to its address.
NAME_REFUSAL = "does not match any of DNSNames"


@pytest.fixture(scope="module")
def host_resolves_cluster_names(real_nodes):
    """etcdctl on the host reaches members by the names their certificates carry."""
    if hoststate.RESOLVER_MARKER + real_nodes.checkout_id not in hoststate.RESOLV_CONF.read_text():
        pytest.skip("/etc/resolv.conf belongs to another checkout's real nodes")


@pytest.fixture(scope="module")
def cluster(operator_release, kubectl_on_real_nodes):
    restricted_namespace(NAMESPACE)
    manifest = {
        "apiVersion": "etcd.operator.dev/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
        "spec": {
            "size": 3,
            "version": "3.6.16",
            "storage": {"size": "1Gi"},
            "recovery": {"memberUnhealthyTimeout": f"{UNHEALTHY_TIMEOUT_SECONDS}s"},
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(manifest))
    wait_healthy(NAMESPACE, CLUSTER, 3, timeout=300)
    yield CLUSTER
    # The operator (the session's release) is still there to release the cluster's finalizer.
    delete_namespace(NAMESPACE, wait=False)  # not under the hold of the nodes: it takes 30 s


def operator_pods() -> list[dict]:
    return kubectl_json("get", "pods", "-n", OPERATOR_NAMESPACE, "-l", f"app.kubernetes.io/name={CHART.name}")["items"]


def client_files(tmp_path) -> list[str]:
    data = kubectl_json("get", "secret", f"{CLUSTER}-client-tls", "-n", NAMESPACE)["data"]
    paths = {}
    for key in ("ca.crt", "tls.crt", "tls.key"):
        path = tmp_path / key
        path.write_bytes(base64.b64decode(data[key]))
        path.chmod(0o600)
        paths[key] = str(path)
    return [f"--cacert={paths['ca.crt']}", f"--cert={paths['tls.crt']}", f"--key={paths['tls.key']}"]


def etcdctl(urls: list[str], tls: list[str], *args: str) -> subprocess.CompletedProcess:
    binary = localkube_layout.testbin_dir() / "etcd-3.6" / "etcdctl"
    return subprocess.run(
        [str(binary), f"--endpoints={','.join(urls)}", "--command-timeout=5s", "--dial-timeout=3s", *tls, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


def member_urls(pods: list[dict]) -> list[str]:
    return sorted(naming.client_url(CLUSTER, NAMESPACE, p["metadata"]["name"], tls=True) for p in pods)


def live_members() -> list[dict]:
    return [p for p in member_pods(NAMESPACE, CLUSTER) if not p["metadata"].get("deletionTimestamp")]


def started_once(pods: list[dict]) -> str:
    """Per member, what says its etcd did not start just once: restarts, and refusals of a
    peer's certificate in its log. Empty when nothing does."""
    found = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        etcd = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "etcd")
        log = kubectl("logs", "-n", NAMESPACE, name, "-c", "etcd").stdout
        problems = [line[:700] for line in log.splitlines() if NAME_REFUSAL in line][:2]
        if etcd["restartCount"]:
            previous = kubectl("logs", "-n", NAMESPACE, name, "-c", "etcd", "--previous", check=False).stdout
            problems.insert(
                0,
                f"restarted {etcd['restartCount']} time(s); the last lines before: "
                + "\n".join(line[:700] for line in previous.splitlines()[-3:]),
            )
        if problems:
            found[name] = problems
    return "\n".join(f"{name}: {problem}" for name, problems in found.items() for problem in problems)


def test_the_chart_runs_the_operator_as_a_pod_that_the_runtime_confines(operator_release):
    pods = operator_pods()
    assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)
    for pod in pods:
        image = pod["status"]["containerStatuses"][0]["image"]
        assert image.startswith("ghcr.io/etcd-operator/etcd-operator:")
        probe = kubectl(
            "exec",
            "-n",
            OPERATOR_NAMESPACE,
            pod["metadata"]["name"],
            "--",
            "python",
            "-c",
            "import os, pathlib\n"
            "print(os.getuid(), os.getgid())\n"
            "try:\n pathlib.Path('/etc/written').write_text('x'); print('writable')\n"
            "except OSError as e:\n print('read-only', e.errno)\n"
            "status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
            "print(status['CapBnd'].strip(), status['NoNewPrivs'].strip(), status['Seccomp'].strip())",
            check=False,
        )
        assert probe.returncode == 0, probe.stderr
        uid_gid, root, confinement = probe.stdout.split("\n")[:3]
        assert uid_gid == "65532 65532"
        assert root == "read-only 30"  # EROFS
        bounding_capabilities, no_new_privileges, seccomp_mode = confinement.split()
        assert int(bounding_capabilities, 16) == 0  # capabilities: drop ALL
        assert no_new_privileges == "1"  # allowPrivilegeEscalation: false
        assert seccomp_mode == "2"  # RuntimeDefault: a filter


def test_a_tls_cluster_spreads_over_the_nodes_and_serves_the_host_by_name(
    cluster, host_resolves_cluster_names, tmp_path
):
    pods = live_members()
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["node-1", "node-2", "node-3"]
    assert not (problems := started_once(pods)), problems  # two of them joined the first
    tls = client_files(tmp_path)
    written = etcdctl(member_urls(pods), tls, "put", "/on-real-nodes/kept", "before-the-node-stops")
    assert written.returncode == 0, written.stderr
    without_certificate = etcdctl(member_urls(pods), [f"--cacert={tmp_path / 'ca.crt'}"], "get", "/on-real-nodes/kept")
    assert without_certificate.returncode != 0


def test_a_stopped_node_costs_its_member_which_is_replaced_after_the_timeout(
    cluster, real_nodes, host_resolves_cluster_names, tmp_path
):
    tls = client_files(tmp_path)
    written = etcdctl(member_urls(live_members()), tls, "put", "/on-real-nodes/kept", "before-the-node-stops")
    assert written.returncode == 0, written.stderr
    before = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in live_members()}
    leader = next(m["name"] for m in get_cluster(NAMESPACE, CLUSTER)["status"]["members"] if m["role"] == "leader")
    # A follower away from the acting operator replica: the node fault hits etcd only (a leader
    # replica stopped with its node is a hand-over, tests/nodes/host_operator/test_leader_handover.py).
    acting = kubectl_json("get", "lease", OPERATOR_LEASE, "-n", OPERATOR_NAMESPACE)["spec"]["holderIdentity"]
    acting_node = kubectl_json("get", "pod", acting.rsplit("_", 1)[0], "-n", OPERATOR_NAMESPACE)["spec"]["nodeName"]
    victim, node = next((name, n) for name, n in sorted(before.items()) if name != leader and n != acting_node)
    stopped_at = time.monotonic()
    assert nodefaults.stop(real_nodes, node) == []
    try:

        def replaced():
            now = {p["metadata"]["name"] for p in live_members()}
            return victim not in now and len(now) == 3 and now

        members = wait_for(
            replaced, UNHEALTHY_TIMEOUT_SECONDS + 240, interval=2.0, what=f"{victim} on stopped {node} replaced"
        )
        try:
            wait_healthy(NAMESPACE, CLUSTER, 3, timeout=240)
        except TimeoutError as e:
            seen = kubectl("get", "pods,pvc", "-A", "-o", "wide", check=False).stdout
            raise AssertionError(f"{e}\n{seen}") from None
        recovered_after = time.monotonic() - stopped_at
        replacement = events(NAMESPACE, CLUSTER)
        reasons = [e["message"] for e in replacement if e.get("reason") == "MemberReplaced"]
        assert any(victim in m for m in reasons), reasons
        # Not before the operator itself saw the member unhealthy for the whole timeout.
        assert recovered_after >= UNHEALTHY_TIMEOUT_SECONDS
        measured.report(f"{victim} on {node}: healthy with a replacement {recovered_after:.0f}s after the node stopped")
        survivors = [p for p in live_members() if p["metadata"]["name"] in members]
        assert not (problems := started_once([p for p in survivors if p["spec"]["nodeName"] != node])), problems
        read = etcdctl(member_urls(survivors), tls, "get", "/on-real-nodes/kept", "--print-value-only")
        assert read.returncode == 0 and read.stdout.strip() == "before-the-node-stops", read.stderr
    finally:
        nodefaults.heal(real_nodes, node)
