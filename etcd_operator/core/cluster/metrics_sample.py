"""What the operator reads from one member's /metrics: the few series its anomaly
detection needs, and the cluster version gauge, parsed from Prometheus's text format into
plain data. Pure; the one parser of the page (etcd/scrape fetches it)."""

from __future__ import annotations

import dataclasses
import math

from prometheus_client.parser import text_string_to_metric_families

WAL_FSYNC = "etcd_disk_wal_fsync_duration_seconds"
BACKEND_COMMIT = "etcd_disk_backend_commit_duration_seconds"
LEADER_CHANGES = "etcd_server_leader_changes_seen_total"
PROPOSALS_FAILED = "etcd_server_proposals_failed_total"
DB_SIZE = "etcd_mvcc_db_total_size_in_bytes"
QUOTA = "etcd_server_quota_backend_bytes"
CLUSTER_VERSION = "etcd_cluster_version"

Buckets = tuple[tuple[float, float], ...]  # (upper bound `le`, cumulative count), ascending


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsSample:
    """One scrape of one member, taken at `at` (Unix seconds)."""

    at: float
    wal_fsync: Buckets = ()
    backend_commit: Buckets = ()
    leader_changes: float = 0.0
    proposals_failed: float = 0.0
    db_size: float = 0.0
    quota: float = 0.0


# The names of the samples parse() reads: each histogram's buckets and each scalar.
READ_SAMPLES = (WAL_FSYNC + "_bucket", BACKEND_COMMIT + "_bucket", LEADER_CHANGES, PROPOSALS_FAILED, DB_SIZE, QUOTA)


def selected_lines(text: str) -> list[str]:
    """The page's lines that start with one of READ_SAMPLES, in page order; every other
    line is skipped unread. Each name is found with str.find (a C scan), so the cost follows
    the few lines the checks read, not the page's size (160 KiB from etcd 3.5 and 3.6)."""
    page = text if text.startswith("\n") else "\n" + text
    found: list[tuple[int, str]] = []
    for name in READ_SAMPLES:
        line_break = page.find("\n" + name)
        while line_break >= 0:
            start = line_break + 1
            end = page.find("\n", start)
            end = len(page) if end < 0 else end
            found.append((start, page[start:end]))
            line_break = page.find("\n" + name, end)
    return [line for _, line in sorted(found)]


_BUCKETS = {WAL_FSYNC + "_bucket": WAL_FSYNC, BACKEND_COMMIT + "_bucket": BACKEND_COMMIT}
_SCALARS = (LEADER_CHANGES, PROPOSALS_FAILED, DB_SIZE, QUOTA)


def parse(text: str, at: float) -> MetricsSample:
    """The sample of one member's page. Only its selected_lines are read, each by hand: the
    name, a bucket's `le` label and the value (sample_of_lines, the exposition parser's
    reading, is what the tests compare it with on real pages). A line it cannot read makes
    the page unreadable (ValueError), as with that parser."""
    histograms: dict[str, dict[float, float]] = {WAL_FSYNC: {}, BACKEND_COMMIT: {}}
    scalars: dict[str, float] = {}
    for line in selected_lines(text):
        labels_at = line.find("{")
        if labels_at >= 0:
            name, labels_end = line[:labels_at], line.rfind("}")
            labels, rest = line[labels_at + 1 : labels_end], line[labels_end + 1 :]
        else:
            name, _, rest = line.partition(" ")
            labels = ""
        if name not in _BUCKETS and name not in _SCALARS:
            continue  # a series whose name only begins like a read one
        fields = rest.split()
        if not fields:
            raise ValueError(f"no value in {line!r}")
        value = float(fields[0])
        if name in _BUCKETS:
            le = float(_label(labels, "le"))
            buckets = histograms[_BUCKETS[name]]
            buckets[le] = buckets.get(le, 0.0) + value
        elif name in _SCALARS:
            scalars[name] = scalars.get(name, 0.0) + value
    return _sample(at, histograms, scalars)


def _label(labels: str, name: str) -> str:
    """The value of label `name` in a sample's `a="x",b="y"` (no escapes in the labels read here)."""
    start = labels.find(f'{name}="')
    if start < 0 or (start > 0 and labels[start - 1] not in ", "):
        raise ValueError(f"no label {name}")
    start += len(name) + 2
    return labels[start : labels.index('"', start)]


def _sample(at: float, histograms: dict[str, dict[float, float]], scalars: dict[str, float]) -> MetricsSample:
    return MetricsSample(
        at=at,
        wal_fsync=tuple(sorted(histograms[WAL_FSYNC].items())),
        backend_commit=tuple(sorted(histograms[BACKEND_COMMIT].items())),
        leader_changes=scalars.get(LEADER_CHANGES, 0.0),
        proposals_failed=scalars.get(PROPOSALS_FAILED, 0.0),
        db_size=scalars.get(DB_SIZE, 0.0),
        quota=scalars.get(QUOTA, 0.0),
    )


def sample_of_lines(text: str, at: float) -> MetricsSample:
    """The sample of exposition lines, every one of them read by Prometheus's exposition
    parser: the reference parse() is checked against (on whole real pages in the tests),
    and what the scrape bench compares it with."""
    histograms: dict[str, dict[float, float]] = {WAL_FSYNC: {}, BACKEND_COMMIT: {}}
    scalars: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_bucket") and sample.name[: -len("_bucket")] in histograms:
                if "le" not in sample.labels:
                    raise ValueError(f"a bucket of {sample.name} without le")
                le = float(sample.labels["le"])
                buckets = histograms[sample.name[: -len("_bucket")]]
                buckets[le] = buckets.get(le, 0.0) + sample.value
            elif sample.name in (LEADER_CHANGES, PROPOSALS_FAILED, DB_SIZE, QUOTA):
                scalars[sample.name] = scalars.get(sample.name, 0.0) + sample.value
    return _sample(at, histograms, scalars)


def cluster_version_from_gauge(lines: list[str]) -> str | None:
    """The version whose `etcd_cluster_version{cluster_version="3.6"} 1` line is set: etcd
    keeps the previous version's line at 0 after the cluster version changes. None when no
    line is set or the lines cannot be read."""
    try:
        samples = [s for family in text_string_to_metric_families("".join(lines)) for s in family.samples]
    except ValueError:
        return None
    for sample in samples:
        version = sample.labels.get("cluster_version") if sample.name == CLUSTER_VERSION else None
        if version and sample.value != 0:
            return version if version.count(".") == 2 else f"{version}.0"
    return None


def _shared_buckets(previous: Buckets, new: Buckets) -> Buckets:
    if new == previous:
        return previous
    if len(new) != len(previous):
        return new
    return tuple(old if old == pair else pair for old, pair in zip(previous, new, strict=True))


def sharing_unchanged(previous: MetricsSample | None, sample: MetricsSample) -> MetricsSample:
    """`sample`, equal in value, whose buckets reuse `previous`'s objects where they did not
    change. A quiet member's histograms stay the same from scrape to scrape; a history of
    them then costs one set of buckets, not one per scrape (about 4 KiB each)."""
    if previous is None:
        return sample
    return dataclasses.replace(
        sample,
        wal_fsync=_shared_buckets(previous.wal_fsync, sample.wal_fsync),
        backend_commit=_shared_buckets(previous.backend_commit, sample.backend_commit),
    )


def counter_increase(old: float, new: float) -> float:
    """A counter that went down was reset (the member restarted): it counted `new` since."""
    return new - old if new >= old else new


def bucket_increase(old: Buckets, new: Buckets) -> Buckets:
    """Observations between two scrapes, per bucket; a reset counts from zero."""
    before = dict(old)
    if any(count < before.get(le, 0.0) for le, count in new):
        return new
    return tuple((le, count - before.get(le, 0.0)) for le, count in new)


def quantile(q: float, buckets: Buckets) -> float | None:
    """The q-quantile of cumulative buckets, interpolated linearly inside the bucket that
    holds it (as PromQL's histogram_quantile does); None without observations. A quantile
    in the +Inf bucket is reported as the largest finite bound."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower_bound
            if count == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = le, count
    return lower_bound
