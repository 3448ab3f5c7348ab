"""The backup planner: which slot is due, interrupted slots, suspension, refused schedules,
one-shot backups. Pure: plan() and build_status() driven directly."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings, strategies as st

from etcd_operator.backup import schedule
from etcd_operator.backup import steps as s
from etcd_operator.backup.planner import one_shot_slot, plan
from etcd_operator.backup.state import Observed, RunState, ScheduleSpec
from etcd_operator.backup.status import build_status, changes

UTC = datetime.timezone.utc
T0 = datetime.datetime(2026, 11, 21, 12, 0, 1, tzinfo=UTC)
CREATED = Observed(T0, generation=1)


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def text(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- schedules the operator refuses ----------------------------------------------------------

@pytest.mark.parametrize("expression", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4 *", "0 0 31 2 * */30"])
def test_a_schedule_that_never_fires_is_refused(expression):
    step = plan(ScheduleSpec(expression), RunState(), CREATED, at(0))
    assert isinstance(step, s.RefuseSchedule) and step.reason == schedule.NEVER_FIRES


@pytest.mark.parametrize("now", [at(0), datetime.datetime(2028, 3, 1, tzinfo=UTC),
                                 datetime.datetime(2097, 3, 1, tzinfo=UTC)])  # 2100 is no leap year
def test_february_29_is_a_schedule_that_fires(now):
    assert schedule.problem("0 0 29 2 *", now) is None
    step = plan(ScheduleSpec("0 0 29 2 *"), RunState(), Observed(now, 1), now)
    assert isinstance(step, s.WaitForSlot) and (step.next_slot.month, step.next_slot.day) == (2, 29)


@pytest.mark.parametrize("expression, gap", [
    ("* * * * * *", 1),
    ("* * * * * */5", 5),
    ("*/10 * * * * *", 1),           # the "10" is minutes: every second of every tenth minute
    ("0,59 5,6 * * * 0,59", 1),      # 05:59:59 then 06:00:00, across an hour boundary
    ("59,0 23,0 * * * 59,0", 1),     # 23:59:59 then 00:00:00, across midnight
    ("0,59 3,10,11 * * * 0,59", 1),  # only 10:59:59 then 11:00:00, hours after the first fire
    ("* 3 * * 1 */3", 3),            # only on Mondays at 03:xx
])
def test_a_schedule_faster_than_the_floor_is_refused_by_its_fires_not_its_text(expression, gap):
    problem = schedule.problem(expression, at(0))
    assert problem is not None and problem.reason == schedule.TOO_FREQUENT
    assert f"{gap}s apart" in problem.message
    step = plan(ScheduleSpec(expression), RunState(), CREATED, at(0))
    assert isinstance(step, s.RefuseSchedule) and step.reason == schedule.TOO_FREQUENT


@pytest.mark.parametrize("expression", ["* * * * * */10", "* * * * * 0,30", "*/5 * * * *", "@hourly", "0 3 * * *"])
def test_schedules_at_or_above_the_floor_are_accepted(expression):
    assert schedule.problem(expression, at(0)) is None


def test_not_a_cron_expression_is_refused():
    step = plan(ScheduleSpec("every tuesday"), RunState(), CREATED, at(0))
    assert isinstance(step, s.RefuseSchedule) and step.reason == schedule.INVALID_SCHEDULE


def test_a_refused_schedule_runs_nothing_not_even_an_interrupted_slot():
    state = RunState(phase="Running", slot_in_progress="20261121T120000Z")
    assert isinstance(plan(ScheduleSpec("0 0 31 2 *"), state, CREATED, at(0)), s.RefuseSchedule)


# --- scheduled runs ---------------------------------------------------------------------------

def test_a_due_slot_is_recorded_before_it_runs_then_run_under_the_same_name():
    step = plan(ScheduleSpec("*/10 * * * *"), RunState(), CREATED, at(10.5))
    assert isinstance(step, s.StartSlot) and step.slot_time == at(10) - datetime.timedelta(seconds=1)
    status = build_status(step, s.NOTHING_DONE, {}, 1, text(at(10.5)))
    assert status["progress"]["slot"] == step.slot and status["lastScheduleTime"] == text(step.slot_time)
    following = plan(ScheduleSpec("*/10 * * * *"), RunState.from_dict(status), CREATED, at(10.5))
    assert following == s.RunBackup(slot=step.slot, one_shot=False, message=following.message)


def test_an_interrupted_slot_is_finished_before_a_later_slot_starts():
    state = RunState(phase="Running", slot_in_progress="20261121T121000Z", last_slot=at(10))
    step = plan(ScheduleSpec("*/10 * * * *"), state, CREATED, at(95))
    assert isinstance(step, s.RunBackup) and step.slot == "20261121T121000Z"


def test_suspended_starts_nothing_not_even_an_interrupted_slot():
    for state in (RunState(), RunState(phase="Running", slot_in_progress="20261121T121000Z")):
        assert isinstance(plan(ScheduleSpec("*/10 * * * *", suspend=True), state, CREATED, at(95)), s.Suspend)


def test_between_slots_it_waits_for_the_next():
    step = plan(ScheduleSpec("*/10 * * * *"), RunState(last_slot=at(10)), CREATED, at(15))
    assert isinstance(step, s.WaitForSlot) and step.next_slot == at(20) - datetime.timedelta(seconds=1)


# --- one-shot backups -------------------------------------------------------------------------

def test_one_shot_runs_once_then_is_idle():
    step = plan(ScheduleSpec(None), RunState(), CREATED, at(0))
    assert step == s.StartSlot(slot=one_shot_slot(CREATED), slot_time=None, next_slot=None, one_shot=True,
                               message=step.message)
    assert isinstance(plan(ScheduleSpec(None), RunState(phase="Running", slot_in_progress=step.slot), CREATED,
                           at(1)), s.RunBackup)
    assert isinstance(plan(ScheduleSpec(None), RunState(phase="Completed", observed_generation=1), CREATED,
                           at(2)), s.Idle)
    assert isinstance(plan(ScheduleSpec(None), RunState(phase="Completed", observed_generation=1),
                           Observed(T0, generation=2), at(2)), s.Idle)


def test_a_failed_one_shot_runs_again_only_after_its_spec_changed():
    failed = RunState(phase="Failed", observed_generation=1)
    assert isinstance(plan(ScheduleSpec(None), failed, CREATED, at(5)), s.Idle)
    assert isinstance(plan(ScheduleSpec(None), failed, Observed(T0, generation=2), at(5)), s.StartSlot)


# --- edits that must bring a backup back to life ----------------------------------------------

def pass_once(spec: ScheduleSpec, status: dict, observed: Observed, now: datetime.datetime,
              outcome: s.Outcome = s.NOTHING_DONE) -> tuple[s.Step, dict]:
    step = plan(spec, RunState.from_dict(status), observed, now)
    if isinstance(step, s.RunBackup) and outcome is s.NOTHING_DONE:
        outcome = succeeded(step.slot)
    written = build_status(step, outcome, status, observed.generation, text(now))
    return step, {**status, **written}


def succeeded(slot: str) -> s.RunSucceeded:
    return s.RunSucceeded(record={"key": f"p/ns/b/{slot}.db"}, completed_at="2026-11-21T13:00:00Z")


def test_an_invalid_schedule_that_is_fixed_starts_running():
    step, status = pass_once(ScheduleSpec("0 0 31 2 *"), {}, CREATED, at(1))
    assert isinstance(step, s.RefuseSchedule) and status["phase"] == "Failed"
    step, status = pass_once(ScheduleSpec("*/10 * * * *"), status, Observed(T0, 2), at(61))
    assert isinstance(step, s.StartSlot) and not step.one_shot
    step, status = pass_once(ScheduleSpec("*/10 * * * *"), status, Observed(T0, 2), at(61))
    assert isinstance(step, s.RunBackup)
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert status["phase"] == "Scheduled" and degraded["status"] == "False"


def test_a_schedule_added_to_a_finished_one_shot_starts_running():
    status: dict = {}
    for _ in range(3):
        step, status = pass_once(ScheduleSpec(None), status, CREATED, at(1))
    assert isinstance(step, s.Idle) and status["phase"] == "Completed"
    step, status = pass_once(ScheduleSpec("*/10 * * * *"), status, Observed(T0, 2), at(5))
    assert isinstance(step, s.WaitForSlot) and status["phase"] == "Scheduled"
    step, status = pass_once(ScheduleSpec("*/10 * * * *"), status, Observed(T0, 2), at(10.1))
    assert isinstance(step, s.StartSlot) and step.slot == schedule.slot_name(at(10) - datetime.timedelta(seconds=1))


def test_a_quiet_pass_writes_nothing():
    _, status = pass_once(ScheduleSpec("*/10 * * * *"), {}, CREATED, at(3))
    step = plan(ScheduleSpec("*/10 * * * *"), RunState.from_dict(status), CREATED, at(4))
    assert changes(status, build_status(step, s.NOTHING_DONE, status, 1, text(at(4)))) == {}


# --- whole histories --------------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 25), st.sampled_from(["pass", "crash", "fail"])), min_size=1,
                max_size=60))
def test_no_slot_is_started_twice_and_runs_only_finish_recorded_slots(history):
    """A pass can be cut short by a crash after its step ran but before its status write,
    or its run can fail; runs still only finish recorded slots, and no slot is recorded or
    reported successful twice."""
    spec, status, minutes = ScheduleSpec("*/7 * * * *"), {}, 0.0
    started: list[str] = []
    reported: list[str] = []
    for advance, event in history:
        minutes += advance
        step = plan(spec, RunState.from_dict(status), CREATED, at(minutes))
        outcome: s.Outcome = s.NOTHING_DONE
        if isinstance(step, s.RunBackup):
            assert step.slot == status["progress"]["slot"]
            outcome = s.RunFailed(reason="StorageError", message="S3 down") if event == "fail" else succeeded(step.slot)
        if event == "crash":
            continue  # the status write never happened
        status = {**status, **build_status(step, outcome, status, 1, text(at(minutes)))}
        if isinstance(step, s.StartSlot):
            started.append(step.slot)
        if isinstance(outcome, s.RunSucceeded):
            reported.append(step.slot)
    assert started == sorted(set(started))
    assert reported == sorted(set(reported)) and set(reported) <= set(started)
