"""The restore executor's live fence before a create. Pure.

A pass decides on its GET of the target EtcdCluster; a deletion that lands after that GET is
not in its observation. Right before each object it creates for the target (a seed PVC, a
restore pod), the executor reads the target again and creates nothing when the live object
is gone, is another object under the same name, or is being deleted: a seed PVC has no owner
reference and would outlive the cluster. The next pass observes the deletion and the planner
waits (ClusterBeingDeleted)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etcd_operator.core.live_fence import refusal
from etcd_operator.core.restore.observed import TargetCluster


def creation_refusal(decided_on: TargetCluster, live: Mapping[str, Any] | None) -> str | None:
    """Why nothing may be created for the target the pass decided on, as the `live` object
    (None: not found) says; None when it is still that object and not being deleted."""
    return refusal(f"EtcdCluster {decided_on.name}", live, decided_on.uid)
