"""When a scheduled backup runs next, and whether a schedule is one the operator runs. Pure.

Missed runs are handled as cron users expect: however many slots were missed while the
operator was down, at most one catch-up run happens, for the latest missed slot."""

from __future__ import annotations

import dataclasses
import datetime
import functools

from croniter import CroniterBadDateError, croniter

UTC = datetime.UTC

# The shortest gap allowed between two runs of one backup. Each run streams the whole
# database, and with retention.maxBackups a faster schedule would push every older backup
# out of the bucket within seconds.
MIN_INTERVAL_SECONDS = 10
# How far ahead the next run must be. Ten years cover `0 0 29 2 *` across 2100, which is
# not a leap year (2096 -> 2104).
NEVER_FIRES_HORIZON_YEARS = 10

INVALID_SCHEDULE = "InvalidSchedule"
NEVER_FIRES = "ScheduleNeverFires"
TOO_FREQUENT = "ScheduleTooFrequent"
PROBLEM_REASONS = frozenset({INVALID_SCHEDULE, NEVER_FIRES, TOO_FREQUENT})


@dataclasses.dataclass(frozen=True)
class ScheduleProblem:
    reason: str  # one of PROBLEM_REASONS
    message: str


def parses(expression: str) -> bool:
    """The cron parser accepts it (5 fields, an optional sixth for seconds, or a macro)."""
    return bool(croniter.is_valid(expression))


def problem(expression: str, now: datetime.datetime) -> ScheduleProblem | None:
    """Why `expression` cannot be run as a backup schedule, or None when it can."""
    if not parses(expression):
        return ScheduleProblem(INVALID_SCHEDULE, f"spec.schedule {expression!r} is not a cron expression")
    horizon = now + datetime.timedelta(days=366 * NEVER_FIRES_HORIZON_YEARS)
    try:
        upcoming = croniter(expression, now, max_years_between_matches=NEVER_FIRES_HORIZON_YEARS).get_next(
            datetime.datetime
        )
    except CroniterBadDateError:
        upcoming = None
    if upcoming is None or upcoming > horizon:
        return ScheduleProblem(
            NEVER_FIRES, f"spec.schedule {expression!r} has no date in the next {NEVER_FIRES_HORIZON_YEARS} years"
        )
    gap = shortest_gap(expression, now.astimezone(UTC).date())
    if gap is not None and gap < MIN_INTERVAL_SECONDS:
        return ScheduleProblem(
            TOO_FREQUENT,
            f"spec.schedule {expression!r} fires {gap:g}s apart; backups "
            f"must be at least {MIN_INTERVAL_SECONDS}s apart",
        )
    return None


@functools.lru_cache(maxsize=256)
def shortest_gap(expression: str, day: datetime.date) -> float | None:
    """The shortest gap in seconds between consecutive fires during one day, starting at the
    first fire after the hour before `day`'s midnight (so midnight and every hour and minute
    boundary of a firing day are crossed), or None when it fires less than twice in that day.
    Stops at the first gap below the floor. A gap that only occurs across a month boundary
    is seen on the first day of the month only."""
    start = datetime.datetime.combine(day, datetime.time(), UTC) - datetime.timedelta(hours=1)
    fires = croniter(expression, start, ret_type=float)
    previous = fires.get_next()
    end = previous + 86400
    shortest: float | None = None
    while True:
        current = fires.get_next()
        if current > end:
            return shortest
        gap = current - previous
        shortest = gap if shortest is None else min(shortest, gap)
        if shortest < MIN_INTERVAL_SECONDS:
            return shortest
        previous = current


# How far the longest gap between two fires is looked for: a year and a month hold every
# monthly and yearly pattern; a week of fires every minute holds weekday patterns of those.
GAP_WINDOW_DAYS = 400
GAP_MAX_FIRES = 7 * 24 * 60


@functools.lru_cache(maxsize=256)
def longest_gap(expression: str, year: int) -> float:
    """The longest gap in seconds between consecutive fires of `expression`, over the
    GAP_WINDOW_DAYS from the start of `year` (at most GAP_MAX_FIRES fires), or between its
    next two fires when it fires less often. A backup is late once its last success is older
    than this: however irregular the schedule, no slot was missed before. Walks up to about
    10,000 fires (0.2 s): call it in a thread. Only for expressions `problem` accepts."""
    start = datetime.datetime(year, 1, 1, tzinfo=UTC)
    fires = croniter(expression, start, ret_type=float, max_years_between_matches=NEVER_FIRES_HORIZON_YEARS)
    previous = fires.get_next()
    end = start.timestamp() + GAP_WINDOW_DAYS * 86400
    longest: float | None = None
    for _ in range(GAP_MAX_FIRES):
        current = fires.get_next()
        gap = current - previous
        longest = gap if longest is None else max(longest, gap)
        if current > end:
            break
        previous = current
    if longest is None:
        raise ValueError(f"spec.schedule {expression!r} fires fewer than twice")
    return longest


def interval(expression: str | None, now: datetime.datetime) -> float | None:
    """The longest gap of a schedule the operator runs (longest_gap), or None when there is
    no schedule or it is refused. Call it in a thread."""
    if expression is None or problem(expression, now) is not None:
        return None
    return longest_gap(expression, now.astimezone(UTC).year)


@dataclasses.dataclass(frozen=True)
class Due:
    slot: datetime.datetime | None  # the slot to run now, if any
    next_slot: datetime.datetime  # the slot after that


def due(
    expression: str, last_slot: datetime.datetime | None, created: datetime.datetime, now: datetime.datetime
) -> Due:
    """`last_slot` is the slot of the last run started (recorded before it starts).
    Only for expressions `problem` accepts."""
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
