"""What deleting an EtcdCluster does to its member PVCs. Pure.

Member PVCs carry no owner reference to the cluster (cluster/executor._ensure_pvc), so the
garbage collector never takes them, whatever the propagation policy, and whether or not the
deletion handler ever runs. The handler then applies `spec.reclaimPolicy`:
- `Retain` keeps every PVC.
- `Delete` deletes them, except under orphan propagation (`kubectl delete --cascade=orphan`):
  the members' pods are left running, so their data is too. The orphan finalizer says so
  while the garbage collector works; afterwards, a member pod that still runs without the
  cluster as its owner says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

ORPHAN_FINALIZER = "orphan"
RETAIN, DELETE = "Retain", "Delete"


@dataclasses.dataclass(frozen=True)
class Reclaim:
    delete: tuple[str, ...]  # PVC names
    keep: tuple[str, ...]
    reason: str  # DataDeleted, DataRetained or DataOrphaned
    message: str


def _claims(pod: Mapping[str, Any]) -> set[str]:
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return {claim for v in volumes if (claim := (v.get("persistentVolumeClaim") or {}).get("claimName")) is not None}


def _orphaned(pod: Mapping[str, Any], cluster_uid: str) -> bool:
    meta = pod.get("metadata") or {}
    owned = any(o.get("uid") == cluster_uid for o in meta.get("ownerReferences") or [])
    return not owned and not meta.get("deletionTimestamp")


def reclaim(
    policy: str, cluster_meta: Mapping[str, Any], pvcs: list[Mapping[str, Any]], pods: list[Mapping[str, Any]]
) -> Reclaim:
    """`pvcs` and `pods`: the cluster's members', found by their labels."""
    names = sorted(p["metadata"]["name"] for p in pvcs)
    if policy != DELETE:
        return Reclaim(
            (),
            tuple(names),
            "DataRetained",
            f"Kept {len(names)} member PVCs (reclaimPolicy Retain): {', '.join(names) or 'none'}",
        )
    if ORPHAN_FINALIZER in (cluster_meta.get("finalizers") or ()):
        return Reclaim(
            (),
            tuple(names),
            "DataOrphaned",
            f"Kept {len(names)} member PVCs: the cluster was deleted with orphan propagation, so its "
            f"member pods run on; delete the PVCs by hand when they are no longer needed",
        )
    in_use = set().union(*(_claims(p) for p in pods if _orphaned(p, cluster_meta.get("uid", ""))))
    keep = tuple(n for n in names if n in in_use)
    delete = tuple(n for n in names if n not in in_use)
    message = f"Deleted {len(delete)} member PVCs (reclaimPolicy Delete): {', '.join(delete) or 'none'}"
    if keep:
        message += f"; kept {', '.join(keep)}, used by member pods left running (orphaned)"
    return Reclaim(delete, keep, "DataDeleted", message)
