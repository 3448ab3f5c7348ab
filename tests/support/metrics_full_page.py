"""The member-metrics parser as it was before it read only the checks' lines: every line of
the page through prometheus_client's parser. Kept as the reference the selective parser
(core/cluster/metrics_sample.parse) is checked against and measured beside (bench/scrape.py)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from etcd_operator.core.cluster.metrics_sample import (
    BACKEND_COMMIT,
    DB_SIZE,
    LEADER_CHANGES,
    PROPOSALS_FAILED,
    QUOTA,
    WAL_FSYNC,
    MetricsSample,
)


def parse_full_page(text: str, at: float) -> MetricsSample:
    histograms: dict[str, dict[float, float]] = {WAL_FSYNC: {}, BACKEND_COMMIT: {}}
    scalars: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_bucket") and sample.name[: -len("_bucket")] in histograms:
                le = float(sample.labels["le"])
                buckets = histograms[sample.name[: -len("_bucket")]]
                buckets[le] = buckets.get(le, 0.0) + sample.value
            elif sample.name in (LEADER_CHANGES, PROPOSALS_FAILED, DB_SIZE, QUOTA):
                scalars[sample.name] = scalars.get(sample.name, 0.0) + sample.value
    return MetricsSample(
        at=at,
        wal_fsync=tuple(sorted(histograms[WAL_FSYNC].items())),
        backend_commit=tuple(sorted(histograms[BACKEND_COMMIT].items())),
        leader_changes=scalars.get(LEADER_CHANGES, 0.0),
        proposals_failed=scalars.get(PROPOSALS_FAILED, 0.0),
        db_size=scalars.get(DB_SIZE, 0.0),
        quota=scalars.get(QUOTA, 0.0),
    )
