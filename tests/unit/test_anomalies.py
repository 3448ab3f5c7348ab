"""Anomaly detection from member metrics (cluster.metrics_sample, cluster.anomaly_detection) and the
lifecycle of the operator's series (metrics.forget_*), table-driven, no substrate."""

from __future__ import annotations

import asyncio
import collections
import pathlib
import time

import hypothesis
import pytest
from hypothesis import strategies as st

from etcd_operator.controllers import metrics
from etcd_operator.controllers.cluster.metrics_watcher import MemberMetricsWatcher
from etcd_operator.core.cluster import anomaly_detection as an
from etcd_operator.core.cluster.metrics_sample import (
    MetricsSample,
    bucket_increase,
    parse,
    quantile,
    sample_of_lines,
    selected_lines,
    sharing_unchanged,
)
from etcd_operator.core.cluster.observed import EtcdView, MemberStatus, Observed, PodView

REAL_PAGE = (pathlib.Path(__file__).parent / "data" / "etcd-3.6-metrics.txt").read_text()
BOUNDS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, float("inf"))


def buckets(*counts: float):
    """Cumulative buckets over BOUNDS from per-bucket counts."""
    total, result = 0.0, []
    for le, count in zip(BOUNDS, counts, strict=True):
        total += count
        result.append((le, total))
    return tuple(result)


def test_parse_reads_a_real_etcd_page():
    sample = parse(REAL_PAGE, at=10.0)
    assert sample.quota == 1048576 and sample.db_size == 28672
    assert sample.leader_changes == 1 and sample.proposals_failed == 0
    assert sample.wal_fsync[-1] == (float("inf"), 7.0)
    assert [le for le, _ in sample.wal_fsync] == sorted(le for le, _ in sample.wal_fsync)
    assert sample.backend_commit and sample.backend_commit[-1][0] == float("inf")


@pytest.mark.parametrize(
    "counts, expected",
    [
        ((0, 0, 0, 0, 0, 0, 0, 0), None),
        ((100, 0, 0, 0, 0, 0, 0, 0), 0.00099),  # p99 inside the first bucket
        ((0, 0, 0, 0, 100, 0, 0, 0), 0.01592),  # inside (0.008, 0.016]
        ((99, 0, 0, 0, 0, 0, 0, 1), 0.001),  # exactly at the boundary of the first bucket
        ((0, 0, 0, 0, 0, 0, 0, 10), 0.064),  # in +Inf: the largest finite bound
    ],
)
def test_quantile_interpolates_like_promql(counts, expected):
    result = quantile(0.99, buckets(*counts))
    assert result == (None if expected is None else pytest.approx(expected, rel=1e-3))


def test_bucket_increase_handles_a_reset():
    old, new = buckets(10, 10, 0, 0, 0, 0, 0, 0), buckets(1, 0, 0, 0, 0, 0, 0, 0)
    assert bucket_increase(old, new) == new
    assert bucket_increase(buckets(1, 0, 0, 0, 0, 0, 0, 0), buckets(1, 5, 0, 0, 0, 0, 0, 0))[1] == (0.002, 5.0)


QUIET = buckets(0, 0, 0, 0, 0, 0, 0, 0)


def sample(at, fsync=QUIET, commit=QUIET, leaders=1.0, failed=0.0, db=1000.0, quota=10000.0):
    return MetricsSample(at, fsync, commit, leaders, failed, db, quota)


NOW = 10_000.0
QUIET = [sample(NOW - 300), sample(NOW)]


def kinds(history, lag=None):
    return [w.kind for w in an.member_warnings(history, lag, NOW)]


@pytest.mark.parametrize(
    "history, lag, expected",
    [
        (QUIET, 0, []),
        # sustained slow WAL fsync: 100 fsyncs between 16 and 32 ms over 300 s
        ([sample(NOW - 300), sample(NOW, fsync=buckets(0, 0, 0, 0, 0, 100, 0, 0))], None, ["SlowWALFsync"]),
        # fast fsyncs: no warning
        ([sample(NOW - 300), sample(NOW, fsync=buckets(100, 0, 0, 0, 0, 0, 0, 0))], None, []),
        # slow, but over too short a window to call it sustained
        ([sample(NOW - 30), sample(NOW, fsync=buckets(0, 0, 0, 0, 0, 100, 0, 0))], None, []),
        # slow, but too few observations
        ([sample(NOW - 300), sample(NOW, fsync=buckets(0, 0, 0, 0, 0, 5, 0, 0))], None, []),
        # slow backend commits (p99 in (32, 64] ms > 25 ms); 20 ms would be fine
        ([sample(NOW - 300), sample(NOW, commit=buckets(0, 0, 0, 0, 0, 0, 100, 0))], None, ["SlowBackendCommit"]),
        ([sample(NOW - 300), sample(NOW, commit=buckets(0, 0, 0, 0, 100, 0, 0, 0))], None, []),
        # leader churn: 3 new leaders in the window; 2 are not enough
        ([sample(NOW - 300, leaders=1), sample(NOW, leaders=4)], None, ["FrequentLeaderChanges"]),
        ([sample(NOW - 300, leaders=1), sample(NOW, leaders=3)], None, []),
        # a restart resets the counter: 4 changes since it
        ([sample(NOW - 300, leaders=10), sample(NOW, leaders=4)], None, ["FrequentLeaderChanges"]),
        # old changes outside the window do not count
        ([sample(NOW - 2000, leaders=1), sample(NOW - 300, leaders=9), sample(NOW, leaders=9)], None, []),
        ([sample(NOW - 300, failed=0), sample(NOW, failed=5)], None, ["ProposalsFailing"]),
        ([sample(NOW - 300, failed=0), sample(NOW, failed=4)], None, []),
        # database over 80 % of the quota, from the latest scrape alone
        ([sample(NOW, db=8100, quota=10000)], None, ["DatabaseNearQuota"]),
        ([sample(NOW, db=8000, quota=10000)], None, []),
        ([sample(NOW, db=8100, quota=0)], None, []),  # no quota reported: no ratio
        (QUIET, 5000, ["FarBehind"]),
        (QUIET, 4999, []),
        ([], None, []),
    ],
)
def test_member_warnings(history, lag, expected):
    assert kinds(history, lag) == expected


def test_condition_is_unknown_without_metrics_never_healthy():
    assert an.condition({}, scraped_any=False).status is None
    assert an.condition({}, scraped_any=True).status is False
    warned = an.condition({"etcd-1": (an.MemberWarning("DatabaseNearQuota", "x"),)}, True)
    assert (warned.status, warned.reason) == (True, "Warning") and "etcd-1: DatabaseNearQuota" in warned.message


def test_status_entries_and_events_of_warnings():
    warning = an.MemberWarning("FarBehind", "applied index 9000 entries behind the leader")
    members = [{"name": "etcd-0", "warnings": [{"kind": "Old", "message": ""}]}, {"name": "etcd-1"}]
    entries = an.with_warnings(members, {"etcd-1": (warning,)})
    assert entries == [{"name": "etcd-0"}, {"name": "etcd-1", "warnings": [warning.to_dict()]}]
    assert an.appeared(members, {"etcd-1": (warning,)}) == [("etcd-1", warning)]
    assert an.appeared(entries, {"etcd-1": (warning,)}) == []  # already shown: no second event


def pod(name, member_id, ip="10.0.0.1"):
    return PodView(name, "uid", member_id, "Running", True, False, ip, None, "", "", False)


def status(member_id, raft_index, applied):
    return MemberStatus(1, member_id, 1, "3.6.0", 0, 0, 0, raft_index, applied, 2, False, ())


def observed_with(pods, statuses, leader=1):
    return Observed(
        "c",
        "ns",
        "uid",
        {p.name: p for p in pods},
        {},
        EtcdView(statuses={s.member_id: s for s in statuses}, leader_id=leader),
        {},
        None,
        None,
    )


def test_applied_lag_against_the_leader():
    observed = observed_with(
        [pod("etcd-0", 1), pod("etcd-1", 2), pod("etcd-2", None)], [status(1, 10_000, 10_000), status(2, 9_000, 4_000)]
    )
    assert an.applied_lags(observed) == {"etcd-0": 0, "etcd-1": 6000}
    assert an.applied_lags(observed_with([pod("etcd-0", 1)], [status(1, 5, 5)], leader=None)) == {}


async def test_watcher_scrapes_in_the_background_and_forgets_gone_members():
    started, release = asyncio.Event(), asyncio.Event()
    fetched = []

    async def fetch(url, timeout):
        fetched.append(url)
        started.set()
        await release.wait()
        return REAL_PAGE

    watcher = MemberMetricsWatcher(fetch, every=30.0)
    pods = {"etcd-0": pod("etcd-0", 1, "10.0.0.1"), "etcd-1": pod("etcd-1", 2, None)}
    watcher.poke(pods, NOW)
    await started.wait()
    watcher.poke(pods, NOW + 60)  # one scrape at a time: the hung one is not doubled
    await asyncio.sleep(0.01)
    assert fetched == ["http://10.0.0.1:2381/metrics"]  # no IP, no scrape
    release.set()
    await watcher._task
    assert [s.db_size for s in watcher.histories["etcd-0"]] == [28672]
    watcher.poke(pods, NOW + 10)  # not due yet
    assert len(fetched) == 1
    watcher.poke({}, NOW + 100)
    assert watcher.histories == {}
    await watcher.close()


def test_a_sample_shares_the_unchanged_buckets_of_the_previous_one():
    first = parse(REAL_PAGE, at=10.0)
    same = parse(REAL_PAGE, at=40.0)
    shared = sharing_unchanged(first, same)
    assert shared == same and shared.wal_fsync is first.wal_fsync and shared.backend_commit is first.backend_commit
    grown = MetricsSample(
        at=70.0, wal_fsync=first.wal_fsync[:-1] + ((float("inf"), 8.0),), backend_commit=first.backend_commit
    )
    partly = sharing_unchanged(first, grown)
    assert partly == grown
    assert all(a is b for a, b in zip(partly.wal_fsync[:-1], first.wal_fsync[:-1], strict=True))
    assert partly.wal_fsync[-1] == (float("inf"), 8.0)
    assert sharing_unchanged(None, first) is first


async def test_watcher_keeps_no_sample_older_than_the_detection_window():
    async def fetch(url, timeout):
        return REAL_PAGE

    watcher = MemberMetricsWatcher(fetch, every=30.0, thresholds=an.Thresholds(window=900.0))
    now = time.time()
    old, recent = parse(REAL_PAGE, now - 1000), parse(REAL_PAGE, now - 500)
    watcher.histories["etcd-0"] = collections.deque([old, recent], maxlen=64)
    watcher.poke({"etcd-0": pod("etcd-0", 1)}, NOW)
    await watcher._task
    assert [s.at for s in watcher.histories["etcd-0"]][:1] == [recent.at]
    assert len(watcher.histories["etcd-0"]) == 2
    await watcher.close()


def text_of_registry() -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.REGISTRY).decode()


def test_series_of_a_deleted_cluster_and_backup_are_removed():
    metrics.record_cluster("ns-a", "gone", 3, [("etcd-0", "leader", True, 100, 50)], True, False)
    metrics.record_cluster("ns-a", "kept", 3, [("etcd-0", "leader", True, 100, 50)], True, False)
    metrics.record_member_warnings("ns-a", "gone", {"etcd-0": (an.MemberWarning("FarBehind", ""),)})
    metrics.record_alarms("ns-a", "gone", ("NOSPACE",))
    metrics.reconcile_steps.labels("ns-a", "gone", "AddLearner").inc()
    metrics.reconcile_errors.labels("ns-a", "gone").inc()
    metrics.record_backup_status(
        "ns-a", "nightly", {"lastSuccessfulTime": "2026-11-21T10:00:00Z", "lastBackup": {"size": 123}}
    )
    metrics.backup_failures.labels("ns-a", "nightly", "Timeout").inc()
    metrics.backup_duration.labels("ns-a", "nightly").observe(3)
    assert 'cluster="gone"' in text_of_registry() and 'backup="nightly"' in text_of_registry()

    metrics.forget_cluster("ns-a", "gone")
    metrics.forget_backup("ns-a", "nightly")
    text = text_of_registry()
    assert 'cluster="gone"' not in text and 'backup="nightly"' not in text
    assert 'cluster="kept"' in text


def test_backup_freshness_comes_from_status_and_members_removed_lose_their_series():
    metrics.record_backup_status("ns-b", "hourly", {"lastSuccessfulTime": "2026-11-21T10:00:00Z"})
    assert metrics.backup_last_success.labels("ns-b", "hourly")._value.get() == 1795255200.0
    metrics.record_cluster(
        "ns-b", "c", 3, [("etcd-0", "leader", True, 1, 1), ("etcd-1", "follower", True, 1, 1)], True, False
    )
    metrics.record_cluster("ns-b", "c", 3, [("etcd-0", "leader", True, 1, 1)], True, False)
    assert 'member="etcd-1"' not in text_of_registry()
    metrics.record_member_warnings("ns-b", "c", {"etcd-0": (an.MemberWarning("FarBehind", ""),)})
    metrics.record_member_warnings("ns-b", "c", {})
    assert 'etcd_operator_member_warning{namespace="ns-b"' not in text_of_registry()  # cleared


async def test_a_member_that_never_answers_costs_at_most_the_timeout():
    from etcd_operator.clients.etcd.scrape import ScrapeError, read_metrics

    answered = asyncio.Event()  # never set: the member hangs

    async def silent(reader, writer):
        await answered.wait()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        # Without its own timeout the read would hang and wait_for would raise TimeoutError instead.
        with pytest.raises(ScrapeError):
            await asyncio.wait_for(read_metrics(f"http://127.0.0.1:{port}/metrics", 0.3), 30)
    finally:
        server.close()


async def test_a_page_that_arrives_in_pieces_is_read_whole(monkeypatch):
    from etcd_operator.clients.etcd import scrape

    lines = [f'etcd_disk_wal_fsync_duration_seconds_bucket{{le="{2**i / 1000}"}} {i}\n' for i in range(14)]
    page = ("".join(lines) * 300).encode()  # about 250 KiB, like etcd's own page

    requests: list[bytes] = []

    async def in_pieces(reader, writer):
        requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            + f"Content-Length: {len(page)}\r\n\r\n".encode()
        )
        for start in range(0, len(page), 8192):  # a slow member: each piece after a pause
            writer.write(page[start : start + 8192])
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.close()

    server = await asyncio.start_server(in_pieces, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert await scrape.read_metrics(f"http://127.0.0.1:{port}/metrics", 10) == page.decode()
        assert b"\r\naccept-encoding: identity\r\n" in requests[0].lower()  # no gzip to make and inflate
        monkeypatch.setattr(scrape, "MAX_BYTES", len(page) - 1)
        with pytest.raises(scrape.ScrapeError, match="more than"):
            await scrape.read_metrics(f"http://127.0.0.1:{port}/metrics", 10)
    finally:
        server.close()


def test_parse_reads_the_checks_lines_from_the_first_line_to_a_last_without_line_break():
    page = (
        "etcd_mvcc_db_total_size_in_bytes 7\n"
        "# TYPE etcd_mvcc_db_total_size_in_use_in_bytes gauge\n"
        "etcd_mvcc_db_total_size_in_use_in_bytes 5\n"
        'etcd_disk_wal_fsync_duration_seconds_bucket{le="+Inf"} 3\n'
        "etcd_disk_wal_fsync_duration_seconds_count 3\n"
        "etcd_server_quota_backend_bytes 100"
    )
    assert selected_lines(page) == [
        "etcd_mvcc_db_total_size_in_bytes 7",
        'etcd_disk_wal_fsync_duration_seconds_bucket{le="+Inf"} 3',
        "etcd_server_quota_backend_bytes 100",
    ]
    sample = parse(page, at=1.0)
    assert (sample.db_size, sample.quota, sample.wal_fsync) == (7, 100, ((float("inf"), 3.0),))


def test_the_selective_parse_equals_the_full_page_parse_of_the_stored_page():
    assert parse(REAL_PAGE, at=3.0) == sample_of_lines(REAL_PAGE, at=3.0)


@pytest.mark.parametrize(
    "line",
    [
        "etcd_server_quota_backend_bytes many",
        "etcd_server_quota_backend_bytes",
        'etcd_disk_wal_fsync_duration_seconds_bucket{lee="0.1"} 3',
        'etcd_disk_wal_fsync_duration_seconds_bucket{le="soon"} 3',
    ],
)
def test_an_unreadable_line_of_the_checks_makes_the_page_unreadable(line):
    """The metrics watcher reports such a page as unreadable (a ValueError), as it did when
    the exposition parser read it."""
    page = "etcd_mvcc_db_total_size_in_bytes 7\n" + line + "\n"
    with pytest.raises(ValueError):
        sample_of_lines(page, at=0.0)
    with pytest.raises(ValueError):
        parse(page, at=0.0)


_VALUES = st.one_of(
    st.integers(0, 10**12).map(str),
    st.floats(0, 1e12, allow_nan=False).map(repr),
    st.floats(0, 1e12, allow_nan=False).map(lambda v: f"{v:e}"),
    st.sampled_from(["+Inf", "0", "1e+06", "2.147483648e+09"]),
)
_LINE = st.one_of(
    st.tuples(
        st.sampled_from(["etcd_disk_wal_fsync_duration_seconds", "etcd_disk_backend_commit_duration_seconds"]),
        st.sampled_from(["_bucket", "_sum", "_count", "_bucket_x"]),
        st.sampled_from(["0.001", "0.004", "1.024", "+Inf", "8.192"]),
        st.sampled_from(["", 'instance="a b",', 'x="}",']),
        _VALUES,
    ).map(
        lambda t: (
            f'{t[0]}{t[1]}{{{t[3]}le="{t[2]}"}} {t[4]}'
            if t[1] != "_sum" and t[1] != "_count"
            else f"{t[0]}{t[1]} {t[4]}"
        )
    ),
    st.tuples(
        st.sampled_from(
            [
                "etcd_server_leader_changes_seen_total",
                "etcd_server_proposals_failed_total",
                "etcd_mvcc_db_total_size_in_bytes",
                "etcd_mvcc_db_total_size_in_use_in_bytes",
                "etcd_server_quota_backend_bytes",
            ]
        ),
        _VALUES,
    ).map(lambda t: f"{t[0]} {t[1]}"),
    st.just("# HELP etcd_server_quota_backend_bytes Current backend storage quota size in bytes."),
)


@hypothesis.given(st.lists(_LINE, max_size=30, unique=True))
def test_the_selective_parse_reads_any_page_of_the_checks_series_as_the_exposition_parser_does(lines):
    """Label values with spaces and braces, values in every float spelling, names that only
    begin like a read one: the hand-read lines give what Prometheus's parser gives."""
    page = "\n".join(lines) + "\n"
    try:
        expected = sample_of_lines(page, at=0.0)
    except ValueError:
        hypothesis.reject()  # a page the exposition parser refuses (a name in two families)
    assert parse(page, at=0.0) == expected
