"""Carries out one planned step against Kubernetes and etcd. Every step is idempotent:
re-running it after a crash at any point converges to the same state.

This module is the entry point: the table from step to handler, the fences every write
passes and the mapping of errors to outcomes. The handlers live with their concern:
execute_membership, execute_member_pods, execute_quorum_recovery, execute_versions,
execute_space, execute_certificates, execute_hibernation, and execute_children for the
Services, the PDB and the NetworkPolicy."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from etcd_operator import DEFAULT_OPERATOR_IMAGE
from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.clients.etcd.pool import EtcdClientPool
from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster import execute_adoption as adoption
from etcd_operator.controllers.cluster import execute_auth as auth
from etcd_operator.controllers.cluster import execute_certificates as certificates
from etcd_operator.controllers.cluster import execute_children as children
from etcd_operator.controllers.cluster import execute_hibernation as hibernation
from etcd_operator.controllers.cluster import execute_member_pods as member_pods
from etcd_operator.controllers.cluster import execute_membership as membership
from etcd_operator.controllers.cluster import execute_quorum_recovery as quorum_recovery
from etcd_operator.controllers.cluster import execute_space as space
from etcd_operator.controllers.cluster import execute_versions as versions
from etcd_operator.controllers.cluster.execute_context import Handler, NameCollision, NotYet, PodRefused, StepContext
from etcd_operator.core.cluster import pacing
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import Health
from etcd_operator.core.cluster.member_pod_outcome import CollisionOutcome, MemberPodOutcome
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import EventPoster, Outcome


class BeingDeleted(Exception):
    """The EtcdCluster was marked for deletion during the pass: nothing more is created for it."""


class HeldByRestore(Exception):
    """An EtcdRestore holds the EtcdCluster, as the live object says, though this pass decided
    on an older copy: no member pod or PVC is created and no member step is taken."""


# What a pass may still do while a restore holds the cluster: wait, and keep its
# certificates (a restored member starts with them). Nothing that touches a member.
PERMITTED_WHILE_HELD = (
    a.Steady,
    a.Wait,
    a.RecordTransport,
    a.RecordPeerIdentity,  # status only: restored members then start with the peer identity
    a.IssueCertificate,
    a.RecordRotation,
    a.UpdateCASecret,
    a.SyncTrustBundle,
)


async def nothing(ctx: StepContext, action: a.Step, spec: ClusterSpec, observed: Observed) -> None:
    return None


# Every step the planner can ask for, and the handler that takes it.
HANDLERS: dict[type[a.Step], Handler] = {
    a.Steady: nothing,
    a.Wait: nothing,
    a.WaitForLearner: nothing,
    a.BootstrapFirstMember: membership.bootstrap_first_member,
    a.BootstrapMembers: membership.bootstrap_members,
    a.SettleStartedMembers: membership.settle_started_members,
    a.StartRestoredMembers: membership.start_restored_members,
    a.AddLearner: membership.add_learner,
    a.PromoteLearner: membership.promote_learner,
    a.AppendEntryForLearner: membership.append_entry_for_learner,
    a.RemoveMember: membership.remove_member,
    a.MoveLeader: membership.move_leader,
    a.MoveLeaderOnRequest: membership.move_leader_on_request,
    a.FinishLeaderMoveRequest: membership.finish_leader_move_request,
    a.CheckPodSpec: member_pods.check_pod_spec,
    a.CreateMemberPod: member_pods.create_member_pod,
    a.SettleMemberPod: member_pods.settle_member_pod,
    a.DeleteMemberPod: member_pods.delete_member_pod,
    a.RestartFailedPod: member_pods.restart_failed_pod,
    a.DeleteMemberPVC: member_pods.delete_member_pvc,
    a.RollMember: versions.roll_member,
    a.RollFailed: versions.roll_failed,
    a.EnableDowngrade: versions.enable_downgrade,
    a.CancelDowngrade: versions.cancel_downgrade,
    a.FinishDowngrade: versions.finish_downgrade,
    a.BeginQuorumRecovery: quorum_recovery.begin_quorum_recovery,
    a.StopMemberPod: quorum_recovery.stop_member_pod,
    a.SetAsideMemberData: quorum_recovery.set_aside_member_data,
    a.ForceNewCluster: quorum_recovery.force_new_cluster,
    a.FinishQuorumRecovery: quorum_recovery.finish_quorum_recovery,
    a.AbandonQuorumRecovery: quorum_recovery.abandon_quorum_recovery,
    a.RecordTransport: certificates.record_transport,
    a.RecordPeerIdentity: certificates.record_peer_identity,
    a.IssueCertificate: certificates.issue_certificate,
    a.RecordRotation: certificates.record_rotation,
    a.UpdateCASecret: certificates.update_ca_secret,
    a.SyncTrustBundle: certificates.sync_trust_bundle,
    a.Defragment: space.defragment,
    a.BeginSpaceRecovery: space.begin_space_recovery,
    a.CompactRevisions: space.compact_revisions,
    a.DefragmentForSpace: space.defragment_for_space,
    a.DisarmNoSpaceAlarm: space.disarm_nospace_alarm,
    a.FinishSpaceRecovery: space.finish_space_recovery,
    a.DefragmentOnRequest: space.defragment_on_request,
    a.FinishDefragmentRequest: space.finish_defragment_request,
    a.ExpandMemberPVC: space.expand_member_pvc,
    a.RecordHibernation: hibernation.record_hibernation,
    a.StopMemberForHibernation: hibernation.stop_member_for_hibernation,
    a.RecordAdoption: adoption.record_adoption,
    a.RecordUserCertificateBound: auth.record_user_certificate_bound,
    a.IssueUserCertificate: auth.issue_user_certificate,
    a.DeleteUserCertificate: auth.delete_user_certificate,
    a.AddAuthRole: auth.add_auth_role,
    a.GrantRolePermission: auth.grant_role_permission,
    a.RevokeRolePermission: auth.revoke_role_permission,
    a.DeleteAuthRole: auth.delete_auth_role,
    a.AddAuthUser: auth.add_auth_user,
    a.ChangeUserPassword: auth.change_user_password,
    a.ClearUserPassword: auth.clear_user_password,
    a.GrantUserRole: auth.grant_user_role,
    a.RevokeUserRole: auth.revoke_user_role,
    a.DeleteAuthUser: auth.delete_auth_user,
    a.EnableAuth: auth.enable_auth,
    a.DisableAuth: auth.disable_auth,
}


class ClusterExecutor:
    def __init__(
        self,
        kube_client: kube.KubeClient,
        etcd_clients: EtcdClientPool,
        body: Mapping[str, Any],
        post_event: EventPoster,
        operator_namespace: str = "default",
        being_deleted: Callable[[], bool] = lambda: False,
        held_by: Callable[[], str | None] = lambda: None,
        operator_image: str = DEFAULT_OPERATOR_IMAGE,
        *,
        status: ClusterStatus,
        now: float,
    ):
        """`being_deleted` reads the live object: once it is marked for deletion, every create
        and apply is refused here (BeingDeleted), before it reaches the API server.
        `held_by` reads the live object's restore hold (the EtcdRestore's name): while one
        stands, every member step and every pod or PVC create is refused (HeldByRestore),
        whatever copy of the object the pass decided on. `status` and `now` are what the
        pass planned with: the status records and the wall clock."""
        self.being_deleted = being_deleted
        self.held_by = held_by
        self.cluster = body["metadata"]["name"]
        self.namespace = body["metadata"]["namespace"]
        self.context = StepContext(
            kube=kube_client,
            etcd_clients=etcd_clients,
            body=body,
            post_event=post_event,
            fence=self._fence,
            hold_fence=self._hold_fence,
            operator_namespace=operator_namespace,
            operator_image=operator_image,
            status=status,
            now=now,
        )

    def _fence(self) -> None:
        if self.being_deleted():
            raise BeingDeleted(f"EtcdCluster {self.namespace}/{self.cluster} is being deleted")

    def _hold_fence(self, what: str) -> None:
        holder = self.held_by()
        if holder:
            raise HeldByRestore(
                f"EtcdCluster {self.namespace}/{self.cluster} is held by EtcdRestore {holder}; {what} is not done"
            )

    def handlers(self) -> dict[type[a.Step], Handler]:
        return HANDLERS

    async def run(self, action: a.Step, spec: ClusterSpec, observed: Observed) -> Outcome:
        handler = HANDLERS.get(type(action))
        if handler is None:
            raise TypeError(f"no executor step for {action.kind}")
        if not isinstance(action, PERMITTED_WHILE_HELD):
            self._hold_fence(action.kind)
        outcome: Outcome
        try:
            outcome = await handler(self.context, action, spec, observed) or Outcome(True)
        except NotYet as e:
            outcome = Outcome(False, str(e))
        except NameCollision as e:
            outcome = CollisionOutcome(False, str(e), collision=(e.ref, e.why))  # reported (cluster/ownership.py)
        except PodRefused as e:
            # Not an error of the pass: status says what is refused, and the planner waits.
            outcome = MemberPodOutcome(False, str(e), admission=e.answer)
        except EtcdError as e:
            if not (e.unavailable or e.learner_not_ready or e.cluster_not_ready):
                raise
            outcome = Outcome(False, f"etcd is not ready for {action.kind}: {e.detail}")
        return dataclasses.replace(outcome, retry_after=pacing.next_pass(action, outcome.done))

    # --- children that are not members (execute_children) ---------------------------

    async def disown_member_pvcs(self, observed: Observed) -> None:
        await children.disown_member_pvcs(self.context, observed)

    async def ensure_services(
        self, spec: ClusterSpec, health: Health, applied: str | None = None, force: bool = True
    ) -> tuple[str | None, dict[str, str]]:
        return await children.ensure_services(self.context, spec, health, applied, force)
