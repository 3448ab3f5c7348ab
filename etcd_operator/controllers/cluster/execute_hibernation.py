"""The cluster executor's hibernation steps: writing status.hibernation and stopping one
member's pod. Waking creates member pods with execute_member_pods.create_member_pod."""

from __future__ import annotations

from etcd_operator.controllers.cluster.execute_context import StepContext
from etcd_operator.controllers.cluster.execute_member_pods import delete_pod
from etcd_operator.core import hibernation as h
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import Outcome

# The event each recorded state is announced with: (reason, what people read first).
ANNOUNCED = {
    h.SNAPSHOTTING: ("Hibernating", "Going to sleep"),
    h.STOPPING: ("Hibernating", "Stopping the members"),
    h.HIBERNATED: ("Hibernated", "Hibernated"),
    h.WAKING: ("Waking", "Waking up"),
}


async def record_hibernation(
    ctx: StepContext, action: a.RecordHibernation, spec: ClusterSpec, observed: Observed
) -> Outcome:
    record = action.record
    if action.without_snapshot:
        ctx.post_event("Warning", "HibernatingWithoutSnapshot", action.reason)
    elif record is None:
        ctx.post_event("Normal", "Awake", action.reason)
    else:
        reason, headline = ANNOUNCED[record.state]
        ctx.post_event("Normal", reason, f"{headline}: {action.reason}")
    return Outcome(True, status_fields={"hibernation": None if record is None else record.to_dict()})


async def stop_member_for_hibernation(
    ctx: StepContext, action: a.StopMemberForHibernation, spec: ClusterSpec, observed: Observed
) -> None:
    if action.without_chain:
        ctx.post_event("Warning", "HibernatingWithoutChain", action.reason)
    await delete_pod(ctx, observed, action.member)
