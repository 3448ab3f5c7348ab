"""Carries out one planned step against Kubernetes and etcd. Every step is idempotent:
re-running it after a crash at any point converges to the same state."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

import kopf

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.clients.etcd.pool import EtcdClientPool
from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers import faults
from etcd_operator.controllers.cluster.pod_dry_run import PodDryRun, is_refusal
from etcd_operator.controllers.cluster.tls_observer import read_secret, secret_bytes
from etcd_operator.core.cluster import admission, builders, certs, naming, network_policy, pacing, pki
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import Health
from etcd_operator.core.cluster.observed import (
    DefragmentationRecord,
    Observed,
    Operation,
    PodAdmission,
    SpaceRecoveryRecord,
)
from etcd_operator.core.cluster.planner import QUORUM_RECOVERY, member_add_receivers, self_only_cluster
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.runtime.config import DEFAULT_OPERATOR_IMAGE

logger = logging.getLogger(__name__)

EventPoster = Callable[[str, str, str], None]  # (type, reason, message)


@dataclasses.dataclass(frozen=True)
class Outcome:
    done: bool
    message: str = ""
    status_patch: dict | None = None
    retry_after: float | None = None  # seconds until the next pass; None: the reconciler's default
    admission: PodAdmission | None = None  # the API server's answer to a member pod (dry run or create)


class PodRefused(Exception):
    """The API server refused to create a member pod; nothing was created."""

    def __init__(self, answer: PodAdmission):
        super().__init__(admission.describe(answer))
        self.answer = answer


class NotYet(Exception):
    """The step cannot be taken right now (etcd said so); try again next pass."""


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
    a.IssueCertificate,
    a.RecordRotation,
    a.UpdateCASecret,
    a.SyncTrustBundle,
)
MEMBER_RESOURCES = (kube.PODS, kube.PVCS)


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
    ):
        """`being_deleted` reads the live object: once it is marked for deletion, every create
        and apply is refused here (BeingDeleted), before it reaches the API server.
        `held_by` reads the live object's restore hold (the EtcdRestore's name): while one
        stands, every member step and every pod or PVC create is refused (HeldByRestore),
        whatever copy of the object the pass decided on."""
        self.kube = kube_client
        self.being_deleted = being_deleted
        self.held_by = held_by
        self.operator_image = operator_image  # a joining TLS member's init container (builders.peer_name_container)
        self.operator_namespace = operator_namespace  # where the operator's pods run (NetworkPolicy)
        self.etcd_clients = etcd_clients
        self.body = body
        self.post_event = post_event
        self.cluster = body["metadata"]["name"]
        self.namespace = body["metadata"]["namespace"]
        self.token = body["metadata"]["uid"]

    # --- helpers ----------------------------------------------------------------------

    def _owned(self, manifest: dict) -> dict:
        kopf.adopt(manifest, owner=cast(kopf.Body, dict(self.body)))
        return manifest

    def _fence(self) -> None:
        if self.being_deleted():
            raise BeingDeleted(f"EtcdCluster {self.namespace}/{self.cluster} is being deleted")

    def _hold_fence(self, what: str) -> None:
        holder = self.held_by()
        if holder:
            raise HeldByRestore(
                f"EtcdCluster {self.namespace}/{self.cluster} is held by EtcdRestore {holder}; {what} is not done"
            )

    async def _create(self, resource: kube.Resource, manifest: dict) -> None:
        """Creates `manifest` as is: the caller decides whether the cluster owns it."""
        self._fence()
        if resource in MEMBER_RESOURCES:
            self._hold_fence(f"{resource.plural} {manifest['metadata']['name']}")
        try:
            await self.kube.create(resource, self.namespace, manifest)
        except kube.Conflict:
            pass  # created by an earlier, interrupted attempt

    async def _apply(self, resource: kube.Resource, manifest: dict) -> None:
        self._fence()
        await self.kube.apply(resource, self.namespace, manifest)

    def _leader_client(self, observed: Observed):
        leader = observed.etcd.leader_id
        endpoint = observed.etcd.endpoints.get(leader) if leader is not None else None
        if not endpoint:
            raise NotYet("no reachable leader")
        return self.etcd_clients.get(endpoint)

    def _member_client(self, observed: Observed, member_id: int):
        endpoint = observed.etcd.endpoints.get(member_id)
        if not endpoint:
            raise NotYet(f"member {member_id:x} does not answer")
        return self.etcd_clients.get(endpoint)

    async def _ensure_pvc(self, spec: ClusterSpec, member: str, member_id: int | None) -> None:
        """A member's PVC has no owner reference: the garbage collector must never take the
        data (foreground deletion, a finalizer removed by hand). The deletion handler finds
        PVCs by their labels and applies reclaimPolicy."""
        if not spec.storage.empty_dir:
            await self._create(kube.PVCS, builders.member_pvc(spec, self.cluster, self.namespace, member, member_id))

    def _member_pod(
        self,
        spec: ClusterSpec,
        member: str,
        member_id: int | None,
        initial_cluster: str,
        state: str,
        force_new_cluster: bool = False,
        joining: bool = False,
    ) -> dict:
        return self._owned(
            builders.member_pod(
                spec,
                self.cluster,
                self.namespace,
                member,
                member_id,
                initial_cluster,
                state,
                self.token,
                force_new_cluster,
                joining_image=self.operator_image if joining else None,
            )
        )

    async def _create_pod(
        self,
        spec: ClusterSpec,
        member: str,
        member_id: int | None,
        initial_cluster: str,
        state: str,
        force_new_cluster: bool = False,
        joining: bool = False,
    ) -> None:
        """Raises PodRefused when the API server refuses the pod (the answer says why).
        `joining`: the member's first pod after its add (builders.peer_name_container)."""
        await self._ensure_pvc(spec, member, member_id)
        pod = self._member_pod(spec, member, member_id, initial_cluster, state, force_new_cluster, joining)
        try:
            await self._create(kube.PODS, pod)
        except kube.ApiError as e:
            if not is_refusal(e):
                raise
            raise PodRefused(await self._dry_runs(joining).answer(spec, member, e)) from None

    def _dry_runs(self, joining: bool = False) -> PodDryRun:
        """Dry runs of a member's pod as the create would send it (its etcd ID aside): a
        re-create's, or with `joining` a new member's first pod (with TLS, its peer-name init
        container in the operator's image, which a policy may refuse where etcd's is allowed)."""

        def build(spec: ClusterSpec, member: str) -> dict:
            itself = f"{member}={naming.peer_url(self.cluster, self.namespace, member, spec.tls.enabled)}"
            return self._member_pod(spec, member, None, itself, builders.STATE_EXISTING, joining=joining)

        self._fence()
        return PodDryRun(self.kube, self.namespace, build)

    # --- the steps --------------------------------------------------------------------

    def handlers(self) -> dict[type[a.Step], Callable]:
        """Every step the planner can ask for, and the method that takes it."""
        return {
            a.Steady: self._nothing,
            a.Wait: self._nothing,
            a.WaitForLearner: self._nothing,
            a.BootstrapFirstMember: self._bootstrap_first_member,
            a.StartRestoredMembers: self._start_restored_members,
            a.AddLearner: self._add_learner,
            a.CheckPodSpec: self._check_pod_spec,
            a.CreateMemberPod: self._create_member_pod,
            a.SettleMemberPod: self._settle_member_pod,
            a.PromoteLearner: self._promote_learner,
            a.RemoveMember: self._remove_member,
            a.DeleteMemberPod: self._delete_member_pod,
            a.RestartFailedPod: self._restart_failed_pod,
            a.DeleteMemberPVC: self._delete_member_pvc,
            a.MoveLeader: self._move_leader,
            a.RollMember: self._roll_member,
            a.RollFailed: self._roll_failed,
            a.EnableDowngrade: self._enable_downgrade,
            a.CancelDowngrade: self._cancel_downgrade,
            a.FinishDowngrade: self._finish_downgrade,
            a.Defragment: self._defragment,
            a.BeginQuorumRecovery: self._begin_quorum_recovery,
            a.StopMemberPod: self._stop_member_pod,
            a.SetAsideMemberData: self._set_aside_member_data,
            a.ForceNewCluster: self._force_new_cluster,
            a.FinishQuorumRecovery: self._finish_quorum_recovery,
            a.AbandonQuorumRecovery: self._abandon_quorum_recovery,
            a.RecordTransport: self._record_transport,
            a.IssueCertificate: self._issue_certificate,
            a.RecordRotation: self._record_rotation,
            a.UpdateCASecret: self._update_ca_secret,
            a.SyncTrustBundle: self._sync_trust_bundle,
            a.BeginSpaceRecovery: self._begin_space_recovery,
            a.CompactRevisions: self._compact_revisions,
            a.DefragmentForSpace: self._defragment_for_space,
            a.DisarmNoSpaceAlarm: self._disarm_nospace_alarm,
            a.FinishSpaceRecovery: self._finish_space_recovery,
            a.DefragmentOnRequest: self._defragment_on_request,
            a.FinishDefragmentRequest: self._finish_defragment_request,
            a.ExpandMemberPVC: self._expand_member_pvc,
        }

    async def run(self, action: a.Step, spec: ClusterSpec, observed: Observed) -> Outcome:
        handler = self.handlers().get(type(action))
        if handler is None:
            raise TypeError(f"no executor step for {action.kind}")
        if not isinstance(action, PERMITTED_WHILE_HELD):
            self._hold_fence(action.kind)
        try:
            outcome = await handler(action, spec, observed) or Outcome(True)
        except NotYet as e:
            outcome = Outcome(False, str(e))
        except PodRefused as e:
            # Not an error of the pass: status says what is refused, and the planner waits.
            outcome = Outcome(False, str(e), admission=e.answer)
        except EtcdError as e:
            if not (e.unavailable or e.learner_not_ready or e.cluster_not_ready):
                raise
            outcome = Outcome(False, f"etcd is not ready for {action.kind}: {e.detail}")
        return dataclasses.replace(outcome, retry_after=pacing.next_pass(action, outcome.done))

    async def _nothing(self, action: a.Step, spec, observed) -> None:
        return None

    async def _bootstrap_first_member(self, action: a.BootstrapFirstMember, spec, observed) -> None:
        await self._create_pod(
            spec,
            action.member,
            None,
            action.initial_cluster or self_only_cluster(observed, action.member),
            builders.STATE_NEW,
        )
        self.post_event(
            "Normal", "ClusterBootstrapping", f"Started first member {action.member} with initial-cluster-state=new"
        )

    async def _start_restored_members(self, action: a.StartRestoredMembers, spec, observed) -> None:
        await asyncio.gather(
            *(
                self._create_pod(spec, member, None, action.initial_cluster, builders.STATE_NEW)
                for member in action.members
            )
        )
        self.post_event(
            "Normal", "ClusterBootstrapping", f"Started {', '.join(action.members)} together on their restored data"
        )

    async def _add_learner(self, action: a.AddLearner, spec, observed) -> None:
        peer = naming.peer_url(self.cluster, self.namespace, action.member, spec.tls.enabled)
        learner, members = await self._member_add(observed, peer)
        self.post_event("Normal", "MemberAdded", f"Added {action.member} (id {learner.hex_id}) as a learner")
        faults.hit(faults.AFTER_MEMBER_ADD)
        initial = ",".join(
            sorted(f"{m.name or action.member}={m.peer_urls[0]}" for m in members if m.name or m.id == learner.id)
        )
        await self._create_pod(spec, action.member, learner.id, initial, builders.STATE_EXISTING, joining=True)

    async def _member_add(self, observed: Observed, peer: str):
        """Offers the add to each healthy voter in turn (planner.member_add_receivers) until
        one accepts. Only etcd's own refusal of an unhealthy cluster moves on to the next:
        nothing was proposed then. Any other error ends the step as before."""
        receivers = member_add_receivers(observed)
        if not receivers:
            raise NotYet("no voting member answers")
        refused: EtcdError | None = None
        for member_id in receivers:
            try:
                return await self._member_client(observed, member_id).add_learner([peer])
            except EtcdError as e:
                if not e.cluster_not_ready:
                    raise
                refused = e
        raise refused or NotYet("no voting member answers")

    async def _check_pod_spec(self, action: a.CheckPodSpec, spec: ClusterSpec, observed) -> Outcome:
        joining = action.before == a.AddLearner.__name__
        answer = dataclasses.replace(
            await self._dry_runs(joining).check(spec, action.member), pod_spec_hash=action.pod_spec_hash
        )
        if not answer.accepted:
            logger.warning("%s/%s: %s", self.namespace, self.cluster, admission.describe(answer))
        return Outcome(True, admission=answer)

    async def _create_member_pod(self, action: a.CreateMemberPod, spec, observed) -> None:
        await self._create_pod(
            spec,
            action.member,
            action.member_id,
            action.initial_cluster,
            builders.STATE_EXISTING,
            joining=not action.joined_before,
        )
        if action.joined_before:
            self.post_event(
                "Normal", "MemberRestarted", f"Recreated the pod of {action.member}; it rejoins on its data"
            )

    async def _settle_member_pod(self, action: a.SettleMemberPod, spec, observed) -> None:
        member_id = builders.member_id_text(action.member_id)
        await self.kube.merge_patch(
            kube.PODS,
            self.namespace,
            action.member,
            {
                "metadata": {
                    "annotations": {
                        naming.ANNOTATION_MEMBER_ID: member_id,
                        naming.ANNOTATION_INITIAL_CLUSTER: self_only_cluster(observed, action.member),
                        naming.ANNOTATION_INITIAL_STATE: builders.STATE_EXISTING,
                        naming.ANNOTATION_FORCE_NEW_CLUSTER: "false",
                    }
                }
            },
        )
        if naming.pvc_name(action.member) in observed.pvcs:
            await self.kube.merge_patch(
                kube.PVCS,
                self.namespace,
                naming.pvc_name(action.member),
                {"metadata": {"annotations": {naming.ANNOTATION_MEMBER_ID: member_id}}},
            )

    async def _promote_learner(self, action: a.PromoteLearner, spec, observed) -> None:
        await self._leader_client(observed).promote(action.member_id)
        self.post_event("Normal", "MemberPromoted", f"Promoted {action.member} to a voting member")

    async def _remove_member(self, action: a.RemoveMember, spec, observed) -> None:
        await self._leader_client(observed).remove(action.member_id)
        reason = "MemberReplaced" if action.replacing else "MemberRemoved"
        if action.learner_not_caught_up:
            reason = "LearnerNotCaughtUp"
        self.post_event(
            "Warning" if action.replacing or action.learner_not_caught_up else "Normal",
            reason,
            f"Removed {action.member} (id {action.member_id:x}) from etcd: {action.reason}",
        )
        faults.hit(faults.AFTER_MEMBER_REMOVE)

    async def _delete_member_pod(self, action: a.DeleteMemberPod, spec, observed) -> None:
        pod = observed.pods[action.member]
        await self.kube.delete(kube.PODS, self.namespace, action.member, uid=pod.uid)

    async def _restart_failed_pod(self, action: a.RestartFailedPod, spec, observed) -> None:
        pod = observed.pods[action.member]
        await self.kube.delete(kube.PODS, self.namespace, action.member, uid=pod.uid)
        self.post_event("Warning", "FailedPodRestarted", f"Deleted failed pod {action.member}: {action.reason}")

    async def _delete_member_pvc(self, action: a.DeleteMemberPVC, spec, observed) -> None:
        pvc = observed.pvcs[naming.pvc_name(action.member)]
        await self.kube.delete(kube.PVCS, self.namespace, pvc.name, uid=pvc.uid)

    async def _move_leader(self, action: a.MoveLeader, spec, observed) -> None:
        await self._leader_client(observed).move_leader(action.to_id)
        self.post_event("Normal", "LeaderMoved", f"Moved leadership to {action.to_member}: {action.reason}")

    async def _roll_member(self, action: a.RollMember, spec, observed) -> None:
        pod = observed.pods[action.member]
        await self.kube.delete(kube.PODS, self.namespace, action.member, uid=pod.uid)
        self.post_event(
            "Normal", "MemberRolling", f"Restarting {action.member} with etcd {spec.version}: {action.reason}"
        )

    async def _roll_failed(self, action: a.RollFailed, spec, observed) -> None:
        self.post_event("Warning", "RollFailed", f"Roll paused and rolled back: {action.reason}")

    async def _enable_downgrade(self, action: a.EnableDowngrade, spec, observed) -> Outcome:
        leader = self._leader_client(observed)
        try:
            await leader.downgrade("VALIDATE", action.target)
            await leader.downgrade("ENABLE", action.target)
        except EtcdError as e:
            if "downgrade job in progress" not in e.detail:  # enabled by an interrupted pass
                raise
        self.post_event("Normal", "DowngradeEnabled", f"Enabled etcd's downgrade to {action.target}: {action.reason}")
        return Outcome(True, status_patch={"downgrade": {"target": action.target}})

    async def _cancel_downgrade(self, action: a.CancelDowngrade, spec, observed) -> Outcome:
        try:
            await self._leader_client(observed).downgrade("CANCEL", action.target)
        except EtcdError as e:
            if "no inflight downgrade" not in e.detail:  # ended already
                raise
        self.post_event("Normal", "DowngradeCancelled", f"Cancelled the downgrade to {action.target}: {action.reason}")
        return Outcome(True, status_patch={"downgrade": None})

    async def _finish_downgrade(self, action: a.FinishDowngrade, spec, observed) -> Outcome:
        self.post_event("Normal", "DowngradeFinished", f"Downgraded to {action.target}: {action.reason}")
        return Outcome(True, status_patch={"downgrade": None})

    async def _defragment(self, action: a.Defragment, spec, observed) -> None:
        status = observed.etcd.statuses.get(action.member_id)
        await self._member_client(observed, action.member_id).defragment()
        freed = status.db_size - status.db_size_in_use if status else 0
        self.post_event("Normal", "Defragmented", f"Defragmented {action.member}, freeing about {freed // 1024} KiB")

    async def _begin_quorum_recovery(self, action: a.BeginQuorumRecovery, spec, observed) -> Outcome:
        operation = Operation(QUORUM_RECOVERY, action.member, action.member_id, observed.now)
        if observed.recovery_approved:
            # An approval is for one incident: it is used up as the recovery starts.
            await self.kube.merge_patch(
                kube.ETCDCLUSTERS,
                self.namespace,
                self.cluster,
                {"metadata": {"annotations": {naming.ANNOTATION_APPROVE_QUORUM_RECOVERY: None}}},
            )
        self.post_event(
            "Warning",
            "QuorumRecoveryStarted",
            f"Recovering quorum from {action.member}: {action.reason}. Writes that reached only "
            f"the lost members are gone",
        )
        return Outcome(True, status_patch={"operation": operation.to_dict()})

    async def _stop_member_pod(self, action: a.StopMemberPod, spec, observed) -> None:
        pod = observed.pods[action.member]
        await self.kube.delete(kube.PODS, self.namespace, action.member, uid=pod.uid)

    async def _set_aside_member_data(self, action: a.SetAsideMemberData, spec, observed) -> None:
        if action.min_ordinal > observed.min_ordinal:
            await self.kube.merge_patch(
                kube.ETCDCLUSTERS,
                self.namespace,
                self.cluster,
                {"metadata": {"annotations": {naming.ANNOTATION_MIN_ORDINAL: str(action.min_ordinal)}}},
            )
        pvc = observed.pvcs[naming.pvc_name(action.member)]
        patch = builders.set_aside_pvc_patch(
            self.cluster,
            self.token,
            [],
            {naming.LABEL_SET_ASIDE_FROM: self.cluster, naming.LABEL_SET_ASIDE_BY: "quorum-recovery"},
        )
        await self.kube.merge_patch(kube.PVCS, self.namespace, pvc.name, patch)
        self.post_event(
            "Warning",
            "MemberDataSetAside",
            f"Kept PVC {pvc.name} aside (label {naming.LABEL_SET_ASIDE_FROM}={self.cluster}): it may hold "
            f"writes the survivor lacks. Delete it once you no longer need it",
        )

    async def _force_new_cluster(self, action: a.ForceNewCluster, spec, observed) -> None:
        pod = observed.pods.get(action.member)
        if pod is not None:
            await self.kube.delete(kube.PODS, self.namespace, action.member, uid=pod.uid)
            return
        await self._create_pod(
            spec,
            action.member,
            action.member_id,
            self_only_cluster(observed, action.member),
            builders.STATE_EXISTING,
            force_new_cluster=True,
        )

    async def _finish_quorum_recovery(self, action: a.FinishQuorumRecovery, spec, observed) -> Outcome:
        self.post_event("Normal", "QuorumRecovered", f"{action.member} leads again; members are re-added one at a time")
        return Outcome(True, status_patch={"operation": None})

    async def _abandon_quorum_recovery(self, action: a.AbandonQuorumRecovery, spec, observed) -> Outcome:
        self.post_event("Warning", "QuorumRecoveryAbandoned", f"Quorum recovery called off: {action.reason}")
        return Outcome(True, status_patch={"operation": None})

    async def _record_transport(self, action: a.RecordTransport, spec, observed) -> Outcome:
        return Outcome(True, status_patch={"tls": {"transport": action.transport}})

    async def _issue_certificate(self, action: a.IssueCertificate, spec: ClusterSpec, observed) -> None:
        """Issues each certificate in order (the CA first when it is one of them). Leaves are
        signed by the CA as its Secret holds it: read live, or as this step created it."""
        ca_name = certs.secret_name(spec, self.cluster, certs.CertKind.CA)
        ca: dict[str, bytes] | None = None
        for value, reason in action.certificates:
            kind = certs.CertKind(value)
            request = certs.request_for(spec, self.cluster, self.namespace, kind, observed.cluster_domain)
            name = certs.secret_name(spec, self.cluster, kind)
            seen_absent = observed.tls.cert(kind) is None
            if kind == certs.CertKind.CA:
                data = await asyncio.to_thread(pki.new_ca, request, observed.now)
            else:
                ca = ca or await read_secret(self.kube, self.namespace, ca_name)
                if ca is None:
                    raise NotYet("the CA Secret is not readable yet")
                previous = None if seen_absent else await read_secret(self.kube, self.namespace, name)
                data = await asyncio.to_thread(pki.issue_leaf, request, ca, previous, observed.now)
            written = await self._write_secret(name, data, create=seen_absent)
            if kind == certs.CertKind.CA:
                ca = written
            self.post_event("Normal", "CertificateIssued", f"Secret {name}: {reason}")

    async def _write_secret(self, name: str, data: Mapping[str, bytes], create: bool = False) -> dict[str, bytes]:
        """Applies a certificate Secret, or with `create` creates it: a Secret this pass saw
        absent is never written over, and one that appeared since ends the step (NotYet; the
        next pass looks again). Returns the data as stored."""
        secret = self._owned(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/tls",
                "metadata": {"name": name, "namespace": self.namespace, "labels": naming.selector_labels(self.cluster)},
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
            }
        )
        self._fence()
        if not create:
            written = await self.kube.apply(kube.SECRETS, self.namespace, secret)
        else:
            try:
                written = await self.kube.create(kube.SECRETS, self.namespace, secret)
            except kube.Conflict:
                raise NotYet(f"Secret {name} appeared after this pass looked; the next pass reads it") from None
        if (data_written := secret_bytes(written)) is None:
            raise NotYet(f"Secret {name}: its namespace is gone")
        return data_written

    async def _record_rotation(self, action: a.RecordRotation, spec, observed) -> Outcome:
        patch: dict[str, Any] = {"rotation": action.rotation.to_dict() if action.rotation else None}
        if action.finished:
            patch["rotated"] = {**observed.tls.rotated, action.finished[0]: action.finished[1]}
        self.post_event("Normal", "CertificateRotation", action.reason)
        return Outcome(True, status_patch={"tls": patch})

    async def _update_ca_secret(self, action: a.UpdateCASecret, spec: ClusterSpec, observed) -> None:
        name = certs.secret_name(spec, self.cluster, certs.CertKind.CA)
        current = await read_secret(self.kube, self.namespace, name)
        if current is None:
            raise NotYet(f"the CA Secret {name} is not readable")
        request = certs.request_for(spec, self.cluster, self.namespace, certs.CertKind.CA)
        updated = await asyncio.to_thread(pki.change_ca, current, action.change, request, observed.now)
        await self._write_secret(name, updated)
        self.post_event("Normal", "CertificateRotation", f"Secret {name}: {action.reason}")

    async def _sync_trust_bundle(self, action: a.SyncTrustBundle, spec: ClusterSpec, observed) -> None:
        kind = certs.CertKind(action.certificate)
        ca = await read_secret(self.kube, self.namespace, certs.secret_name(spec, self.cluster, certs.CertKind.CA))
        name = certs.secret_name(spec, self.cluster, kind)
        leaf = await read_secret(self.kube, self.namespace, name)
        if ca is None or leaf is None:
            raise NotYet("the CA or leaf Secret is not readable")
        await self._write_secret(name, {**leaf, certs.CA_KEY: ca[certs.CA_KEY]})

    # --- space: each step re-runs harmlessly; its progress is recorded in status ---------

    async def _begin_space_recovery(self, action: a.BeginSpaceRecovery, spec, observed) -> Outcome:
        self.post_event("Normal", "NoSpaceAlarmDetected", f"etcd raised the NOSPACE alarm: {action.reason}")
        return Outcome(True, status_patch={"spaceRecovery": SpaceRecoveryRecord(observed.now).to_dict()})

    async def _compact_revisions(self, action: a.CompactRevisions, spec, observed) -> Outcome:
        if action.revision > 0:
            await self._leader_client(observed).compact(action.revision)
        record = dataclasses.replace(
            observed.space_recovery or SpaceRecoveryRecord(observed.now),
            compacted_revision=action.revision,
            defragmented=(),
        )
        self.post_event("Normal", "RevisionsCompacted", f"Compacted revisions up to {action.revision}: {action.reason}")
        return Outcome(True, status_patch={"spaceRecovery": record.to_dict()})

    async def _defragment_member(self, observed: Observed, member: str, member_id: int) -> str:
        status = observed.etcd.statuses.get(member_id)
        await self._member_client(observed, member_id).defragment()
        freed = status.db_size - status.db_size_in_use if status else 0
        return f"Defragmented {member}, freeing about {freed // 1024} KiB"

    async def _defragment_for_space(self, action: a.DefragmentForSpace, spec, observed) -> Outcome:
        message = await self._defragment_member(observed, action.member, action.member_id)
        record = observed.space_recovery or SpaceRecoveryRecord(observed.now)
        record = dataclasses.replace(record, defragmented=tuple(sorted({*record.defragmented, action.member})))
        self.post_event("Normal", "MemberDefragmented", f"{message}: {action.reason}")
        return Outcome(True, status_patch={"spaceRecovery": record.to_dict()})

    async def _disarm_nospace_alarm(self, action: a.DisarmNoSpaceAlarm, spec, observed) -> Outcome:
        leader = self._leader_client(observed)
        for member_id in action.member_ids:
            await leader.disarm_alarm(member_id)
        self.post_event("Normal", "NoSpaceAlarmDisarmed", f"Disarmed the NOSPACE alarm: {action.reason}")
        return Outcome(True, status_patch={"spaceRecovery": None})

    async def _finish_space_recovery(self, action: a.FinishSpaceRecovery, spec, observed) -> Outcome:
        return Outcome(True, status_patch={"spaceRecovery": None})

    async def _defragment_on_request(self, action: a.DefragmentOnRequest, spec, observed) -> Outcome:
        message = await self._defragment_member(observed, action.member, action.member_id)
        record = observed.defragmentation
        done = record.defragmented if record.token == action.token else ()
        record = dataclasses.replace(record, token=action.token, defragmented=tuple(sorted({*done, action.member})))
        self.post_event("Normal", "MemberDefragmented", f"{message}: {action.reason}")
        return Outcome(True, status_patch={"defragmentation": record.to_dict()})

    async def _finish_defragment_request(self, action: a.FinishDefragmentRequest, spec, observed) -> Outcome:
        record = DefragmentationRecord(last_token=action.token)
        self.post_event("Normal", "DefragmentationDone", f"Every member was defragmented for request {action.token}")
        return Outcome(True, status_patch={"defragmentation": record.to_dict()})

    async def _expand_member_pvc(self, action: a.ExpandMemberPVC, spec, observed) -> None:
        await self.kube.merge_patch(
            kube.PVCS,
            self.namespace,
            naming.pvc_name(action.member),
            {"spec": {"resources": {"requests": {"storage": action.size}}}},
        )
        self.post_event(
            "Normal",
            "VolumeExpansionRequested",
            f"Asked for {naming.pvc_name(action.member)} to grow to {action.size}: {action.reason}",
        )

    # --- children that are not members -----------------------------------------------

    async def disown_member_pvcs(self, observed: Observed) -> None:
        """Takes the cluster's owner reference off member PVCs that an older operator set, so
        that the garbage collector can never take their data (see _ensure_pvc)."""
        for name in sorted(n for n, pvc in observed.pvcs.items() if pvc.owned_by_cluster):
            pvc = await self.kube.get(kube.PVCS, self.namespace, name)
            if pvc is None:
                continue
            meta = pvc["metadata"]
            await self.kube.merge_patch(
                kube.PVCS,
                self.namespace,
                name,
                {
                    "metadata": {
                        "ownerReferences": builders.owners_without(meta.get("ownerReferences") or [], self.token),
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
            )
            logger.info("%s/%s: PVC %s no longer has the cluster as its owner", self.namespace, self.cluster, name)

    async def ensure_services(
        self, spec: ClusterSpec, health: Health, applied: str | None = None, force: bool = True
    ) -> str:
        """Applies the Services, the PDB and the NetworkPolicy (or deletes the policy when it is
        off), unless `force` is off and their manifests hash to `applied`, what this reconciler
        last applied in full. Returns the hash of what is now in place."""
        voters = len(health.voters) or None
        manifests = [
            (kube.SERVICES, self._owned(builders.peer_service(self.cluster, self.namespace))),
            (kube.SERVICES, self._owned(builders.client_service(self.cluster, self.namespace))),
            (kube.PDBS, self._owned(builders.disruption_budget(spec, self.cluster, self.namespace, voters))),
        ]
        settings = (self.body.get("spec") or {}).get("networkPolicy")
        policy_on = network_policy.enabled(settings, spec.tls.enabled)
        if policy_on:
            manifests.append(
                (
                    kube.NETWORK_POLICIES,
                    self._owned(
                        network_policy.network_policy(self.cluster, self.namespace, settings, self.operator_namespace)
                    ),
                )
            )
        digest = hashlib.sha256(
            json.dumps([(r.plural, m) for r, m in manifests], sort_keys=True, default=str).encode()
        ).hexdigest()
        if digest == applied and not force:
            return digest
        for resource, manifest in manifests:
            await self._apply(resource, manifest)
        if not policy_on:
            await self.kube.delete(kube.NETWORK_POLICIES, self.namespace, network_policy.policy_name(self.cluster))
        return digest
