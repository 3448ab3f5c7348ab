"""Timestamps in the formats the Kubernetes API uses."""

from __future__ import annotations

import datetime


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def rfc3339(when: datetime.datetime | None = None) -> str:
    return (when or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(when: datetime.datetime | None = None) -> str:
    return (when or now()).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
