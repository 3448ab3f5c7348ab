"""The cluster executor's adoption step: writing status.adoption. Members join and leave
the adopted cluster with execute_membership's steps."""

from __future__ import annotations

from etcd_operator.controllers.cluster.execute_context import StepContext
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import Outcome


async def record_adoption(ctx: StepContext, action: a.RecordAdoption, spec: ClusterSpec, observed: Observed) -> Outcome:
    record = action.record
    if record is not None and record.completed:
        ctx.post_event("Normal", "Adopted", f"Adoption complete: {action.reason}")
    elif ctx.status.adoption is None:
        ctx.post_event("Normal", "Adopting", f"Adoption started: {action.reason}")
    return Outcome(True, status_fields={"adoption": None if record is None else record.to_dict()})
