"""The status one pass over an EtcdBackup writes, built from its step and the outcome. Pure.

Conditions: Available (a backup exists; its message also says how many expired backups S3
Object Lock keeps, and when the first may go), Progressing (a run or a verification is under
way; False with reason WaitingFor... while a due run waits for its cluster or a Secret, and
BackupRetryScheduled while a failed attempt waits for its retry), Degraded (the last run
failed, a verification found a backup that differs from its source, a verification gave no
verdict in all its attempts, or the schedule is refused). A run's failure stays reported
until a run succeeds, through every new slot of an outage; a failed or incomplete
verification's, until a verification gives a verdict; a refused schedule's, until the
schedule is accepted. Ready sums them up for `kubectl wait` and kstatus (ready_condition)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core.backup import backoff, object_lock, retention, retry
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.continuous_status import CONDITION as CONTINUOUS_CONDITION
from etcd_operator.core.backup.continuous_status import continuous_fields
from etcd_operator.core.backup.planner import STREAM_DISABLED, STREAM_STOPPED
from etcd_operator.core.backup.schedule import PROBLEM_REASONS
from etcd_operator.core.backup.state import VerificationAttempts
from etcd_operator.core.storage_policy import AMBIENT_NOT_ALLOWED
from etcd_operator.core.timefmt import format_time, parse_datetime

RECENT_BACKUPS = 10
HEALTHY = c.Condition("Degraded", False, "Healthy")
VERIFICATION_FAILED = "BackupVerificationFailed"
VERIFICATION_INCOMPLETE = "VerificationIncomplete"
VERIFYING = "Verifying"
NOT_STARTED = "RunNotStarted"  # the live fence refused a run: nothing started
VERIFICATION_REASONS = (VERIFICATION_FAILED, VERIFICATION_INCOMPLETE)
RETRY_SCHEDULED = "BackupRetryScheduled"
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"


def build_status(
    step: s.Step, outcome: s.Outcome, previous: Mapping[str, Any], generation: int | None, now: str
) -> dict[str, Any]:
    """The status fields this pass sets; `now` is an RFC 3339 time."""
    fields, progressing, degraded = _step_fields(step, outcome, previous, now)
    merged = {**previous, **fields}
    chain_fields, continuous = continuous_fields(step, outcome, previous, now)
    if chain_fields is not None:
        fields["continuous"] = {**(previous.get("continuous") or {}), **chain_fields}
    conditions = [_available(merged), progressing, degraded or _carried_degraded(previous)]
    continuous = continuous or _carried(previous, CONTINUOUS_CONDITION)
    if continuous is not None:
        conditions.append(continuous)
    conditions.append(stalled_condition({**merged, **fields}, conditions))
    conditions.append(ready_condition({**merged, **fields}, conditions))
    fields["conditions"] = c.merge(previous.get("conditions"), conditions, now, generation)
    fields["observedGeneration"] = generation
    return fields


# The Degraded reasons a backup does not get past without a person: a refused schedule or
# refused ambient credentials, and a run's failure whose cause does not pass by itself (the
# permanent ones of controllers/backup/failure.py with a reason of their own; a bare
# StorageError may be either, and is left out).
STALLED_REASONS = PROBLEM_REASONS | {
    AMBIENT_NOT_ALLOWED,
    "BucketNotFound",
    "InvalidCredentials",
    "AccessDenied",
    "CredentialsNotFound",
    "CredentialsRefused",
    "InsecureEndpoint",
    "EncryptionKeyMissing",
    "EncryptionKeyInvalid",
    "MemoryBudgetTooSmall",
    "ManifestUnauthenticated",
    "SlotTakenByForeignBackup",
}


def stalled_condition(status: Mapping[str, Any], conditions: list[c.Condition]) -> c.Condition:
    """Stalled: True while Degraded's reason needs a person (STALLED_REASONS), and for a
    one-shot backup that failed, which never runs again; False once a run succeeds."""
    degraded = next(cond for cond in conditions if cond.type == "Degraded")
    if degraded.status and (degraded.reason in STALLED_REASONS or status.get("phase") == "Failed"):
        return c.stalled(degraded)
    return c.stalled(None)


def ready_condition(status: Mapping[str, Any], conditions: list[c.Condition]) -> c.Condition:
    """Ready, the summary `kubectl wait` and kstatus (Flux, Argo CD) read: True when the last
    backup succeeded and nothing reported since speaks against it (a one-shot backup:
    Completed; a schedule: its last run; continuous: besides, the writer streams and has held
    every revision of the cluster at least once on its current chain); False with the reason
    of what is in the way: Degraded's (a failed run or verification, a refused schedule), the
    writer's, or, before the first backup, what the backup waits for."""
    by_type = {cond.type: cond for cond in conditions}
    degraded = by_type["Degraded"]
    if degraded.status:
        return c.Condition("Ready", False, degraded.reason, degraded.message)
    available, progressing = by_type["Available"], by_type["Progressing"]
    if not available.status:
        if progressing.reason != "Idle":
            return c.Condition("Ready", False, progressing.reason, progressing.message)
        return c.Condition("Ready", False, available.reason, available.message)
    stream = by_type.get(CONTINUOUS_CONDITION)
    if stream is not None and stream.reason not in (STREAM_STOPPED, STREAM_DISABLED):
        if not stream.status:
            return c.Condition("Ready", False, stream.reason, stream.message)
        record = status.get("continuous") or {}
        chain = record.get("chain")
        if not chain or (record.get("caughtUp") or {}).get("chain") != chain:
            return c.Condition(
                "Ready",
                False,
                "CatchingUp",
                f"chain {chain} has not yet held every revision of the cluster at once",
            )
        return c.Condition("Ready", True, "CaughtUp", f"{available.message}; {stream.message}")
    reason = "Completed" if status.get("phase") == "Completed" else "BackupSucceeded"
    return c.Condition("Ready", True, reason, available.message)


def progress_fields(slot: str, started: str, sent: int, member: str) -> dict[str, Any]:
    """What a run reports while it uploads: bytes sent to the store so far, from which member."""
    return {"progress": {"slot": slot, "startTime": started, "bytesSent": sent, "member": member}}


def pending_upload_fields(pending: list[dict[str, str]]) -> dict[str, Any]:
    """The multipart uploads a run started and has not finished or aborted, recorded before
    any part is sent: the next run aborts them by key and ID."""
    return {"pendingUploads": pending}


def schedule_events(previous: Mapping[str, Any], status: Mapping[str, Any]) -> list[s.Event]:
    """A Warning when a schedule is newly refused (run failures have their own events)."""
    before = c.find(previous.get("conditions"), "Degraded") or {}
    after = c.find(status.get("conditions"), "Degraded") or {}
    if after.get("status") != "True" or after.get("reason") not in PROBLEM_REASONS:
        return []
    if before.get("status") == "True" and before.get("reason") == after.get("reason"):
        return []
    return [("Warning", after["reason"], after["message"])]


def verification_events(previous: Mapping[str, Any], status: Mapping[str, Any]) -> list[s.Event]:
    """When an attempt ended without a verdict: Normal while attempts are left, Warning after
    the last. `status` holds the fields this pass sets."""
    before = previous.get("verification") or {}
    after = status.get("verification")
    if not after or not before.get("startTime") or after.get("startTime") or not after.get("reason"):
        return []
    what = (
        f"{after['key']}: attempt {after.get('attempts')} gave no verdict ({after['reason']}: {after.get('message')})"
    )
    if after.get("nextAttemptTime"):
        return [("Normal", "VerificationRetryScheduled", f"{what}; next attempt at {after['nextAttemptTime']}")]
    return [("Warning", VERIFICATION_INCOMPLETE, f"{what}; that was the last of {retry.MAX_ATTEMPTS} attempts")]


def run_events(step: s.Step, outcome: s.Outcome, status: Mapping[str, Any]) -> list[s.Event]:
    """A Warning for every failed attempt, saying whether and when it is tried again.
    `status` holds the fields this pass sets."""
    if not isinstance(step, s.RunBackup) or not isinstance(outcome, s.RunFailed):
        return []
    what = (
        f"attempt {step.attempt} of {step.backoff_limit + 1} at slot {step.slot} failed: "
        f"{outcome.reason}: {outcome.message}"
    )
    if status.get("nextAttemptTime"):
        return [("Warning", "BackupAttemptFailed", f"{what}; tried again at {status['nextAttemptTime']}")]
    return [("Warning", "BackupFailed", f"{what}; {_not_retried(step, outcome)}")]


def _not_retried(step: s.RunBackup, outcome: s.RunFailed) -> str:
    if outcome.transient:
        return f"not tried again: spec.backoffLimit ({step.backoff_limit}) retries were used"
    return "not tried again: this cause does not pass by itself"


def _step_fields(
    step: s.Step, outcome: s.Outcome, previous: Mapping[str, Any], now: str
) -> tuple[dict[str, Any], c.Condition, c.Condition | None]:
    """(status fields, Progressing, Degraded or None to carry the previous one)."""
    fields: dict[str, Any]
    match step:
        case s.Idle():
            return {"nextScheduleTime": None}, c.Condition("Progressing", False, "Idle", step.message), None
        case s.WaitForSlot():
            fields = {"phase": "Scheduled", "nextScheduleTime": format_time(step.next_slot.timestamp())}
            return fields, c.Condition("Progressing", False, "WaitingForSlot", step.message), None
        case s.Suspend():
            fields = {"phase": "Suspended", "nextScheduleTime": None}
            return fields, c.Condition("Progressing", False, "Suspended", step.message), None
        case s.RefuseSchedule():
            fields = {"phase": "Failed", "nextScheduleTime": None}
            return (
                fields,
                c.Condition("Progressing", False, step.reason, step.message),
                c.Condition("Degraded", True, step.reason, step.message),
            )
        case s.RefuseCredentials():
            # Pending, not Failed: allowed later (a new install setting), a one-shot backup still runs.
            return (
                {"phase": "Pending"},
                c.Condition("Progressing", False, step.reason, step.message),
                c.Condition("Degraded", True, step.reason, step.message),
            )
        case s.WaitForPrerequisite():
            return {"phase": "Pending"}, c.Condition("Progressing", False, step.reason, step.message), None
        case s.WaitForRetry():
            fields = {
                "phase": "Retrying",
                "nextScheduleTime": format_time(step.next_slot.timestamp()) if step.next_slot else None,
            }
            return fields, c.Condition("Progressing", False, RETRY_SCHEDULED, _retry_message(previous)), None
        case s.StartSlot():
            # A new slot: a retry of an older one, if any, is dropped (nextAttemptTime).
            fields = {
                "phase": "Running",
                "progress": {"slot": step.slot, "startTime": now, "bytesSent": 0},
                "nextScheduleTime": format_time(step.next_slot.timestamp()) if step.next_slot else None,
                "attempts": 1,
                "failedAttempts": 0,
                "nextAttemptTime": None,
            }
            if step.slot_time is not None:
                fields["lastScheduleTime"] = format_time(step.slot_time.timestamp())
            return fields, c.Condition("Progressing", True, "BackupRunning", f"snapshot for slot {step.slot}"), None
        case s.RetrySlot():
            fields = {
                "phase": "Running",
                "progress": {"slot": step.slot, "startTime": now, "bytesSent": 0},
                "attempts": step.attempt,
                "nextAttemptTime": None,
            }
            return (
                fields,
                c.Condition(
                    "Progressing", True, "BackupRunning", f"snapshot for slot {step.slot}, attempt {step.attempt}"
                ),
                None,
            )
        case s.RunBackup():
            return _run_fields(step, outcome, previous, now)
        case s.StartVerification():
            record = {"key": step.key, "attempts": step.attempt, "startTime": now}
            fields = {"verification": _replacing(previous.get("verification"), record)}
            if step.slot_time is not None:
                fields["lastVerificationSlot"] = format_time(step.slot_time.timestamp())
            return (
                fields,
                _verifying(
                    f"attempt {step.attempt} of {retry.MAX_ATTEMPTS} at verifying {step.key} "
                    f"started; creating its scratch pod"
                ),
                None,
            )
        case s.CreateScratchPod():
            if isinstance(outcome, s.ScratchPodCreated):
                record = {
                    **(previous.get("verification") or {}),
                    "pod": {"name": outcome.pod_name, "uid": outcome.pod_uid},
                }
                return (
                    {"verification": record},
                    _verifying(f"scratch pod {outcome.pod_name} created; waiting for it to check {step.key}"),
                    None,
                )
            if isinstance(outcome, s.VerificationDone):
                return _verification_fields(step, outcome, previous, now)
            return {}, _verifying(f"the scratch pod for {step.key} could not be created yet; looking again"), None
        case s.DeleteStrayScratchPod() | s.WaitForScratchPod():
            return {}, _verifying(step.message), None
        case s.FinishVerification():
            return _verification_fields(step, outcome, previous, now)
        case s.StartStream() | s.Stream():
            fields = {"phase": "Streaming"}
            if isinstance(step, s.Stream):
                fields["nextScheduleTime"] = format_time(step.next_slot.timestamp()) if step.next_slot else None
            return fields, c.Condition("Progressing", False, "Streaming", step.message), None
        case s.MarkChainBroken():
            return {}, c.Condition("Progressing", False, "ChainBroken", step.message), None
        case s.StopStream():
            return {}, c.Condition("Progressing", False, "Idle", step.message), None
    raise TypeError(f"no status for step {step.kind}")


def _retry_message(status: Mapping[str, Any]) -> str:
    failure = status.get("lastFailure") or {}
    return (
        f"attempt {failure.get('attempt')} at slot {failure.get('slot')} failed ({failure.get('reason')}: "
        f"{failure.get('message')}); it is tried again at {status.get('nextAttemptTime')}"
    )


def _verifying(message: str) -> c.Condition:
    return c.Condition("Progressing", True, VERIFYING, message)


def _same_key(previous: Mapping[str, Any], key: str) -> bool:
    return (previous.get("verification") or {}).get("key") == key


def _replacing(before: Mapping[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """`after`, with the fields only `before` has set to None: a merge patch removes them."""
    return {**{k: None for k in before or {} if k not in after}, **after}


def _run_fields(
    step: s.RunBackup, outcome: s.Outcome, previous: Mapping[str, Any], now: str
) -> tuple[dict[str, Any], c.Condition, c.Condition | None]:
    idle = c.Condition("Progressing", False, "Idle")
    match outcome:
        case s.RunSucceeded():
            deleted = set(outcome.deleted_keys)
            key = outcome.record.get("key")
            new_backup = key != (previous.get("lastBackup") or {}).get("key")
            recent = [dict(outcome.record)] + [
                r for r in previous.get("recentBackups") or [] if r.get("key") != key and r.get("key") not in deleted
            ]
            return (
                {
                    "phase": "Completed" if step.one_shot else "Scheduled",
                    "lastBackup": dict(outcome.record),
                    "lastSuccessfulTime": outcome.completed_at,
                    "recentBackups": recent[:RECENT_BACKUPS],
                    "progress": None,
                    "pendingUploads": _pending(outcome),
                    "clusterIDHistory": list(
                        retention.extend_history(
                            previous.get("clusterIDHistory") or (), outcome.record.get("clusterID") or ""
                        )
                    ),
                    "backupsSinceVerification": int(previous.get("backupsSinceVerification") or 0) + new_backup,
                    "nextAttemptTime": None,
                    "retention": object_lock.status_fields(outcome.locked),
                },
                idle,
                _unless_verification_failed(previous),
            )
        case s.RunFailed():
            return _failed_fields(step, outcome, previous, now)
        case s.RunNotStarted():
            return {}, c.Condition("Progressing", False, NOT_STARTED, outcome.message), None
    raise TypeError(f"a {step.kind} step ended without a run outcome: {outcome!r}")


def _failed_fields(
    step: s.RunBackup, outcome: s.RunFailed, previous: Mapping[str, Any], now: str
) -> tuple[dict[str, Any], c.Condition, c.Condition]:
    """An attempt failed: recorded; retried after a backoff if its cause may pass and
    spec.backoffLimit allows, else the slot ends (a one-shot backup: Failed)."""
    ended = parse_datetime(now).astimezone(datetime.UTC)
    retry_at = backoff.retry_at(step.attempt, step.backoff_limit, outcome.transient, ended)
    fields: dict[str, Any] = {
        "progress": None,
        "pendingUploads": _pending(outcome),
        "failedAttempts": int(previous.get("failedAttempts") or 0) + 1,
        "lastFailure": {
            "reason": outcome.reason,
            "message": outcome.message,
            "time": now,
            "slot": step.slot,
            "attempt": step.attempt,
        },
        "nextAttemptTime": format_time(retry_at.timestamp()) if retry_at else None,
    }
    if retry_at is not None:
        fields["phase"] = "Retrying"
        return (
            fields,
            c.Condition("Progressing", False, RETRY_SCHEDULED, _retry_message(fields)),
            c.Condition("Degraded", True, outcome.reason, outcome.message),
        )
    fields["phase"] = "Failed" if step.one_shot else "Scheduled"
    ended_why = _not_retried(step, outcome)
    progressing = c.Condition(
        "Progressing", False, BACKOFF_LIMIT_EXCEEDED if outcome.transient else "Idle", f"slot {step.slot} {ended_why}"
    )
    return fields, progressing, c.Condition("Degraded", True, outcome.reason, f"{outcome.message} ({ended_why})")


def _verification_fields(
    step: s.Step, outcome: s.Outcome, previous: Mapping[str, Any], now: str
) -> tuple[dict[str, Any], c.Condition, c.Condition | None]:
    idle = c.Condition("Progressing", False, "Idle")
    if not isinstance(outcome, s.VerificationDone):
        raise TypeError(f"a {step.kind} step ended without a verification outcome: {outcome!r}")
    if outcome.verified is None and not outcome.complete:
        return _incomplete_fields(outcome, previous, now)
    record: dict[str, Any] = {"key": outcome.key, "reason": outcome.reason, "message": outcome.message}
    if outcome.verified is not None:
        record.update(verified=outcome.verified, verifiedAt=outcome.at)
    fields: dict[str, Any] = {
        "verification": None,
        "lastVerification": record,
        "backupsSinceVerification": 0,
        "recentBackups": [
            {**r, "verification": record} if r.get("key") == outcome.key else r
            for r in previous.get("recentBackups") or []
        ],
    }
    if (previous.get("lastBackup") or {}).get("key") == outcome.key:
        fields["lastBackup"] = {**previous["lastBackup"], "verification": record}
    if outcome.verified:
        fields["lastVerifiedTime"] = outcome.at
    if outcome.verified is False:
        return (
            fields,
            idle,
            c.Condition(
                "Degraded",
                True,
                VERIFICATION_FAILED,
                f"backup {outcome.key} failed verification ({outcome.reason}): {outcome.message}",
            ),
        )
    if outcome.verified:
        return fields, idle, _unless_run_failed(previous)
    return fields, idle, None


def _incomplete_fields(
    outcome: s.VerificationDone, previous: Mapping[str, Any], now: str
) -> tuple[dict[str, Any], c.Condition, c.Condition | None]:
    """The attempt ended without comparing: counted; the next one is scheduled, or none."""
    before = previous.get("verification") if _same_key(previous, outcome.key) else None
    attempts = max(int((before or {}).get("attempts") or 0), 1)
    ended = parse_datetime(now).astimezone(datetime.UTC)
    next_attempt = retry.next_attempt(attempts, ended)
    record: dict[str, Any] = {
        "key": outcome.key,
        "attempts": attempts,
        "reason": outcome.reason,
        "message": outcome.message,
    }
    if next_attempt is not None:
        record["nextAttemptTime"] = format_time(next_attempt.timestamp())
    fields = {"verification": _replacing(previous.get("verification"), record), "backupsSinceVerification": 0}
    if next_attempt is not None:
        return (
            fields,
            c.Condition(
                "Progressing",
                False,
                "VerificationRetryScheduled",
                f"attempt {attempts} at verifying {outcome.key} gave no verdict "
                f"({outcome.reason}); next attempt at {record['nextAttemptTime']}",
            ),
            None,
        )
    return (
        fields,
        c.Condition("Progressing", False, "Idle"),
        _no_verdict(outcome.key, attempts, outcome.reason, outcome.message),
    )


def _no_verdict(key: str, attempts: int, reason: str, message: str) -> c.Condition:
    return c.Condition(
        "Degraded",
        True,
        VERIFICATION_INCOMPLETE,
        f"backup {key} got no verdict in {attempts} verification attempts; the last: {reason}: {message}",
    )


def _unless_verification_failed(previous: Mapping[str, Any]) -> c.Condition:
    """After a successful run: a failed or incomplete verification stays reported until a
    verification gives a verdict; one that used up its attempts, even if a failed run
    reported something else in between."""
    before = c.find(previous.get("conditions"), "Degraded") or {}
    if before.get("status") == "True" and before.get("reason") in VERIFICATION_REASONS:
        return c.Condition("Degraded", True, before["reason"], before.get("message", ""))
    tried = VerificationAttempts.from_dict(previous.get("verification"))
    if tried is not None and retry.exhausted(tried):
        return _no_verdict(tried.key, tried.attempts, tried.reason, tried.message)
    return HEALTHY


def _unless_run_failed(previous: Mapping[str, Any]) -> c.Condition:
    """After a successful verification: clears a failed or incomplete verification, nothing else."""
    before = c.find(previous.get("conditions"), "Degraded") or {}
    if before.get("status") == "True" and before.get("reason") not in VERIFICATION_REASONS:
        return _carried_degraded(previous)
    return HEALTHY


def _pending(outcome: s.RunOutcome) -> list[dict[str, str]] | None:
    return [dict(u) for u in outcome.pending_uploads] or None


def _available(status: Mapping[str, Any]) -> c.Condition:
    if not status.get("lastSuccessfulTime"):
        return c.Condition("Available", False, "NoBackupYet", "no backup has succeeded yet")
    key = (status.get("lastBackup") or {}).get("key", "")
    locked = object_lock.summary(status.get("retention"))
    return c.Condition("Available", True, "BackupAvailable", f"latest backup {key}" + (f"; {locked}" if locked else ""))


def _carried(previous: Mapping[str, Any], type_: str) -> c.Condition | None:
    before = c.find(previous.get("conditions"), type_)
    if not before:
        return None
    status = {"True": True, "False": False}.get(before.get("status", ""))
    return c.Condition(type_, status, before.get("reason", ""), before.get("message", ""))


def _carried_degraded(previous: Mapping[str, Any]) -> c.Condition:
    """A failed run stays reported until a run succeeds; a refused schedule does not outlive
    its refusal."""
    before = c.find(previous.get("conditions"), "Degraded")
    if not before or before.get("status") != "True" or before.get("reason") in PROBLEM_REASONS:
        return HEALTHY
    return c.Condition("Degraded", True, before.get("reason", ""), before.get("message", ""))
