"""The status a backup pass writes: conditions per step, recent backups, events on refusal."""

from __future__ import annotations

import datetime

from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.status import RECENT_BACKUPS, build_status, schedule_events
from etcd_operator.core.status_patch import changed_fields as changes

UTC = datetime.UTC
NEXT = datetime.datetime(2026, 11, 21, 12, 10, tzinfo=UTC)
WAIT = s.WaitForSlot(next_slot=NEXT)
REFUSED = s.RefuseSchedule(reason="ScheduleNeverFires", message="spec.schedule '0 0 31 2 *' has no date")


def condition(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def write(status: dict, step: s.Step, outcome: s.Outcome = s.NOTHING_DONE, now: str = "2026-11-21T12:00:00Z") -> dict:
    return {**status, **build_status(step, outcome, status, 3, now)}


def test_a_refused_schedule_is_degraded_until_the_schedule_is_accepted():
    status = write({}, REFUSED)
    assert status["phase"] == "Failed" and status["nextScheduleTime"] is None
    assert (condition(status, "Degraded")["status"], condition(status, "Degraded")["reason"]) == (
        "True",
        REFUSED.reason,
    )
    assert condition(status, "Progressing")["status"] == "False"
    status = write(status, WAIT)
    assert condition(status, "Degraded") | {"lastTransitionTime": ""} == {
        "type": "Degraded",
        "status": "False",
        "reason": "Healthy",
        "message": "",
        "lastTransitionTime": "",
        "observedGeneration": 3,
    }
    assert status["phase"] == "Scheduled" and status["nextScheduleTime"] == "2026-11-21T12:10:00Z"


def test_a_failed_run_stays_reported_until_a_run_succeeds():
    run = s.RunBackup(slot="20261121T120000Z", one_shot=False)
    status = write({}, run, s.RunFailed(reason="BucketNotFound", message="S3: no such bucket"))
    for step in (
        WAIT,
        s.StartSlot(slot="20261121T121000Z", slot_time=NEXT, next_slot=None, one_shot=False),
        s.Suspend(),
    ):
        status = write(status, step)
        assert condition(status, "Degraded")["reason"] == "BucketNotFound"
    status = write(status, run, s.RunSucceeded(record={"key": "k1"}, completed_at="2026-11-21T12:11:00Z"))
    assert condition(status, "Degraded")["status"] == "False"
    assert condition(status, "Available")["status"] == "True" and "k1" in condition(status, "Available")["message"]


def test_one_shot_outcomes_set_the_final_phase_and_clear_progress():
    start = s.StartSlot(slot="once-x", slot_time=None, next_slot=None, one_shot=True)
    status = write({}, start, now="2026-11-21T12:00:05Z")
    assert status["phase"] == "Running" and "lastScheduleTime" not in status
    assert status["progress"] == {"slot": "once-x", "startTime": "2026-11-21T12:00:05Z", "bytesSent": 0}
    assert condition(status, "Progressing")["status"] == "True"
    run = s.RunBackup(slot="once-x", one_shot=True)
    done = write(status, run, s.RunSucceeded(record={"key": "k"}, completed_at="2026-11-21T12:01:00Z"))
    assert done["phase"] == "Completed" and done["progress"] is None and done["lastSuccessfulTime"]
    failed = write(status, run, s.RunFailed(reason="ClusterNotFound", message="no cluster"))
    assert failed["phase"] == "Failed" and failed["progress"] is None
    assert condition(failed, "Available")["reason"] == "NoBackupYet"


def test_recent_backups_drop_deleted_and_repeated_keys_and_stay_bounded():
    previous = {"recentBackups": [{"key": f"k{i}"} for i in range(12)]}
    run = s.RunBackup(slot="x", one_shot=False)
    status = write(
        previous,
        run,
        s.RunSucceeded(record={"key": "k3"}, completed_at="2026-11-21T12:00:00Z", deleted_keys=("k0", "k1")),
    )
    keys = [r["key"] for r in status["recentBackups"]]
    assert keys[0] == "k3" and keys.count("k3") == 1 and not {"k0", "k1"} & set(keys)
    assert len(keys) == RECENT_BACKUPS


def test_transition_times_move_only_when_a_condition_changes_and_quiet_passes_write_nothing():
    first = write({}, WAIT, now="2026-11-21T12:00:00Z")
    again = build_status(WAIT, s.NOTHING_DONE, first, 3, "2026-11-21T12:05:00Z")
    assert changes(first, again) == {}


def test_a_refusal_is_announced_once_per_reason():
    refused = write({}, REFUSED)
    assert schedule_events({}, refused) == [("Warning", REFUSED.reason, REFUSED.message)]
    assert schedule_events(refused, write(refused, REFUSED)) == []
    too_fast = write(refused, s.RefuseSchedule(reason="ScheduleTooFrequent", message="1s apart"))
    assert schedule_events(refused, too_fast) == [("Warning", "ScheduleTooFrequent", "1s apart")]
    failed_run = write({}, s.RunBackup(slot="x", one_shot=True), s.RunFailed(reason="StorageError", message="m"))
    assert schedule_events({}, failed_run) == []
