"""How often a verification that gave no verdict is tried again. Pure."""

from __future__ import annotations

import datetime

from etcd_operator.core.backup.state import VerificationAttempts

MAX_ATTEMPTS = 5  # per backup key; after the last one, Degraded says so
FIRST_BACKOFF_SECONDS = 60.0  # doubled after every incomplete attempt ...
MAX_BACKOFF_SECONDS = 1800.0  # ... up to this
START_TIMEOUT_SECONDS = 300.0  # from an attempt's recorded start until its scratch pod must have checked


def backoff(attempts: int) -> datetime.timedelta:
    """The wait after the `attempts`-th incomplete attempt (1 -> 60 s, 2 -> 120 s, ...)."""
    return datetime.timedelta(seconds=min(FIRST_BACKOFF_SECONDS * 2 ** max(attempts - 1, 0), MAX_BACKOFF_SECONDS))


def next_attempt(attempts: int, ended: datetime.datetime) -> datetime.datetime | None:
    """When the next attempt is due after the `attempts`-th ended without a verdict; None
    after the last."""
    return ended + backoff(attempts) if attempts < MAX_ATTEMPTS else None


def pending(tried: VerificationAttempts) -> bool:
    """Attempts are left and one is scheduled (none is running)."""
    return not tried.in_progress and tried.attempts < MAX_ATTEMPTS and tried.next_attempt is not None


def exhausted(tried: VerificationAttempts) -> bool:
    return not tried.in_progress and tried.attempts >= MAX_ATTEMPTS
