"""Real nodes: pods scheduled onto three containerd/kubelet nodes, pod traffic across
nodes, the host reaching pods, Services and cluster names, a partition and its healing,
and `down` giving the host back as it was found."""

from __future__ import annotations

import socket
import urllib.request
import uuid

import pytest

from images import names as image_names
from localkube import controlplane, hoststate, nodefaults, realnodes
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes]

START_TIMEOUT = 90.0
WEB_PORT = 8080


@pytest.fixture(scope="module")
def core(nodes_api):
    from kubernetes import client

    return client.CoreV1Api(nodes_api)


@pytest.fixture(scope="module")
def namespace(core):
    from kubernetes import client

    name = f"nodes-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def busybox_pod(name: str, node: str, command: str, restart: str = "Never", labels: dict | None = None):
    from kubernetes import client

    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}),
        spec=client.V1PodSpec(
            node_selector={"kubernetes.io/hostname": node},
            restart_policy=restart,
            termination_grace_period_seconds=0,
            containers=[
                client.V1Container(
                    name="main",
                    image=image_names.BUSYBOX,
                    image_pull_policy="Never",
                    command=["sh", "-c", command],
                )
            ],
        ),
    )


def fetch_command(ip: str) -> str:
    """Succeeds when the web pod answers (busybox nc: this busybox's wget crashes)."""
    request = "GET / HTTP/1.0\\r\\n\\r\\n"
    return f"printf '{request}' | nc -w 3 {ip} {WEB_PORT} | grep -q hello-from-node-3"


def running_pod_ip(core, namespace: str, name: str) -> str:
    def ip():
        pod = core.read_namespaced_pod(name, namespace)
        return pod.status.pod_ip if pod.status.phase == "Running" else None

    return wait_for(ip, START_TIMEOUT, what=f"pod {name} running with an IP")


def finished_phase(core, namespace: str, name: str) -> str:
    def phase():
        p = core.read_namespaced_pod(name, namespace).status.phase
        return p if p in ("Succeeded", "Failed") else None

    return wait_for(phase, START_TIMEOUT, what=f"pod {name} finished")


@pytest.fixture(scope="module")
def web(core, namespace):
    """An HTTP server pod on node-3 and a ClusterIP Service in front of it."""
    from kubernetes import client

    command = f"mkdir -p /www && echo hello-from-node-3 > /www/index.html && httpd -f -p {WEB_PORT} -h /www"
    core.create_namespaced_pod(namespace, busybox_pod("web", "node-3", command, "Always", {"app": "web"}))
    core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(
                selector={"app": "web"}, ports=[client.V1ServicePort(port=80, target_port=WEB_PORT)]
            ),
        ),
    )
    return running_pod_ip(core, namespace, "web")


def test_three_nodes_are_ready_with_real_runtimes(real_nodes, core):
    nodes = core.list_node().items
    assert sorted(n.metadata.name for n in nodes) == realnodes.node_names()
    assert realnodes.ready_nodes(real_nodes) == set(realnodes.node_names())
    for node in nodes:
        assert node.status.node_info.container_runtime_version.startswith("containerd://")
        addresses = {a.type: a.address for a in node.status.addresses}
        index = int(node.metadata.name.rsplit("-", 1)[1])
        assert addresses["InternalIP"] == real_nodes.node_network.node_address(index)


def test_a_pod_on_each_node_gets_an_ip_from_its_node_range(real_nodes, core, namespace):
    import ipaddress

    for node in realnodes.node_names():
        core.create_namespaced_pod(namespace, busybox_pod(f"idle-{node}", node, "sleep 3600", "Always"))
    for index, node in enumerate(realnodes.node_names(), start=1):
        ip = running_pod_ip(core, namespace, f"idle-{node}")
        assert ipaddress.ip_address(ip) in ipaddress.ip_network(real_nodes.node_network.pod_cidr(index))
        assert core.read_namespaced_pod(f"idle-{node}", namespace).spec.node_name == node


def test_a_pod_on_node_1_reaches_a_pod_on_node_3(core, namespace, web):
    core.create_namespaced_pod(namespace, busybox_pod("cross-node", "node-1", fetch_command(web)))
    assert finished_phase(core, namespace, "cross-node") == "Succeeded"


def test_the_host_reaches_a_pod_ip_and_a_cluster_ip(real_nodes, core, namespace, web):
    with urllib.request.urlopen(f"http://{web}:{WEB_PORT}/", timeout=5) as resp:
        assert resp.read().strip() == b"hello-from-node-3"
    cluster_ip = core.read_namespaced_service("web", namespace).spec.cluster_ip

    def through_service():
        with urllib.request.urlopen(f"http://{cluster_ip}/", timeout=3) as resp:
            return resp.read().strip() == b"hello-from-node-3"

    # kube-proxy on node 1 programs the Service shortly after it is created.
    wait_for(through_service, START_TIMEOUT, what=f"the host reaching Service IP {cluster_ip}")


def test_service_names_resolve_from_a_pod_and_from_the_host(real_nodes, core, namespace, web):
    cluster_ip = core.read_namespaced_service("web", namespace).spec.cluster_ip
    lookup = f"nslookup web.{namespace}.svc.cluster.local | grep -q {cluster_ip}"
    core.create_namespaced_pod(namespace, busybox_pod("lookup", "node-2", lookup))
    assert finished_phase(core, namespace, "lookup") == "Succeeded"
    assert realnodes.dns_answers(real_nodes.node_network.dns_address, f"web.{namespace}.svc.cluster.local")
    if hoststate.RESOLVER_MARKER + real_nodes.checkout_id not in hoststate.RESOLV_CONF.read_text():
        pytest.skip("/etc/resolv.conf belongs to another checkout's real nodes")
    # The host's resolver: its search list completes `<name>.<namespace>.svc`.
    found = {info[4][0] for info in socket.getaddrinfo(f"web.{namespace}.svc", 80, socket.AF_INET)}
    assert found == {cluster_ip}


def test_a_partitioned_node_is_unreachable_until_healed(real_nodes, core, namespace, web, nodes_to_the_test):
    fetch = fetch_command(web)
    nodefaults.partition(real_nodes, "node-3")
    try:
        core.create_namespaced_pod(namespace, busybox_pod("while-partitioned", "node-1", fetch))
        assert finished_phase(core, namespace, "while-partitioned") == "Failed"
    finally:
        nodefaults.heal(real_nodes, "node-3")
    assert not nodefaults.partitioned(real_nodes, "node-3")
    core.create_namespaced_pod(namespace, busybox_pod("after-healing", "node-1", fetch))
    assert finished_phase(core, namespace, "after-healing") == "Succeeded"


def test_a_stopped_node_runs_pods_again_once_healed(real_nodes, core, namespace, nodes_to_the_test):
    assert nodefaults.stop(real_nodes, "node-2") == []
    assert nodefaults.stopped(real_nodes, "node-2")
    assert realnodes.containers_left(real_nodes, 2) == []
    core.create_namespaced_pod(namespace, busybox_pod("after-restart", "node-2", "sleep 3600", "Always"))
    assert core.read_namespaced_pod("after-restart", namespace).status.phase == "Pending"
    nodefaults.heal(real_nodes, "node-2")
    assert not nodefaults.stopped(real_nodes, "node-2")
    running_pod_ip(core, namespace, "after-restart")


def _is_ours(item: str, where) -> bool:
    marks = (f"lk{where.checkout_id[:6]}", where.checkout_id, str(where.state_dir), f"10.{where.node_network.octet}.")
    return any(mark in item for mark in marks)


def _is_another_checkouts(item: str) -> bool:
    """Links, routes, namespaces and cgroups of other checkouts' real nodes on this machine."""
    return item.startswith("lk") or " dev lk" in item or "/localkube-" in item


@pytest.mark.needs_nodes(takes_them_down=True)
def test_down_gives_the_host_back_as_found(real_nodes_use, real_nodes, host_before):
    real_nodes_use.wait_until_only_user()
    during = hoststate.snapshot()
    assert [link for link in during["links"] if _is_ours(link, real_nodes)]  # the nodes did change the host
    assert controlplane.down(real_nodes) == []
    after = hoststate.snapshot()
    # This machine is shared: other work mounts and unmounts, other checkouts' real nodes come
    # and go. Nothing of these nodes may stay, nothing else may have been taken away.
    for aspect in ("links", "routes", "netns", "cgroups"):
        changed = set(after[aspect]) ^ set(host_before[aspect])
        assert [item for item in changed if _is_ours(item, real_nodes)] == [], aspect
        assert [item for item in changed if not _is_another_checkouts(item)] == [], aspect
    ours = (str(real_nodes.state_dir), "/run/netns", "/run/containerd", "/var/lib/kubelet", "/var/lib/cni")
    changed = [m for m in set(after["mounts"]) ^ set(host_before["mounts"]) if m.startswith(ours)]
    assert [m for m in changed if _is_ours(m, real_nodes) or not _is_another_checkouts(m.rsplit("/", 1)[-1])] == []
    assert hoststate.RESOLVER_MARKER + real_nodes.checkout_id not in after["resolv_conf"]
    if hoststate.RESOLVER_MARKER not in after["resolv_conf"]:  # else another checkout took it since
        assert after["resolv_conf"] == host_before["resolv_conf"]
    for aspect in ("sysctls", "iptables", "paths"):
        assert after[aspect] == host_before[aspect], aspect
