"""The model executor: one handler per action type in etcd_operator/core/cluster/steps.py,
doing to the simulated world what etcd_operator/controllers/cluster/executor.py does to the real one
(same requests, same preconditions: uid-guarded deletes, create-if-absent, the leader's
endpoint as observed). An action type without a handler is an error, never "done"."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from etcd_operator.controllers.cluster.executor import PERMITTED_WHILE_HELD
from etcd_operator.core.cluster import builders, naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Observed, PodAdmission
from etcd_operator.core.cluster.planner import QUORUM_RECOVERY, self_only_cluster
from etcd_operator.core.cluster.recorded import (
    ClusterStatus,
    DefragmentationRecord,
    LeaderMoveRecord,
    Operation,
    SpaceRecoveryRecord,
)
from etcd_operator.core.cluster.spec import ClusterSpec
from tests.sim.world import POD_REFUSAL, PVC, Pod, Refused, World, api_refuses_pod, peer_url

BAD_REPOSITORY = "registry.invalid/etcd"


@dataclasses.dataclass
class Outcome:
    done: bool
    message: str = ""
    status_fields: dict | None = None
    interrupted: bool = False  # the operator was killed in the middle of the step
    aborted: bool = False  # the executor raised: the pass ends without writing status
    admission: PodAdmission | None = None  # the API server's answer to a member pod


class PodRefused(Exception):
    """The API server refused a member pod (executor.PodRefused): an outcome, not an abort."""

    def __init__(self, answer: PodAdmission):
        super().__init__(answer.refused)
        self.answer = answer


def _answer(ctx: Context, member: str) -> PodAdmission:
    refused = api_refuses_pod(ctx.spec)
    return PodAdmission(
        member,
        builders.pod_spec_hash(ctx.spec),
        POD_REFUSAL if refused else None,
        ("spec.pod.priorityClassName",) if refused else (),
    )


class Killed(Exception):
    """The operator process died at a kill point inside a step."""


@dataclasses.dataclass
class Context:
    world: World
    spec: ClusterSpec
    status: ClusterStatus  # what the acting process's status records said when it planned
    observed: Observed
    now: float  # the acting process's wall clock when it planned
    kill_at_kill_point: bool = False  # the operator dies after the first of two requests
    annotations: dict = dataclasses.field(default_factory=dict)  # the EtcdCluster's metadata.annotations

    def kill_point(self) -> None:
        if self.kill_at_kill_point:
            raise Killed()


def _ensure_pvc(ctx: Context, member: str, member_id: int | None) -> None:
    name = naming.pvc_name(member)
    if name not in ctx.world.pvcs:
        ctx.world.pvcs[name] = PVC(name, ctx.world.uid("pvc"), member_id)


def _create_pod(
    ctx: Context, member: str, member_id: int | None, initial_cluster: str, state: str, force_new_cluster: bool = False
) -> None:
    _ensure_pvc(ctx, member, member_id)
    if member in ctx.world.pods:
        return  # Conflict: created by an earlier, interrupted attempt
    if api_refuses_pod(ctx.spec):
        raise PodRefused(_answer(ctx, member))
    spec = ctx.spec
    pod = Pod(
        member,
        ctx.world.uid("pod"),
        member_id,
        builders.pod_spec_hash(spec),
        state,
        initial_cluster,
        force_new_cluster,
        spec.version,
        spec.repository == BAD_REPOSITORY,
    )
    pod.quota_bytes = spec.etcd.quota_backend_bytes
    ctx.world.pods[member] = pod


def _delete_pod(ctx: Context, member: str) -> None:
    view = ctx.observed.pods[member]  # KeyError like the real executor's observed.pods[...]
    pod = ctx.world.pods.get(member)
    if pod is None:
        return  # NotFound counts as deleted
    if pod.uid != view.uid:
        raise Refused(f"Conflict: pod {member} has uid {pod.uid}, not {view.uid}", not_yet=False)
    ctx.world.delete_pod(pod)


def _leader_group(ctx: Context):
    endpoint = ctx.observed.etcd.endpoints.get(ctx.observed.etcd.leader_id)
    if not endpoint:
        raise Refused("no reachable leader")
    return ctx.world.group_with_leader(endpoint)


def do_nothing(ctx: Context, action: a.Step) -> None:
    return None


def do_bootstrap(ctx: Context, action: a.BootstrapFirstMember) -> None:
    _create_pod(
        ctx, action.member, None, self_only_cluster(ctx.status, ctx.observed, action.member), builders.STATE_NEW
    )


def do_bootstrap_members(ctx: Context, action: a.BootstrapMembers) -> None:
    for member in action.members:  # every PVC first, as the executor
        name = naming.pvc_name(member)
        found = ctx.world.pvcs.get(name)
        if found is None:
            ctx.world.pvcs[name] = PVC(name, ctx.world.uid("pvc"), None, action.initial_cluster)
        elif found.initial_cluster != action.initial_cluster or found.member_id is not None:
            raise Refused(f"PVC {name} exists and was not created by this bootstrap", not_yet=False)
        ctx.kill_point()
    for member in action.members:
        _create_pod(ctx, member, None, action.initial_cluster, builders.STATE_NEW)
        ctx.kill_point()


def do_settle_started(ctx: Context, action: a.SettleStartedMembers) -> None:
    for member, member_id in action.members:
        pod = ctx.world.pods.get(member)
        if member in ctx.observed.pods and pod is not None:
            pod.member_id = member_id
            pod.initial_cluster = self_only_cluster(ctx.status, ctx.observed, member)
            pod.initial_state = builders.STATE_EXISTING
            pod.force_new_cluster = False
        pvc = ctx.world.pvcs.get(naming.pvc_name(member))
        if pvc is None:
            raise Refused(f"NotFound: pvc of {member}", not_yet=False)
        pvc.member_id = member_id
        ctx.kill_point()


def do_start_restored(ctx: Context, action: a.StartRestoredMembers) -> None:
    # Restored PVCs come from the restore_race family's EtcdRestore (restore_model.py).
    for member in action.members:
        _create_pod(ctx, member, None, action.initial_cluster, builders.STATE_NEW)
        ctx.kill_point()


def do_add_learner(ctx: Context, action: a.AddLearner) -> None:
    group = _leader_group(ctx)
    if group is None:
        return  # the request went to a foreign etcd; nothing changes here
    learner = ctx.world.member_add_learner(group, peer_url(action.member))
    ctx.kill_point()
    members = group.members
    initial = ",".join(
        sorted(f"{m.name or action.member}={m.peer_urls[0]}" for m in members if m.name or m.id == learner.id)
    )
    _create_pod(ctx, action.member, learner.id, initial, builders.STATE_EXISTING)


def do_check_pod_spec(ctx: Context, action: a.CheckPodSpec) -> Outcome:
    """A server-side dry run: nothing changes in the world."""
    return Outcome(True, admission=dataclasses.replace(_answer(ctx, action.member), pod_spec_hash=action.pod_spec_hash))


def do_create_member_pod(ctx: Context, action: a.CreateMemberPod) -> None:
    _create_pod(ctx, action.member, action.member_id, action.initial_cluster, builders.STATE_EXISTING)


def do_settle(ctx: Context, action: a.SettleMemberPod) -> None:
    pod = ctx.world.pods.get(action.member)
    if pod is None:
        raise Refused(f"NotFound: pod {action.member}", not_yet=False)
    pod.member_id = action.member_id
    pod.initial_cluster = self_only_cluster(ctx.status, ctx.observed, action.member)
    pod.initial_state = builders.STATE_EXISTING
    pod.force_new_cluster = False
    ctx.kill_point()
    if naming.pvc_name(action.member) in ctx.observed.pvcs:
        pvc = ctx.world.pvcs.get(naming.pvc_name(action.member))
        if pvc is None:
            raise Refused(f"NotFound: pvc of {action.member}", not_yet=False)
        pvc.member_id = action.member_id


def do_promote(ctx: Context, action: a.PromoteLearner) -> None:
    group = _leader_group(ctx)
    if group is not None:
        ctx.world.member_promote(group, action.member_id)


def do_remove(ctx: Context, action: a.RemoveMember) -> None:
    group = _leader_group(ctx)
    if group is not None:
        ctx.world.member_remove(group, action.member_id)


def do_delete_pod(ctx: Context, action) -> None:
    _delete_pod(ctx, action.member)


def do_delete_pvc(ctx: Context, action: a.DeleteMemberPVC) -> None:
    view = ctx.observed.pvcs[naming.pvc_name(action.member)]
    pvc = ctx.world.pvcs.get(view.name)
    if pvc is None:
        return
    if pvc.uid != view.uid:
        raise Refused(f"Conflict: pvc {view.name} has uid {pvc.uid}, not {view.uid}", not_yet=False)
    ctx.world.delete_pvc(pvc, by_operator=True)


def do_move_leader(ctx: Context, action: a.MoveLeader) -> None:
    endpoint = ctx.observed.etcd.endpoints.get(ctx.observed.etcd.leader_id)
    if not endpoint:
        raise Refused("no reachable leader")
    ctx.world.move_leader(endpoint, action.to_id)


def do_move_leader_on_request(ctx: Context, action: a.MoveLeaderOnRequest) -> Outcome:
    do_move_leader(ctx, a.MoveLeader(action.reason, action.from_id, action.to_id, action.to_member))
    outcome = f"moved from {action.from_member} to {action.to_member}"
    return Outcome(True, status_fields={"leaderMove": LeaderMoveRecord(action.token, outcome).to_dict()})


def do_finish_leader_move_request(ctx: Context, action: a.FinishLeaderMoveRequest) -> Outcome:
    return Outcome(True, status_fields={"leaderMove": LeaderMoveRecord(action.token, action.outcome).to_dict()})


def do_defragment(ctx: Context, action: a.Defragment) -> None:
    endpoint = ctx.observed.etcd.endpoints.get(action.member_id)
    if not endpoint:
        raise Refused(f"member {action.member_id:x} does not answer")
    found = ctx.world.process_at(endpoint)
    if isinstance(found, tuple):
        data = found[1]
        data.db_size = data.db_in_use


def _leader_group(ctx: Context):
    """The group of the reachable leader (maintenance calls go to it), or Refused."""
    endpoint = ctx.observed.etcd.endpoints.get(ctx.observed.etcd.leader_id)
    if not endpoint:
        raise Refused("no reachable leader")
    found = ctx.world.process_at(endpoint)
    if not isinstance(found, tuple):
        return None  # a foreign etcd answers there; nothing of ours changes
    return found[2]


def _space_record(ctx: Context) -> SpaceRecoveryRecord:
    return ctx.status.space_recovery or SpaceRecoveryRecord(ctx.now)


def do_begin_space_recovery(ctx: Context, action: a.BeginSpaceRecovery) -> Outcome:
    return Outcome(True, status_fields={"spaceRecovery": SpaceRecoveryRecord(ctx.now).to_dict()})


def do_compact(ctx: Context, action: a.CompactRevisions) -> Outcome:
    """The model's database sizes follow revisions, not history, so compaction frees nothing
    here; it still needs a leader, and its record is written after it."""
    _leader_group(ctx)
    record = dataclasses.replace(_space_record(ctx), compacted_revision=action.revision, defragmented=())
    return Outcome(True, status_fields={"spaceRecovery": record.to_dict()})


def do_defragment_for_space(ctx: Context, action: a.DefragmentForSpace) -> Outcome:
    do_defragment(ctx, a.Defragment(action.reason, action.member, action.member_id))
    record = _space_record(ctx)
    record = dataclasses.replace(record, defragmented=tuple(sorted({*record.defragmented, action.member})))
    return Outcome(True, status_fields={"spaceRecovery": record.to_dict()})


def do_disarm_nospace(ctx: Context, action: a.DisarmNoSpaceAlarm) -> Outcome:
    group = _leader_group(ctx)
    if group is not None:
        group.alarms.discard("NOSPACE")
    ctx.kill_point()  # disarmed, but the record is not yet cleared
    return Outcome(True, status_fields={"spaceRecovery": None})


def do_finish_space_recovery(ctx: Context, action: a.FinishSpaceRecovery) -> Outcome:
    return Outcome(True, status_fields={"spaceRecovery": None})


def do_defragment_on_request(ctx: Context, action: a.DefragmentOnRequest) -> Outcome:
    do_defragment(ctx, a.Defragment(action.reason, action.member, action.member_id))
    record = ctx.status.defragmentation
    done = record.defragmented if record.token == action.token else ()
    record = dataclasses.replace(record, token=action.token, defragmented=tuple(sorted({*done, action.member})))
    return Outcome(True, status_fields={"defragmentation": record.to_dict()})


def do_finish_defragment_request(ctx: Context, action: a.FinishDefragmentRequest) -> Outcome:
    return Outcome(True, status_fields={"defragmentation": DefragmentationRecord(last_token=action.token).to_dict()})


def do_expand_pvc(ctx: Context, action: a.ExpandMemberPVC) -> None:
    """The model's PVCs carry no sizes, so the planner never asks for this here."""
    raise Refused("the model does not size PVCs", not_yet=False)


def do_begin_recovery(ctx: Context, action: a.BeginQuorumRecovery) -> Outcome:
    operation = Operation(QUORUM_RECOVERY, action.member, action.member_id, ctx.now)
    return Outcome(True, status_fields={"operation": operation.to_dict()})


def do_set_aside(ctx: Context, action: a.SetAsideMemberData) -> None:
    """The PVC leaves the cluster's selector (and owner): kept, no longer the operator's."""
    if action.min_ordinal > ctx.observed.min_ordinal:
        ctx.annotations[naming.ANNOTATION_MIN_ORDINAL] = str(action.min_ordinal)
    ctx.kill_point()
    view = ctx.observed.pvcs[naming.pvc_name(action.member)]
    pvc = ctx.world.pvcs.get(view.name)
    if pvc is None:
        raise Refused(f"NotFound: pvc {view.name}", not_yet=False)
    ctx.world.set_aside_pvc(pvc)


def do_force_new_cluster(ctx: Context, action: a.ForceNewCluster) -> None:
    if ctx.observed.pods.get(action.member) is not None:
        _delete_pod(ctx, action.member)
        return
    _create_pod(
        ctx,
        action.member,
        action.member_id,
        self_only_cluster(ctx.status, ctx.observed, action.member),
        builders.STATE_EXISTING,
        force_new_cluster=True,
    )


def do_finish_recovery(ctx: Context, action: a.FinishQuorumRecovery) -> Outcome:
    return Outcome(True, status_fields={"operation": None})


def do_record_hibernation(ctx: Context, action: a.RecordHibernation) -> Outcome:
    return Outcome(True, status_fields={"hibernation": None if action.record is None else action.record.to_dict()})


def do_record_adoption(ctx: Context, action: a.RecordAdoption) -> Outcome:
    return Outcome(True, status_fields={"adoption": None if action.record is None else action.record.to_dict()})


HANDLERS: dict[type, Callable] = {
    a.Steady: do_nothing,
    a.Wait: do_nothing,
    a.WaitForLearner: do_nothing,
    a.BootstrapFirstMember: do_bootstrap,
    a.BootstrapMembers: do_bootstrap_members,
    a.SettleStartedMembers: do_settle_started,
    a.StartRestoredMembers: do_start_restored,
    a.AddLearner: do_add_learner,
    a.CheckPodSpec: do_check_pod_spec,
    a.CreateMemberPod: do_create_member_pod,
    a.SettleMemberPod: do_settle,
    a.PromoteLearner: do_promote,
    # The simulated learners publish as soon as they start: none is held at its snapshot.
    a.AppendEntryForLearner: do_nothing,
    a.RemoveMember: do_remove,
    a.DeleteMemberPod: do_delete_pod,
    a.RestartFailedPod: do_delete_pod,
    a.SetAsideMemberData: do_set_aside,
    a.DeleteMemberPVC: do_delete_pvc,
    a.MoveLeader: do_move_leader,
    a.MoveLeaderOnRequest: do_move_leader_on_request,
    a.FinishLeaderMoveRequest: do_finish_leader_move_request,
    a.RollMember: do_delete_pod,
    a.RollFailed: do_nothing,  # status.rollout is written from the decision
    # Downgrades are not simulated (the simulator's versions are 3.6 patches only).
    a.EnableDowngrade: do_nothing,
    a.CancelDowngrade: do_nothing,
    a.FinishDowngrade: do_nothing,
    a.Defragment: do_defragment,
    a.BeginQuorumRecovery: do_begin_recovery,
    a.StopMemberPod: do_delete_pod,
    a.ForceNewCluster: do_force_new_cluster,
    a.FinishQuorumRecovery: do_finish_recovery,
    a.AbandonQuorumRecovery: do_finish_recovery,  # both clear status.operation
    # Certificates and status.tls are not modelled: the simulated clusters are plaintext
    # (a hand-built Observed records transport http), so the planner never asks for these;
    # tests/unit/test_tls_plan.py covers their decisions and tests/nodes/host_operator/test_tls.py their effects.
    a.RecordTransport: do_nothing,
    a.RecordPeerIdentity: do_nothing,
    a.IssueCertificate: do_nothing,
    a.RecordRotation: do_nothing,
    a.UpdateCASecret: do_nothing,
    a.SyncTrustBundle: do_nothing,
    a.BeginSpaceRecovery: do_begin_space_recovery,
    a.CompactRevisions: do_compact,
    a.DefragmentForSpace: do_defragment_for_space,
    a.DisarmNoSpaceAlarm: do_disarm_nospace,
    a.FinishSpaceRecovery: do_finish_space_recovery,
    a.DefragmentOnRequest: do_defragment_on_request,
    a.FinishDefragmentRequest: do_finish_defragment_request,
    a.ExpandMemberPVC: do_expand_pvc,
    # The simulated specs never ask for hibernation; tests/unit/test_hibernation.py covers its
    # decisions and tests/nodes/host_operator/test_hibernation.py its effects.
    a.RecordHibernation: do_record_hibernation,
    a.StopMemberForHibernation: do_delete_pod,
    # The simulated specs never ask for adoption (the model has no foreign members);
    # tests/unit/test_adoption.py covers its decisions and tests/nodes/host_operator/test_adoption.py its effects.
    a.RecordAdoption: do_record_adoption,
    # spec.auth is not modelled: the simulated specs declare none (and are plaintext), so the
    # planner never asks for these; tests/unit/test_cluster_auth.py covers their decisions
    # against a model of etcd's auth store, tests/nodes/host_operator/test_auth.py their effects.
    a.RecordUserCertificateBound: do_nothing,
    a.IssueUserCertificate: do_nothing,
    a.DeleteUserCertificate: do_nothing,
    a.AddAuthRole: do_nothing,
    a.GrantRolePermission: do_nothing,
    a.RevokeRolePermission: do_nothing,
    a.DeleteAuthRole: do_nothing,
    a.AddAuthUser: do_nothing,
    a.ChangeUserPassword: do_nothing,
    a.ClearUserPassword: do_nothing,
    a.GrantUserRole: do_nothing,
    a.RevokeUserRole: do_nothing,
    a.DeleteAuthUser: do_nothing,
    a.EnableAuth: do_nothing,
    a.DisableAuth: do_nothing,
}

# Actions that take two requests: the operator may die between them.
TWO_PHASE = {a.AddLearner, a.SettleMemberPod, a.SetAsideMemberData, a.DisarmNoSpaceAlarm}


class UnknownAction(Exception):
    pass


def action_types() -> list[type]:
    """Every concrete action type the planner can return."""
    return [t for t in vars(a).values() if isinstance(t, type) and issubclass(t, a.Step) and t is not a.Step]


def run(ctx: Context, action: a.Step) -> Outcome:
    handler = HANDLERS.get(type(action))
    if handler is None:
        raise UnknownAction(f"no model handler for {action.kind}; add it to tests/sim/effects.py HANDLERS")
    holder = ctx.annotations.get(naming.ANNOTATION_RESTORE_IN_PROGRESS)
    if holder and not isinstance(action, PERMITTED_WHILE_HELD):
        # executor.HeldByRestore: the live object is held, whatever copy the pass decided on.
        return Outcome(False, f"held by EtcdRestore {holder}", aborted=True)
    try:
        result = handler(ctx, action)
    except Killed:
        return Outcome(False, "operator killed mid-step", interrupted=True)
    except PodRefused as e:
        return Outcome(False, str(e), admission=e.answer)
    except Refused as e:
        return Outcome(False, str(e), aborted=not e.not_yet)
    except KeyError as e:
        return Outcome(False, f"KeyError {e}", aborted=True)
    return result or Outcome(True)
