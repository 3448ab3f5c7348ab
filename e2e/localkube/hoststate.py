"""Host state that real nodes change: recorded before the first node starts, restored by
`down`, and snapshotted so that a test can compare the host before `up` and after `down`.

The record is host-wide (RECORD): the first checkout whose real nodes start writes it, later
ones join it as owners, and the last one to go down restores it, so that a checkout starting
beside another one's running nodes never takes their changes for the host's own values. An
owner whose processes were all killed (a CI job cut off, a machine stopped) never runs its
`down`: the next `up` finds it dead, drops it and takes back the resolver it held.

The host's resolver keeps its own nameservers after the substrate's DNS, so that a killed
substrate never leaves the host unable to resolve names (pip, apt) while it waits for that.

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

from localkube import processes
from localkube.layout import CLUSTER_DOMAIN

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


def record(owner: str, run_dir: pathlib.Path) -> list[str]:
    """Records the host as found, or joins the record another checkout made. Owners found dead
    are dropped first (and returned); `run_dir` holds the pid files that show this one alive."""
    state = recorded()
    if state is None:
        state = {
            "sysctls": read_sysctls(),
            "resolv_conf": _host_resolver_text(RESOLV_CONF.read_text()),
            "absent_paths": [str(p) for p in [*CREATED_PATHS, RECORD.parent] if not p.exists()],
            "run_netns_mounted": is_mountpoint(pathlib.Path("/run/netns")),
            "owners": {},
        }
    dead = drop_dead_owners(state)
    # The recording process shows the owner alive until its first pid file is written.
    state["owners"][owner] = {"pid": os.getpid(), "run_dir": str(run_dir)}
    _write(state)
    return dead


def recorded() -> dict | None:
    try:
        state = json.loads(RECORD.read_text())
    except FileNotFoundError:
        return None
    if isinstance(state["owners"], list):  # a record from before owners were tracked: no way to
        state["owners"] = {owner: {} for owner in state["owners"]}  # tell them alive
    return state


def owns(owner: str) -> bool:
    state = recorded()
    return state is not None and owner in state["owners"]


def owner_alive(owner: dict) -> bool:
    """The recording process or any process of the owner's pid files still runs."""
    pids = [owner.get("pid")]
    if owner.get("run_dir"):
        run_dir = pathlib.Path(owner["run_dir"])
        pids += [processes.read_pid(run_dir, pid_file.stem) for pid_file in run_dir.glob("*.pid")]
    return any(processes.alive(pid) for pid in pids)


def drop_dead_owners(state: dict) -> list[str]:
    """Removes owners with no live process from `state`, then gives back the resolver when no
    remaining owner holds it."""
    dead = [name for name, owner in state["owners"].items() if not owner_alive(owner)]
    for name in dead:
        del state["owners"][name]
    text = RESOLV_CONF.read_text()
    if RESOLVER_MARKER in text and not any(RESOLVER_MARKER + name in text for name in state["owners"]):
        RESOLV_CONF.write_text(state["resolv_conf"])
    return dead


def _host_resolver_text(text: str) -> str:
    """The host's own resolver file: as found, or with a substrate's lines taken out when a
    killed one left them and no record survived (/run is emptied by a reboot, /etc is not)."""
    if RESOLVER_MARKER not in text:
        return text
    lines = text.splitlines()
    marker_at = next(i for i, line in enumerate(lines) if line.startswith(RESOLVER_MARKER))
    substrate_lines = set(lines[marker_at : marker_at + 2])  # the marker and the substrate's DNS
    kept = []
    for line in lines:
        if line in substrate_lines:
            continue
        if line.startswith("search "):
            domains = [d for d in line.split()[1:] if d != CLUSTER_DOMAIN]
            if not domains:
                continue
            line = "search " + " ".join(domains)
        kept.append(line)
    return "\n".join(kept) + "\n"


def upstream_nameservers() -> list[str]:
    state = recorded()
    text = state["resolv_conf"] if state else RESOLV_CONF.read_text()
    return re.findall(r"^\s*nameserver\s+(\S+)", text, re.MULTILINE)


def substrate_resolver_text(host_text: str, dns_address: str, owner: str) -> str:
    """The substrate's DNS first, then the host's own nameservers (glibc reads three at most),
    options and search domains, after the substrate's."""
    nameservers = re.findall(r"^\s*nameserver\s+\S+.*$", host_text, re.MULTILINE)[:2]
    options = re.findall(r"^\s*options\s.*$", host_text, re.MULTILINE)
    searches = re.findall(r"^\s*(?:search|domain)\s+(.*)$", host_text, re.MULTILINE)
    domains = [CLUSTER_DOMAIN, *(searches[-1].split() if searches else [])]
    lines = [
        RESOLVER_MARKER + owner,
        f"nameserver {dns_address}",
        *nameservers,
        *options,
        "search " + " ".join(dict.fromkeys(domains)),
    ]
    return "\n".join(lines) + "\n"


def point_resolver(dns_address: str, owner: str) -> bool:
    """Puts the substrate's DNS first on the host; False when another checkout holds it."""
    text = RESOLV_CONF.read_text()
    marker = RESOLVER_MARKER + owner
    if marker in text:
        return True
    if RESOLVER_MARKER in text:
        return False
    state = recorded()
    host_text = state["resolv_conf"] if state else text
    # Written in place: /etc/resolv.conf may be a bind mount that a rename would miss.
    RESOLV_CONF.write_text(substrate_resolver_text(host_text, dns_address, owner))
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
    """Leaves the record; the last live owner puts the host back as recorded."""
    state = recorded()
    if state is None or owner not in state["owners"]:
        return []
    del state["owners"][owner]
    drop_dead_owners(state)  # and gives back the resolver, held by this owner or a dead one
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
    for _, _, files in os.walk(root):
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
