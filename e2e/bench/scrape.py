"""`python -m bench scrape`: the operator's CPU for reading one member's /metrics, old
against new, side by side in one run: the fetch (clients/etcd/scrape) plus the full-page
parse it used (core/cluster/metrics_sample.sample_of_lines over the whole page) against
the fetch plus the parse of only the checks' lines (core/cluster/metrics_sample.parse).
Over the real pages of an etcd 3.5 and a 3.6 member of the testbin (tests/support/etcd_process,
in a temporary folder), after some load. No cluster needed; process CPU time of this process
alone (etcd's is not counted)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import tempfile
import time

from etcd_operator.clients.etcd.client import EtcdMemberClient
from etcd_operator.clients.etcd.scrape import ScrapeError, read_metrics
from etcd_operator.controllers.cluster.metrics_watcher import SCRAPE_EVERY
from etcd_operator.controllers.cluster.observer import CLUSTER_VERSION_GAUGE
from etcd_operator.controllers.cluster.reconciler import WHEN_STEADY_AND_QUIET
from etcd_operator.core.cluster.metrics_sample import cluster_version_from_gauge, parse, sample_of_lines
from localkube import layout as localkube_layout
from tests.support.etcd_process import EtcdProcess, free_port

ITERATIONS = int(os.environ.get("BENCH_SCRAPE_ITERATIONS") or 1000)  # of each kind, per etcd version
ROUNDS = 10  # old and new alternate in this many blocks, so both see the same machine load
PUTS = 2000
GOAL_CORES_AT_1000 = 0.5  # the whole operator's budget at 1,000 clusters (issue 44)


def start_member(version: str, folder: pathlib.Path) -> tuple[EtcdProcess, str]:
    """An etcd of the testbin, healthy, with its metrics URL."""
    metrics_port = free_port()
    member = EtcdProcess(
        version,
        localkube_layout.testbin_dir() / f"etcd-{version}",
        folder / version,
        extra_flags=(f"--listen-metrics-urls=http://127.0.0.1:{metrics_port}",),
    ).start()
    member.wait_healthy()
    return member, f"http://127.0.0.1:{metrics_port}/metrics"


async def load(endpoint: str) -> None:
    async with EtcdMemberClient(endpoint, timeout=30) as client:
        for first in range(0, PUTS, 100):
            values = {f"/bench/{i % 500}".encode(): os.urandom(100 + i % 1900) for i in range(first, first + 100)}
            await asyncio.gather(*(client.put(key, value) for key, value in values.items()))


async def wait_ready(metrics_url: str) -> None:
    for _ in range(100):
        try:
            await read_metrics(metrics_url, 1.0)
            return
        except ScrapeError:
            await asyncio.sleep(0.1)
    raise TimeoutError(f"{metrics_url} did not answer")


async def cpu_seconds_each(kinds: dict, iterations: int) -> dict[str, float]:
    """CPU seconds per call of each kind, the kinds alternating in ROUNDS blocks."""
    spent = dict.fromkeys(kinds, 0.0)
    for _ in range(ROUNDS):
        for name, call in kinds.items():
            started = time.process_time()
            for _ in range(iterations // ROUNDS):
                await call()
            spent[name] += time.process_time() - started
    return {name: seconds / (iterations // ROUNDS * ROUNDS) for name, seconds in spent.items()}


async def measure(metrics_url: str) -> dict[str, float]:
    pages: list[str] = []

    async def fetch_only() -> None:
        pages.append(await read_metrics(metrics_url, 5.0))

    async def fetch_and_parse_full_page() -> None:
        sample_of_lines(await read_metrics(metrics_url, 5.0), 0.0)

    async def fetch_and_parse_checks_lines() -> None:
        parse(await read_metrics(metrics_url, 5.0), 0.0)

    async def read_cluster_version() -> None:
        page = await read_metrics(metrics_url, 5.0, series=CLUSTER_VERSION_GAUGE)
        cluster_version_from_gauge(page.splitlines(keepends=True))

    figures = await cpu_seconds_each(
        {
            "fetch": fetch_only,
            "old": fetch_and_parse_full_page,
            "new": fetch_and_parse_checks_lines,
            "version": read_cluster_version,
        },
        ITERATIONS,
    )
    figures["identical"] = float(all(parse(p, 0.0) == sample_of_lines(p, 0.0) for p in pages))
    figures["page_bytes"] = float(len(pages[-1].encode()))
    walls = []
    for _ in range(200):
        started = time.perf_counter()
        parse(pages[-1], 0.0)
        walls.append(time.perf_counter() - started)
    figures["wall_one_parse"] = sorted(walls)[len(walls) // 2]
    return figures


def cores_at_1000(watcher_scrape: float) -> float:
    """A quiet cluster of size 1: its member's page at each pass, every WHEN_STEADY_AND_QUIET
    (a scrape is started by a pass, at most every SCRAPE_EVERY); the version gauge is read
    only during a downgrade."""
    return 1000 * watcher_scrape / max(SCRAPE_EVERY, WHEN_STEADY_AND_QUIET)


def run() -> None:
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as folder:
        for version in ("3.5", "3.6"):
            member, metrics_url = start_member(version, pathlib.Path(folder))
            try:
                asyncio.run(wait_ready(metrics_url))
                asyncio.run(load(member.endpoint))
                results[version] = asyncio.run(measure(metrics_url))
            finally:
                member.stop()
    print("\nscrape: CPU of one member's /metrics read, old (full-page parse) and new (the checks' lines only),")
    print(f"  {ITERATIONS} of each per etcd version, alternating in {ROUNDS} blocks, one process; ms of CPU per call")
    print(f"  {'etcd':<5} {'page KiB':>8} {'fetch':>7} {'old':>7} {'new':>7} {'old/new':>8} {'new parse wall':>15} "
          f"{'version read':>13} {'same sample':>12}")  # fmt: skip
    for version, f in results.items():
        print(
            f"  {version:<5} {f['page_bytes'] / 1024:>8.0f} {f['fetch'] * 1e3:>7.2f} {f['old'] * 1e3:>7.2f} "
            f"{f['new'] * 1e3:>7.2f} {f['old'] / f['new']:>7.1f}x {f['wall_one_parse'] * 1e3:>12.2f} ms "
            f"{f['version'] * 1e3:>13.2f} {'yes' if f['identical'] else 'NO':>12}"
        )
    for version, f in results.items():
        old, new = cores_at_1000(f["old"]), cores_at_1000(f["new"])
        print(
            f"  at 1,000 quiet clusters of size 1 (etcd {version}: a page every "
            f"{max(SCRAPE_EVERY, WHEN_STEADY_AND_QUIET):.0f} s): {old:.3f} cores before, {new:.3f} now, "
            f"{new / GOAL_CORES_AT_1000:.0%} of the whole operator's goal of {GOAL_CORES_AT_1000} core"
        )
