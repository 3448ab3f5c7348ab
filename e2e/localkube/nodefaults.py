"""Node faults for real nodes (`up`): stop a node, partition it, heal it.

stop(layout, "node-2")       kubelet, kube-proxy, containers and containerd die, as at power-off
partition(layout, "node-2")  the node drops every packet on its link (inside its own namespace)
heal(layout, "node-2")       undoes both: the partition goes, stopped processes start again
"""

from __future__ import annotations

from localkube import processes, realnodes
from localkube.layout import Layout

PARTITION_CHAIN = "LOCALKUBE-PARTITION"
HOOKS = [("INPUT", "-i"), ("FORWARD", "-i"), ("FORWARD", "-o"), ("OUTPUT", "-o")]


def _index(node: str) -> int:
    if node not in realnodes.node_names():
        raise ValueError(f"no node {node!r}; nodes are {', '.join(realnodes.node_names())}")
    return int(node.rsplit("-", 1)[1])


def _iptables(layout: Layout, index: int, *args: str, check: bool = True):
    return realnodes._run(realnodes._in_node(layout, index, ["iptables", "-w", *args]), check=check)


def stop(layout: Layout, node: str) -> list[str]:
    """Returns problems (processes that would not die), empty when the node is down."""
    return realnodes.stop_node_processes(layout, _index(node))


def stopped(layout: Layout, node: str) -> bool:
    index = _index(node)
    return not any(processes.running(layout.run_dir, f"{c}-node-{index}") for c in ("containerd", "kubelet"))


def partition(layout: Layout, node: str) -> None:
    index = _index(node)
    if partitioned(layout, node):
        return
    _iptables(layout, index, "-N", PARTITION_CHAIN, check=False)
    _iptables(layout, index, "-F", PARTITION_CHAIN)
    _iptables(layout, index, "-A", PARTITION_CHAIN, "-j", "DROP")
    for chain, direction in HOOKS:
        _iptables(layout, index, "-I", chain, "1", direction, "eth0", "-j", PARTITION_CHAIN)


def partitioned(layout: Layout, node: str) -> bool:
    return _iptables(layout, _index(node), "-S", PARTITION_CHAIN, check=False).returncode == 0


def heal(layout: Layout, node: str) -> None:
    index = _index(node)
    if partitioned(layout, node):
        for chain, direction in HOOKS:
            _iptables(layout, index, "-D", chain, direction, "eth0", "-j", PARTITION_CHAIN, check=False)
        _iptables(layout, index, "-F", PARTITION_CHAIN)
        _iptables(layout, index, "-X", PARTITION_CHAIN)
    if stopped(layout, node):
        realnodes.start_node(layout, index)
