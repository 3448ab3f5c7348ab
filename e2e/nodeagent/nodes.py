"""The Nodes this agent plays: registration, Lease renewal and status heartbeats, and
the "lost" state used by the node-loss fault (lease and status stop, node goes NotReady)."""

from __future__ import annotations

import asyncio
import logging
import os
import platform
from urllib.parse import quote

from nodeagent import clock, ipam
from nodeagent.kube import Kube, is_status

log = logging.getLogger(__name__)

NODE_PREFIX = "localkube-node-"
AGENT_LABEL = "localkube.local/node-agent"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION = 40
RENEW_INTERVAL = 10.0
STATUS_INTERVAL = 60.0
ARCHES = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def node_name(index: int) -> str:
    return f"{NODE_PREFIX}{index}"


class Node:
    def __init__(self, index: int, ip: str):
        self.index = index
        self.name = node_name(index)
        self.ip = ip
        self.uid: str | None = None
        self.ready_since = clock.rfc3339()
        self.up = asyncio.Event()
        self.up.set()

    @property
    def lost(self) -> bool:
        return not self.up.is_set()

    @property
    def labels(self) -> dict[str, str]:
        return {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": ARCHES.get(platform.machine(), platform.machine()),
            AGENT_LABEL: "true",
        }


class NodeSet:
    def __init__(self, kube: Kube, count: int, pod_octet: int, agent_port: int):
        self.kube = kube
        self.agent_port = agent_port
        self.nodes = {n.name: n for n in (Node(i, ipam.node_ip(pod_octet, i)) for i in range(count))}
        self.kubelet_version = "v0.0.0"
        self._wake = asyncio.Event()

    def __contains__(self, name: str | None) -> bool:
        return name in self.nodes

    def get(self, name: str) -> Node:
        return self.nodes[name]

    def available(self) -> list[Node]:
        return [n for n in self.nodes.values() if not n.lost]

    # --- registration -----------------------------------------------------------------

    async def register(self) -> None:
        version = await self.kube.get("/version")
        self.kubelet_version = version.get("gitVersion", self.kubelet_version)
        for node in self.nodes.values():
            existing = await self.kube.get_or_none(f"/api/v1/nodes/{node.name}")
            if existing is None:
                existing = await self.kube.create(
                    "/api/v1/nodes",
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {"name": node.name, "labels": node.labels},
                    },
                )
                log.info("registered node %s (%s)", node.name, node.ip)
            else:
                existing = await self.kube.patch(f"/api/v1/nodes/{node.name}", {"metadata": {"labels": node.labels}})
                for cond in (existing.get("status") or {}).get("conditions") or []:
                    if cond["type"] == "Ready" and cond["status"] == "True":
                        node.ready_since = cond.get("lastTransitionTime") or node.ready_since
            node.uid = existing["metadata"]["uid"]
            await self._post_status(node)
            await self._renew_lease(node)
        await self._remove_surplus()

    async def _remove_surplus(self) -> None:
        listing = await self.kube.get("/api/v1/nodes", labelSelector=f"{AGENT_LABEL}=true")
        for item in listing.get("items") or []:
            name = item["metadata"]["name"]
            if name not in self.nodes:
                log.info("removing node %s (LOCALKUBE_NODES is %d)", name, len(self.nodes))
                try:
                    await self.kube.delete(f"/api/v1/nodes/{name}")
                except Exception as e:
                    log.warning("could not remove node %s: %s", name, e)

    # --- heartbeats -------------------------------------------------------------------

    async def run(self) -> None:
        since_status = 0.0
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), RENEW_INTERVAL)
            except TimeoutError:
                pass
            forced = self._wake.is_set()
            self._wake.clear()
            since_status += RENEW_INTERVAL
            for node in self.available():
                try:
                    await self._renew_lease(node)
                    if forced or since_status >= STATUS_INTERVAL:
                        await self._post_status(node)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.warning("heartbeat of %s failed: %s", node.name, e)
            if since_status >= STATUS_INTERVAL:
                since_status = 0.0

    def lose(self, name: str) -> None:
        self.nodes[name].up.clear()
        log.info("node %s lost (fault injection): lease and status stop", name)

    def restore(self, name: str) -> None:
        node = self.nodes[name]
        if node.lost:
            node.ready_since = clock.rfc3339()
            node.up.set()
            self._wake.set()
            log.info("node %s restored", name)

    async def _renew_lease(self, node: Node) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{quote(node.name)}"
        spec = {"holderIdentity": node.name, "leaseDurationSeconds": LEASE_DURATION, "renewTime": clock.micro_time()}
        try:
            await self.kube.patch(path, {"spec": spec})
        except Exception as e:
            if not is_status(e, 404):
                raise
            await self.kube.create(
                f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": node.name,
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}],
                    },
                    "spec": spec,
                },
            )

    async def _post_status(self, node: Node) -> None:
        await self.kube.patch(f"/api/v1/nodes/{node.name}/status", {"status": self._status(node)})

    def _status(self, node: Node) -> dict:
        now = clock.rfc3339()

        def condition(kind: str, status: str, reason: str, message: str) -> dict:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": node.ready_since,
            }

        resources = _capacity()
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                condition(
                    "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"
                ),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status (localkube node agent)"),
            ],
            "addresses": [{"type": "InternalIP", "address": node.ip}, {"type": "Hostname", "address": node.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.agent_port}},
            "nodeInfo": {
                "machineID": node.name,
                "systemUUID": node.name,
                "bootID": node.ready_since,
                "kernelVersion": platform.release(),
                "osImage": "localkube process node",
                "containerRuntimeVersion": "localkube://1",
                "kubeletVersion": self.kubelet_version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": ARCHES.get(platform.machine(), platform.machine()),
            },
        }


def _capacity() -> dict[str, str]:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    disk = os.statvfs("/")
    return {
        "cpu": str(os.cpu_count() or 1),
        "memory": f"{memory // 1024}Ki",
        "pods": "110",
        "ephemeral-storage": f"{disk.f_blocks * disk.f_frsize // 1024}Ki",
    }
