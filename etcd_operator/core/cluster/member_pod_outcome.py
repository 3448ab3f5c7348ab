"""The cluster executor's outcomes that carry evidence for the next pass: a step that asked
the API server about a member pod (a dry run, or a create it refused), with that answer
(cluster/admission.py); and a step that found an object of a child's name that is not the
operator's (cluster/ownership.py)."""

from __future__ import annotations

import dataclasses

from etcd_operator.core.cluster.observed import PodAdmission
from etcd_operator.core.outcome import Outcome


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemberPodOutcome(Outcome):
    admission: PodAdmission  # the API server's answer to the member pod


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollisionOutcome(Outcome):
    collision: tuple[str, str]  # ("Kind name", why it is not the operator's)
