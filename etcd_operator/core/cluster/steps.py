"""The steps a planner can ask for. Each is one small, idempotent change."""

from __future__ import annotations

import dataclasses

from etcd_operator.core.cluster.adoption_record import AdoptionRecord
from etcd_operator.core.cluster.certs import Rotation
from etcd_operator.core.cluster.observed import EtcdPermission
from etcd_operator.core.cluster.spec import SecretKeyRef
from etcd_operator.core.hibernation import HibernationRecord


@dataclasses.dataclass(frozen=True)
class Step:
    reason: str = ""

    @property
    def kind(self) -> str:
        return type(self).__name__

    @property
    def changes_membership(self) -> bool:
        return False


@dataclasses.dataclass(frozen=True)
class Steady(Step):
    """Nothing to do: the cluster matches its spec."""


@dataclasses.dataclass(frozen=True)
class Wait(Step):
    """Nothing safe to do yet; look again soon."""


@dataclasses.dataclass(frozen=True)
class WaitForLearner(Wait):
    """A learner is catching up; it is promoted once it serves. While it is new, the next
    pass comes sooner than for other waits (cluster.pacing)."""

    catching_up_for: float = 0.0  # seconds it has been unhealthy (0: since this pass)


@dataclasses.dataclass(frozen=True)
class BootstrapFirstMember(Step):
    member: str = ""
    initial_cluster: str = ""  # a restored member: every member its restored data holds; else itself only


@dataclasses.dataclass(frozen=True)
class BootstrapMembers(Step):
    """Members of a new cluster started at once with one initial cluster naming them all
    (etcd's static bootstrap): their PVCs first, each carrying that initial cluster, then
    their pods (cluster/bootstrap.py)."""

    members: tuple[str, ...] = ()
    initial_cluster: str = ""


@dataclasses.dataclass(frozen=True)
class SettleStartedMembers(Step):
    """Settle at once every bootstrap member seen running (name, ID): its ID on its PVC, the
    evidence that it ran, and its pod's flags those of a restart. From then on it never
    starts as bootstrapped again (cluster/bootstrap.py)."""

    members: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class StartRestoredMembers(Step):
    """Every member whose data an EtcdRestore seeded, started in one step (etcd's
    disaster-recovery procedure): each one's data holds the full initial cluster, and none
    can elect a leader alone, so starting them one per pass only adds waiting."""

    members: tuple[str, ...] = ()
    initial_cluster: str = ""


@dataclasses.dataclass(frozen=True)
class AddLearner(Step):
    member: str = ""

    @property
    def changes_membership(self) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class CreateMemberPod(Step):
    """Start the pod of a member etcd already knows: a fresh learner (full initial
    cluster) or a started member whose pod is gone (rejoins as itself)."""

    member: str = ""
    member_id: int = 0
    initial_cluster: str = ""
    joined_before: bool = False


@dataclasses.dataclass(frozen=True)
class CheckPodSpec(Step):
    """Ask the API server, with a dry run, whether it accepts `member`'s pod with the pod
    spec `pod_spec_hash` stands for, before a step (`before`) takes a pod away or adds a
    member. Changes nothing; the answer is evidence for the next pass (cluster/admission.py)."""

    member: str = ""
    member_id: int = 0  # 0: a member etcd does not know yet
    pod_spec_hash: str = ""
    before: str = ""  # the kind of the step that waits for the answer


@dataclasses.dataclass(frozen=True)
class SettleMemberPod(Step):
    """Narrow a started member's pod annotations so a restart with lost data fails loudly
    instead of silently rejoining empty."""

    member: str = ""
    member_id: int = 0


@dataclasses.dataclass(frozen=True)
class PromoteLearner(Step):
    member: str = ""
    member_id: int = 0

    @property
    def changes_membership(self) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class AppendEntryForLearner(Step):
    """Update a learner to the peer URLs it already has: one raft entry that changes no
    member, which a learner held at its snapshot applies, so that it can publish itself
    (cluster/learners.py)."""

    member: str = ""
    member_id: int = 0
    peer_urls: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class RemoveMember(Step):
    member: str = ""
    member_id: int = 0
    replacing: bool = False
    learner_not_caught_up: bool = False  # counted in status.learnerJoins (cluster/learners.py)

    @property
    def changes_membership(self) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class DeleteMemberPod(Step):
    """The member is not (or no longer) in etcd: its pod goes."""

    member: str = ""


@dataclasses.dataclass(frozen=True)
class RestartFailedPod(Step):
    """The pod failed for good (evicted, node shutdown): it goes, and its member starts
    again on its PVC."""

    member: str = ""


@dataclasses.dataclass(frozen=True)
class DeleteMemberPVC(Step):
    """The member is not in etcd and its pod is gone: its data goes."""

    member: str = ""


@dataclasses.dataclass(frozen=True)
class MoveLeader(Step):
    from_id: int = 0
    to_id: int = 0
    to_member: str = ""


@dataclasses.dataclass(frozen=True)
class MoveLeaderOnRequest(Step):
    """A leader move asked for by the etcd.operator.dev/move-leader annotation: move it, then
    record the request as done in status.leaderMove."""

    from_id: int = 0
    to_id: int = 0
    from_member: str = ""
    to_member: str = ""
    token: str = ""


@dataclasses.dataclass(frozen=True)
class FinishLeaderMoveRequest(Step):
    """A leader move request that needs no move (its member leads already) or that is
    refused (`refused`: `outcome` says why): record it as done."""

    token: str = ""
    outcome: str = ""
    refused: bool = False


@dataclasses.dataclass(frozen=True)
class RollMember(Step):
    """Recreate a member's pod to follow the spec (image, pod settings); data stays."""

    member: str = ""


@dataclasses.dataclass(frozen=True)
class RollFailed(Step):
    """A rolled member did not become healthy with the new pod spec: record the failure in
    status (status.rollout) and tell people. The spec acted on then becomes the last good one."""

    member: str = ""
    pod_spec_hash: str = ""


@dataclasses.dataclass(frozen=True)
class EnableDowngrade(Step):
    """Validate, then enable etcd's downgrade to `target` (a minor, "3.5") on the leader;
    status.downgrade records it."""

    target: str = ""


@dataclasses.dataclass(frozen=True)
class CancelDowngrade(Step):
    """The spec went back: cancel etcd's downgrade job and forget status.downgrade."""

    target: str = ""


@dataclasses.dataclass(frozen=True)
class FinishDowngrade(Step):
    """Every member runs the target minor: forget status.downgrade."""

    target: str = ""


@dataclasses.dataclass(frozen=True)
class Defragment(Step):
    member: str = ""
    member_id: int = 0


@dataclasses.dataclass(frozen=True)
class BeginQuorumRecovery(Step):
    """Record the survivor in status, then stop every other member."""

    member: str = ""
    member_id: int = 0


@dataclasses.dataclass(frozen=True)
class StopMemberPod(Step):
    """Part of quorum recovery: stop a non-survivor; its PVC stays until recovery is done."""

    member: str = ""


@dataclasses.dataclass(frozen=True)
class SetAsideMemberData(Step):
    """Part of quorum recovery: a non-survivor's PVC leaves the cluster's selector and owner
    but is kept, since it may hold writes the survivor lacks; new members take higher
    ordinals so no name collides with it."""

    member: str = ""
    min_ordinal: int = 0


@dataclasses.dataclass(frozen=True)
class ForceNewCluster(Step):
    """Restart the survivor with --force-new-cluster."""

    member: str = ""
    member_id: int = 0


@dataclasses.dataclass(frozen=True)
class FinishQuorumRecovery(Step):
    member: str = ""


@dataclasses.dataclass(frozen=True)
class AbandonQuorumRecovery(Step):
    """Call off a recorded recovery before the survivor was forced: quorum came back, or the
    survivor's data is gone."""


@dataclasses.dataclass(frozen=True)
class RecordTransport(Step):
    """Record in status, before any member exists, that this cluster serves TLS; a cluster
    without the record and with members predates TLS and is plaintext. A new Managed TLS
    cluster records its peer identity with it (see RecordPeerIdentity)."""

    transport: str = ""
    peer_identity: str | None = None


@dataclasses.dataclass(frozen=True)
class RecordPeerIdentity(Step):
    """Record in status.tls.peerIdentity the CN the members' peer port accepts from now on;
    the acting spec then carries it, and the members are rolled onto
    --peer-cert-allowed-cn one at a time (tls_plan says when it may be recorded)."""

    common_name: str = ""


@dataclasses.dataclass(frozen=True)
class IssueCertificate(Step):
    """Create or renew certificate Secrets of the Managed issuer, in order: (certs.CertKind
    value, why) pairs. More than one only before the first member exists (tls_plan)."""

    certificates: tuple[tuple[str, str], ...] = ()

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(kind for kind, _ in self.certificates)


@dataclasses.dataclass(frozen=True)
class RecordRotation(Step):
    """Record a certificate rotation's start or next phase in status.tls.rotation (None:
    finished, and `finished` = (kind, request) is recorded as done)."""

    rotation: Rotation | None = None
    finished: tuple[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class UpdateCASecret(Step):
    """A CA rotation's change to the Managed CA Secret: `add-next` (a new CA, trusted next to
    the old), `promote-next` (the new CA signs), `drop-old` (only the new CA is trusted)."""

    change: str = ""


@dataclasses.dataclass(frozen=True)
class SyncTrustBundle(Step):
    """Copy the CA Secret's trust bundle (ca.crt) into a leaf Secret; the leaf stays."""

    certificate: str = ""


# --- space: NOSPACE remediation, requested defragmentation, volume expansion ------------


@dataclasses.dataclass(frozen=True)
class BeginSpaceRecovery(Step):
    """The NOSPACE alarm is raised: record in status that remediation starts."""


@dataclasses.dataclass(frozen=True)
class CompactRevisions(Step):
    """NOSPACE remediation: compact the key history up to `revision` (cluster-wide)."""

    revision: int = 0


@dataclasses.dataclass(frozen=True)
class DefragmentForSpace(Step):
    """NOSPACE remediation: defragment one member, then record it in status."""

    member: str = ""
    member_id: int = 0


@dataclasses.dataclass(frozen=True)
class DisarmNoSpaceAlarm(Step):
    """Every member's database fits under the quota again: disarm NOSPACE."""

    member_ids: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class FinishSpaceRecovery(Step):
    """The NOSPACE alarm is gone: drop the remediation record."""


@dataclasses.dataclass(frozen=True)
class DefragmentOnRequest(Step):
    """A defragmentation asked for by the etcd.operator.dev/defragment annotation: one
    member, then record it in status."""

    member: str = ""
    member_id: int = 0
    token: str = ""


@dataclasses.dataclass(frozen=True)
class FinishDefragmentRequest(Step):
    """Every member was defragmented for `token`: record it as done."""

    token: str = ""


@dataclasses.dataclass(frozen=True)
class ExpandMemberPVC(Step):
    """Raise a member PVC's storage request to `size` (the StorageClass allows expansion)."""

    member: str = ""
    size: str = ""


# --- hibernation (core/hibernation.py, cluster/hibernation.py) ------------------------------


@dataclasses.dataclass(frozen=True)
class RecordHibernation(Step):
    """Write status.hibernation: the cluster's identity as it goes to sleep, or its next
    state (Snapshotting, Stopping, Hibernated, Waking); None: awake again, record dropped."""

    record: HibernationRecord | None = None
    without_snapshot: tuple[str, ...] = ()  # EtcdBackups whose snapshot was not waited for any longer


@dataclasses.dataclass(frozen=True)
class StopMemberForHibernation(Step):
    """Delete one member's pod as the cluster goes to sleep; its PVC, and its membership in
    etcd, stay."""

    member: str = ""
    without_chain: tuple[str, ...] = ()  # continuous EtcdBackups whose chains were not waited for any longer


@dataclasses.dataclass(frozen=True)
class RecordAdoption(Step):
    """Write status.adoption (cluster/adoption.py): the foreign cluster's ID before the first
    member joins it, and its completion once no foreign member is left."""

    record: AdoptionRecord | None = None


# --- authentication (cluster/auth.py): one change to etcd's users, roles or switch per step --


@dataclasses.dataclass(frozen=True)
class RecordUserCertificateBound(Step):
    """Record in status.auth, before a user's certificate is issued, the time until which it
    will be valid: a name removed later stays retired until then, even if the operator dies
    between writing the Secret and writing status."""

    user: str = ""
    valid_until: float = 0.0


@dataclasses.dataclass(frozen=True)
class IssueUserCertificate(Step):
    """Create or renew the client certificate of a spec.auth user (CN = its name) in its
    Secret, signed by the cluster's CA, valid until `valid_until` (recorded in status before)."""

    user: str = ""
    valid_until: float = 0.0


@dataclasses.dataclass(frozen=True)
class DeleteUserCertificate(Step):
    """A user's certificate Secret whose user no longer asks for one goes."""

    user: str = ""


@dataclasses.dataclass(frozen=True)
class AddAuthRole(Step):
    role: str = ""


@dataclasses.dataclass(frozen=True)
class GrantRolePermission(Step):
    role: str = ""
    permission: EtcdPermission = EtcdPermission(b"", b"", "READ")
    drift: bool = False  # the role was in place and had drifted from its declaration


@dataclasses.dataclass(frozen=True)
class RevokeRolePermission(Step):
    role: str = ""
    permission: EtcdPermission = EtcdPermission(b"", b"", "READ")
    drift: bool = False


@dataclasses.dataclass(frozen=True)
class DeleteAuthRole(Step):
    role: str = ""


@dataclasses.dataclass(frozen=True)
class AddAuthUser(Step):
    """Add a user: with the password its Secret holds (`password`), or without one (a user
    that authenticates by its client certificate's CN, and the operator's own identity)."""

    user: str = ""
    password: SecretKeyRef | None = None
    password_version: str | None = None  # the Secret's resourceVersion this pass saw


@dataclasses.dataclass(frozen=True)
class ChangeUserPassword(Step):
    user: str = ""
    password: SecretKeyRef = SecretKeyRef("")
    password_version: str = ""


@dataclasses.dataclass(frozen=True)
class ClearUserPassword(Step):
    """A user whose passwordSecretRef was removed: its password is replaced by a random one
    that is neither recorded nor shown, so the password it had stops working at once."""

    user: str = ""


@dataclasses.dataclass(frozen=True)
class GrantUserRole(Step):
    user: str = ""
    role: str = ""
    drift: bool = False


@dataclasses.dataclass(frozen=True)
class RevokeUserRole(Step):
    user: str = ""
    role: str = ""
    drift: bool = False


@dataclasses.dataclass(frozen=True)
class DeleteAuthUser(Step):
    user: str = ""


@dataclasses.dataclass(frozen=True)
class EnableAuth(Step):
    """Turn etcd's authentication on, once the operator's own identity is in place; the
    executor then proves it with an admin call."""

    operator_user: str = ""


@dataclasses.dataclass(frozen=True)
class DisableAuth(Step):
    """spec.auth.enabled is false: turn etcd's authentication off."""
