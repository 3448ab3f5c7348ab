"""status.adoption: what the operator recorded of a foreign cluster it adopts. Plain data,
parsed from and written to status; pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.cluster.identity import parse_hex_id


@dataclasses.dataclass(frozen=True)
class AdoptionRecord:
    cluster_id: int  # the foreign cluster's ID, recorded before the first member is added
    foreign_members: tuple[str, ...] = ()  # foreign members still in the cluster (names or hex IDs)
    completed: bool = False  # no foreign member is left: the cluster is an ordinary EtcdCluster

    def to_dict(self) -> dict[str, Any]:
        return {
            "clusterID": f"{self.cluster_id:x}",
            "foreignMembers": list(self.foreign_members),
            "completed": self.completed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> AdoptionRecord | None:
        if not data:
            return None
        cluster_id = parse_hex_id(data.get("clusterID"))
        if cluster_id is None:
            return None
        return cls(cluster_id, tuple(str(n) for n in data.get("foreignMembers") or ()), bool(data.get("completed")))
