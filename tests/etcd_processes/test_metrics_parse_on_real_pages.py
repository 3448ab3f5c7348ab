"""The member-metrics parser that reads only the checks' lines (core/cluster/metrics_sample)
against the full-page parser it replaced, over the real /metrics pages of etcd 3.5 and 3.6
members under load, fetched the way the operator fetches them (clients/etcd/scrape)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from etcd_operator.clients.etcd.client import EtcdMemberClient
from etcd_operator.clients.etcd.scrape import read_metrics
from etcd_operator.core.cluster.metrics_sample import READ_SAMPLES, parse, sample_of_lines, selected_lines
from localkube import layout as localkube_layout
from tests.support.etcd_process import EtcdProcess, free_port

pytestmark = pytest.mark.needs_etcd


@pytest.fixture(params=["3.5", "3.6"])
def member_with_metrics(request, tmp_path):
    metrics_port = free_port()
    member = EtcdProcess(
        "m0",
        localkube_layout.testbin_dir() / f"etcd-{request.param}",
        tmp_path / "m0",
        extra_flags=(f"--listen-metrics-urls=http://127.0.0.1:{metrics_port}",),
    ).start()
    member.wait_healthy()
    yield member, f"http://127.0.0.1:{metrics_port}/metrics"
    member.stop()


async def put_load(endpoint: str) -> None:
    async with EtcdMemberClient(endpoint) as client:
        for i in range(300):
            await client.put(f"/load/{i % 50}".encode(), b"v" * (100 + 7 * i))


def samples_read_by_the_checks(page: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name in READ_SAMPLES
    ]


async def test_the_selective_parse_returns_what_the_full_page_parse_did(member_with_metrics):
    member, url = member_with_metrics
    for round_ in range(3):  # pages with the histograms filling up between them
        await put_load(member.endpoint)
        page = await read_metrics(url, 5.0)

        assert parse(page, at=round_) == sample_of_lines(page, at=round_)
        # Every sample the checks read, label for label and value for value.
        selected = "".join(line + "\n" for line in selected_lines(page))
        assert samples_read_by_the_checks(selected) == samples_read_by_the_checks(page)
        sample = parse(page, at=round_)
        assert sample.wal_fsync[-1][1] >= 300 * (round_ + 1) and sample.backend_commit[-1][1] > 0
        assert sample.db_size > 0 and sample.quota > 0 and sample.leader_changes == 1
