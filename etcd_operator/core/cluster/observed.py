"""What the operator sees of one cluster in one pass: its pods, PVCs and etcd's own view.
Plain data; gathered by cluster.observer, read by the planner and the status builder."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from etcd_operator.core.cluster.certs import CertView, TLSView
from etcd_operator.core.cluster.naming import DEFAULT_CLUSTER_DOMAIN


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
    def ended(self) -> bool:
        """Evicted, or stopped by a graceful node shutdown: the kubelet never restarts it. The
        phase is Failed (reason Evicted), or Succeeded when etcd exited 0 on the kubelet's
        SIGTERM (kubelets since 1.27, kubernetes/kubernetes#118310)."""
        return self.phase in ("Failed", "Succeeded")

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
    initial_cluster: str = (
        ""  # a bootstrap created it: the initial cluster its member starts with (cluster/bootstrap.py)
    )
    bound: bool = False  # bound to a volume, or a node chosen for one: a pod may have used it
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
class BackupSnapshot:
    """An EtcdBackup that takes a snapshot before its cluster sleeps (core/hibernation.py),
    with its newest full snapshot as its status records it."""

    name: str
    cluster_id: str | None  # status.lastBackup.clusterID (hex); None: no snapshot yet
    revision: int | None  # status.lastBackup.revision
    continuous: bool = False  # spec.continuous.enabled: it writes a chain of segments
    chain_cluster_id: str | None = None  # status.continuous.clusterID (hex): the chain's cluster
    chain_revision: int | None = None  # status.continuous.lastRevision: the chain's last uploaded revision


@dataclasses.dataclass(frozen=True, order=True)
class EtcdPermission:
    """One permission of an etcd role as etcd stores it: a key and a range end (empty: the
    key alone), and READ, WRITE or READWRITE."""

    key: bytes
    range_end: bytes
    perm_type: str


@dataclasses.dataclass(frozen=True)
class AuthView:
    """etcd's authentication state as the leader reported it, and the Kubernetes objects
    spec.auth names. `read` is False when etcd's users and roles were not read (no leader,
    or an error, in `problem`): then the auth planner takes no step."""

    read: bool = False
    enabled: bool = False
    users: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # user -> its roles
    roles: Mapping[str, tuple[EtcdPermission, ...]] = dataclasses.field(default_factory=dict)
    problem: str | None = None
    # The resourceVersion of each user's password Secret (None: absent, or without the key).
    password_versions: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    # Each user certificate Secret the operator finds for this cluster (by user), and its view.
    user_certs: Mapping[str, CertView] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Observed:
    """What this pass saw: the cluster's pods, PVCs and etcd, its annotations, the TLS Secrets,
    and this process's own timers. What the EtcdCluster's status recorded is in
    recorded.ClusterStatus; the wall clock is the planner's own argument."""

    cluster: str
    namespace: str
    uid: str
    pods: dict[str, PodView]
    pvcs: dict[str, PVCView]
    etcd: EtcdView
    # Seconds this operator process has itself seen each unhealthy member unhealthy, and
    # evidence of a lost quorum, on its monotonic clock (cluster/timers.py); never from status.
    unhealthy_for: dict[str, float]
    no_quorum_for: float | None
    running_version: str | None
    recovery_approved: bool = False
    restoring: str | None = None  # the EtcdRestore that holds this cluster stopped
    restore_hold: str | None = None  # that EtcdRestore's uid, as its hold names it
    min_ordinal: int = 0  # ordinals below this belong to data kept aside by an in-place restore
    annotation_problems: tuple[str, ...] = ()  # annotations ignored as malformed, and why
    # The transport and rotation recorded in status.tls, read with the certificate Secrets they select.
    tls: TLSView = dataclasses.field(default_factory=TLSView)
    # etcd's cluster version (x.y.0), as the leader reports it; read only while status records
    # a downgrade (cluster/downgrade.py, its one reader), else None.
    cluster_version: str | None = None
    defrag_requested: str | None = None  # the etcd.operator.dev/defragment annotation's token
    leader_move_requested: str | None = None  # the etcd.operator.dev/move-leader annotation's value
    # Seconds since this process first saw status.learnerJoins' last failure, on its monotonic
    # clock (cluster/timers.py); None: no failure recorded.
    since_join_failure: float | None = None
    # Seconds since this process sent each learner (by member ID) an entry (cluster/learners.py).
    since_learner_entry: Mapping[int, float] = dataclasses.field(default_factory=dict)
    # The API server's latest answers for member pods, by member (cluster/admission.py).
    pod_admissions: Mapping[str, PodAdmission] = dataclasses.field(default_factory=dict)
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN  # the operator's CLUSTER_DOMAIN (member certificate names)
    # The operator's ADOPTION_ALLOW_CROSS_NAMESPACE: spec.adoption may name another namespace's members.
    adoption_cross_namespace: bool = False
    # While status.hibernation is Snapshotting or Stopping: the EtcdBackups that take a snapshot first
    # (None: not read), and seconds this process has seen the cluster waiting for them, on
    # its monotonic clock (cluster/timers.py), counted again from the start of Stopping.
    snapshot_backups: tuple[BackupSnapshot, ...] | None = None
    snapshot_wait_for: float | None = None
    auth: AuthView = dataclasses.field(default_factory=AuthView)
    # Children other than the certificate Secrets whose name an object that is not the
    # operator's holds ("Service c-client" -> why), as their last write found them
    # (cluster/ownership.py); the certificate Secrets' are in tls.foreign.
    collisions: Mapping[str, str] = dataclasses.field(default_factory=dict)
