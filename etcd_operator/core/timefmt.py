"""Timestamps as Kubernetes writes them (RFC 3339, UTC). Pure; the one place that reads
or writes them."""

from __future__ import annotations

import datetime

UTC = datetime.UTC
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # metav1.Time
MICRO_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # metav1.MicroTime (a Lease's renewTime)


def parse_datetime(text: str) -> datetime.datetime:
    """The moment `text` names, with its offset ("Z" read as UTC); ValueError otherwise."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def parse_time(text: str | None) -> float | None:
    """Unix seconds of `text`; None when empty."""
    if not text:
        return None
    return parse_datetime(text).timestamp()


def parse_utc(text: str | None) -> datetime.datetime | None:
    """The moment of `text` in UTC; None when empty."""
    ts = parse_time(text)
    return None if ts is None else datetime.datetime.fromtimestamp(ts, UTC)


def format_time(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, UTC).strftime(TIME_FORMAT)


def format_precise_time(ts: float) -> str:
    """RFC 3339 in UTC with milliseconds: a moment finer than a second (a revision's arrival)."""
    return datetime.datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_text() -> str:
    return datetime.datetime.now(UTC).strftime(TIME_FORMAT)


def now_micro_text() -> str:
    return datetime.datetime.now(UTC).strftime(MICRO_TIME_FORMAT)
