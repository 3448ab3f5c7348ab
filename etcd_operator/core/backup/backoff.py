"""When a backup run that failed for a cause that may pass is tried again. Pure.

Like a Kubernetes Job: `spec.backoffLimit` retries (default 6) after the first attempt,
10 s after the first failure, doubling, at most 5 min apart. Each attempt of a slot runs
under that slot's name, so a retry never makes a second backup."""

from __future__ import annotations

import datetime

DEFAULT_BACKOFF_LIMIT = 6
FIRST_BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 300.0


def backoff(failures: int) -> datetime.timedelta:
    """The wait after the `failures`-th failed attempt of a slot (1 -> 10 s, 2 -> 20 s, ...)."""
    return datetime.timedelta(seconds=min(FIRST_BACKOFF_SECONDS * 2 ** max(failures - 1, 0), MAX_BACKOFF_SECONDS))


def retry_at(failures: int, backoff_limit: int, transient: bool, ended: datetime.datetime) -> datetime.datetime | None:
    """Whether a failed attempt is tried again, and when: only one whose cause may pass
    (transient), while `backoff_limit` allows; None: the slot ends."""
    return next_attempt(failures, backoff_limit, ended) if transient else None


def next_attempt(failures: int, backoff_limit: int, ended: datetime.datetime) -> datetime.datetime | None:
    """When the slot is tried again after its `failures`-th failed attempt; None once
    `backoff_limit` retries were used."""
    return ended + backoff(failures) if failures <= backoff_limit else None
