"""status.continuous and the ContinuousBackup condition a pass writes. Pure.

ContinuousBackup: True with reason Streaming while the writer uploads its chain; False with
StoreUnavailable (uploads fail and are retried; the writer stops reading its watch rather
than buffer more), WaitingForMember (no member of the cluster answers the watch),
ChainBroken (the chain could not go on: a full snapshot is taken and a new chain starts),
WaitingForBaseSnapshot (no full snapshot to start from yet), Stopped or Disabled. A step
that says nothing of the writer leaves the condition as it was.

status.continuous.authRead keeps the newest auth revision a writer read (continuous.AuthRead):
the planner compares the base with it after a restart, before the new writer cut anything."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.continuous import AuthRead, StreamView
from etcd_operator.core.backup.manifest import Ignored, ignored_summary
from etcd_operator.core.backup.planner import CHAIN_BROKEN
from etcd_operator.core.timefmt import format_precise_time, format_time

CONDITION = "ContinuousBackup"
STREAMING = "Streaming"
STORE_UNAVAILABLE = "StoreUnavailable"
WAITING_FOR_MEMBER = "WaitingForMember"
COUNTERS = ("segmentsSinceFullSnapshot", "eventsSinceFullSnapshot", "bytesSinceFullSnapshot")


def continuous_fields(
    step: s.Step, outcome: s.Outcome, previous: Mapping[str, Any], now: str
) -> tuple[dict[str, Any] | None, c.Condition | None]:
    """(status.continuous to merge, or None; the condition, or None to leave it)."""
    before = previous.get("continuous") or {}
    match step:
        case s.StartStream() | s.Stream():
            if not isinstance(outcome, s.StreamReport):
                raise TypeError(f"a {step.kind} step ended without a stream report: {outcome!r}")
            fields = _progress(before, outcome)
            if isinstance(step, s.StartStream):
                fields.update(step.start.to_dict(), needsFullSnapshot=None)
            return fields, _streaming(outcome.view, step.message)
        case s.MarkChainBroken():
            broken = step.chain_break
            fields = {
                "chain": None,
                "clusterID": None,
                "baseKey": None,
                "baseRevision": None,
                "needsFullSnapshot": True,
                "lastBreak": {
                    "chain": broken.chain,
                    "reason": broken.reason,
                    "message": broken.message,
                    "lastRevision": broken.last_revision,
                    "time": now,
                },
            }
            return fields, c.Condition(
                CONDITION, False, CHAIN_BROKEN, f"{step.message}; a full snapshot is taken and a new chain starts"
            )
        case s.StopStream():
            return None, c.Condition(CONDITION, False, step.reason, step.message)
        case s.StartSlot() if step.base_for is not None:
            return None, c.Condition(CONDITION, False, step.base_for, step.message)
        case s.RunBackup() if before and isinstance(outcome, s.RunSucceeded):
            # A new full snapshot: the volume since the last one starts again from nothing.
            return {**dict.fromkeys(COUNTERS, 0), "needsFullSnapshot": None}, None
    return None, None


def _progress(before: Mapping[str, Any], report: s.StreamReport) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "segmentsSinceFullSnapshot": int(before.get("segmentsSinceFullSnapshot") or 0) + report.written.segments,
        "eventsSinceFullSnapshot": int(before.get("eventsSinceFullSnapshot") or 0) + report.written.events,
        "bytesSinceFullSnapshot": int(before.get("bytesSinceFullSnapshot") or 0) + report.written.bytes,
    }
    view = report.view
    if view is not None:
        # A writer resuming the recorded chain starts from its base until it read the store:
        # what status recorded of that chain never goes back.
        same_chain = before.get("chain") == view.chain
        fields["lastRevision"] = max(view.last_revision, int(before.get("lastRevision") or 0) if same_chain else 0)
        if view.last_segment_at is not None:
            fields["lastSegmentTime"] = format_time(view.last_segment_at)
        if view.cluster_revision is not None:
            fields["lagRevisions"] = max(view.cluster_revision - view.last_revision, 0)
        if view.caught_up is not None:
            revision, moment = view.caught_up
            fields["caughtUp"] = {"chain": view.chain, "revision": revision, "time": format_precise_time(moment)}
        auth_read = _auth_read(before.get("authRead"), view)
        if auth_read is not None:
            fields["authRead"] = auth_read.to_dict()
    return fields


def _auth_read(before: Mapping[str, Any] | None, view: StreamView) -> AuthRead | None:
    """The newest auth revision read of the writer's cluster: what status recorded, with the
    writer's reading taken in. Never lower than recorded, whichever writer (of this process
    or of a replica before it) reports: a writer started after a restart has read nothing yet."""
    recorded = AuthRead.from_dict(before)
    if recorded is not None:
        return recorded.newest(view.cluster_id, view.auth_revision, view.auth_read_at)
    if view.auth_revision is None or not view.cluster_id:
        return None
    return AuthRead(view.cluster_id, view.auth_revision, view.auth_read_at)


def _streaming(view: StreamView | None, message: str) -> c.Condition:
    if view is None:
        return c.Condition(CONDITION, False, "Starting", message)
    if view.store_error:
        failing = f"uploads of chain {view.chain} fail and are retried: {view.store_error}"
        return c.Condition(CONDITION, False, STORE_UNAVAILABLE, failing)
    if view.waiting:
        return c.Condition(CONDITION, False, WAITING_FOR_MEMBER, view.waiting)
    holds = f"chain {view.chain} holds every revision up to {view.last_revision}"
    if view.ignored:
        holds += f"; it resumed past {ignored_summary([Ignored(key, '') for key in view.ignored])}"
    return c.Condition(CONDITION, True, STREAMING, holds)
