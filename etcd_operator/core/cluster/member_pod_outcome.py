"""The cluster executor's outcome of a step that asked the API server about a member pod (a
dry run, or a create it refused): the shared Outcome plus that answer, which the reconciler
remembers as evidence for the next pass (cluster/admission.py)."""

from __future__ import annotations

import dataclasses

from etcd_operator.core.cluster.observed import PodAdmission
from etcd_operator.core.outcome import Outcome


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemberPodOutcome(Outcome):
    admission: PodAdmission  # the API server's answer to the member pod
