"""Host state that real nodes change: recorded before the first node starts, restored by
`down`, and snapshotted so that a test can compare the host before `up` and after `down`.

The record is host-wide (RECORD): the first checkout whose real nodes start writes it, later
ones join it as owners, and the last one to go down restores it, so that a checkout starting
beside another one's running nodes never takes their changes for the host's own values.

Kubelets set a few global sysctls (their protectKernelDefaults is off); the host's resolver
is pointed at the substrate's DNS; `ip netns add` may mount /run/netns; containerd, the
kubelet and the CNI plugins leave files under /run/containerd, /var/lib/cni and
/var/log/containers. Everything else (iptables, conntrack, forwarding) happens inside the
nodes' own network namespaces.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess

SYSCTLS = [
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.netfilter.nf_conntrack_max",
]
RESOLV_CONF = pathlib.Path("/etc/resolv.conf")
# Paths that host-wide tools create on first use; removed again when they were absent.
CREATED_PATHS = [
    pathlib.Path("/run/netns"),
    pathlib.Path("/run/containerd"),
    pathlib.Path("/var/lib/cni"),
    pathlib.Path("/var/log/containers"),
    pathlib.Path("/var/lib/kubelet"),
    pathlib.Path("/etc/kubernetes"),
    pathlib.Path("/run/xtables.lock"),  # iptables -w in the nodes' namespaces
]
RESOLVER_MARKER = "# localkube real nodes of checkout "
RECORD = pathlib.Path("/run/localkube/host-state.json")


def _sysctl_path(name: str) -> pathlib.Path:
    return pathlib.Path("/proc/sys") / name.replace(".", "/")


def read_sysctls() -> dict[str, str | None]:
    values = {}
    for name in SYSCTLS:
        try:
            values[name] = _sysctl_path(name).read_text().strip()
        except OSError:
            values[name] = None
    return values


def mountpoints() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]


def is_mountpoint(path: pathlib.Path) -> bool:
    return str(path) in mountpoints()


def _write(state: dict) -> None:
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(state, indent=2))


def record(owner: str) -> None:
    """Records the host as found, or joins the record another checkout made."""
    state = recorded()
    if state is None:
        state = {
            "sysctls": read_sysctls(),
            "resolv_conf": RESOLV_CONF.read_text(),
            "absent_paths": [str(p) for p in [*CREATED_PATHS, RECORD.parent] if not p.exists()],
            "run_netns_mounted": is_mountpoint(pathlib.Path("/run/netns")),
            "owners": [],
        }
    if owner not in state["owners"]:
        state["owners"].append(owner)
    _write(state)


def recorded() -> dict | None:
    try:
        return json.loads(RECORD.read_text())
    except FileNotFoundError:
        return None


def owns(owner: str) -> bool:
    state = recorded()
    return state is not None and owner in state["owners"]


def upstream_nameservers() -> list[str]:
    state = recorded()
    text = state["resolv_conf"] if state else RESOLV_CONF.read_text()
    return re.findall(r"^\s*nameserver\s+(\S+)", text, re.MULTILINE)


def point_resolver(dns_address: str, owner: str) -> bool:
    """Puts the substrate's DNS first on the host; False when another checkout holds it."""
    text = RESOLV_CONF.read_text()
    marker = RESOLVER_MARKER + owner
    if marker in text:
        return True
    if RESOLVER_MARKER in text:
        return False
    # Written in place: /etc/resolv.conf may be a bind mount that a rename would miss.
    RESOLV_CONF.write_text(f"{marker}\nnameserver {dns_address}\nsearch cluster.local\n")
    return True


def unmount_below(root: pathlib.Path) -> list[str]:
    problems = []
    prefix = str(root.resolve()) + "/"
    below = [m for m in mountpoints() if m.startswith(prefix)]
    for mount in sorted(below, key=lambda m: m.count("/"), reverse=True):
        if subprocess.run(["umount", mount], capture_output=True).returncode != 0:
            if subprocess.run(["umount", "-l", mount], capture_output=True).returncode != 0:
                problems.append(f"could not unmount {mount}")
    return problems


def restore(owner: str) -> list[str]:
    """Leaves the record; the last owner puts the host back as recorded."""
    state = recorded()
    if state is None or owner not in state["owners"]:
        return []
    if RESOLVER_MARKER + owner in RESOLV_CONF.read_text():
        RESOLV_CONF.write_text(state["resolv_conf"])
    state["owners"].remove(owner)
    if state["owners"]:
        _write(state)
        return []
    problems = []
    for name, value in state["sysctls"].items():
        if value is not None and read_sysctls().get(name) != value:
            try:
                _sysctl_path(name).write_text(value)
            except OSError as e:
                problems.append(f"could not restore {name}={value}: {e}")
    RECORD.unlink()
    for absent in map(pathlib.Path, state["absent_paths"]):
        if absent == pathlib.Path("/run/netns"):
            continue
        if absent.is_file():
            absent.unlink()
        else:
            _remove_if_empty_tree(absent)
    run_netns = pathlib.Path("/run/netns")
    if not state["run_netns_mounted"] and is_mountpoint(run_netns) and not any(run_netns.iterdir()):
        subprocess.run(["umount", str(run_netns)], capture_output=True)
    if str(run_netns) in state["absent_paths"] and run_netns.exists() and not is_mountpoint(run_netns):
        _remove_if_empty_tree(run_netns)
    return problems


def _remove_if_empty_tree(root: pathlib.Path) -> None:
    """Removes a tree holding only directories (no files another user may still need)."""
    if not root.is_dir():
        return
    for dirpath, _, files in os.walk(root):
        if files:
            return
    shutil.rmtree(root, ignore_errors=True)


def _iptables_rules() -> list[str]:
    out = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    return [re.sub(r"\[\d+:\d+\]", "", line) for line in out.splitlines() if not line.startswith("#")]


def snapshot() -> dict:
    """What `down` must give back, in a form two snapshots can be compared by."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    routes = subprocess.run(["ip", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    return {
        "sysctls": read_sysctls(),
        "iptables": _iptables_rules(),
        "mounts": sorted(mountpoints()),
        "links": sorted(re.findall(r"^\d+: ([^:@]+)", links, re.MULTILINE)),
        "routes": sorted(routes.splitlines()),
        "resolv_conf": RESOLV_CONF.read_text(),
        "netns": sorted(p.name for p in pathlib.Path("/run/netns").glob("*")),
        "paths": {str(p): p.exists() for p in [*CREATED_PATHS, RECORD]},
        "cgroups": sorted(str(p) for p in pathlib.Path("/sys/fs/cgroup").glob("*/localkube-*")),
    }
