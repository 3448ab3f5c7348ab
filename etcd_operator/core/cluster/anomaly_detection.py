"""Anomaly detection from the members' own metrics. Pure: from the recent scrapes of each
member (and the applied-index lag seen in the status calls) to warnings per member, the
MemberWarnings condition and the events for warnings that just appeared.

Each warning says when it applies:
- SlowWALFsync / SlowBackendCommit: over a window of at least `sustained` seconds, with
  enough observations, the p99 (from the histogram buckets' increase) is above etcd's
  hardware guidance (WAL fsync p99 under 10 ms, backend commit p99 under 25 ms);
- FrequentLeaderChanges: the member saw at least `leader_changes` new leaders in the window;
- ProposalsFailing: at least `proposals_failed` proposals failed in the window;
- DatabaseNearQuota: the backend file is over `quota_fraction` of the quota (latest scrape);
- FarBehind: the member's applied index trails the leader's raft index by `applied_lag`.
A member without scrapes gets no metrics warnings; when no member could be scraped at all
the condition is Unknown, never Healthy."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core.cluster.metrics_sample import (
    Buckets,
    MetricsSample,
    bucket_increase,
    counter_increase,
    quantile,
)
from etcd_operator.core.cluster.observed import Observed

CONDITION = "MemberWarnings"


@dataclasses.dataclass(frozen=True)
class Thresholds:
    wal_fsync_p99: float = 0.010
    backend_commit_p99: float = 0.025
    leader_changes: int = 3
    proposals_failed: int = 5
    quota_fraction: float = 0.8
    applied_lag: int = 5000
    window: float = 900.0  # seconds of scrapes kept and compared
    sustained: float = 120.0  # latency warnings need a window at least this long
    min_observations: int = 30


@dataclasses.dataclass(frozen=True)
class MemberWarning:
    kind: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


Warnings = Mapping[str, tuple[MemberWarning, ...]]  # member name -> its warnings


def in_window(history: Sequence[MetricsSample], now: float, t: Thresholds) -> list[MetricsSample]:
    return [s for s in history if now - s.at <= t.window]


def _latency_warning(
    kind: str, what: str, old: Buckets, new: Buckets, limit: float, span: float, t: Thresholds
) -> MemberWarning | None:
    increase = bucket_increase(old, new)
    if span < t.sustained or not increase or increase[-1][1] < t.min_observations:
        return None
    p99 = quantile(0.99, increase)
    if p99 is None or p99 <= limit:
        return None
    return MemberWarning(
        kind, f"{what} p99 {p99 * 1000:.0f} ms (etcd's guidance: under {limit * 1000:.0f} ms); check the disk"
    )


def member_warnings(
    history: Sequence[MetricsSample], applied_lag: int | None, now: float, t: Thresholds = Thresholds()
) -> tuple[MemberWarning, ...]:
    found: list[MemberWarning] = []
    samples = in_window(history, now, t)
    if samples:
        first, last = samples[0], samples[-1]
        span = last.at - first.at
        for warning in (
            _latency_warning("SlowWALFsync", "WAL fsync", first.wal_fsync, last.wal_fsync, t.wal_fsync_p99, span, t),
            _latency_warning(
                "SlowBackendCommit",
                "backend commit",
                first.backend_commit,
                last.backend_commit,
                t.backend_commit_p99,
                span,
                t,
            ),
        ):
            if warning:
                found.append(warning)
        changes = counter_increase(first.leader_changes, last.leader_changes)
        if changes >= t.leader_changes:
            found.append(
                MemberWarning(
                    "FrequentLeaderChanges", f"{changes:.0f} leader changes within {t.window / 60:.0f} minutes"
                )
            )
        failed = counter_increase(first.proposals_failed, last.proposals_failed)
        if failed >= t.proposals_failed:
            found.append(
                MemberWarning("ProposalsFailing", f"{failed:.0f} proposals failed within {t.window / 60:.0f} minutes")
            )
        if last.quota > 0 and last.db_size > t.quota_fraction * last.quota:
            found.append(
                MemberWarning(
                    "DatabaseNearQuota",
                    f"database {last.db_size / last.quota:.0%} of its quota ({last.db_size:.0f} of {last.quota:.0f} "
                    f"bytes); at 100 % etcd raises NOSPACE and refuses writes",
                )
            )
    if applied_lag is not None and applied_lag >= t.applied_lag:
        found.append(MemberWarning("FarBehind", f"applied index {applied_lag} entries behind the leader"))
    return tuple(found)


def applied_lags(observed: Observed) -> dict[str, int]:
    """Per member pod: the leader's raft index less the member's applied index."""
    statuses = observed.etcd.statuses
    leader = statuses.get(observed.etcd.leader_id or 0)
    if leader is None:
        return {}
    lags = {}
    for pod in observed.pods.values():
        status = statuses.get(pod.member_id or 0)
        if status is not None:
            lags[pod.name] = max(0, leader.raft_index - status.raft_applied_index)
    return lags


def detect(
    histories: Mapping[str, Sequence[MetricsSample]], lags: Mapping[str, int], now: float, t: Thresholds = Thresholds()
) -> dict[str, tuple[MemberWarning, ...]]:
    members = set(histories) | set(lags)
    found = {name: member_warnings(histories.get(name, ()), lags.get(name), now, t) for name in sorted(members)}
    return {name: warnings for name, warnings in found.items() if warnings}


def condition(warnings: Warnings, scraped_any: bool) -> c.Condition:
    if warnings:
        text = "; ".join(f"{name}: {w.kind} ({w.message})" for name, ws in sorted(warnings.items()) for w in ws)
        return c.Condition(CONDITION, True, "Warning", text)
    if not scraped_any:
        return c.Condition(CONDITION, None, "NoMetrics", "no member's /metrics could be read yet")
    return c.Condition(CONDITION, False, "Healthy", "")


def with_warnings(members: Iterable[Mapping[str, Any]], warnings: Warnings) -> list[dict[str, Any]]:
    """The status member entries, each with `warnings` when it has any."""
    result = []
    for entry in members:
        entry = {k: v for k, v in entry.items() if k != "warnings"}
        if warnings.get(entry["name"]):
            entry["warnings"] = [w.to_dict() for w in warnings[entry["name"]]]
        result.append(entry)
    return result


def appeared(
    previous_members: Iterable[Mapping[str, Any]] | None, warnings: Warnings
) -> list[tuple[str, MemberWarning]]:
    """Warnings that the previous status did not show yet: one event each."""
    before = {(m.get("name"), w.get("kind")) for m in previous_members or [] for w in m.get("warnings") or []}
    return [(name, w) for name, ws in sorted(warnings.items()) for w in ws if (name, w.kind) not in before]
