"""Builds an EtcdRestore's status from one pass: the step taken and what it found. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core.outcome import Outcome
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.point_in_time import ReplayRecord, auth_condition

VERIFYING_STEPS = (s.StartVerifying, s.VerifySnapshot)
REPLAYING_STEPS = (s.PlanReplay, s.StartReplayPod, s.RecordReplayResult, s.RemoveReplayPod)
# The phases a restore does not leave without a person: a failure is for good (kstatus: Failed).
STALLED_PHASES = frozenset({"Failed"})


def _phase(previous: str | None, step: s.Step, outcome: Outcome) -> str:
    if outcome.failure or isinstance(step, s.Fail):
        return "Failed"
    if isinstance(step, s.SkipAlreadyApplied):
        return "AlreadyApplied"
    if isinstance(step, s.Complete):
        return "Completed"
    if isinstance(step, VERIFYING_STEPS):
        return "Verifying"
    if isinstance(step, REPLAYING_STEPS):
        return "Replaying"
    if isinstance(step, (s.Wait, s.Idle)):
        return previous or "Pending"
    return "Restoring"


def _conditions(phase: str, code: str, message: str) -> list[c.Condition]:
    active = phase in ("Pending", "Verifying", "Replaying", "Restoring")
    return [
        c.Condition("Progressing", active, code, message if active else ""),
        c.Condition(
            "Failed",
            phase == "Failed",
            code if phase == "Failed" else "NoFailure",
            message if phase == "Failed" else "",
        ),
        c.Condition(
            "Completed",
            phase == "Completed",
            {"Completed": code, "AlreadyApplied": code}.get(phase, "NotYet"),
            message if phase in ("Completed", "AlreadyApplied") else "",
        ),
        _ready(phase, code, message),
        c.stalled(c.Condition("Failed", True, code, message) if phase in STALLED_PHASES else None),
    ]


def _auth(status: Mapping[str, Any]) -> list[c.Condition]:
    """A point-in-time restore's AuthStateAtTarget, from its recorded plan."""
    record = ReplayRecord.from_dict(status.get("pointInTime"))
    return [] if record is None else [auth_condition(record)]


def _ready(phase: str, code: str, message: str) -> c.Condition:
    """Ready, for `kubectl wait` and kstatus: True once the data is restored (or was already);
    False while the restore runs, with the step's reason, and for good after a failure, with
    reason Failed (the failure's own reason leads the message)."""
    if phase in ("Completed", "AlreadyApplied"):
        return c.Condition("Ready", True, code, message)
    if phase == "Failed":
        return c.Condition("Ready", False, "Failed", f"{code}: {message}")
    return c.Condition("Ready", False, code, message)


def _code(phase: str, step: s.Step, outcome: Outcome) -> str:
    if outcome.failure:
        return outcome.failure[0]
    if isinstance(step, (s.Fail, s.Wait)):
        return step.code
    return {"AlreadyApplied": "AlreadyApplied", "Completed": "Restored"}.get(phase, phase)


def _step_fields(step: s.Step, previous: Mapping[str, Any], now: str) -> dict[str, Any]:
    """Status fields that follow from the step itself."""
    if isinstance(step, s.StartVerifying):
        return {"startTime": previous.get("startTime") or now}
    if isinstance(step, s.PlanReplay) and step.record is not None:
        return {"pointInTime": step.record.to_dict()}
    if isinstance(step, s.RecordReplayResult) and step.result is not None:
        record = ReplayRecord.from_dict(previous.get("pointInTime"))
        if record is None:
            raise RuntimeError("a replay's result was recorded without its plan in status.pointInTime")
        return {"pointInTime": record.with_result(step.result).to_dict()}
    if isinstance(step, s.BeginRestore):
        fields: dict[str, Any] = {"targetCluster": step.target, "revisionBump": step.revision_bump}
        if step.bumped_revision is not None:
            fields["bumpedRevision"] = step.bumped_revision
        if step.target_revision_before is not None:
            fields["targetRevisionBefore"] = step.target_revision_before
        return fields
    if isinstance(step, s.RecordPreservedData):
        return {"preservedData": list(step.pvcs)}
    if isinstance(step, s.ChooseMembers):
        return {"seedMembers": list(step.members)}
    if isinstance(step, s.MarkSeedsRestored):
        timings = list(previous.get("seedPods") or [])
        known = {t.get("member") for t in timings}
        timings += [
            {"member": m, "createdAt": created, "startedAt": started, "finishedAt": finished}
            for m, created, started, finished in step.timings
            if m not in known
        ]
        return {"seedPods": timings}
    if isinstance(step, s.RetrySeedPod):
        return {"seedAttempts": step.attempt}
    if isinstance(step, s.Complete):
        return {"clusterID": step.cluster_id}
    return {}


def build_status(
    previous: Mapping[str, Any], step: s.Step, outcome: Outcome, generation: int | None, now: str
) -> dict[str, Any]:
    """The whole status to write for this pass (merged over the previous one). A step that
    was not taken changes nothing but the progress message."""
    status = dict(previous)
    if not outcome.done:
        status["progress"] = outcome.message or step.reason
        return status
    phase = _phase(previous.get("phase"), step, outcome)
    code = _code(phase, step, outcome)
    message = outcome.failure[1] if outcome.failure else step.reason
    status.update(_step_fields(step, previous, now))
    status.update(outcome.status_fields or {})
    if phase in ("Failed", "AlreadyApplied", "Completed") and previous.get("phase") != phase:
        status["completionTime"] = now
    status.update(
        phase=phase,
        progress=message,
        observedGeneration=generation,
        conditions=c.merge(
            previous.get("conditions"), _conditions(phase, code, message) + _auth(status), now, generation
        ),
    )
    return status
