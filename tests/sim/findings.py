"""Known defects of the current planner or observer, recognised by their signature in the
final (or failing) state of a schedule. A violation with a known signature is reported as
that finding; any other violation fails the suite."""

from __future__ import annotations

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster import steps as a
from tests.sim import invariants as inv

FINDINGS = {
    "recovery_survivor_not_newest": (
        "quorum recovery picks the newest among ANSWERING voters; a voter whose pod is down (crash loop, "
        "Failed) may hold a slightly newer applied index. Its data is set aside (kept, not deleted) but not "
        "used; the operator has no way to read a silent member's index"
    ),
    "recovery_survivor_lost_data": (
        "the survivor's data dir is wiped while its pod is down between the two ForceNewCluster passes (the PVC "
        "stays): nothing the operator can observe tells, so the force-new pod is created on the empty dir. It "
        "then fails to start and the recovery is called off (AbandonQuorumRecovery), with the other members' "
        "data still set aside; no data is deleted. Only storage-level evidence (a data-dir marker the operator "
        "could read) would close this"
    ),
}


def main_voter_pods(world):
    main = world.main
    if main is None:
        return []
    found = []
    for m in main.voters():
        name = naming.member_from_peer_url("sim", "ns", m.peer_urls[0])
        pvc = world.pvcs.get(naming.pvc_name(name or ""))
        has_data = pvc is not None and pvc.data is not None and pvc.data.lineage == main.lineage
        found.append((m, world.pods.get(name or ""), has_data))
    return found


def _newer_member_answered(sim) -> bool:
    """Whether a member holding newer data than the chosen survivor answered the operator
    (then picking the survivor was the planner's own mistake, not a blind spot)."""
    observed, action = sim.replay[-1][3], sim.replay[-1][4].action
    world = sim.world
    target = world.pvcs.get(naming.pvc_name(action.member))
    applied = target.data.applied if target is not None and target.data is not None else -1
    return any(d.applied > applied and d.member_id in observed.etcd.statuses for _, d in inv.surviving_data(world))


def _status_and_own_timer(sim, name: str | None, member_id: int | None) -> tuple[float | None, float]:
    """How long status showed the member unhealthy (read on the acting process's clock), and
    how long the acting process itself had seen it unhealthy."""
    shown = sim.status_unhealthy_for.get(name)
    return shown, sim.operator.unhealthy_for(sim.world.now).get(member_id, 0.0)


def _replaced_on_status_timer(sim) -> bool:
    action, spec = sim.last_decision.action, sim.last_decision.acting_spec
    shown, seen = _status_and_own_timer(sim, action.member, action.member_id)
    return shown is not None and shown >= spec.recovery.member_unhealthy_timeout > seen


def _timer_in_the_future(sim) -> bool:
    """Status's start time for an unhealthy member lies ahead of the acting process's clock (a
    standby whose clock is behind): its timer stays at zero and it is never replaced (or, a
    learner, never removed)."""
    health = sim.last_decision.health
    for member in health.members:
        if health.is_healthy(member):
            continue
        name = naming.member_from_peer_url("sim", "ns", member.peer_urls[0])
        shown, seen = _status_and_own_timer(sim, name, member.id)
        if shown is not None and shown < seen - 1.0:
            return True
    return False


def classify(sim, violation: inv.Violation) -> str | None:
    if sim.replay and sim.replay[-1][2] == "stale":
        return "stale_replica"  # raised by the stale replica's own step, taken on its old view
    known = _classify(sim, violation)
    if known is None and sim.stale_acted:
        return "stale_replica"
    return known


def _restored_member_bootstrapped_alone(sim) -> bool:
    """A PVC the restore wrote holds another cluster's data: a restored member started on its
    emptied data directory bootstrapped a cluster of its own (a quorum recovery keeps the ID)."""
    group = sim.restore.restored_group if sim.restore is not None else None
    return group is not None and any(
        p.restored and p.data is not None and p.data.cluster_id != group.cluster_id for p in sim.world.pvcs.values()
    )


def _restore_finding(sim, violation: inv.Violation) -> str | None:
    """restore_race: how the EtcdRestore beside the cluster ended (restore_model.py)."""
    restore = sim.restore
    if _restored_member_bootstrapped_alone(sim):
        return "restored_member_bootstraps_alone"
    if violation.invariant == "restore_waits_for_hold_ack":
        return "restore_touched_before_ack"
    if violation.invariant == "nothing_created_for_an_object_being_deleted" and restore is not None:
        return (
            "restore_creates_for_a_deleted_cluster"
            if restore.decided_on_deletion
            else ("restore_creates_on_a_copy_from_before_the_deletion")
        )
    if restore is None or violation.invariant != "converges_to_spec":
        return None
    held_by_itself = sim.annotations.get(naming.ANNOTATION_RESTORE_IN_PROGRESS) == "r1"
    if restore.failed == "TargetBusy" and held_by_itself:
        return "restore_fails_on_its_own_hold"
    set_aside = {p.name for p in sim.world.set_aside}
    chosen = {naming.pvc_name(m) for m in restore.status.get("seedMembers") or ()}
    if restore.failed == "SeedVolumeNotOurs" and held_by_itself and chosen & set_aside:
        return "restore_forgets_set_aside_data"
    return None


def _backup_finding(sim, violation: inv.Violation) -> str | None:
    """backup_race: what the EtcdBackup beside the cluster did (backup_actor.py)."""
    backup = sim.backup
    if backup is None:
        return None
    if violation.invariant == "nothing_created_for_an_object_being_deleted" and (
        "RunBackup" in violation.message
        or "StartSlot" in violation.message
        or "RetrySlot" in violation.message
        or "CreateScratchPod" in violation.message
    ):
        return (
            "backup_runs_for_an_object_being_deleted"
            if backup.decided_on_deletion
            else "backup_creates_on_a_copy_from_before_the_deletion"
        )
    return None


def _classify(sim, violation: inv.Violation) -> str | None:
    backup = _backup_finding(sim, violation)
    if backup:
        return backup
    if violation.invariant == "no_member_created_while_held":
        return "created_while_held"
    restore = _restore_finding(sim, violation)
    if restore:
        return restore
    world = sim.world
    last = sim.replay[-1] if sim.replay else None
    observed = last[3] if last else None
    main = world.main
    if (
        observed is not None
        and main is not None
        and observed.etcd.cluster_id not in (None, main.cluster_id)
        and observed.etcd.from_leader
    ):
        return "foreign_member_list"
    if main is not None and any(
        g.cluster_id == main.cluster_id and g.lineage != main.lineage and world.up_members(g)
        for g in world.groups.values()
    ):
        return "recovery_resurrects_old_members"
    decision = sim.last_decision
    if violation.invariant == "pod_recreatable":
        return "pod_taken_while_its_replacement_is_refused"
    if violation.invariant == "member_replaced_after_own_timeout" and _replaced_on_status_timer(sim):
        return "unhealthy_timer_read_from_status"
    if (
        violation.invariant == "quorum_kept_by_actions"
        and "StopMemberPod" in violation.message
        and decision is not None
        and decision.action.kind == "StopMemberPod"
    ):
        return "recovery_not_abandoned_when_quorum_returns"
    if (
        violation.invariant == "quorum_lost_waits"
        and decision is not None
        and decision.action.kind == "RemoveMember"
        and decision.action.reason.startswith("learner")
    ):
        return "learner_blocks_quorum_recovery"  # it acts on a learner (as it sees it) instead of waiting
    if (
        violation.invariant == "quorum_kept_by_actions"
        and "RollMember" in violation.message
        and "(its pod ran etcd)" in violation.message
        and decision is not None
        and decision.health.state != inv.HealthState.HEALTHY
    ):
        return "broken_pod_rule_rolls_live_members"
    if (
        violation.invariant == "force_new_cluster_only_after_true_loss"
        and "recovery begun while" in violation.message
        and sim.lost_timer_reset
    ):
        return "quorum_timer_survives_lost_write"
    if violation.invariant == "force_new_cluster_only_after_true_loss":
        if "no data" in violation.message:
            return "recovery_survivor_lost_data"
        if "while a surviving member has" in violation.message and not _newer_member_answered(sim):
            return "recovery_survivor_not_newest"
    if violation.invariant == "converges_to_spec" and isinstance(decision.action, a.Wait) and _timer_in_the_future(sim):
        return "unhealthy_timer_read_from_status"
    operation = sim.status.get("operation") or {}
    if violation.invariant == "converges_to_spec" and operation.get("member"):
        pvc = world.pvcs.get(naming.pvc_name(operation["member"]))
        if pvc is None or pvc.data is None:
            return "recovery_survivor_lost_data"
    if violation.invariant == "converges_to_spec":
        survivor = world.pods.get(operation.get("member") or "")
        if survivor is not None and (survivor.phase == "Failed" or survivor.bad_image):
            return "recovery_waits_on_broken_survivor_pod"
        decision = sim.last_decision
        if (
            decision is not None
            and decision.health.state == inv.HealthState.QUORUM_LOST
            and sim.recovery_allowed
            and decision.health.learners
            and getattr(decision.action, "member_id", None) in {m.id for m in decision.health.learners} | {None}
        ):
            return "learner_blocks_quorum_recovery"
    return None


# Found on main at 10d8d78 and fixed by main at 25d1e7b (cluster-ID check in the observer, learners
# handled only with quorum, set-aside of non-survivor data, RestartFailedPod, restart of broken
# outdated members) and 0cb7c57 (recovery called off when quorum returns, the quorum-loss clock
# kept by the acting process); unhealthy_timer_read_from_status found at 2262756 (operator_down,
# standby_takeover; seed 11) and fixed by the commit after it (cluster/timers.py: every timer on the
# acting process's monotonic clock); their signatures stay so that a regression is named.
FIXED = {
    "backup_runs_for_an_object_being_deleted": (
        "a scheduled EtcdBackup started and ran slots (StartSlot, RunBackup) for an EtcdCluster with a "
        "deletionTimestamp: prerequisites.ClusterReadiness did not carry the deletion, so a cluster being "
        "deleted counted as ready, and the run raced the deletion cascade (a snapshot of a cluster going "
        "away, or NoHealthyMember failures and retries reported as Degraded). Found in the backup_race family "
        "at 54adc70 (7 of seeds 0-99, first seed 7: RunBackup on a copy that showed the deletion); fixed by "
        "ClusterReadiness.deleting and cluster_wait waiting (WaitingForCluster: being deleted)"
    ),
    "backup_creates_on_a_copy_from_before_the_deletion": (
        "a backup pass decided on its GET of the EtcdBackup; a deletion that landed before its step ran was "
        "not seen, and RunBackup started a snapshot upload (or CreateScratchPod a scratch pod) for a backup "
        "being deleted. Found in the backup_race family at 54adc70 (3 of seeds 0-99, first seed 18: the "
        "deletion landed while a pass decided RunBackup); fixed by the backup executor's live fence "
        "(backup/fence.py creation_refusal, executor._fence): right before a run or a scratch pod it reads "
        "the backup (and, for a run, the cluster) again and creates nothing when either is gone or being "
        "deleted"
    ),
    "restored_member_bootstraps_alone": (
        "a restored member that had not joined (its data directory lost before it started, so it never "
        "settled) was started again (StartRestoredMembers, no member answering) after the other restored "
        "members had joined: cluster.planner.restored_cluster listed only the restored PVCs without a member "
        "ID, so its --initial-cluster named itself alone, and etcd on the empty data directory bootstrapped a "
        "new one-member cluster serving no data beside the restored one (split brain). Found in the "
        "restore_race family at fcbc590 beyond the campaign's seeds (seeds 612, diagnosis_matches_truth, and "
        "1033, snapshot_from_the_cluster_itself, of 200-1199); fixed by restored_cluster listing every "
        "restored PVC, joined or not: with the full list (and the cluster's token, not the restore's) an "
        "empty member never reaches a quorum of its own"
    ),
    "restore_creates_on_a_copy_from_before_the_deletion": (
        "a restore pass decided on its GET of the EtcdCluster; a deletion that landed before its step ran was "
        "not seen, and CreateSeedVolumes/StartSeedPods created seed PVCs (no owner reference) and restore pods "
        "for a cluster being deleted, which then outlived it. Found in the restore_race family's deletion "
        "cascade at a469c00 (4 of seeds 0-199, first seed 31: CreateSeedVolumes one pass after ChooseMembers, "
        "on a copy from before the deletionTimestamp); fixed by the restore executor's live fence "
        "(restore/executor.py _fence, restore/fence.py creation_refusal): right before each create it reads "
        "the target again and creates nothing when it is gone, another object or being deleted, and a create "
        "the API server refuses in a terminating namespace (NamespaceTerminating) ends the step, not the pass"
    ),
    "restore_forgets_set_aside_data": (
        "an in-place restore's memory of the PVCs it set aside was status.preservedData only: a pass on a copy "
        "of its own status from before RecordPreservedData landed found no member PVC left (set aside, "
        "relabelled, under the same names) and chose members from ordinal 0; CreateSeedVolumes then met the "
        "set-aside data-<cluster>-0 and the restore failed (SeedVolumeNotOurs) with the cluster held and its "
        "members stopped. Found in the restore_race family at a469c00 (10 of seeds 0-199, first seed 32); "
        "fixed by the restore's observation listing the PVCs labelled preserved-from the target "
        "(restore/observer.py, Observed.preserved_pvcs) and restore.planner._plan_set_aside choosing ordinals "
        "above them as well as above status.preservedData"
    ),
    "restore_touched_before_ack": (
        "an in-place EtcdRestore stopped the target's members (StopMembers) and set their data aside as soon "
        "as its hold annotation was on the cluster, while a cluster pass that decided on a copy without the "
        "hold could still act (issue 25). Reproduced in the restore_race family by the mutant "
        "restore_skips_hold_ack (mutants.py: the planner's WaitingForHoldAck taken out); fixed by 0bee3fe "
        "(the restore waits until status.restoreHold names its name and uid)"
    ),
    "restore_creates_for_a_deleted_cluster": (
        "an in-place restore went on creating its seed PVCs and restore pods for an EtcdCluster with a "
        "deletionTimestamp (its observation did not carry it): the PVCs, which have no owner, outlived the "
        "cluster with restored data in them. Found in the restore_race family's deletion cascade (10 of seeds "
        "0-199 on a copy that showed the deletion, first seed 10); fixed by TargetCluster.deleting "
        "(restore/observer.py) and the planner waiting (ClusterBeingDeleted) until the cluster is gone"
    ),
    "restore_fails_on_its_own_hold": (
        "a restore pass on a copy of its own status from before BeginRestore was recorded (the daemon's "
        "body lags its own status patch: the next pass starts 0.1 s after a status-only step) saw the target "
        "held by the hold it had just set and failed as TargetBusy; a failed restore never releases, so the "
        "cluster stayed held and never served again. Found in the restore_race family at 88de505 (17 of seeds 0-199, "
        "first seed 18); fixed in restore.planner._target_problem: a hold with this restore's name and uid "
        "is its own"
    ),
    "created_while_held": (
        "a cluster pass decides on the copy of the EtcdCluster taken as it began; a restore's hold set while it "
        "decides did not stop it: it created member pods and PVCs or changed the membership under the hold "
        "(issue 25: BootstrapFirstMember on the restore's new volume while the seed pod wrote it). Found in the "
        "restore_hold family (17 of seeds 0-199, first seed 2: PromoteLearner under the hold) with the fence "
        "taken out; fixed by the executor's live hold check (HeldByRestore) and the restore waiting for the "
        "cluster's acknowledgement (status.restoreHold)"
    ),
    "pod_taken_while_its_replacement_is_refused": (
        "a spec.pod field the CRD accepts but the API server refuses (a missing PriorityClass): RollMember "
        "deleted the member's pod and CreateMemberPod was refused on every later pass (the cluster stayed at "
        "N-1), and AddLearner added a member whose pod could not be created. Found with the refused_pod family "
        "(refused_pod_spec fault) and fixed by cluster/admission.py: a dry run of the new pod first, a wait on "
        "a refusal"
    ),
    "unhealthy_timer_read_from_status": (
        "memberUnhealthyTimeout is timed from status.members[].unhealthySince, a wall-clock time read back "
        "from status (cluster/timers.py carry_timers): after operator downtime (the member recovered and "
        "failed again unseen) or a restart, or under a standby whose clock is ahead, a member is replaced "
        "(RemoveMember replacing=True, its PVC deleted) long before the acting process saw it unhealthy for "
        "the timeout (the second-truncated start time alone makes it up to 1 s early); under a standby whose "
        "clock is behind, the start time lies in its future and an unhealthy member is never replaced (a "
        "learner that never catches up never removed)"
    ),
    "recovery_waits_on_broken_survivor_pod": (
        "during a quorum recovery (status.operation set) planner.next_step goes straight to _plan_quorum_recovery, so "
        "RestartFailedPod and the restart of a broken outdated pod never apply there: when the survivor's "
        "force-new pod is evicted (Failed) or stuck on a reverted bad image, recovery waits for it forever"
    ),
    "broken_pod_rule_rolls_live_members": (
        "planner.pod_broken counts a pod whose etcd runs but is not ready only because no leader is elected "
        "yet (members restarting, election in progress) as broken; _restart_broken_outdated_members and "
        "_plan_without_member_list then RollMember it during a spec change, breaking a quorum that was "
        "forming and rolling several members at once"
    ),
    "foreign_member_list": (
        "observer.py takes the member list from any endpoint whose status says it leads, without checking "
        "its cluster ID against status.clusterID: a foreign etcd answering on an address a Failed pod still "
        "shows makes from_leader=True with a foreign list, and _cleanup_removed_members deletes our pods "
        "(and PVCs)"
    ),
    "learner_blocks_quorum_recovery": (
        "planner._handle_learners runs before the quorum-loss branch: with quorum lost and recovery "
        "allowed, a pending learner (which cannot be removed or promoted without a leader) makes every pass "
        "return RemoveMember/Wait for it, so recovery never begins; without approval it keeps asking to remove "
        "a member it believes is a learner (from a stale list it may be a voter) while QuorumLost=True"
    ),
    "recovery_resurrects_old_members": (
        "after FinishQuorumRecovery the stopped members' PVCs still hold the old dataset; when the survivor "
        "does not answer for a moment, _plan_without_member_list restarts them on those PVCs (self-only, "
        "existing), the old members regain their old quorum, and the operator then replaces the survivor "
        "and deletes the recovered data"
    ),
    "recovery_not_abandoned_when_quorum_returns": (
        "_plan_quorum_recovery follows status.operation blindly: when the members come back (a leader "
        "reported, or their pods ready) after BeginQuorumRecovery was recorded, it still stops them one by "
        "one and breaks the quorum that had returned"
    ),
    "quorum_timer_survives_lost_write": (
        "noQuorumSince is only cleared by a status write; when the pass that saw quorum again is killed "
        "before writing, the next outage inherits the old start time and QuorumLost is declared early"
    ),
    "failed_pod_never_restarted": (
        "a member pod in phase Failed (evicted, node shutdown) was never recreated although its PVC held its "
        "data; with quorum lost the cluster waited forever"
    ),
    "stuck_outdated_pod_not_rolled": (
        "a member pod that never started (bad image) kept its outdated spec after the spec was reverted"
    ),
}

# Open findings of the restore_race family (restore_model.py), kept out of FINDINGS (whose tests
# read the main campaign). None is open now.
RESTORE_RACE: dict[str, str] = {}

# Findings too rare to reproduce in every campaign (xfail without strict).
RARE = {"recovery_survivor_not_newest"}

STALE = {
    "stale_replica": (
        "a replica that lost its lease but keeps acting for a while on a view 2-5 passes old, its status "
        "writes landing: it asks for AddLearner while the live replica's learner is pending (etcd refuses: "
        "one learner at most) and it can begin a quorum recovery from an old QuorumLost view after quorum "
        "returned, which the live replica then carries out (stops members). The planner cannot tell an old "
        "view; the lease fence outside it (the stop-acting deadline and fenced Kubernetes/etcd writes, "
        "etcd_operator/runtime/lease_elector.py) is what prevents this"
    ),
}
