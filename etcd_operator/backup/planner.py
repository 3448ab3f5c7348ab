"""Decides the one next step for an EtcdBackup from its spec, the run state recorded in
status, and the time. Pure.

Invariants, each covered by tests/unit/test_backup_planner.py:
- a slot is recorded in status (StartSlot) before its run, and a recorded slot is finished
  (RunBackup) under the same name before any other slot starts;
- a schedule the operator refuses (invalid, never fires, too frequent) runs nothing, not
  even an interrupted slot; a suspended one starts nothing;
- no cron slot is started twice, and however many were missed, one catch-up run happens;
- a completed one-shot backup never runs again; a failed one runs again only after its
  spec changed; a schedule set later on either makes it a scheduled backup;
- a verification never interrupts a run: it comes after a recorded slot is finished and
  before the next one starts; it verifies the newest backup, once, when the policy says
  (every Nth backup, or its own schedule).
"""

from __future__ import annotations

import datetime

from etcd_operator.backup import schedule
from etcd_operator.backup import steps as s
from etcd_operator.backup.state import Observed, RunState, ScheduleSpec, VerificationPolicy

COMPLETED = "Completed"
FAILED = "Failed"


def one_shot_slot(observed: Observed) -> str:
    return "once-" + schedule.slot_name(observed.created)


def plan(spec: ScheduleSpec, state: RunState, observed: Observed, now: datetime.datetime) -> s.Step:
    if spec.schedule is None:
        return _plan_one_shot(spec.verification, state, observed, now)
    return _plan_scheduled(spec.schedule, spec.suspend, spec.verification, state, observed, now)


def verification_due(policy: VerificationPolicy, state: RunState, observed: Observed,
                     now: datetime.datetime) -> s.VerifyBackup | None:
    key = state.last_backup_key
    if not policy.enabled or not key or key == state.last_verification_key:
        return None
    if policy.schedule is not None:
        if schedule.problem(policy.schedule, now):
            return None
        due = schedule.due(policy.schedule, state.last_verification_slot, observed.created, now)
        if due.slot is None:
            return None
        return s.VerifyBackup(key=key, slot_time=due.slot, message=f"verification slot for {key}")
    if state.backups_since_verification < policy.every_n:
        return None
    return s.VerifyBackup(key=key, message=f"verifying {key}")


def _plan_one_shot(policy: VerificationPolicy, state: RunState, observed: Observed,
                   now: datetime.datetime) -> s.Step:
    if state.slot_in_progress:
        return s.RunBackup(slot=state.slot_in_progress, one_shot=True,
                           message=f"finishing slot {state.slot_in_progress}")
    if state.phase == COMPLETED:
        verify = verification_due(policy, state, observed, now)
        if verify is not None:
            return verify
        return s.Idle(message="the one-shot backup completed")
    if state.phase == FAILED and state.observed_generation == observed.generation:
        return s.Idle(message="the one-shot backup failed; it runs again when its spec changes")
    slot = one_shot_slot(observed)
    return s.StartSlot(slot=slot, slot_time=None, next_slot=None, one_shot=True,
                       message=f"one-shot backup, slot {slot}")


def _plan_scheduled(expression: str, suspend: bool, policy: VerificationPolicy, state: RunState,
                    observed: Observed, now: datetime.datetime) -> s.Step:
    problem = schedule.problem(expression, now)
    if problem:
        return s.RefuseSchedule(reason=problem.reason, message=problem.message)
    if suspend:
        return s.Suspend(message="spec.suspend is set")
    if state.slot_in_progress:
        return s.RunBackup(slot=state.slot_in_progress, one_shot=False,
                           message=f"finishing slot {state.slot_in_progress}")
    verify = verification_due(policy, state, observed, now)
    if verify is not None:
        return verify
    due = schedule.due(expression, state.last_slot, observed.created, now)
    if due.slot is not None:
        slot = schedule.slot_name(due.slot)
        return s.StartSlot(slot=slot, slot_time=due.slot, next_slot=due.next_slot, one_shot=False,
                           message=f"scheduled slot {slot}")
    return s.WaitForSlot(next_slot=due.next_slot, message=f"next slot {schedule.slot_name(due.next_slot)}")
