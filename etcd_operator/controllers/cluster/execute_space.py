"""The cluster executor's space: defragmentation (routine and on request), recovery from
etcd's NOSPACE alarm and volume expansion. Each step re-runs harmlessly; its progress is
recorded in status."""

from __future__ import annotations

import dataclasses

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster.execute_context import StepContext
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.recorded import DefragmentationRecord, SpaceRecoveryRecord
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import Outcome


async def defragment_member(ctx: StepContext, observed: Observed, member: str, member_id: int) -> str:
    """Defragments one member; returns what that freed, for an event."""
    status = observed.etcd.statuses.get(member_id)
    await ctx.member_client(observed, member_id).defragment()
    freed = status.db_size - status.db_size_in_use if status else 0
    return f"Defragmented {member}, freeing about {freed // 1024} KiB"


async def defragment(ctx: StepContext, action: a.Defragment, spec: ClusterSpec, observed: Observed) -> None:
    ctx.post_event("Normal", "Defragmented", await defragment_member(ctx, observed, action.member, action.member_id))


async def begin_space_recovery(
    ctx: StepContext, action: a.BeginSpaceRecovery, spec: ClusterSpec, observed: Observed
) -> Outcome:
    ctx.post_event("Normal", "NoSpaceAlarmDetected", f"etcd raised the NOSPACE alarm: {action.reason}")
    return Outcome(True, status_fields={"spaceRecovery": SpaceRecoveryRecord(ctx.now).to_dict()})


async def compact_revisions(
    ctx: StepContext, action: a.CompactRevisions, spec: ClusterSpec, observed: Observed
) -> Outcome:
    if action.revision > 0:
        await ctx.leader_client(observed).compact(action.revision)
    record = dataclasses.replace(
        ctx.status.space_recovery or SpaceRecoveryRecord(ctx.now),
        compacted_revision=action.revision,
        defragmented=(),
    )
    ctx.post_event("Normal", "RevisionsCompacted", f"Compacted revisions up to {action.revision}: {action.reason}")
    return Outcome(True, status_fields={"spaceRecovery": record.to_dict()})


async def defragment_for_space(
    ctx: StepContext, action: a.DefragmentForSpace, spec: ClusterSpec, observed: Observed
) -> Outcome:
    message = await defragment_member(ctx, observed, action.member, action.member_id)
    record = ctx.status.space_recovery or SpaceRecoveryRecord(ctx.now)
    record = dataclasses.replace(record, defragmented=tuple(sorted({*record.defragmented, action.member})))
    ctx.post_event("Normal", "MemberDefragmented", f"{message}: {action.reason}")
    return Outcome(True, status_fields={"spaceRecovery": record.to_dict()})


async def disarm_nospace_alarm(
    ctx: StepContext, action: a.DisarmNoSpaceAlarm, spec: ClusterSpec, observed: Observed
) -> Outcome:
    leader = ctx.leader_client(observed)
    for member_id in action.member_ids:
        await leader.disarm_alarm(member_id)
    ctx.post_event("Normal", "NoSpaceAlarmDisarmed", f"Disarmed the NOSPACE alarm: {action.reason}")
    return Outcome(True, status_fields={"spaceRecovery": None})


async def finish_space_recovery(
    ctx: StepContext, action: a.FinishSpaceRecovery, spec: ClusterSpec, observed: Observed
) -> Outcome:
    return Outcome(True, status_fields={"spaceRecovery": None})


async def defragment_on_request(
    ctx: StepContext, action: a.DefragmentOnRequest, spec: ClusterSpec, observed: Observed
) -> Outcome:
    message = await defragment_member(ctx, observed, action.member, action.member_id)
    record = ctx.status.defragmentation
    done = record.defragmented if record.token == action.token else ()
    record = dataclasses.replace(record, token=action.token, defragmented=tuple(sorted({*done, action.member})))
    ctx.post_event("Normal", "MemberDefragmented", f"{message}: {action.reason}")
    return Outcome(True, status_fields={"defragmentation": record.to_dict()})


async def finish_defragment_request(
    ctx: StepContext, action: a.FinishDefragmentRequest, spec: ClusterSpec, observed: Observed
) -> Outcome:
    record = DefragmentationRecord(last_token=action.token)
    ctx.post_event("Normal", "DefragmentationDone", f"Every member was defragmented for request {action.token}")
    return Outcome(True, status_fields={"defragmentation": record.to_dict()})


async def expand_member_pvc(ctx: StepContext, action: a.ExpandMemberPVC, spec: ClusterSpec, observed: Observed) -> None:
    await ctx.kube.merge_patch(
        kube.PVCS,
        ctx.namespace,
        naming.pvc_name(action.member),
        {"spec": {"resources": {"requests": {"storage": action.size}}}},
    )
    ctx.post_event(
        "Normal",
        "VolumeExpansionRequested",
        f"Asked for {naming.pvc_name(action.member)} to grow to {action.size}: {action.reason}",
    )
