"""The operator-wide memory budget on the real path: several large backups at once keep
the operator's resident memory within the budget plus a fixed overhead. Small budget,
moderate data; the 512 MiB version is in make bench (e2e/bench). On the real nodes, with the
operator as a process on the host, whose memory is read from /proc."""

from __future__ import annotations

import concurrent.futures
import pathlib

import pytest

from tests.support.backups import apply_backup, fill, get_backup
from tests.support.clusters import apply_cluster, member_endpoints, wait_healthy
from tests.support.s3 import create_credentials_secret, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane2]

MiB = 1 << 20
BUDGET = 16 * MiB
PART = 5 * MiB  # the smallest part S3 takes
CONCURRENCY = 4  # unbudgeted, 4 backups would hold 4 × 5 × 5 MiB = 100 MiB of parts
DATA = 64 * MiB
BACKUPS = 4  # one cluster each: backups of one cluster never overlap
FIXED_OVERHEAD = 32 * MiB  # gRPC and HTTP buffers, threads and S3 clients of 4 backups


def proc_status(pid: int) -> dict[str, int]:
    fields = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


def reset_peak(pid: int) -> None:
    pathlib.Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS


def test_concurrent_large_backups_stay_within_the_memory_budget(real_nodes, operator_process, namespace):
    operator = operator_process(namespace, env={"MEMORY_BUDGET_BYTES": str(BUDGET)}).start()
    try:
        create_credentials_secret(real_nodes, namespace)
        clusters = [f"m{i}" for i in range(BACKUPS)]
        for name in clusters:
            apply_cluster(namespace, name, {"size": 1, "storage": {"size": "1Gi"}})
        for name in clusters:
            wait_healthy(namespace, name, 1)
        # One small backup first, so that loading the S3 client (boto3's models) is not counted.
        storage = s3_storage_spec(real_nodes, f"tests/{namespace}", partSizeBytes=PART, uploadConcurrency=CONCURRENCY)
        apply_backup(namespace, "warmup", {"clusterRef": {"name": clusters[0]}, "storage": storage})
        wait_for(
            lambda: get_backup(namespace, "warmup").get("status", {}).get("phase") == "Completed",
            120,
            what="warm-up backup completed",
        )
        with concurrent.futures.ThreadPoolExecutor(BACKUPS) as pool:
            list(
                pool.map(
                    lambda name: fill(member_endpoints(namespace, name), DATA // MiB, MiB, incompressible=True),
                    clusters,
                )
            )

        pid = operator.process.pid
        reset_peak(pid)
        baseline = proc_status(pid)["VmRSS"]
        for name in clusters:
            apply_backup(namespace, name, {"clusterRef": {"name": name}, "storage": storage})
        done = wait_for(
            lambda: (
                all(get_backup(namespace, n).get("status", {}).get("phase") == "Completed" for n in clusters)
                and [get_backup(namespace, n) for n in clusters]
            ),
            300,
            what="all backups completed",
        )
        peak = proc_status(pid)["VmHWM"]
    finally:
        operator.stop()
    sizes = [b["status"]["lastBackup"]["size"] for b in done]
    assert all(size >= DATA for size in sizes), sizes
    growth = peak - baseline
    print(
        f"operator RSS {baseline / MiB:.0f} MiB before, peak {peak / MiB:.0f} MiB during {BACKUPS} backups of "
        f"{min(sizes) / MiB:.0f} MiB: growth {growth / MiB:.1f} MiB, budget {BUDGET / MiB:.0f} MiB"
    )
    assert growth <= BUDGET + FIXED_OVERHEAD, f"RSS grew {growth / MiB:.1f} MiB"
