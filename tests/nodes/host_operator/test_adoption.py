"""Adoption of a running cluster on the real nodes, with the operator as a process on the
host: three plain etcd processes on the host (as a user's static cluster of VMs would be),
plaintext, listening on the nodes' bridge address, which pods reach. A client writes
sequential keys through every endpoint, old and new, while an EtcdCluster of size 3 adopts
the cluster and then removes the old members. Every acknowledged write must be found, the
cluster ID must not change, and no write may wait longer than one leader election.

Plaintext (tls.enabled false): with TLS the user would bring member and operator
certificates signed by the running cluster's CA (docs/operations/adoption.md); the
transport plays no part in the handover this test checks."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import time

import pytest

from etcd_operator.clients.etcd.client import EtcdError, EtcdMemberClient
from localkube import layout as localkube_layout
from tests.support import measured, nodes_resolver
from tests.support.clusters import (
    apply_cluster,
    condition,
    events,
    get_cluster,
    is_healthy,
    member_endpoints,
    patch_spec,
    wait_condition,
)
from tests.support.etcd_probes import LoopThread
from tests.support.waiting import holds_throughout, wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.lane6]

CLUSTER = "adopt"
VERSION = "3.6.16"  # the testbin's etcd 3.6, the same minor spec.version names
# etcd's default election timeout is 1 s; a follower waits up to twice that (raft
# randomises it in [timeout, 2 x timeout)) before it campaigns. One more second covers the
# writer's own timeout on a member that stopped answering mid-request.
ELECTION_TIMEOUT = 1.0
LONGEST_GAP_ALLOWED = 2 * ELECTION_TIMEOUT + 1.0


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class StaticCluster:
    """Three etcd processes on the host, as `etcd --initial-cluster-state new` starts them."""

    def __init__(self, host: str, root, binary, resolver: str):
        self.host = host
        self.resolver = resolver  # the nodes' DNS: the members' peer names resolve as in pods
        self.names = ("static0", "static1", "static2")
        self.ports = {n: (free_port(host), free_port(host)) for n in self.names}
        self.root = root
        self.binary = binary
        self.processes: list[subprocess.Popen] = []
        self.logs: list = []

    def client_urls(self) -> list[str]:
        return [f"http://{self.host}:{self.ports[n][0]}" for n in self.names]

    def start(self) -> StaticCluster:
        initial = ",".join(f"{n}=http://{self.host}:{self.ports[n][1]}" for n in self.names)
        for name in self.names:
            client, peer = self.ports[name]
            log = open(self.root / f"{name}.log", "w")
            self.logs.append(log)
            self.processes.append(
                subprocess.Popen(
                    nodes_resolver.command(
                        self.root / f"{name}-resolv.conf",
                        self.resolver,
                        [
                            str(self.binary),
                            f"--name={name}",
                            f"--data-dir={self.root / name}",
                            f"--listen-client-urls=http://{self.host}:{client}",
                            f"--advertise-client-urls=http://{self.host}:{client}",
                            f"--listen-peer-urls=http://{self.host}:{peer}",
                            f"--initial-advertise-peer-urls=http://{self.host}:{peer}",
                            f"--initial-cluster={initial}",
                            "--initial-cluster-state=new",
                            "--initial-cluster-token=static",
                        ],
                    ),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        return self

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait(10)
        for log in self.logs:
            log.close()


class SequentialWriter(LoopThread):
    """Writes /w/<n> = n in sequence through the endpoints, moving to the next one at the
    first error; remembers the writes etcd acknowledged and the longest time between two."""

    def __init__(self, endpoints, timeout: float = 1.0):
        super().__init__()
        self.endpoints = endpoints  # () -> ["host:port", ...], read again every second
        self.timeout = timeout
        self.acked: list[int] = []
        self.failed = 0
        self.longest_gap = 0.0

    async def main(self) -> None:
        clients: dict[str, EtcdMemberClient] = {}
        endpoints: list[str] = []
        refreshed, last_ack, sequence, turn = 0.0, time.monotonic(), 0, 0
        try:
            while not self.stopping:
                if time.monotonic() - refreshed > 1.0:
                    endpoints = await asyncio.to_thread(self.endpoints) or endpoints
                    refreshed = time.monotonic()
                endpoint = endpoints[turn % len(endpoints)]
                client = clients.setdefault(endpoint, EtcdMemberClient(endpoint, timeout=self.timeout))
                try:
                    await client.put(f"/w/{sequence:08}".encode(), str(sequence).encode())
                except EtcdError:
                    self.failed += 1
                    turn += 1  # the next endpoint, at once
                    continue
                now = time.monotonic()
                self.longest_gap = max(self.longest_gap, now - last_ack)
                self.acked.append(sequence)
                last_ack, sequence = now, sequence + 1
                turn += 1  # spread the writes over every endpoint
                await asyncio.sleep(0.01)
        finally:
            for client in clients.values():
                await client.close()


def found_writes(endpoints: list[str]) -> set[int]:
    """Every /w/ key, read through an own member with the testbin's etcdctl (a linearizable read)."""
    etcdctl = localkube_layout.testbin_dir() / "etcd-3.6" / "etcdctl"
    listed = subprocess.run(
        [str(etcdctl), f"--endpoints={endpoints[0]}", "get", "/w/", "--prefix", "--keys-only", "-w", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    kvs = json.loads(listed.stdout).get("kvs") or []
    return {int(base64.b64decode(kv["key"]).decode().removeprefix("/w/")) for kv in kvs}


def event_time(event: dict) -> str:
    """When it happened, to the microsecond where the event says (eventTime)."""
    return event.get("eventTime") or event.get("lastTimestamp") or event["metadata"]["creationTimestamp"]


def member_list(endpoint: str) -> tuple[int, list]:
    async def ask():
        async with EtcdMemberClient(endpoint, timeout=5.0) as client:
            return await client.member_list()

    return asyncio.run(ask())


def test_a_running_cluster_is_adopted_and_its_old_members_removed_without_downtime(
    real_nodes, namespace, operator, tmp_path
):
    host = real_nodes.node_network.bridge_address
    etcd = localkube_layout.testbin_dir() / "etcd-3.6" / "etcd"
    static = StaticCluster(host, tmp_path, etcd, real_nodes.node_network.dns_address).start()
    writer = None
    try:
        foreign = [u.removeprefix("http://") for u in static.client_urls()]
        wait_for(lambda: member_list(foreign[0]), 30, what="the static cluster answers")
        cluster_id, _ = member_list(foreign[0])

        writer = SequentialWriter(lambda: foreign + member_endpoints(namespace, CLUSTER)).start()
        wait_for(lambda: len(writer.acked) > 20, 30, what="the workload writes")

        apply_cluster(
            namespace,
            CLUSTER,
            {
                "size": 3,
                "version": VERSION,
                "storage": {"size": "1Gi"},
                # The ID the plain etcd processes answer with: the adoption is pinned to it.
                "adoption": {"endpoints": static.client_urls(), "clusterID": f"{cluster_id:x}"},
            },
            raft=None,  # the adopted processes' (etcd's own): their election timeout bounds the gap
        )

        def six_voters() -> bool:
            _, members = member_list(foreign[0])
            return len(members) == 6 and not any(m.is_learner for m in members)

        wait_for(six_voters, 240, interval=1.0, what="3 own members join as voters")
        assert get_cluster(namespace, CLUSTER)["status"]["adoption"]["clusterID"] == f"{cluster_id:x}"

        patch_spec(namespace, CLUSTER, {"adoption": {"removeForeignMembers": True}})
        adopted = wait_condition(namespace, CLUSTER, "Adopted", "True", timeout=180)
        assert adopted["status"]["adoption"]["completed"] is True
        own = member_endpoints(namespace, CLUSTER)
        listed_id, members = member_list(own[0])
        assert listed_id == cluster_id, "the adopted cluster has another ID"
        assert sorted(m.name for m in members) == [f"{CLUSTER}-{i}" for i in range(3)]

        # A restarted operator reads the completed adoption back: an ordinary cluster, left as it is.
        operator.kill()
        operator.start()

        def still_adopted() -> None:
            obj = get_cluster(namespace, CLUSTER)
            assert is_healthy(obj, 3) and condition(obj, "Adopted")["status"] == "True", obj["status"]
            assert sorted(m["name"] for m in obj["status"]["members"]) == [f"{CLUSTER}-{i}" for i in range(3)]

        holds_throughout(still_adopted, 8, what="the adopted cluster after an operator restart")
        writer.stop()
        acked, writer_done = set(writer.acked), writer
        writer = None
        found = found_writes([f"http://{own[0]}"])
        steps = [e["reason"] for e in sorted(events(namespace, CLUSTER), key=event_time)]
        print(f"\nadoption events: {', '.join(steps)}")
        measured.report(
            f"adoption figures: longest time without a successful write {writer_done.longest_gap:.3f}s "
            f"(bound {LONGEST_GAP_ALLOWED:.1f}s), writes acknowledged {len(acked)}, writes found "
            f"{len(found & acked)} of them ({len(found)} keys in all), failed attempts {writer_done.failed}"
        )
        assert acked <= found, f"acknowledged writes lost: {sorted(acked - found)[:20]}"
        assert writer_done.longest_gap < LONGEST_GAP_ALLOWED
    finally:
        if writer is not None:
            writer.stop()
        static.stop()
