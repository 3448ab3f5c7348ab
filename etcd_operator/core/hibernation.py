"""A hibernating EtcdCluster as its status records it (status.hibernation), read by the
cluster planner and by the backup planner. Pure.

The record is written when the cluster starts going to sleep, while its members still
answer: the cluster ID, every member's name and ID, and the revision the leader had then.
It stays until the cluster is awake again, and moves through these states:

- Snapshotting: every EtcdBackup that would take a snapshot (scheduled or continuous, not
  suspended) takes one that holds the recorded revision; the members still run.
- Stopping: the member pods are deleted, one at a time; PVCs, Services and Secrets stay.
  Once fewer members run than a quorum of the recorded ones, no write can be acknowledged
  any more (writes_fenced): the last ones stop only after every continuous backup's chain
  holds the revision they hold.
- Hibernated: no member pod runs.
- Waking: every recorded member's pod is created again on its own PVC, as itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

SNAPSHOTTING = "Snapshotting"
STOPPING = "Stopping"
HIBERNATED = "Hibernated"
WAKING = "Waking"
STATES = (SNAPSHOTTING, STOPPING, HIBERNATED, WAKING)


def _hex(text: Any) -> int | None:
    try:
        return int(str(text), 16) if text else None
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class HibernationRecord:
    """status.hibernation."""

    state: str
    cluster_id: int
    revision: int  # the leader's revision when the cluster started going to sleep
    members: tuple[tuple[str, int], ...]  # (name, etcd member ID), sorted by name

    def with_state(self, state: str) -> HibernationRecord:
        return dataclasses.replace(self, state=state)

    @property
    def member_ids(self) -> frozenset[int]:
        return frozenset(member_id for _, member_id in self.members)

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "clusterID": f"{self.cluster_id:x}",
            "revision": self.revision,
            "members": [{"name": name, "id": f"{member_id:x}"} for name, member_id in self.members],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> HibernationRecord | None:
        """None when absent, or unreadable (then no decision rests on it: the planner starts over)."""
        if not data or data.get("state") not in STATES:
            return None
        cluster_id = _hex(data.get("clusterID"))
        members = tuple(sorted((str(m.get("name") or ""), _hex(m.get("id")) or 0) for m in data.get("members") or []))
        if cluster_id is None or not members or any(not name or not member_id for name, member_id in members):
            return None
        return cls(str(data["state"]), cluster_id, int(data.get("revision") or 0), members)


def snapshot_holds(record: HibernationRecord, backup_cluster_id: str | None, backup_revision: int | None) -> bool:
    """A backup's newest snapshot (its cluster ID as hex, its revision) holds every write the
    cluster had when it started going to sleep."""
    return (
        backup_revision is not None
        and _hex(backup_cluster_id) == record.cluster_id
        and backup_revision >= record.revision
    )


def takes_snapshots(backup_spec: Mapping[str, Any]) -> bool:
    """An EtcdBackup that takes a snapshot before its cluster sleeps: a scheduled or
    continuous one that is not suspended. A one-shot backup never runs again."""
    if backup_spec.get("suspend"):
        return False
    return bool(backup_spec.get("schedule")) or bool((backup_spec.get("continuous") or {}).get("enabled"))


def quorum(members: int) -> int:
    return members // 2 + 1


def writes_fenced(record: HibernationRecord | None, member_pods: int) -> bool:
    """Going to sleep, and fewer member pods exist (running or stopping) than a quorum of
    the recorded members: no write can be acknowledged any more, and what the members
    still running hold is every revision the cluster acknowledged."""
    return record is not None and record.state == STOPPING and 0 < member_pods < quorum(len(record.members))


def members_stopped(record: HibernationRecord | None) -> bool:
    """No member runs on purpose (Hibernated), or they are starting again (Waking)."""
    return record is not None and record.state in (HIBERNATED, WAKING)


def chain_holds(
    record: HibernationRecord, chain_cluster_id: str | None, chain_revision: int | None, revision: int
) -> bool:
    """A continuous backup's chain (its cluster ID as hex, its last uploaded revision)
    holds `revision` of the hibernating cluster."""
    return chain_revision is not None and _hex(chain_cluster_id) == record.cluster_id and chain_revision >= revision
