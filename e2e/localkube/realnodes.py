"""Real nodes: three Linux network namespaces on one bridge, each with its own containerd,
kubelet and kube-proxy, plus one kube-scheduler and CoreDNS on the bridge's host address.

Addresses come from layout.NodeNetwork. The host reaches pod IPs (a route per node's pod
range) and Services (the Service range routed via node 1, whose kube-proxy translates).
Host state that the nodes change is recorded and restored by localkube.hoststate.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import os
import pathlib
import signal
import socket
import struct
import subprocess
import time
from typing import NamedTuple

from images import names as image_names
from localkube import controlplane, hoststate, local_path, pki, processes
from localkube.layout import CLUSTER_DOMAIN, NODE_COUNT, Layout

CNI_BIN_DIR = "/usr/lib/cni"
NODES_READY_TIMEOUT = 180.0


# --- names and paths ------------------------------------------------------------------


def node_names() -> list[str]:
    return [f"node-{i}" for i in range(1, NODE_COUNT + 1)]


def _short(layout: Layout) -> str:
    return layout.checkout_id[:6]


def netns_name(layout: Layout, index: int) -> str:
    return f"lk{_short(layout)}-n{index}"


def netns_path(layout: Layout, index: int) -> pathlib.Path:
    return pathlib.Path("/run/netns") / netns_name(layout, index)


def bridge_name(layout: Layout) -> str:
    return f"lk{_short(layout)}br"


def host_veth(layout: Layout, index: int) -> str:
    return f"lk{_short(layout)}n{index}"


def nodes_dir(layout: Layout) -> pathlib.Path:
    return layout.state_dir / "nodes"


def node_dir(layout: Layout, index: int) -> pathlib.Path:
    return nodes_dir(layout) / f"node-{index}"


def containerd_socket(layout: Layout, index: int) -> pathlib.Path:
    return node_dir(layout, index) / "containerd.sock"


def cgroup_name(layout: Layout, index: int) -> str:
    return f"localkube-{layout.checkout_id}-node-{index}"


def cni_network_name(layout: Layout) -> str:
    return f"localkube-{_short(layout)}"


def _in_node(layout: Layout, index: int, argv: list[str]) -> list[str]:
    # Network namespace only: kubelet and containerd must share the host's mounts.
    return ["nsenter", f"--net={netns_path(layout, index)}", *argv]


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result


# --- the network ----------------------------------------------------------------------


def _link_exists(name: str) -> bool:
    return _run(["ip", "link", "show", name], check=False).returncode == 0


def _check_block_is_free(layout: Layout) -> None:
    import ipaddress

    block = ipaddress.ip_network(layout.node_network.block)
    for line in _run(["ip", "-o", "addr", "show"]).stdout.splitlines():
        fields = line.split()
        address = ipaddress.ip_interface(fields[3])
        if fields[1].startswith(bridge_name(layout)):
            continue
        if address.version == 4 and address.network.overlaps(block):
            raise RuntimeError(f"{block} overlaps {address} on {fields[1]}; set LOCALKUBE_NODE_OCTET")


def _ensure_network(layout: Layout) -> None:
    net = layout.node_network
    bridge = bridge_name(layout)
    if not _link_exists(bridge):
        _check_block_is_free(layout)
        _run(["ip", "link", "add", bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{net.bridge_address}/24", "dev", bridge])
    _run(["ip", "link", "set", bridge, "up"])
    for index in range(1, NODE_COUNT + 1):
        name, veth = netns_name(layout, index), host_veth(layout, index)
        if not netns_path(layout, index).exists():
            _run(["ip", "netns", "add", name])
        if not _link_exists(veth):
            peer = f"lk{_short(layout)}p{index}"
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", peer])
            _run(["ip", "link", "set", peer, "netns", name])
            _run(["ip", "-n", name, "link", "set", peer, "name", "eth0"])
            _run(["ip", "-n", name, "addr", "add", f"{net.node_address(index)}/24", "dev", "eth0"])
        _run(["ip", "link", "set", veth, "master", bridge, "up"])
        _run(["ip", "-n", name, "link", "set", "lo", "up"])
        _run(["ip", "-n", name, "link", "set", "eth0", "up"])
        _run(["ip", "-n", name, "route", "replace", "default", "via", net.bridge_address])
        for other in range(1, NODE_COUNT + 1):
            if other != index:
                _run(["ip", "-n", name, "route", "replace", net.pod_cidr(other), "via", net.node_address(other)])
        # Per-namespace settings: this node routes for its pods.
        _run(_in_node(layout, index, ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]))
        _run(["ip", "route", "replace", net.pod_cidr(index), "via", net.node_address(index)])
    _run(["ip", "route", "replace", net.service_cidr, "via", net.node_address(1)])


def _remove_network(layout: Layout) -> list[str]:
    problems = []
    for index in range(1, NODE_COUNT + 1):
        if netns_path(layout, index).exists():
            result = _run(["ip", "netns", "delete", netns_name(layout, index)], check=False)
            if result.returncode != 0:
                problems.append(f"netns {netns_name(layout, index)}: {result.stderr.strip()}")
        if _link_exists(host_veth(layout, index)):
            _run(["ip", "link", "delete", host_veth(layout, index)], check=False)
    if _link_exists(bridge_name(layout)):
        _run(["ip", "link", "delete", bridge_name(layout)], check=False)  # its routes go with it
    return problems


# --- cgroups --------------------------------------------------------------------------


def _cgroup_mounts() -> list[pathlib.Path]:
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            if right.split()[0] in ("cgroup", "cgroup2"):
                mounts.append(pathlib.Path(left.split()[4]))
    return mounts


def _ensure_cgroups(layout: Layout) -> None:
    """The kubelet wants its cgroupRoot to exist in every hierarchy."""
    for index in range(1, NODE_COUNT + 1):
        for mount in _cgroup_mounts():
            path = mount / cgroup_name(layout, index)
            path.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (path / knob).exists() and not (path / knob).read_text().strip():
                    (path / knob).write_text((mount / knob).read_text())


def _cgroup_dirs(layout: Layout, index: int) -> list[pathlib.Path]:
    return [m / cgroup_name(layout, index) for m in _cgroup_mounts() if (m / cgroup_name(layout, index)).exists()]


def containers_left(layout: Layout, index: int) -> list[int]:
    """Pids still in the node's cgroups (its pods' processes)."""
    pids = set()
    for root in _cgroup_dirs(layout, index):
        for dirpath, _, _ in os.walk(root):  # cgroups come and go while the walk runs
            try:
                pids.update(int(p) for p in (pathlib.Path(dirpath) / "cgroup.procs").read_text().split())
            except OSError:
                pass
    return sorted(pids)


def _kill_cgroup_processes(layout: Layout, index: int, patience: float = 20.0) -> list[str]:
    deadline = time.monotonic() + patience
    while True:
        pids = containers_left(layout, index)
        if not pids:
            return []
        if time.monotonic() > deadline:
            return [f"processes {pids} stay in {cgroup_name(layout, index)}"]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def _remove_cgroups(layout: Layout, index: int) -> list[str]:
    problems = []
    for root in _cgroup_dirs(layout, index):
        for dirpath, _, _ in os.walk(root, topdown=False):
            try:
                pathlib.Path(dirpath).rmdir()
            except OSError:
                pass
        if root.exists():
            problems.append(f"cgroup {root} could not be removed")
    return problems


# --- configuration files --------------------------------------------------------------


def _write_if_changed(path: pathlib.Path, text: str) -> None:
    """A daemon's file, replaced whole and only when its content changes: kube-proxy exits when
    its configuration file changes, and would read a half-written one (`up` on running nodes)."""
    if path.exists() and path.read_text() == text:
        return
    partial = path.with_name(f".{path.name}.new")
    partial.write_text(text)
    partial.replace(path)


def _write_registry_hosts(layout: Layout, index: int) -> pathlib.Path:
    """containerd's registry hosts directory: the local OCI registry's address, served over
    plain HTTP (no certificate), is the one registry configured; images under any other name
    are imported (`_import_images`), never pulled. Nothing listens there unless a test starts
    the registry (tests/support/oci_registry.py)."""
    hosts_dir = node_dir(layout, index) / "containerd" / "certs.d"
    registry = layout.node_network.registry_host(layout.ports)
    (hosts_dir / registry).mkdir(parents=True, exist_ok=True)
    hosts = f'server = "http://{registry}"\n\n[host."http://{registry}"]\n  capabilities = ["pull", "resolve"]\n'
    _write_if_changed(hosts_dir / registry / "hosts.toml", hosts)
    return hosts_dir


def _write_containerd_config(layout: Layout, index: int) -> pathlib.Path:
    d = node_dir(layout, index)
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    text = f"""version = 2
root = "{d / "containerd" / "root"}"
state = "{d / "containerd" / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{containerd_socket(layout, index)}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "containerd" / "opt"}"

[{cri}]
  sandbox_image = "{image_names.PAUSE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{d / "containerd" / "runc"}"

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{d / "cni"}"

[{cri}.registry]
  config_path = "{_write_registry_hosts(layout, index)}"
"""
    path = d / "containerd.toml"
    _write_if_changed(path, text)
    return path


def _write_cni_config(layout: Layout, index: int) -> None:
    conf_dir = node_dir(layout, index) / "cni"
    conf_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "cniVersion": "0.4.0",
        "name": cni_network_name(layout),
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": layout.node_network.pod_cidr(index)}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node_dir(layout, index) / "cni-ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    _write_if_changed(conf_dir / "10-localkube.conflist", json.dumps(config, indent=2))


def _write_kubelet_config(layout: Layout, index: int) -> pathlib.Path:
    d = node_dir(layout, index)
    net = layout.node_network
    resolv = d / "resolv.conf"
    _write_if_changed(resolv, f"nameserver {net.dns_address}\n")
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": net.node_address(index),
        "healthzBindAddress": "127.0.0.1",
        "readOnlyPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(layout.pki_dir / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{containerd_socket(layout, index)}",
        # cgroup v1 here, and containerd 1.6 cannot tell the kubelet its driver.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": "/" + cgroup_name(layout, index),
        "failSwapOn": False,
        "protectKernelDefaults": False,
        "clusterDNS": [net.dns_address],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(resolv),
        # This machine's disk may be full-ish: no hard eviction, no image collection.
        "evictionHard": {
            "memory.available": "0%",
            "nodefs.available": "0%",
            "nodefs.inodesFree": "0%",
            "imagefs.available": "0%",
            "imagefs.inodesFree": "0%",
        },
        "imageGCHighThresholdPercent": 100,
        "podLogsDir": str(d / "pod-logs"),
        "volumePluginDir": str(d / "volume-plugins"),
        "serializeImagePulls": False,
        # The nodes' images are imported, and no registry here serves their names. The kubelet
        # records its own pulls by image ID (KEP-2535, beta in 1.35): once it pulls the same
        # image under another name (the release test's registry), the imported name would need
        # a pull to be verified, which fails. No pull here uses credentials.
        "imagePullCredentialsVerificationPolicy": "NeverVerify",
        "maxPods": 60,
    }
    path = d / "kubelet.yaml"
    _write_if_changed(path, json.dumps(config, indent=2))
    return path


def _write_kube_proxy_config(layout: Layout, index: int) -> pathlib.Path:
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(controlplane.component_kubeconfig(layout, "kube-proxy"))},
        "hostnameOverride": f"node-{index}",
        "bindAddress": layout.node_network.node_address(index),
        "mode": "iptables",
        "clusterCIDR": layout.node_network.pods_cidr,
        "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
        # Zero: kube-proxy leaves the (partly global) conntrack sysctls alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }
    path = node_dir(layout, index) / "kube-proxy.yaml"
    _write_if_changed(path, json.dumps(config, indent=2))
    return path


def _write_corefile(layout: Layout) -> pathlib.Path:
    net = layout.node_network
    upstreams = " ".join(hoststate.upstream_nameservers()) or "/etc/resolv.conf"
    kubeconfig = controlplane.component_kubeconfig(layout, "coredns")
    # Pod and Service addresses answer reverse lookups as on kubeadm and kind clusters: etcd
    # checks a peer's certificate names against the PTR record of its address.
    reverse_zone = f"{net.octet}.10.in-addr.arpa"
    text = f"""{CLUSTER_DOMAIN}:53 {reverse_zone}:53 {{
    bind {net.dns_address}
    errors
    kubernetes {CLUSTER_DOMAIN} {reverse_zone} {{
        kubeconfig {kubeconfig} localkube
        pods insecure
    }}
}}
.:53 {{
    bind {net.dns_address}
    errors
    forward . {upstreams}
    cache 30
}}
"""
    nodes_dir(layout).mkdir(parents=True, exist_ok=True)
    path = nodes_dir(layout) / "Corefile"
    _write_if_changed(path, text)
    return path


# --- processes ------------------------------------------------------------------------


def _start(layout: Layout, name: str, argv: list[str]) -> int:
    pid = processes.running(layout.run_dir, name)
    if pid:
        return pid
    return processes.start(layout.run_dir, layout.logs_dir, name, argv, cwd=layout.state_dir)


def _wait(layout: Layout, what: str, condition, pid_names: list[str], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        for name in pid_names:
            if not processes.running(layout.run_dir, name):
                log = layout.logs_dir / f"{name}.log"
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                raise RuntimeError(f"{name} exited while waiting for {what}; {log}:\n{tail}")
        time.sleep(0.25)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def _containerd_answers(layout: Layout, index: int) -> bool:
    return _run(["ctr", "--address", str(containerd_socket(layout, index)), "version"], check=False).returncode == 0


class ImageArchive(NamedTuple):
    name: str
    base_name: str | None
    path: pathlib.Path


def image_archives() -> list[ImageArchive]:
    """Every image e2e/images builds, as a registry would offer them; nothing is pulled.
    Built before the nodes start, once for all of them."""
    from images import recipes

    archives = []
    for recipe in recipes.all_recipes():
        try:
            archives.append(ImageArchive(recipe.name, recipe.base_name, recipes.build(recipe)))
        except recipes.Missing as missing:
            if not recipe.optional:
                raise
            print(f"localkube: {recipe.name} is not imported into the nodes: {missing}", flush=True)
    return archives


def _import_images(layout: Layout, index: int, archives: list[ImageArchive]) -> None:
    from images import containerd

    socket = containerd_socket(layout, index)
    present = containerd.image_digests(socket)
    for archive in archives:
        if present.get(archive.name) != containerd.archive_digest(archive.path):
            containerd.import_archive(socket, archive.path, archive.base_name)


def start_node(layout: Layout, index: int, archives: list[ImageArchive] | None = None) -> None:
    """`archives`: image_archives(), when the caller starts several nodes."""
    d = node_dir(layout, index)
    d.mkdir(parents=True, exist_ok=True)
    _write_cni_config(layout, index)
    config = _write_containerd_config(layout, index)
    containerd = f"containerd-node-{index}"
    _start(layout, containerd, _in_node(layout, index, ["containerd", "--config", str(config)]))
    _wait(layout, f"containerd of node-{index}", lambda: _containerd_answers(layout, index), [containerd])
    _import_images(layout, index, image_archives() if archives is None else archives)
    kubelet_config = _write_kubelet_config(layout, index)
    _start(
        layout,
        f"kubelet-node-{index}",
        _in_node(
            layout,
            index,
            [
                str(layout.binary("nodes", "kubelet")),
                f"--config={kubelet_config}",
                f"--kubeconfig={controlplane.component_kubeconfig(layout, f'kubelet-node-{index}')}",
                f"--root-dir={d / 'kubelet'}",
                f"--hostname-override=node-{index}",
                f"--node-ip={layout.node_network.node_address(index)}",
                "--v=1",
            ],
        ),
    )
    _start(
        layout,
        f"kube-proxy-node-{index}",
        _in_node(
            layout,
            index,
            [
                str(layout.binary("nodes", "kube-proxy")),
                f"--config={_write_kube_proxy_config(layout, index)}",
                "--v=1",
            ],
        ),
    )


def _scheduler_argv(layout: Layout) -> list[str]:
    kubeconfig = controlplane.component_kubeconfig(layout, "kube-scheduler")
    return [
        str(layout.binary("nodes", "kube-scheduler")),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={layout.ports.kube_scheduler}",
        "--leader-elect=false",
        "--v=1",
    ]


def coredns_binary(layout: Layout) -> pathlib.Path:
    return layout.binary("coredns", "coredns")


def dns_answers(server: str, name: str) -> bool:
    """One A query over UDP; True on an answer with at least one record."""

    header = struct.pack(">HHHHHH", 0x4C4B, 0x0100, 1, 0, 0, 0)
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1.0)
        try:
            s.sendto(header + question, (server, 53))
            reply = s.recv(512)
        except OSError:
            return False
    return len(reply) >= 12 and reply[3] & 0x0F == 0 and struct.unpack(">H", reply[6:8])[0] > 0


def api_get(layout: Layout, path: str) -> dict | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(
            controlplane.apiserver_url(layout) + path, timeout=3, context=controlplane.admin_ssl_context(layout)
        ) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def ready_nodes(layout: Layout, heard_since: dict[str, float] | None = None) -> set[str]:
    """The nodes whose Ready condition is True; a node named in `heard_since` counts only once
    its kubelet reported at or after that time (whole seconds, as the API keeps it): a kubelet
    just started again finds its Node still Ready from before it stopped."""
    listing = api_get(layout, "/api/v1/nodes") or {"items": []}
    ready = set()
    for node in listing["items"]:
        name = node["metadata"]["name"]
        for condition in node.get("status", {}).get("conditions", []):
            if condition["type"] == "Ready" and condition["status"] == "True":
                since = (heard_since or {}).get(name)
                if since is None or _api_seconds(condition.get("lastHeartbeatTime")) >= int(since):
                    ready.add(name)
    return ready


def _api_seconds(timestamp: str | None) -> float:
    """An API server timestamp (RFC 3339 in UTC, whole seconds) as seconds since the epoch."""
    if not timestamp:
        return 0.0
    return datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()


# --- up and down ----------------------------------------------------------------------


def prepare_host(layout: Layout) -> None:
    """Before the control plane starts: record the host, then the bridge the apiserver binds."""
    for recipe, binary in (("nodes", "kubelet"), ("nodes", "kube-proxy"), ("nodes", "kube-scheduler")):
        if not layout.binary(recipe, binary).exists():
            raise RuntimeError(f"{layout.binary(recipe, binary)} is missing: run `make testbin`")
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    for dead in hoststate.record(layout.checkout_id, layout.run_dir):
        print(
            f"localkube: the real nodes of checkout {dead} were killed without `down`; "
            "their hold on the host's resolver is released",
            flush=True,
        )
    _ensure_network(layout)
    _ensure_cgroups(layout)
    pki.ensure(layout.pki_dir)
    net = layout.node_network
    pki.ensure_real_nodes(layout.pki_dir, [net.bridge_address, net.kubernetes_service_ip], node_names())


def up(layout: Layout) -> None:
    """After the control plane is ready: nodes, scheduler and DNS, then waits for Ready."""
    users = ["kube-proxy", "kube-scheduler", "coredns", *(f"kubelet-{n}" for n in node_names())]
    for user in users:
        controlplane.write_kubeconfig(layout, controlplane.component_kubeconfig(layout, user), user)
    _start(layout, "kube-scheduler", _scheduler_argv(layout))
    if coredns_binary(layout).exists():
        _start(layout, "coredns", [str(coredns_binary(layout)), "-conf", str(_write_corefile(layout))])
        _wait(
            layout,
            "CoreDNS to answer",
            lambda: dns_answers(layout.node_network.dns_address, f"kubernetes.default.svc.{CLUSTER_DOMAIN}"),
            ["coredns"],
        )
        if not hoststate.point_resolver(layout.node_network.dns_address, layout.checkout_id):
            print(
                "localkube: /etc/resolv.conf belongs to another checkout's real nodes; "
                "this checkout's names resolve from pods only",
                flush=True,
            )
    else:
        print(f"localkube: {coredns_binary(layout)} is missing: no cluster DNS", flush=True)
    started = time.time()
    restarted = {name: started for name in node_names() if not processes.running(layout.run_dir, f"kubelet-{name}")}
    # The nodes start side by side: most of a node's start is importing the images into its
    # containerd (about 12 s a node on an idle machine, one after the other before).
    archives = image_archives()
    with concurrent.futures.ThreadPoolExecutor(NODE_COUNT) as pool:
        for node_start in [pool.submit(start_node, layout, index, archives) for index in range(1, NODE_COUNT + 1)]:
            node_start.result()
    components = [f"{c}-node-{i}" for i in range(1, NODE_COUNT + 1) for c in ("containerd", "kubelet")]
    _wait(
        layout,
        f"{NODE_COUNT} Ready nodes",
        lambda: len(ready_nodes(layout, restarted)) == NODE_COUNT,
        components,
        timeout=NODES_READY_TIMEOUT,
    )
    local_path.install(layout, nodes_dir(layout), node_names(), str(layout.binary("kube", "kubectl")))


def _shim_pids(layout: Layout, index: int) -> list[int]:
    needle = str(containerd_socket(layout, index)).encode()
    pids = []
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if b"containerd-shim" in (cmd := (proc / "cmdline").read_bytes()) and needle in cmd:
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


def stop_node_processes(layout: Layout, index: int) -> list[str]:
    """Kubelet, kube-proxy, the node's containers, their shims and containerd."""
    for name in (f"kube-proxy-node-{index}", f"kubelet-node-{index}"):
        processes.stop(layout.run_dir, name)
    problems = _kill_cgroup_processes(layout, index)
    for pid in _shim_pids(layout, index):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    processes.stop(layout.run_dir, f"containerd-node-{index}")
    return problems


def _remove_leftover_files(layout: Layout) -> None:
    """Files host-wide paths got from this checkout's nodes."""
    # libcni caches each sandbox's results as <network>-<sandbox id>-<interface>.
    results = pathlib.Path("/var/lib/cni/results")
    for index in range(1, NODE_COUNT + 1):
        sandboxes = node_dir(layout, index) / "containerd" / "root" / "io.containerd.grpc.v1.cri" / "sandboxes"
        for sandbox in sandboxes.glob("*"):
            for path in results.glob(f"*-{sandbox.name}-*"):
                path.unlink(missing_ok=True)
    logs = pathlib.Path("/var/log/containers")
    for link in logs.glob("*.log"):
        if link.is_symlink() and str(nodes_dir(layout)) in os.readlink(link):
            link.unlink()
    listening = pathlib.Path("/proc/net/unix").read_text()
    for socket_file in pathlib.Path("/run/containerd/s").glob("*"):
        if str(socket_file) not in listening:
            socket_file.unlink(missing_ok=True)


def down(layout: Layout) -> list[str]:
    if not hoststate.owns(layout.checkout_id) and not nodes_dir(layout).exists():
        return []
    problems = []
    for index in range(1, NODE_COUNT + 1):
        problems += stop_node_processes(layout, index)
    for name in ("coredns", "kube-scheduler"):
        processes.stop(layout.run_dir, name)
    problems += hoststate.unmount_below(nodes_dir(layout))
    for index in range(1, NODE_COUNT + 1):
        problems += _remove_cgroups(layout, index)
    problems += _remove_network(layout)
    _remove_leftover_files(layout)
    problems += hoststate.restore(layout.checkout_id)
    return problems


def status(layout: Layout) -> dict[str, str]:
    names = ["kube-scheduler", "coredns"]
    names += [f"{c}-node-{i}" for i in range(1, NODE_COUNT + 1) for c in ("containerd", "kubelet", "kube-proxy")]
    result = {
        name: (f"running (pid {pid})" if (pid := processes.running(layout.run_dir, name)) else "stopped")
        for name in names
    }
    ready = ready_nodes(layout)
    for name in node_names():
        result[f"node {name}"] = "Ready" if name in ready else "not ready"
    return result
