"""`make bench BENCH=pitr`: a point-in-time restore of BENCH_PITR_REVISIONS (250,000) revisions on
the real nodes, end to end (issue 44: at most 60 s). Runs only when named: the writes take minutes.

A 3-member cluster (plaintext, so that the load's client needs no certificate) gets a
continuous EtcdBackup; once its first full snapshot is stored, the continuous bench's Mix
(puts of 100 B to 2 KiB values, some under session leases, deletes, transactions of several
changes, sessions ending) is written as fast as the cluster takes it until it made that many
revisions after the snapshot. Once the chain holds the last revision, an EtcdRestore to that
revision into a new 3-member cluster is timed from apply to Completed (the replay pod's fetch,
restore, apply into the backend, scratch member, snapshot and upload; then the restore of the
replayed snapshot into every member), then to the new cluster's Available, and the restored
keys are compared with the source's, key by key."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

from bench.continuous import Mix
from bench.scenarios import Bench
from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.clients.etcd.replay import ReplayMember
from etcd_operator.core.timefmt import parse_time
from tests.support.backups import apply_backup, apply_restore, get_backup, wait_phase
from tests.support.clusters import PLAINTEXT, apply_cluster, member_endpoints, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.s3 import s3_storage_spec
from tests.support.waiting import wait_for

REVISIONS = int(os.environ.get("BENCH_PITR_REVISIONS", "250000"))
IN_FLIGHT = 64  # writes outstanding at once, over one client per member
GOAL_SECONDS = 60.0  # issue 44: apply to Completed
SOURCE, BACKUP, RESTORE, TARGET = "pitr-src", "pitr", "pitr-250k", "pitr-at"


async def write_mix(endpoints: list[str], revisions: int) -> tuple[int, int, float]:
    """The Mix until the store made `revisions` more revisions: (first, last revision, seconds)."""
    clients = [ReplayMember(e, timeout=10) for e in endpoints]
    mix = Mix(seed=250)
    await mix.begin_sessions(clients[0])
    first = await clients[0].revision()
    target, last, written = first + revisions, first, 0
    started = time.monotonic()

    async def worker() -> None:
        nonlocal last, written
        while last < target:
            i, written = written, written + 1
            try:
                last = max(last, await mix.write(clients[i % len(clients)], i))
            except EtcdError as e:
                if not e.unavailable:
                    raise

    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    seconds = time.monotonic() - started
    last = max(last, await clients[0].revision())
    for client in clients:
        await client.close()
    return first, last, seconds


class ReplayPodWatch:
    """Reads the replay pod until it is removed: each container's seconds from start to end
    (the kubelet's own timestamps), and the apply container's own account of the replay."""

    def __init__(self, namespace: str, name: str):
        self.namespace, self.name = namespace, name
        self.pod: dict = {}
        self.apply_log = ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> ReplayPodWatch:
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._done.is_set():
            got = kubectl("get", "pod", self.name, "-n", self.namespace, "-o", "json", check=False)
            if got.returncode == 0:
                self.pod = json.loads(got.stdout)
                logs = kubectl("logs", self.name, "-n", self.namespace, "-c", "apply", check=False)
                if logs.returncode == 0 and logs.stdout.strip():
                    self.apply_log = logs.stdout
            time.sleep(0.5)

    def stop(self) -> str:
        self._done.set()
        self._thread.join()
        status = self.pod.get("status") or {}
        parts = []
        for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            ended = (container.get("state") or {}).get("terminated") or {}
            if ended.get("startedAt") and ended.get("finishedAt"):
                seconds = parse_time(ended["finishedAt"]) - parse_time(ended["startedAt"])
                parts.append(f"{container['name']} {seconds:.0f} s")
        replayed = [line for line in self.apply_log.splitlines() if "replayed" in line]
        return ", ".join(parts) + (f"; {replayed[-1].strip()}" if replayed else "")


async def keys(endpoints: list[str], revision: int = 0) -> list[tuple[bytes, bytes, int]]:
    async with ReplayMember(endpoints[0], timeout=60) as client:
        return await client.key_values(revision)


def run(bench: Bench) -> None:
    namespace = bench.namespace
    print(f"\npoint-in-time restore of {REVISIONS:,} revisions on the real nodes (make bench BENCH=pitr)", flush=True)
    apply_cluster(namespace, SOURCE, {**PLAINTEXT, "size": 3, "storage": {"size": "4Gi"}}, raft=None)
    wait_healthy(namespace, SOURCE, 3)
    storage = s3_storage_spec(bench.layout, bench.s3_prefix)
    # No new full snapshot (and chain) while the load runs: the restore replays all of it.
    continuous = {"enabled": True, "fullSnapshotAfter": {"events": 50 * REVISIONS, "bytes": 64 << 30}}
    apply_backup(namespace, BACKUP, {"clusterRef": {"name": SOURCE}, "storage": storage, "continuous": continuous})
    wait_for(lambda: get_backup(namespace, BACKUP)["status"].get("lastSuccessfulTime"), 300, what="a full snapshot")
    endpoints = member_endpoints(namespace, SOURCE)
    first, last, seconds = asyncio.run(write_mix(endpoints, REVISIONS))
    bench.row(
        "pitr: the Mix written",
        f"{last - first:,} revisions",
        f"in {seconds:.0f} s ({(last - first) / seconds:,.0f}/s)",
    )

    def caught_up() -> bool:
        continuous = get_backup(namespace, BACKUP)["status"].get("continuous") or {}
        return int(continuous.get("lastRevision") or 0) >= last

    wait_for(caught_up, 600, interval=1, what=f"the chain up to revision {last}")
    since = time.time()
    started = time.monotonic()
    pod = ReplayPodWatch(namespace, f"{RESTORE}-pitr").start()
    apply_restore(
        namespace,
        RESTORE,
        {
            "source": {"backupRef": {"name": BACKUP}, "pointInTime": {"revision": last}},
            "target": {"newCluster": {"name": TARGET, "spec": {**PLAINTEXT, "size": 3, "storage": {"size": "4Gi"}}}},
        },
    )
    completed = wait_phase(namespace, RESTORE, "Completed", timeout=1800)
    to_completed = time.monotonic() - started
    wait_healthy(namespace, TARGET, 3)
    to_available = time.monotonic() - started
    point = completed["status"]["pointInTime"]
    met = "met" if to_completed <= GOAL_SECONDS else "NOT met"
    bench.row(
        "pitr: apply to Completed",
        f"{to_completed:.1f} s",
        f"(goal <= {GOAL_SECONDS:.0f} s: {met}; {point.get('revisionsApplied', 0):,} revisions replayed onto "
        f"the base at {point['baseRevision']:,}, {point.get('segments', 0)} segments)",
    )
    bench.row("pitr: apply to the new cluster Available", f"{to_available:.1f} s")
    print(f"  steps: {bench._step_timeline(RESTORE, since)}", flush=True)
    print(f"  replay pod: {pod.stop()}", flush=True)
    restored, source = asyncio.run(keys(member_endpoints(namespace, TARGET))), asyncio.run(keys(endpoints, last))
    if [(k, v) for k, v, _ in restored] != [(k, v) for k, v, _ in source]:
        raise RuntimeError(f"the restored cluster holds {len(restored)} keys, the source at {last} {len(source)}")
    bench.row("pitr: restored keys equal the source's at the revision", f"{len(restored):,} keys")
    kubectl_json("get", "etcdrestore", RESTORE, "-n", namespace)  # still readable: nothing was cleaned early
