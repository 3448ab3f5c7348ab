"""When a scheduled backup runs next. Pure.

Missed runs are handled as cron users expect: however many slots were missed while the
operator was down, at most one catch-up run happens, for the latest missed slot."""

from __future__ import annotations

import dataclasses
import datetime

from croniter import croniter

UTC = datetime.timezone.utc


def valid(expression: str) -> bool:
    return croniter.is_valid(expression)


@dataclasses.dataclass(frozen=True)
class Due:
    slot: datetime.datetime | None  # the slot to run now, if any
    next_slot: datetime.datetime    # the slot after that


def due(expression: str, last_slot: datetime.datetime | None, created: datetime.datetime,
        now: datetime.datetime) -> Due:
    """`last_slot` is the slot of the last run started (recorded before it starts)."""
    start = last_slot or created
    upcoming = croniter(expression, start).get_next(datetime.datetime)
    if upcoming > now:
        return Due(None, upcoming)
    # One or more slots have passed since the last run: run the latest of them once.
    latest = croniter(expression, now).get_prev(datetime.datetime)
    if last_slot is not None and latest <= last_slot:
        return Due(None, croniter(expression, now).get_next(datetime.datetime))
    return Due(latest, croniter(expression, latest).get_next(datetime.datetime))


def slot_name(slot: datetime.datetime) -> str:
    return slot.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
