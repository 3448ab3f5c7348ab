"""Growing and replacing a member after a CA rotation, under load (`make bench BENCH=rotation`,
issue 41: "in the same time as without the rotation, within 2x, side by side in one run").

Two TLS clusters of 3 members on the real nodes, in the bench's namespace, created together;
then each takes its turn under the same client load (tests/support/kv_workload.py: 8 clients,
puts and linearizable gets, each client re-reading the client Secret every second, as a client
that follows a rotation does). In the rotated cluster's turn the CA is rotated first
(`etcd.operator.dev/rotate-ca`, until status.tls.rotated.CA says so). Then, in both turns:
the load runs until the leader has applied MAX_APPLY_GAP + 1000 entries (so a new member
joins from a snapshot above etcd's apply gap, as in the reported hang); the cluster grows
3 -> 5, timed from the patch to healthy; a member loses its disk and its etcd container is
killed, timed until a new member (by id) makes the cluster healthy again. Which cluster goes
first alternates over ROTATION_RUNS runs (default 1). Nothing asserts: it prints each time,
the ratios, the load the cluster served during each action, and the clients' history verdict."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
import time

from etcd_operator.clients.etcd.client import ClientTLS, EtcdMemberClient
from etcd_operator.core.cluster import learners, naming
from localkube import containerfaults
from tests.support.clusters import FAST_RECOVERY, apply_cluster, get_cluster, is_healthy, member_endpoints, patch_spec
from tests.support.history import check, unknown_outcomes
from tests.support.kubectl import kubectl, secret_bytes
from tests.support.kv_workload import KeyValueWorkload
from tests.support.waiting import wait_for

RUNS = int(os.environ.get("BENCH_ROTATION_RUNS", "1"))
LOAD = {"clients": 8, "keys": 8, "pause": 0.01}  # as tests/nodes/host_operator/test_linearizability.py
TIMEOUT = 600.0


@dataclasses.dataclass
class Turn:
    cluster: str
    rotated: bool
    rotation: float = 0.0
    grow: float = 0.0
    replace: float = 0.0
    grow_rate: float = 0.0  # successful operations a second during the grow
    replace_rate: float = 0.0
    verdict: str = ""


def _credentials(namespace: str, cluster: str) -> ClientTLS:
    data = secret_bytes(namespace, f"{cluster}-client-tls")
    return ClientTLS(data["ca.crt"], data["tls.crt"], data["tls.key"], naming.client_service_host(cluster, namespace))


def _leader_applied_index(namespace: str, cluster: str) -> int:
    async def call() -> int:
        tls = _credentials(namespace, cluster)
        for endpoint in member_endpoints(namespace, cluster):
            async with EtcdMemberClient(endpoint, timeout=3, tls=tls) as client:
                status = await client.status()
            if status.leader_id == status.member_id:
                return status.raft_applied_index
        return 0

    try:
        return asyncio.run(call())
    except Exception:  # a member restarting: ask again at the next poll
        return 0


def _healthy(namespace: str, cluster: str, size: int, gone: frozenset[str] = frozenset()) -> bool:
    obj = get_cluster(namespace, cluster)
    return is_healthy(obj, size) and gone.isdisjoint(m["id"] for m in obj["status"]["members"])


def _timed(namespace: str, cluster: str, act, size: int, gone: frozenset[str] = frozenset()) -> float:
    start = time.monotonic()
    act()
    wait_for(
        lambda: _healthy(namespace, cluster, size, gone),
        TIMEOUT,
        interval=0.5,
        what=f"{cluster} healthy with {size} members",
    )
    return time.monotonic() - start


def _turn(bench, cluster: str, rotate: bool) -> Turn:
    namespace = bench.namespace
    turn = Turn(cluster, rotate)
    workload = KeyValueWorkload(
        lambda: member_endpoints(namespace, cluster), lambda: _credentials(namespace, cluster), **LOAD
    ).start()
    try:
        wait_for(lambda: workload.successes() >= 50, 60, what="the load to get going")
        if rotate:
            start = time.monotonic()
            kubectl("annotate", "etcdcluster", cluster, "-n", namespace, f"{naming.ANNOTATION_ROTATE_CA}=bench")
            wait_for(
                lambda: (
                    ((get_cluster(namespace, cluster).get("status") or {}).get("tls") or {})
                    .get("rotated", {})
                    .get("CA")
                    == "bench"
                ),
                TIMEOUT,
                interval=1.0,
                what=f"{cluster}'s CA rotation",
            )
            turn.rotation = time.monotonic() - start
            wait_for(lambda: _healthy(namespace, cluster, 3), TIMEOUT, interval=1.0, what=f"{cluster} healthy")
        wait_for(
            lambda: _leader_applied_index(namespace, cluster) > learners.MAX_APPLY_GAP + 1000,
            TIMEOUT,
            interval=5.0,
            what=f"{cluster}'s leader to apply {learners.MAX_APPLY_GAP + 1000} entries",
        )
        start_ns = time.monotonic_ns()
        turn.grow = _timed(namespace, cluster, lambda: patch_spec(namespace, cluster, {"size": 5}), 5)
        grown_ns = time.monotonic_ns()
        victim = sorted(m["name"] for m in get_cluster(namespace, cluster)["status"]["members"])[-1]
        victim_ids = {m["id"] for m in get_cluster(namespace, cluster)["status"]["members"] if m["name"] == victim}

        def lose_member() -> None:
            containerfaults.lose_member_disk(bench.layout, namespace, victim, "etcd")

        turn.replace = _timed(namespace, cluster, lose_member, 5, frozenset(victim_ids))
        replaced_ns = time.monotonic_ns()
        turn.grow_rate = workload.rate(start_ns, grown_ns)
        turn.replace_rate = workload.rate(grown_ns, replaced_ns)
    finally:
        workload.stop()
    verdict = check(workload.operations)
    turn.verdict = (
        f"{'linearizable' if verdict.linearizable else 'NOT linearizable (status ' + str(verdict.status) + ')'}, "
        f"{len(workload.operations)} operations, {unknown_outcomes(workload.operations)} of unknown outcome, "
        f"failed calls by code {dict(workload.errors)}"
    )
    print(
        f"  {cluster}{' (CA rotated in ' + format(turn.rotation, '.0f') + ' s)' if rotate else ''}: "
        f"grow 3 -> 5 in {turn.grow:.1f} s at {turn.grow_rate:.0f} ops/s, replace in {turn.replace:.1f} s "
        f"at {turn.replace_rate:.0f} ops/s; history {turn.verdict}",
        flush=True,
    )
    return turn


def run(bench) -> None:
    spec = {"size": 3, "storage": {"size": "1Gi"}, "tls": {}, "recovery": FAST_RECOVERY}
    pairs: list[tuple[Turn, Turn]] = []
    for run_index in range(1, RUNS + 1):
        plain, rotated = f"plain-{run_index}", f"rotated-{run_index}"
        for name in (plain, rotated):
            apply_cluster(bench.namespace, name, spec, raft=None)
        for name in (plain, rotated):
            wait_for(lambda name=name: _healthy(bench.namespace, name, 3), TIMEOUT, interval=1.0, what=name)
        order = [(rotated, True), (plain, False)]
        if run_index % 2 == 0:
            order.reverse()  # neither goes first every time
        turns = {rotate: _turn(bench, name, rotate) for name, rotate in order}
        pairs.append((turns[True], turns[False]))
        for name in (plain, rotated):
            kubectl("delete", "etcdcluster", name, "-n", bench.namespace, "--wait=false")
    for what, field in (("grow 3 -> 5", "grow"), ("replace a member that lost its disk", "replace")):
        rotated_times = [getattr(r, field) for r, _ in pairs]
        plain_times = [getattr(p, field) for _, p in pairs]
        ratios = [r / p for r, p in zip(rotated_times, plain_times, strict=True)]
        rates = [getattr(t, field + "_rate") for pair in pairs for t in pair]
        bench.row(f"{what}, CA-rotated cluster", f"{statistics.median(rotated_times):.1f} s", f"(runs: {RUNS})")
        bench.row(f"{what}, cluster never rotated", f"{statistics.median(plain_times):.1f} s", f"(runs: {RUNS})")
        ratio = statistics.median(ratios)
        bench.row(
            f"{what}: rotated / never rotated",
            f"{ratio:.2f}x",
            f"(target <= 2.0x: {'met' if ratio <= 2.0 else 'NOT met'}; load served during it: "
            f"{min(rates):.0f} to {max(rates):.0f} ops/s, target >= 200)",
        )
