"""The backup planner: which slot is due, interrupted slots, suspension, refused schedules,
one-shot backups, verification in passes and its retries. Pure: plan() and build_status()
driven directly."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etcd_operator.controllers.backup.reconciler import VERIFY_RECHECK, delay_after
from etcd_operator.core.backup import retry, schedule
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.planner import one_shot_slot, plan
from etcd_operator.core.backup.state import (
    CheckResult,
    InitFailure,
    Observed,
    RunState,
    ScheduleSpec,
    ScratchPod,
    VerificationPolicy,
)
from etcd_operator.core.backup.status import VERIFICATION_INCOMPLETE, build_status, verification_events
from etcd_operator.core.status_patch import changed_fields as changes
from tests.sim.world import merge_patch

UTC = datetime.UTC
T0 = datetime.datetime(2026, 11, 21, 12, 0, 1, tzinfo=UTC)
CREATED = Observed(T0, generation=1)


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def text(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- schedules the operator refuses ----------------------------------------------------------


@pytest.mark.parametrize("expression", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4 *", "0 0 31 2 * */30"])
def test_a_schedule_that_never_fires_is_refused(expression):
    step = plan(ScheduleSpec(expression), RunState(), CREATED, at(0).timestamp())
    assert isinstance(step, s.RefuseSchedule) and step.reason == schedule.NEVER_FIRES


@pytest.mark.parametrize(
    "now", [at(0), datetime.datetime(2028, 3, 1, tzinfo=UTC), datetime.datetime(2097, 3, 1, tzinfo=UTC)]
)  # 2100 is no leap year
def test_february_29_is_a_schedule_that_fires(now):
    assert schedule.problem("0 0 29 2 *", now) is None
    step = plan(ScheduleSpec("0 0 29 2 *"), RunState(), Observed(now, 1), now.timestamp())
    assert isinstance(step, s.WaitForSlot) and (step.next_slot.month, step.next_slot.day) == (2, 29)


@pytest.mark.parametrize(
    "expression, gap",
    [
        ("* * * * * *", 1),
        ("* * * * * */5", 5),
        ("*/10 * * * * *", 1),  # the "10" is minutes: every second of every tenth minute
        ("0,59 5,6 * * * 0,59", 1),  # 05:59:59 then 06:00:00, across an hour boundary
        ("59,0 23,0 * * * 59,0", 1),  # 23:59:59 then 00:00:00, across midnight
        ("0,59 3,10,11 * * * 0,59", 1),  # only 10:59:59 then 11:00:00, hours after the first fire
        ("* 3 * * 1 */3", 3),  # only on Mondays at 03:xx
    ],
)
def test_a_schedule_faster_than_the_floor_is_refused_by_its_fires_not_its_text(expression, gap):
    problem = schedule.problem(expression, at(0))
    assert problem is not None and problem.reason == schedule.TOO_FREQUENT
    assert f"{gap}s apart" in problem.message
    step = plan(ScheduleSpec(expression), RunState(), CREATED, at(0).timestamp())
    assert isinstance(step, s.RefuseSchedule) and step.reason == schedule.TOO_FREQUENT


@pytest.mark.parametrize("expression", ["* * * * * */10", "* * * * * 0,30", "*/5 * * * *", "@hourly", "0 3 * * *"])
def test_schedules_at_or_above_the_floor_are_accepted(expression):
    assert schedule.problem(expression, at(0)) is None


def test_not_a_cron_expression_is_refused():
    step = plan(ScheduleSpec("every tuesday"), RunState(), CREATED, at(0).timestamp())
    assert isinstance(step, s.RefuseSchedule) and step.reason == schedule.INVALID_SCHEDULE


def test_a_refused_schedule_runs_nothing_not_even_an_interrupted_slot():
    state = RunState(phase="Running", slot_in_progress="20261121T120000Z")
    assert isinstance(plan(ScheduleSpec("0 0 31 2 *"), state, CREATED, at(0).timestamp()), s.RefuseSchedule)


# --- scheduled runs ---------------------------------------------------------------------------


def test_a_due_slot_is_recorded_before_it_runs_then_run_under_the_same_name():
    step = plan(ScheduleSpec("*/10 * * * *"), RunState(), CREATED, at(10.5).timestamp())
    assert isinstance(step, s.StartSlot) and step.slot_time == at(10) - datetime.timedelta(seconds=1)
    status = build_status(step, s.NOTHING_DONE, {}, 1, text(at(10.5)))
    assert status["progress"]["slot"] == step.slot and status["lastScheduleTime"] == text(step.slot_time)
    following = plan(ScheduleSpec("*/10 * * * *"), RunState.from_dict(status), CREATED, at(10.5).timestamp())
    assert following == s.RunBackup(slot=step.slot, one_shot=False, message=following.message)


def test_an_interrupted_slot_is_finished_before_a_later_slot_starts():
    state = RunState(phase="Running", slot_in_progress="20261121T121000Z", last_slot=at(10))
    step = plan(ScheduleSpec("*/10 * * * *"), state, CREATED, at(95).timestamp())
    assert isinstance(step, s.RunBackup) and step.slot == "20261121T121000Z"


def test_suspended_starts_nothing_not_even_an_interrupted_slot():
    for state in (RunState(), RunState(phase="Running", slot_in_progress="20261121T121000Z")):
        assert isinstance(
            plan(ScheduleSpec("*/10 * * * *", suspend=True), state, CREATED, at(95).timestamp()), s.Suspend
        )


def test_between_slots_it_waits_for_the_next():
    step = plan(ScheduleSpec("*/10 * * * *"), RunState(last_slot=at(10)), CREATED, at(15).timestamp())
    assert isinstance(step, s.WaitForSlot) and step.next_slot == at(20) - datetime.timedelta(seconds=1)


# --- one-shot backups -------------------------------------------------------------------------


def test_one_shot_runs_once_then_is_idle():
    step = plan(ScheduleSpec(None), RunState(), CREATED, at(0).timestamp())
    assert step == s.StartSlot(
        slot=one_shot_slot(CREATED), slot_time=None, next_slot=None, one_shot=True, message=step.message
    )
    assert isinstance(
        plan(ScheduleSpec(None), RunState(phase="Running", slot_in_progress=step.slot), CREATED, at(1).timestamp()),
        s.RunBackup,
    )
    assert isinstance(
        plan(ScheduleSpec(None), RunState(phase="Completed", observed_generation=1), CREATED, at(2).timestamp()), s.Idle
    )
    assert isinstance(
        plan(
            ScheduleSpec(None),
            RunState(phase="Completed", observed_generation=1),
            Observed(T0, generation=2),
            at(2).timestamp(),
        ),
        s.Idle,
    )


def test_a_failed_one_shot_runs_again_only_after_its_spec_changed():
    failed = RunState(phase="Failed", observed_generation=1)
    assert isinstance(plan(ScheduleSpec(None), failed, CREATED, at(5).timestamp()), s.Idle)
    assert isinstance(plan(ScheduleSpec(None), failed, Observed(T0, generation=2), at(5).timestamp()), s.StartSlot)


# --- edits that must bring a backup back to life ----------------------------------------------


def pass_once(
    spec: ScheduleSpec, status: dict, observed: Observed, now: datetime.datetime, outcome: s.Outcome = s.NOTHING_DONE
) -> tuple[s.Step, dict]:
    step = plan(spec, RunState.from_dict(status), observed, now.timestamp())
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
    step = plan(ScheduleSpec("*/10 * * * *"), RunState.from_dict(status), CREATED, at(4).timestamp())
    assert changes(status, build_status(step, s.NOTHING_DONE, status, 1, text(at(4)))) == {}


# --- whole histories --------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 25), st.sampled_from(["pass", "crash", "fail"])), min_size=1, max_size=60))
def test_no_slot_is_started_twice_and_runs_only_finish_recorded_slots(history):
    """A pass can be cut short by a crash after its step ran but before its status write,
    or its run can fail; runs still only finish recorded slots, and no slot is recorded or
    reported successful twice."""
    spec, status, minutes = ScheduleSpec("*/7 * * * *"), {}, 0.0
    started: list[str] = []
    reported: list[str] = []
    for advance, event in history:
        minutes += advance
        step = plan(spec, RunState.from_dict(status), CREATED, at(minutes).timestamp())
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


# --- verification in passes, and its retries ---------------------------------------------------

DAILY = ScheduleSpec("0 0 * * *", verification=VerificationPolicy(True))  # no slot due within 12 h of T0
BACKED_UP = {
    "phase": "Scheduled",
    "lastBackup": {"key": "k1"},
    "recentBackups": [{"key": "k1"}],
    "lastSuccessfulTime": "2026-11-21T12:00:01Z",
    "backupsSinceVerification": 1,
}


def scratch(
    uid: str = "u1",
    owned: bool = True,
    phase: str = "Pending",
    exit_code: int | None = None,
    failure: InitFailure | None = None,
) -> ScratchPod:
    check = None if exit_code is None else CheckResult(exit_code, "")
    return ScratchPod(name="b-verify", uid=uid, owned=owned, phase=phase, check=check, init_failure=failure)


CHECKED = scratch(phase="Running", exit_code=0)  # its check container reported Verified


def executed(step: s.Step, verified: bool | None = True) -> s.Outcome:
    """What a working executor returns for the step."""
    match step:
        case s.CreateScratchPod():
            return s.ScratchPodCreated(pod_name="b-verify", pod_uid="u1")
        case s.FinishVerification():
            return s.VerificationDone(
                key=step.key,
                verified=step.verified,
                reason=step.reason,
                message=step.message,
                at="2026-11-21T12:00:00Z",
                complete=step.complete,
            )
    return s.NOTHING_DONE


def verify_pass(
    status: dict,
    now: datetime.datetime,
    pod: ScratchPod | None = None,
    outcome: s.Outcome | None = None,
    spec: ScheduleSpec = DAILY,
) -> tuple[s.Step, dict, list]:
    """One pass as the controller makes it; the status as the API server then has it, and the
    events the pass posts."""
    state = RunState.from_dict(status)
    observed = CREATED
    if state.verification is not None and state.verification.in_progress:
        observed = Observed(T0, 1, scratch_pod=pod, scratch_pod_observed=True)
    step = plan(spec, state, observed, now.timestamp())
    written = build_status(step, executed(step) if outcome is None else outcome, status, 1, text(now))
    events = verification_events(status, written)
    return step, merge_patch(status, changes(status, written)), events


def condition_of(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_an_attempt_is_recorded_before_its_scratch_pod_and_the_pod_by_name_and_uid():
    step, status, _ = verify_pass(BACKED_UP, at(1))
    assert step == s.StartVerification(key="k1", attempt=1, message=step.message)
    assert status["verification"] == {"key": "k1", "attempts": 1, "startTime": text(at(1))}
    assert condition_of(status, "Progressing")["reason"] == "Verifying"
    assert delay_after(step, at(1)) == 0.0
    step, status, _ = verify_pass(status, at(1.01), pod=None)
    assert isinstance(step, s.CreateScratchPod) and status["verification"]["pod"] == {"name": "b-verify", "uid": "u1"}
    step, status, _ = verify_pass(status, at(1.1), pod=scratch())
    assert isinstance(step, s.WaitForScratchPod) and delay_after(step, at(1.1)) == VERIFY_RECHECK
    progressing = condition_of(status, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "Verifying")
    assert "waiting for scratch pod b-verify" in progressing["message"]
    step, status, _ = verify_pass(status, at(1.2), pod=CHECKED)
    assert step == s.FinishVerification(
        key="k1",
        pod_name="b-verify",
        pod_uid="u1",
        verified=True,
        reason="Verified",
        complete=True,
        message=step.message,
    )
    assert "verification" not in status and status["lastVerification"]["verified"] is True
    assert condition_of(status, "Progressing")["status"] == "False"


ONE_MINUTE_IN = at(1)


def in_progress(pod_uid: str | None = "u1", start: datetime.datetime = ONE_MINUTE_IN, attempts: int = 1) -> dict:
    record = {"key": "k1", "attempts": attempts, "startTime": text(start)}
    if pod_uid:
        record["pod"] = {"name": "b-verify", "uid": pod_uid}
    return {**BACKED_UP, "verification": record}


def test_a_pod_whose_uid_is_not_the_recorded_one_is_deleted_by_its_uid_never_compared():
    step, status, _ = verify_pass(in_progress("u1"), at(2), pod=scratch(uid="u2", phase="Running", exit_code=0))
    assert step == s.DeleteStrayScratchPod(key="k1", pod_name="b-verify", pod_uid="u2", message=step.message)
    # killed after creating its pod, before recording it: that pod is not trusted either
    step, _, _ = verify_pass(in_progress(None), at(2), pod=scratch(uid="u9", phase="Running", exit_code=0))
    assert step == s.DeleteStrayScratchPod(key="k1", pod_name="b-verify", pod_uid="u9", message=step.message)
    step, _, _ = verify_pass(in_progress(None), at(2), pod=None)
    assert isinstance(step, s.CreateScratchPod)


def test_a_pod_this_backup_does_not_own_is_never_touched():
    for recorded in ("u1", None):
        step, status, _ = verify_pass(in_progress(recorded), at(2), pod=scratch(uid="x", owned=False))
        assert isinstance(step, s.FinishVerification) and step.pod_uid is None and step.verified is None
        assert status["verification"]["reason"] == "ScratchPodNameTaken"


@pytest.mark.parametrize(
    "spec",
    [
        DAILY,
        ScheduleSpec("0 0 * * *", suspend=True, verification=VerificationPolicy(True)),
        ScheduleSpec("0 0 31 2 *", verification=VerificationPolicy(True)),
        ScheduleSpec("0 0 * * *", verification=VerificationPolicy(False)),
    ],
)
def test_an_attempt_in_progress_is_resumed_with_its_own_pod_and_carried_to_its_end(spec):
    """A restarted operator reads the same status: it takes the recorded pod's verdict, even when
    the backup was suspended, its schedule refused or verification turned off since."""
    step, status, _ = verify_pass(in_progress("u1"), at(3), pod=CHECKED, spec=spec)
    assert isinstance(step, s.FinishVerification) and step.pod_uid == "u1" and step.verified is True
    assert "verification" not in status


def test_the_start_timeout_counts_from_the_recorded_start():
    limit = datetime.timedelta(seconds=retry.START_TIMEOUT_SECONDS)
    step, _, _ = verify_pass(in_progress("u1"), at(1) + limit - datetime.timedelta(seconds=1), pod=scratch())
    assert isinstance(step, s.WaitForScratchPod)
    step, status, _ = verify_pass(in_progress("u1"), at(1) + limit + datetime.timedelta(seconds=1), pod=scratch())
    assert step == s.FinishVerification(
        key="k1", pod_name="b-verify", pod_uid="u1", verified=None, reason="ScratchPodTimeout", message=step.message
    )
    assert status["verification"]["attempts"] == 1 and "startTime" not in status["verification"]
    assert "pod" not in status["verification"]
    # a stray pod that will not go, or a pod never created: the same limit
    step, _, _ = verify_pass(in_progress(None), at(1) + limit + datetime.timedelta(seconds=1), pod=scratch("u7"))
    assert isinstance(step, s.FinishVerification) and step.reason == "ScratchPodTimeout" and step.pod_uid is None
    step, _, _ = verify_pass(in_progress(None), at(1) + limit + datetime.timedelta(seconds=1), pod=None)
    assert isinstance(step, s.FinishVerification) and step.reason == "ScratchPodTimeout"


@pytest.mark.parametrize(
    "pod, verified, reason",
    [
        (scratch(failure=InitFailure("restore", 1, "bad db")), False, "SnapshotNotRestorable"),
        (scratch(failure=InitFailure("fetch", 3, "sha256 differs")), False, "ChecksumMismatch"),
        (scratch(failure=InitFailure("fetch", 1, "connection refused")), None, "SnapshotNotFetched"),
        (scratch(phase="Failed"), None, "ScratchPodFailed"),
        (scratch(phase="Running", exit_code=15), None, "ScratchMemberUnavailable"),
        (scratch(phase="Running", exit_code=1), None, "ScratchCheckFailed"),
        (None, None, "ScratchPodGone"),
    ],
)
def test_how_an_attempt_ends_without_comparing(pod, verified, reason):
    step, status, _ = verify_pass(in_progress("u1"), at(2), pod=pod)
    assert isinstance(step, s.FinishVerification) and (step.verified, step.reason) == (verified, reason)
    assert step.pod_uid == "u1"
    assert ("nextAttemptTime" in status.get("verification", {})) is (verified is None)


HOURLY_VERIFICATION = ScheduleSpec("0 0 * * *", verification=VerificationPolicy(True, schedule="0 * * * *"))


@pytest.mark.parametrize("spec", [DAILY, HOURLY_VERIFICATION])
@pytest.mark.parametrize("verified", [True, False, None])
def test_a_verdict_or_an_inconclusive_comparison_is_never_retried(verified, spec):
    done = s.VerificationDone(key="k1", verified=verified, reason="R", message="m", at=text(at(2)))
    _, status, _ = verify_pass(in_progress("u1"), at(2), pod=CHECKED, outcome=done, spec=spec)
    assert "verification" not in status and status["lastVerification"]["key"] == "k1"
    for minutes in (3, 10, 60, 61, 125, 600):
        step, status, _ = verify_pass(status, at(minutes), spec=spec)
        assert not isinstance(step, s.StartVerification), step


def fail_attempt(status: dict, now: datetime.datetime) -> tuple[s.Step, dict, list]:
    """From a due attempt: start it, then its scratch pod cannot be created (the store is down)."""
    step, status, _ = verify_pass(status, now)
    assert isinstance(step, s.StartVerification), step
    lost = s.VerificationDone(
        key=step.key, verified=None, reason="StorageError", message="down", at=text(now), complete=False
    )
    create, status, events = verify_pass(status, now, pod=None, outcome=lost)
    assert isinstance(create, s.CreateScratchPod)
    return step, status, events


def test_an_incomplete_verification_is_retried_with_backoff_a_bounded_number_of_times():
    status, now = BACKED_UP, at(1)
    for attempt in range(1, retry.MAX_ATTEMPTS + 1):
        step, status, events = fail_attempt(status, now)
        assert step.attempt == attempt and step.key == "k1"
        assert status["verification"]["attempts"] == attempt
        if attempt == retry.MAX_ATTEMPTS:
            break
        wait = datetime.timedelta(seconds=60 * 2 ** (attempt - 1))
        assert status["verification"]["nextAttemptTime"] == text(now + wait)
        assert [e[:2] for e in events] == [("Normal", "VerificationRetryScheduled")]
        assert condition_of(status, "Degraded")["status"] == "False"
        early, _, _ = verify_pass(status, now + wait - datetime.timedelta(seconds=1))
        assert isinstance(early, s.WaitForSlot) and early.recheck_at == now + wait
        assert delay_after(early, now + wait - datetime.timedelta(seconds=1)) == 1.0
        now += wait
    assert "nextAttemptTime" not in status["verification"]
    assert [e[:2] for e in events] == [("Warning", VERIFICATION_INCOMPLETE)]
    degraded = condition_of(status, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", VERIFICATION_INCOMPLETE)
    assert "k1" in degraded["message"] and "StorageError" in degraded["message"]
    for hours in (1, 5, 11):
        later, status, _ = verify_pass(status, now + datetime.timedelta(hours=hours))
        assert isinstance(later, s.WaitForSlot) and later.recheck_at is None
    assert condition_of(status, "Degraded")["reason"] == VERIFICATION_INCOMPLETE
    # a failed run reports itself; a successful run after it reports the verification again;
    # a verdict on a later backup clears it
    failed = s.RunFailed(reason="StorageError", message="down")
    status = merge_patch(status, build_status(s.RunBackup(slot="w", one_shot=False), failed, status, 1, text(now)))
    assert condition_of(status, "Degraded")["reason"] == "StorageError"
    run = s.RunSucceeded(record={"key": "k2"}, completed_at=text(now))
    status = merge_patch(status, build_status(s.RunBackup(slot="x", one_shot=False), run, status, 1, text(now)))
    assert condition_of(status, "Degraded")["reason"] == VERIFICATION_INCOMPLETE
    step, status, _ = verify_pass(status, now)
    assert (
        step.key == "k2"
        and step.attempt == 1
        and status["verification"] == {"key": "k2", "attempts": 1, "startTime": text(now)}
    )
    for _ in range(3):
        step, status, _ = verify_pass(status, now, pod=CHECKED if status.get("verification", {}).get("pod") else None)
    assert status["lastVerification"]["key"] == "k2" and condition_of(status, "Degraded")["status"] == "False"


def retry_due_status(last_key: str = "k1", since: int = 0, recent: tuple[str, ...] = ("k1",)) -> dict:
    return {
        **BACKED_UP,
        "lastBackup": {"key": last_key},
        "recentBackups": [{"key": k} for k in recent],
        "backupsSinceVerification": since,
        "verification": {"key": "k1", "attempts": 1, "nextAttemptTime": text(at(2)), "reason": "StorageError"},
    }


def test_a_due_backup_slot_comes_before_a_retry():
    spec = ScheduleSpec("*/10 * * * *", verification=VerificationPolicy(True))
    step = plan(spec, RunState.from_dict(retry_due_status()), CREATED, at(10.5).timestamp())
    assert isinstance(step, s.StartSlot)
    following = {**retry_due_status(), "lastScheduleTime": text(at(10) - datetime.timedelta(seconds=1))}
    step = plan(spec, RunState.from_dict(following), CREATED, at(10.5).timestamp())
    assert step == s.StartVerification(key="k1", attempt=2, message=step.message)


def test_a_newer_backup_the_policy_would_verify_wins_over_a_retry_of_an_older_one():
    newer = retry_due_status("k2", since=1, recent=("k2", "k1"))
    step, status, _ = verify_pass(newer, at(3))
    assert step == s.StartVerification(key="k2", attempt=1, message=step.message)
    assert status["verification"] == {"key": "k2", "attempts": 1, "startTime": text(at(3))}
    every_third = ScheduleSpec("0 0 * * *", verification=VerificationPolicy(True, every_n=3))
    step = plan(every_third, RunState.from_dict(newer), CREATED, at(3).timestamp())
    assert step == s.StartVerification(key="k1", attempt=2, message=step.message)


def test_no_retry_once_the_backup_left_status():
    gone = retry_due_status("k2", since=1, recent=("k2",))
    every_third = ScheduleSpec("0 0 * * *", verification=VerificationPolicy(True, every_n=3))
    step = plan(every_third, RunState.from_dict(gone), CREATED, at(3).timestamp())
    assert isinstance(step, s.WaitForSlot) and step.recheck_at is None


def test_a_completed_one_shot_backup_wakes_up_for_its_retry():
    one_shot = ScheduleSpec(None, verification=VerificationPolicy(True))
    waiting = {**retry_due_status(), "phase": "Completed"}
    step = plan(one_shot, RunState.from_dict(waiting), CREATED, at(1.5).timestamp())
    assert isinstance(step, s.Idle) and step.recheck_at == at(2)
    assert delay_after(step, at(1.5)) == 30.0
    assert plan(one_shot, RunState.from_dict(waiting), CREATED, at(2).timestamp()) == s.StartVerification(
        key="k1", attempt=2, message=plan(one_shot, RunState.from_dict(waiting), CREATED, at(2).timestamp()).message
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.01, 3),
            st.sampled_from(
                ["none", "pending", "serving", "stray", "stray-serving", "fetch-failed", "store-down", "crash"]
            ),
        ),
        min_size=1,
        max_size=80,
    )
)
def test_whatever_happens_only_the_recorded_pod_is_compared_and_attempts_stay_bounded(history):
    """Pods come and go, attempts fail, the operator dies between a step and its status
    write: only the recorded pod is compared or finished, a stray one is deleted by its own
    uid, no key gets more than MAX_ATTEMPTS, and nothing is tried after its verdict."""
    status, minutes, starts, verdicts = dict(BACKED_UP), 0.0, 0, 0
    for advance, event in history:
        minutes += advance
        recorded = (status.get("verification") or {}).get("pod", {}).get("uid")
        pod = {
            "none": None,
            "pending": scratch(uid=recorded or "u1"),
            "serving": scratch(uid=recorded or "u1", phase="Running", exit_code=0),
            "stray": scratch(uid="other"),
            "stray-serving": scratch(uid="other", phase="Running", exit_code=0),
            "fetch-failed": scratch(uid=recorded or "u1", failure=InitFailure("fetch", 1, "x")),
            "store-down": None,
            "crash": None,
        }[event]
        state = RunState.from_dict(status)
        observed = Observed(T0, 1, scratch_pod=pod, scratch_pod_observed=True)
        step = plan(DAILY, state, observed, at(minutes).timestamp())
        if isinstance(step, s.FinishVerification) and step.pod_uid is not None:
            assert step.pod_uid == recorded
        if isinstance(step, s.DeleteStrayScratchPod):
            assert step.pod_uid != recorded and step.pod_uid == pod.uid
        if isinstance(step, s.StartVerification):
            assert verdicts == 0
        outcome = executed(step)
        if event == "store-down" and isinstance(step, s.CreateScratchPod):
            outcome = s.VerificationDone(
                key="k1", verified=None, reason="StorageError", message="x", at="t", complete=False
            )
        if event == "crash":
            continue  # the status write never happened: a StartVerification did not happen either
        starts += isinstance(step, s.StartVerification)
        if isinstance(outcome, s.VerificationDone) and outcome.verified is not None:
            verdicts += 1
        status = merge_patch(status, changes(status, build_status(step, outcome, status, 1, text(at(minutes)))))
    assert starts <= retry.MAX_ATTEMPTS and verdicts <= 1
