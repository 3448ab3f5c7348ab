"""What the operator sees of one EtcdRestore and its target in one pass. Plain data;
gathered by restore.observer, read by the planner."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.backup.chain import CaughtUp
from etcd_operator.core.backup.continuous import AuthRead
from etcd_operator.core.backup.manifest import Ignored, Manifest
from etcd_operator.core.backup.segments import SegmentManifest
from etcd_operator.core.cluster.spec import ClusterSpec

RECORD_HISTORY = 20  # applied restores remembered on a cluster


@dataclasses.dataclass(frozen=True)
class RestoreRecord:
    """One restore applied to a cluster, kept on the EtcdCluster itself (annotation
    etcd.operator.dev/restored-from) so that the same restore applied again is recognised
    even after its EtcdRestore object was deleted."""

    restore: str  # the EtcdRestore's name
    uid: str  # ... and uid, generation and spec digest at the time
    generation: int
    spec_hash: str
    source_key: str
    sha256: str
    completed_at: str  # RFC 3339: when the restored data was handed to the cluster

    def to_dict(self) -> dict[str, Any]:
        return {
            "restore": self.restore,
            "uid": self.uid,
            "generation": self.generation,
            "specHash": self.spec_hash,
            "sourceKey": self.source_key,
            "sha256": self.sha256,
            "completedAt": self.completed_at,
        }

    @classmethod
    def from_dict(cls, data: Any) -> RestoreRecord:
        if not isinstance(data, dict):
            raise ValueError("a record is a JSON object")
        try:
            return cls(
                str(data["restore"]),
                str(data["uid"]),
                int(data["generation"]),
                str(data["specHash"]),
                str(data["sourceKey"]),
                str(data["sha256"]),
                str(data["completedAt"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"record lacks or mistypes {e}") from None


def parse_records(text: str | None) -> tuple[RestoreRecord, ...]:
    """The records in an annotation value (a JSON list, oldest first). Raises ValueError
    when the value is not one this operator wrote."""
    if not text:
        return ()
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(data, list):
        raise ValueError("not a JSON list")
    return tuple(RestoreRecord.from_dict(item) for item in data)


def records_text(records: tuple[RestoreRecord, ...]) -> str:
    return json.dumps([r.to_dict() for r in records[-RECORD_HISTORY:]], sort_keys=True, separators=(",", ":"))


@dataclasses.dataclass(frozen=True)
class ObjectState:
    kind: str  # Pod, PersistentVolumeClaim, Service, PodDisruptionBudget, Secret
    name: str
    uid: str
    deleting: bool = False
    phase: str = ""  # pods
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    owner_uids: tuple[str, ...] = ()
    created_at: str = ""  # metadata.creationTimestamp
    started_at: str = ""  # pods: when the first container started
    finished_at: str = ""  # pods: when the last container ended

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)

    def annotation(self, key: str) -> str | None:
        return dict(self.annotations).get(key)

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.name}"


@dataclasses.dataclass(frozen=True)
class TargetCluster:
    """The EtcdCluster a restore writes into, as it is now."""

    name: str
    uid: str
    resource_version: str
    spec: ClusterSpec | None  # None when its spec cannot be read
    spec_error: str | None
    holder: str | None  # the EtcdRestore holding it stopped (restore-in-progress)
    hold_uid: str | None  # ... and its uid (restore-hold)
    hold_ack: tuple[str, str] | None  # the hold (name, uid) its controller acknowledged (status.restoreHold)
    records: tuple[RestoreRecord, ...]
    records_error: str | None  # the restored-from annotation could not be read
    operation: str | None  # status.operation.kind, e.g. QuorumRecovery
    recovery_approved: bool  # the approve-quorum-recovery annotation is present
    min_ordinal: int
    phase: str | None
    available: bool
    ready_members: int
    cluster_id: str | None
    transport: str | None = None  # status.tls.transport: http or https, once the cluster recorded it
    outside_shard: str | None = None  # why this operator's shard does not own it (None: it does)
    deleting: bool = False  # it has a deletionTimestamp
    # the highest revision its members reported, as its status recorded it (status.members[].revision);
    # None when no member reported one
    revision: int | None = None


@dataclasses.dataclass(frozen=True)
class SourceState:
    """What the snapshot's source needs before it can be verified, as observed: the
    EtcdBackup of a backupRef, and the Secrets its storage.s3 block names (the backup's, or
    spec.source.s3)."""

    backup: str | None = None  # spec.source.backupRef.name, if that is the source
    backup_found: bool = True
    backup_completed: bool = True  # it has completed a backup (status.lastSuccessfulTime)
    backup_phase: str = ""
    missing_secrets: tuple[str, ...] = ()
    credentials_refusal: str | None = None  # why its storage may not be used (storage_policy.py)


@dataclasses.dataclass(frozen=True)
class Catalogue:
    """A point-in-time restore's source as listed, until its plan is recorded: the manifests
    of the backup's full snapshots and of its segments."""

    folder: str = ""  # the backup's folder in the store (manifest.backup_prefix)
    snapshots: tuple[Manifest, ...] = ()
    segments: tuple[SegmentManifest, ...] = ()
    caught_up: tuple[CaughtUp, ...] = ()  # the backup's status.continuous.caughtUp, when it records one
    auth_read: AuthRead | None = None  # the backup's status.continuous.authRead, when it records one
    ignored: tuple[Ignored, ...] = ()  # manifests that did not authenticate under the restore's keys: not planned with
    error: str | None = None  # the store could not be listed
    permanent: bool = False  # ... and listing again cannot help (credentials, bucket)


@dataclasses.dataclass(frozen=True)
class ContainerEnd:
    container: str
    exit_code: int | None
    message: str  # its termination message, for people (and the replay's result)


@dataclasses.dataclass(frozen=True)
class ReplayPod:
    """The point-in-time replay pod as the API server has it."""

    name: str
    uid: str
    owned: bool  # an owner reference to this EtcdRestore (by uid)
    phase: str = ""
    deleting: bool = False
    init_failure: ContainerEnd | None = None  # the first init container that failed
    replay: ContainerEnd | None = None  # the replay container ended

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any], restore_uid: str, replay_container: str) -> ReplayPod:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        failure = None
        for container in status.get("initContainerStatuses") or []:
            done = (container.get("state") or {}).get("terminated") or {}
            if done and done.get("exitCode") not in (None, 0):
                failure = ContainerEnd(
                    container.get("name", ""), done.get("exitCode"), (done.get("message") or "").strip()[-1000:]
                )
                break
        replay = None
        for container in status.get("containerStatuses") or []:
            done = (container.get("state") or {}).get("terminated") or {}
            if container.get("name") == replay_container and done:
                replay = ContainerEnd(replay_container, done.get("exitCode"), (done.get("message") or "").strip())
        return cls(
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            owned=any(ref.get("uid") == restore_uid for ref in meta.get("ownerReferences") or []),
            phase=status.get("phase") or "",
            deleting=bool(meta.get("deletionTimestamp")),
            init_failure=failure,
            replay=replay,
        )


@dataclasses.dataclass(frozen=True)
class Observed:
    namespace: str
    restore: str
    uid: str
    generation: int
    cluster: TargetCluster | None
    pods: tuple[ObjectState, ...] = ()  # pods carrying the target's labels
    pvcs: tuple[ObjectState, ...] = ()  # PVCs carrying the target's labels
    # PVCs a restore set aside from the target (label preserved-from-cluster): their names stay taken
    preserved_pvcs: tuple[ObjectState, ...] = ()
    # target absent: the namespace's pods, PVCs, Services and PDBs (what a new cluster could take over),
    # and the Secrets of the names the new cluster would create
    namespace_objects: tuple[ObjectState, ...] = ()
    seed_pvcs: tuple[ObjectState, ...] = ()  # the PVCs of status.seedMembers that exist
    seed_pods: tuple[ObjectState, ...] = ()  # pods carrying this restore's label
    new_cluster_problem: str | None = None  # server-side dry run of the cluster to create
    deleting: bool = False  # the EtcdRestore has a deletionTimestamp
    source: SourceState | None = None  # looked at until the snapshot is verified
    catalogue: Catalogue | None = None  # point in time: listed until the plan is recorded
    replay_pod: ReplayPod | None = None  # point in time: the replay pod, while the replay is planned

    @property
    def target(self) -> TargetCluster:
        """The target cluster, which every step acting on it is planned with."""
        if self.cluster is None:
            raise RuntimeError(f"a step on the target of {self.restore} was planned with no target observed")
        return self.cluster

    @property
    def target_spec(self) -> ClusterSpec:
        """The target's spec, which every step creating members for it is planned with."""
        if (spec := self.target.spec) is None:
            raise RuntimeError(f"a step creating members for {self.restore} was planned with an unreadable spec")
        return spec
