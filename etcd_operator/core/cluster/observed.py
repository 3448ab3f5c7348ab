"""What the operator sees of one cluster in one pass: its pods, PVCs and etcd's own view.
Plain data; gathered by cluster.observer, read by the planner and the status builder."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.cluster.certs import TLSView
from etcd_operator.core.cluster.naming import DEFAULT_CLUSTER_DOMAIN
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.timefmt import format_time, parse_time


@dataclasses.dataclass(frozen=True)
class Member:
    id: int
    name: str
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...]
    is_learner: bool

    @property
    def started(self) -> bool:
        # etcd reports an added-but-never-started member with an empty name.
        return bool(self.name)

    @property
    def hex_id(self) -> str:
        return f"{self.id:x}"


@dataclasses.dataclass(frozen=True)
class MemberStatus:
    cluster_id: int
    member_id: int
    leader_id: int
    version: str
    db_size: int
    db_size_in_use: int
    revision: int
    raft_index: int
    raft_applied_index: int
    raft_term: int
    is_learner: bool
    errors: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class PodView:
    name: str
    uid: str
    member_id: int | None
    phase: str
    ready: bool
    deleting: bool
    ip: str | None
    spec_hash: str | None
    initial_state: str
    initial_cluster: str
    force_new_cluster: bool
    restart_count: int = 0
    waiting_reason: str | None = None
    started: bool = True  # the container passed its startup probe (False while starting)
    quota_bytes: int | None = None  # its etcd's --quota-backend-bytes; None: unset (etcd's default)

    @property
    def failed(self) -> bool:
        """Evicted, or stopped by a graceful node shutdown: the kubelet never restarts it."""
        return self.phase == "Failed"

    @property
    def starting(self) -> bool:
        """Its container runs but has not passed its startup probe yet: inside the startup
        budget. A container waiting to be restarted (CrashLoopBackOff) is not starting."""
        return self.phase == "Running" and not self.started and not self.deleting and self.waiting_reason is None


@dataclasses.dataclass(frozen=True)
class VolumePin:
    """The node a PVC's volume is pinned to (its PV's required node affinity on
    kubernetes.io/hostname, as local volumes have), and what the API server says of it."""

    node: str | None  # None: the PV pins the volume to no single node, or could not be read
    node_gone: bool = False  # the API server has no Node with that hostname: gone for good
    unknown: str | None = None  # why the PV or the Node could not be read (the operator's rights)


@dataclasses.dataclass(frozen=True)
class PVCView:
    name: str
    uid: str
    member_id: int | None
    deleting: bool
    storage_class: str | None
    restored: bool = False  # its data directory was restored from a snapshot (EtcdRestore)
    requested: int | None = None  # spec.resources.requests.storage, bytes
    capacity: int | None = None  # status.capacity.storage, bytes: what the volume has
    # Whether the PVC's StorageClass sets allowVolumeExpansion; None when unknown.
    expandable: bool | None = None
    owned_by_cluster: bool = False  # an owner reference to the EtcdCluster (older operators set one)
    # Where its volume lives, looked up only while its member's pod is Pending (cluster/observer.py).
    pin: VolumePin | None = None


@dataclasses.dataclass(frozen=True)
class EtcdView:
    """etcd as seen through the members that answered. `members` is the leader's member
    list when a leader answered, else the freshest local list; empty when none answered."""

    members: tuple[Member, ...] = ()
    statuses: dict[int, MemberStatus] = dataclasses.field(default_factory=dict)
    cluster_id: int | None = None
    leader_id: int | None = None
    from_leader: bool = False
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    endpoints: dict[int, str] = dataclasses.field(default_factory=dict)  # member id -> answering endpoint
    foreign: dict[str, int] = dataclasses.field(default_factory=dict)  # endpoint -> another cluster's ID

    @property
    def answered(self) -> bool:
        return bool(self.statuses)


@dataclasses.dataclass(frozen=True)
class Operation:
    """A multi-pass operation recorded in status before it starts (quorum recovery)."""

    kind: str
    member: str
    member_id: int
    started_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "member": self.member,
            "memberID": f"{self.member_id:x}",
            "startedAt": self.started_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Operation | None:
        if not data or not data.get("kind"):
            return None
        return cls(data["kind"], data["member"], int(data["memberID"], 16), float(data["startedAt"]))


@dataclasses.dataclass(frozen=True)
class RollRecord:
    """status.rollout: the last pod spec every member ran healthily, and a failed roll."""

    last_good_spec: Mapping[str, Any] | None = None
    failed_hash: str | None = None
    failed_member: str = ""
    failed_reason: str = ""
    # The pod spec hash the members ran when last_good_spec was recorded: it includes what the
    # operator resolves beyond the spec (a derived quota, the trusted CAs).
    last_good_hash: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # The spec is kept as one JSON string: a merge patch would merge a nested object with
        # the old one and keep fields the user has since removed. Empty strings, never null,
        # so an unchanged record compares equal to what status holds.
        return {
            "lastGoodSpec": json.dumps(self.last_good_spec, sort_keys=True) if self.last_good_spec else "",
            "failedPodSpecHash": self.failed_hash or "",
            "failedMember": self.failed_member,
            "failedReason": self.failed_reason,
            "lastGoodPodSpecHash": self.last_good_hash or "",
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RollRecord:
        data = data or {}
        spec = data.get("lastGoodSpec")
        return cls(
            json.loads(spec) if spec else None,
            data.get("failedPodSpecHash") or None,
            data.get("failedMember") or "",
            data.get("failedReason") or "",
            data.get("lastGoodPodSpecHash") or None,
        )

    @property
    def last_good(self) -> ClusterSpec | None:
        return ClusterSpec.from_dict(self.last_good_spec) if self.last_good_spec is not None else None


@dataclasses.dataclass(frozen=True)
class SpaceRecoveryRecord:
    """NOSPACE remediation in progress (status.spaceRecovery): the revision compacted to
    (None: not yet) and the members defragmented since."""

    started_at: float
    compacted_revision: int | None = None
    defragmented: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "startedAt": self.started_at,
            "compactedRevision": self.compacted_revision,
            "defragmented": list(self.defragmented),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SpaceRecoveryRecord | None:
        if not data or data.get("startedAt") is None:
            return None
        revision = data.get("compactedRevision")
        return cls(
            float(data["startedAt"]), None if revision is None else int(revision), tuple(data.get("defragmented") or ())
        )


@dataclasses.dataclass(frozen=True)
class DefragmentationRecord:
    """status.defragmentation: the last request token done, and the one in progress with
    the members defragmented for it so far."""

    last_token: str | None = None
    token: str | None = None
    defragmented: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"lastToken": self.last_token, "token": self.token, "defragmented": list(self.defragmented)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> DefragmentationRecord:
        data = data or {}
        return cls(data.get("lastToken"), data.get("token"), tuple(data.get("defragmented") or ()))


@dataclasses.dataclass(frozen=True)
class JoinRecord:
    """status.learnerJoins: learners removed in a row because they did not catch up."""

    failures: int = 0
    last_failure_at: float | None = None  # wall clock, when the last one was removed: for people only
    last_member_id: int | None = None  # the last one removed: a retried removal counts once
    last_reason: str = ""

    def to_dict(self) -> dict[str, Any] | None:
        if not self.failures:
            return None
        return {
            "failures": self.failures,
            "lastFailureAt": format_time(self.last_failure_at or 0.0),
            "lastMemberID": f"{self.last_member_id or 0:x}",
            "lastReason": self.last_reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> JoinRecord:
        if not data or not data.get("failures"):
            return cls()
        try:
            return cls(
                int(data["failures"]),
                parse_time(data.get("lastFailureAt") or ""),
                int(data.get("lastMemberID") or "0", 16),
                str(data.get("lastReason") or ""),
            )
        except (TypeError, ValueError):
            return cls()  # unreadable: no wait rather than a pass that raises


@dataclasses.dataclass(frozen=True)
class PodAdmission:
    """The API server's answer to creating a member's pod with one pod spec, as this
    operator process got it: from a dry run, or from a create it refused."""

    member: str
    pod_spec_hash: str
    refused: str | None = None  # the API server's message; None: accepted
    fields: tuple[str, ...] = ()  # the refused fields, as the spec names them ("spec.pod.priorityClassName")
    age: float = 0.0  # seconds since the answer, on the acting process's monotonic clock

    @property
    def accepted(self) -> bool:
        return self.refused is None


@dataclasses.dataclass(frozen=True)
class Observed:
    cluster: str
    namespace: str
    uid: str
    now: float
    pods: dict[str, PodView]
    pvcs: dict[str, PVCView]
    etcd: EtcdView
    # Seconds this operator process has itself seen each unhealthy member unhealthy, and
    # evidence of a lost quorum, on its monotonic clock (cluster/timers.py); never from status.
    unhealthy_for: dict[str, float]
    no_quorum_for: float | None
    running_version: str | None
    recovery_approved: bool = False
    operation: Operation | None = None
    bootstrapped: bool = False  # the cluster existed once (status.clusterID was recorded)
    restoring: str | None = None  # the EtcdRestore that holds this cluster stopped
    restore_hold: str | None = None  # that EtcdRestore's uid, as its hold names it
    min_ordinal: int = 0  # ordinals below this belong to data kept aside by an in-place restore
    annotation_problems: tuple[str, ...] = ()  # annotations ignored as malformed, and why
    recorded_cluster_id: int | None = None  # status.clusterID: answers from any other cluster are not trusted
    tls: TLSView = dataclasses.field(default_factory=TLSView)  # recorded transport and certificate Secrets
    rollout: RollRecord = RollRecord()  # status.rollout: the last good pod spec, a failed roll
    recorded_version: str | None = None  # status.currentVersion: what ran when a member last answered
    cluster_version: str | None = None  # etcd's cluster version (x.y.0), as the leader reports it
    downgrade_target: str | None = None  # status.downgrade.target: a downgrade enabled in etcd
    # status.quota.backendBytes: the quota the operator resolved last (None: etcd's default);
    # quota_recorded is False until the operator first recorded one.
    recorded_quota: int | None = None
    quota_recorded: bool = False

    @property
    def known_version(self) -> str | None:
        """The version the members run; when none answers, the one they ran last."""
        return self.running_version or self.recorded_version

    space_recovery: SpaceRecoveryRecord | None = None  # status.spaceRecovery
    defrag_requested: str | None = None  # the etcd.operator.dev/defragment annotation's token
    defragmentation: DefragmentationRecord = DefragmentationRecord()  # status.defragmentation
    learner_joins: JoinRecord = (
        JoinRecord()
    )  # status.learnerJoins: learners that did not catch up (cluster/learners.py)
    # Seconds since this process first saw learner_joins' last failure, on its monotonic clock
    # (cluster/timers.py); None: no failure recorded.
    since_join_failure: float | None = None
    # The API server's latest answers for member pods, by member (cluster/admission.py).
    pod_admissions: Mapping[str, PodAdmission] = dataclasses.field(default_factory=dict)
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN  # the operator's CLUSTER_DOMAIN (member certificate names)
