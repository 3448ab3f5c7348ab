"""The EtcdRestore spec and status as typed values. Pure."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.backup.chain import Target
from etcd_operator.core.restore.point_in_time import ReplayRecord, target_of

TERMINAL_PHASES = ("Completed", "Failed", "AlreadyApplied")
BEFORE_RESTORING = (None, "Pending", "Verifying", "Replaying")  # nothing of the target is touched yet
# The margin a restore without spec.revisionBump starts its revisions at, above the highest
# the target served (planner.chosen_bump): etcd's disaster-recovery guide suggests
# 1,000,000,000 for Kubernetes, far above the writes any store takes between a backup and
# its restore.
DEFAULT_REVISION_BUMP = 1_000_000_000


def spec_hash(spec: Mapping[str, Any]) -> str:
    """A stable digest of a restore's spec: the same manifest applied again hashes the same.
    spec.revisionBump at DEFAULT_REVISION_BUMP is left out: the CRD once filled that in, so
    a spec recorded on a cluster before the field existed, with it filled in, and without it
    (the bump chosen then) all hash alike."""
    if spec.get("revisionBump") == DEFAULT_REVISION_BUMP:
        spec = {k: v for k, v in spec.items() if k != "revisionBump"}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class RestoreSpec:
    source: Mapping[str, Any]
    in_place: bool
    target: str  # the EtcdCluster restored into
    new_cluster_spec: Mapping[str, Any]  # newCluster only: the spec of the cluster to create
    digest: str  # spec_hash of the whole spec
    # etcdutl --bump-revision on every member (with --mark-compacted when > 0); 0: neither;
    # None: not set, the restore chooses one above what the target served (planner.chosen_bump)
    revision_bump: int | None = None
    point: Target | None = None  # spec.source.pointInTime; None: restore a whole snapshot

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> RestoreSpec:
        target = spec.get("target") or {}
        source = spec.get("source") or {}
        bump = None if spec.get("revisionBump") is None else int(spec["revisionBump"])
        point = target_of(source)
        if "inPlace" in target:
            return cls(source, True, target["inPlace"]["clusterName"], {}, spec_hash(spec), bump, point)
        new = target["newCluster"]
        return cls(source, False, new["name"], dict(new.get("spec") or {}), spec_hash(spec), bump, point)

    @property
    def backup(self) -> str | None:
        """The EtcdBackup of spec.source.backupRef, if that is the source."""
        return (self.source.get("backupRef") or {}).get("name")


@dataclasses.dataclass(frozen=True)
class RestoreStatus:
    """What earlier passes recorded; the planner's memory across passes and restarts."""

    phase: str | None = None
    source_key: str | None = None
    sha256: str | None = None  # set once the snapshot verified
    snapshot_version: str | None = None
    restored_revision: int | None = None  # the snapshot's revision (the source's)
    target_revision_before: int | None = None  # in place: the highest revision the target reported before
    revision_bump: int | None = None  # the bump the restore pods apply, recorded when the restore began
    target: str | None = None
    seed_members: tuple[str, ...] = ()  # every member restored from the snapshot
    snapshot_size: int | None = None  # bytes, as verified
    seed_attempts: int = 0
    preserved: tuple[str, ...] = ()
    progress: str = ""
    point_in_time: ReplayRecord | None = None  # a point-in-time restore's plan and what it reached

    @property
    def verified(self) -> bool:
        return bool(self.sha256)

    @classmethod
    def from_dict(cls, status: Mapping[str, Any] | None) -> RestoreStatus:
        status = status or {}
        return cls(
            phase=status.get("phase"),
            source_key=status.get("sourceKey"),
            sha256=status.get("sha256"),
            snapshot_version=status.get("snapshotEtcdVersion"),
            restored_revision=status.get("restoredRevision"),
            target_revision_before=status.get("targetRevisionBefore"),
            revision_bump=status.get("revisionBump"),
            target=status.get("targetCluster"),
            seed_members=tuple(status.get("seedMembers") or ()),
            snapshot_size=status.get("snapshotSize"),
            seed_attempts=int(status.get("seedAttempts") or 0),
            preserved=tuple(sorted(status.get("preservedData") or ())),
            progress=status.get("progress") or "",
            point_in_time=ReplayRecord.from_dict(status.get("pointInTime")),
        )
