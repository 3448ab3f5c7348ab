"""Mutants of the planner and health diagnosis: each removes one quorum or deletion guard.
The simulator must kill every mutant with a NAMED invariant; a survivor means the model
lacks coverage or the guard is redundant (documented in SURVIVORS)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Callable

from croniter import croniter

from etcd_operator.core import seed_containers
from etcd_operator.core.backup import fence as backup_fence
from etcd_operator.core.backup import orphans, retention, schedule, source_choice
from etcd_operator.core.backup import planner as backup_planner
from etcd_operator.core.backup import state as backup_state
from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.cluster import admission, health, joining, naming, planner, timers
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import HealthState
from etcd_operator.core.restore import fence as restore_fence
from etcd_operator.core.restore import planner as restore_planner
from etcd_operator.core.timefmt import parse_time
from tests.sim import backup_actor, effects, runner, view


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    guard: str  # what the mutant removes
    patches: tuple[tuple[object, str, Callable], ...]
    family: str = "main"  # the schedules that exercise this guard most

    @contextlib.contextmanager
    def applied(self):
        saved = [(module, attr, getattr(module, attr)) for module, attr, _ in self.patches]
        try:
            for module, attr, replacement in self.patches:
                setattr(module, attr, replacement)
            yield
        finally:
            for module, attr, original in saved:
                setattr(module, attr, original)


# --- replacements (each is the original with one guard taken out) ---------------------------


def _learners_promote_without_quorum(spec, joins, observed, health_, names):
    for learner in health_.learners:
        name = names[learner.id] or learner.hex_id
        if learner.name:  # guard removed: `health.is_healthy(learner) and health.has_quorum`
            return a.PromoteLearner(f"{name} has caught up", name, learner.id)
        unhealthy_for = observed.unhealthy_for.get(name)
        if unhealthy_for is not None and unhealthy_for >= spec.recovery.member_unhealthy_timeout:
            return a.RemoveMember(f"learner {name} did not catch up", name, learner.id)
        return a.Wait(f"learner {name} is catching up")
    return None


def _shrink_leader_eligible(spec, observed, health_, names):
    voters = health_.voters
    if len(voters) > spec.size and not [m for m in voters if not health_.is_healthy(m)]:
        # guard removed: the leader is no longer excluded from the scale-down victims
        victim = max(voters, key=lambda m: planner._ordinal(observed, m))
        if planner.removal_keeps_quorum(health_, victim):
            return a.RemoveMember(f"scaling down to {spec.size}", names[victim.id] or victim.hex_id, victim.id)
    return _ORIGINAL["_replace_or_shrink"](spec, observed, health_, names)


def _cleanup_trusting_any_list(observed, health_, names):
    # guard removed: `if not observed.etcd.from_leader: return None` (any answering member's list is trusted)
    trusted = dataclasses.replace(observed, etcd=dataclasses.replace(observed.etcd, from_leader=True))
    return _ORIGINAL["_cleanup_removed_members"](trusted, health_, names)


def _cleanup_pvc_while_pod_present(observed, health_, names):
    step = _ORIGINAL["_cleanup_removed_members"](observed, health_, names)
    if step is not None or not observed.etcd.from_leader:
        return step
    known_names = {n for n in names.values() if n}
    for pvc in sorted(observed.pvcs.values(), key=lambda p: p.name):
        member = naming.pvc_member(pvc.name)
        # guard removed: `member in observed.pods`
        if not pvc.deleting and member not in known_names:
            return a.DeleteMemberPVC(f"{member} is not a member", member)
    return None


def _quorum_loss_without_approval(spec, observed, health_, names, recovery_allowed):
    return _ORIGINAL["_plan_quorum_loss"](spec, observed, health_, names, True)  # guard removed: approval


def _quorum_loss_oldest_survivor(spec, observed, health_, names, recovery_allowed):
    if not recovery_allowed:
        return _ORIGINAL["_plan_quorum_loss"](spec, observed, health_, names, recovery_allowed)
    answering = [(observed.etcd.statuses[m.id], m) for m in health_.voters if m.id in observed.etcd.statuses]
    if not answering:
        return a.Wait("no survivor")
    # guard removed: the survivor with the highest applied index
    status, survivor = min(answering, key=lambda sm: (sm[0].raft_applied_index, sm[0].revision))
    return a.BeginQuorumRecovery("recovering", names[survivor.id] or survivor.hex_id, survivor.id)


def _roll_leader_without_moving(observed, health_, names, desired_hash):
    if health_.state != HealthState.HEALTHY:
        return None
    outdated = [
        m for m in health_.voters if (pod := observed.pods.get(names[m.id] or "")) and pod.spec_hash != desired_hash
    ]
    if not outdated:
        return None
    # guard removed: followers first, leadership moved before the leader restarts
    target = min(outdated, key=lambda m: planner._ordinal(observed, m))
    return a.RollMember("following the spec", names[target.id])


def _roll_when_degraded(observed, health_, names, desired_hash):
    if health_.state == HealthState.HEALTHY or not health_.has_quorum:
        return _ORIGINAL["_roll_outdated_member"](observed, health_, names, desired_hash)
    # guard removed: rolls only from HEALTHY
    outdated = [
        m
        for m in health_.voters
        if health_.is_healthy(m)
        and (pod := observed.pods.get(names[m.id] or ""))
        and pod.spec_hash != desired_hash
        and m.id != health_.leader_id
    ]
    if outdated:
        return a.RollMember("following the spec", names[outdated[0].id])
    return None


def _member_healthy_without_alarms(observed, member_id):
    status = observed.etcd.statuses.get(member_id)
    # the old bug: an alarm made the member unhealthy
    return status is not None and status.leader_id != 0 and not health.alarms_of(status)


def _evidence_always(status, observed):
    return True  # guard removed: quorum loss needs evidence


def _no_timeout(spec):
    return 0.0  # guard removed: the quorum-loss timeout


def _add_learner_while_learner_pending(spec, joins, observed, health_, names):
    step = _ORIGINAL["_handle_learners"](spec, joins, observed, health_, names)
    if isinstance(step, a.Wait) and len(health_.voters) < spec.size and health_.has_quorum:
        # guard removed: no second membership change while a learner catches up
        return a.AddLearner("scaling up", naming.member_name(observed.cluster, joining.next_ordinal(observed)))
    return step


def _replace_without_quorum_check(spec, observed, health_, names):
    voters = health_.voters
    for member in voters:
        if health_.is_healthy(member):
            continue
        name = names[member.id] or member.hex_id
        unhealthy_for = observed.unhealthy_for.get(name)
        if unhealthy_for is not None and unhealthy_for >= spec.recovery.member_unhealthy_timeout:
            # guard removed: removal_keeps_quorum before replacing an unhealthy member
            return a.RemoveMember(f"{name} unhealthy; replacing", name, member.id, replacing=True)
    return _ORIGINAL["_replace_or_shrink"](spec, observed, health_, names)


def _replace_without_waiting(spec, observed, health_, names):
    # guard removed: an unhealthy member is replaced only after memberUnhealthyTimeout
    hasty = dataclasses.replace(spec, recovery=dataclasses.replace(spec.recovery, member_unhealthy_timeout=0.0))
    return _ORIGINAL["_replace_or_shrink"](hasty, observed, health_, names)


def _no_pod_stopping(observed, member):
    return False  # guard removed: a voter whose pod is being deleted counts as staying


_plan_restoring = restore_planner._plan_restoring


def _restoring_without_hold_ack(spec, status, observed, now):
    """The restore planner as before 0bee3fe: its own hold counts as acknowledged at once."""
    cluster = observed.cluster
    if cluster is not None and (cluster.holder, cluster.hold_uid) == (observed.restore, observed.uid):
        observed = dataclasses.replace(
            observed, cluster=dataclasses.replace(cluster, hold_ack=(observed.restore, observed.uid))
        )
    return _plan_restoring(spec, status, observed, now)


_plan_set_aside = restore_planner._plan_set_aside


def _set_aside_forgetting_preserved_pvcs(status, observed, cluster):
    """restore.planner._plan_set_aside as before: only status.preservedData tells which data it set aside."""
    return _plan_set_aside(status, dataclasses.replace(observed, preserved_pvcs=()), cluster)


def _observe_reading_status_timers(world, status, *args):
    """The observation before cluster/timers.py: a member's unhealthy time is counted from
    status.members[].unhealthySince, read on the acting process's wall clock."""
    recorded, observed, now, sightings = _observe(world, status, *args)
    shown = {m.get("name"): parse_time(m.get("unhealthySince")) for m in status.get("members") or []}
    unhealthy_for = {
        name: now - shown[name] if shown.get(name) is not None else seconds
        for name, seconds in observed.unhealthy_for.items()
    }
    return recorded, dataclasses.replace(observed, unhealthy_for=unhealthy_for), now, sightings


_observe = runner.observe
_choose_source = source_choice.choose_source


def _choose_source_of_any_cluster(candidates, answers, recorded_cluster_id):
    """backup.source_choice without its cluster-ID check: every answer counts as the recorded cluster's."""
    answers = {
        name: dataclasses.replace(answer, cluster_id=recorded_cluster_id) if answer.cluster_id is not None else answer
        for name, answer in answers.items()
    }
    return _choose_source(candidates, answers, recorded_cluster_id)


def _trust_every_answer(answers, recorded):
    return dict(answers), {}  # guard removed: answers carrying another cluster ID are kept


_due = schedule.due
_cluster_wait = backup_state.cluster_wait


def _due_forgetting_the_last_slot(expression, last_slot, created, now):
    """backup.schedule.due without `latest <= last_slot`: a slot already started counts as missed."""
    due = _due(expression, last_slot, created, now)
    if due.slot is not None or last_slot is None:
        return due
    latest = croniter(expression, now).get_prev(datetime.datetime)
    return schedule.Due(latest, due.next_slot) if latest == last_slot else due


def _due_oldest_missed_slot(expression, last_slot, created, now):
    """backup.schedule.due catching up from the oldest missed slot, one at a time, not the latest once."""
    due = _due(expression, last_slot, created, now)
    if due.slot is None:
        return due
    oldest = croniter(expression, last_slot or created).get_next(datetime.datetime)
    return schedule.Due(oldest, croniter(expression, oldest).get_next(datetime.datetime))


def _cluster_wait_ignoring_deletion(namespace, name, cluster, what):
    """prerequisites.cluster_wait as before: a cluster being deleted is ready for a run."""
    return _cluster_wait(
        namespace, name, None if cluster is None else dataclasses.replace(cluster, deleting=False), what
    )


def _age_on_the_operators_clock(manifest, now, store):
    """retention's age of a backup on the applying process's clock alone, without the store's (issue 25)."""
    return (now - retention._created(manifest)).total_seconds()


def _newest_first_by_position(manifests, history=()):
    """retention.newest_first without the revision order: by the position the listing gave (key order)."""
    return sorted(manifests, key=lambda m: m.snapshot_key)


def _belongs_by_name(self, identity):
    """Manifest.belongs_to by name only, without the EtcdBackup's uid."""
    return (self.namespace, self.backup) == (identity.namespace, identity.backup)


_ORIGINAL = {
    name: getattr(planner, name)
    for name in (
        "_replace_or_shrink",
        "_cleanup_removed_members",
        "_plan_quorum_loss",
        "_roll_outdated_member",
        "_handle_learners",
    )
}

MUTANTS = (
    Mutant(
        "removal_keeps_quorum_always_true",
        "removal keeps a quorum of healthy voters",
        ((planner, "removal_keeps_quorum", lambda h, m: True),),
    ),
    Mutant(
        "promote_learner_without_quorum",
        "promote only a healthy learner while quorum holds",
        ((planner, "_handle_learners", _learners_promote_without_quorum),),
        "focus:resize+kill_member",  # learners join on scale-ups only: a new cluster starts all its members
    ),
    Mutant(
        "leader_eligible_as_scale_down_victim",
        "never remove the leader when scaling down",
        ((planner, "_replace_or_shrink", _shrink_leader_eligible),),
    ),
    Mutant(
        "cleanup_trusts_non_leader_member_list",
        "deletions only from the leader's member list",
        ((planner, "_cleanup_removed_members", _cleanup_trusting_any_list),),
        "focus:isolate_member+resize+partition",
    ),
    Mutant(
        "cleanup_pvc_while_pod_present",
        "a PVC goes only after its pod is gone",
        ((planner, "_cleanup_removed_members", _cleanup_pvc_while_pod_present),),
    ),
    Mutant(
        "quorum_recovery_without_approval",
        "recovery needs automaticQuorumRecovery or the annotation",
        ((planner, "_plan_quorum_loss", _quorum_loss_without_approval),),
    ),
    Mutant(
        "quorum_recovery_without_timeout",
        "recovery only after the quorum-loss timeout",
        ((health, "quorum_loss_timeout", _no_timeout),),
    ),
    Mutant(
        "quorum_recovery_from_oldest_survivor",
        "recover from the survivor with the newest data",
        ((planner, "_plan_quorum_loss", _quorum_loss_oldest_survivor),),
        "focus:kill_member+crash_loop",
    ),
    Mutant(
        "health_treats_alarms_as_unhealthy",
        "an alarm is a state, not unhealthiness",
        (
            (health, "member_healthy", _member_healthy_without_alarms),
            (timers, "member_healthy", _member_healthy_without_alarms),
        ),
    ),
    Mutant(
        "quorum_loss_without_evidence",
        "quorum loss declared only on evidence",
        (
            (health, "quorum_loss_evidence", _evidence_always),
            (timers, "quorum_loss_evidence", _evidence_always),
            (planner, "quorum_loss_evidence", _evidence_always),
        ),
    ),
    Mutant(
        "roll_leader_without_moving_leadership",
        "followers first, leadership moved before the leader rolls",
        ((planner, "_roll_outdated_member", _roll_leader_without_moving),),
    ),
    Mutant(
        "roll_while_degraded",
        "rolls only while HEALTHY",
        ((planner, "_roll_outdated_member", _roll_when_degraded),),
        "focus:version+crash_loop",
    ),
    Mutant(
        "add_learner_while_learner_pending",
        "one membership change at a time",
        ((planner, "_handle_learners", _add_learner_while_learner_pending),),
    ),
    Mutant(
        "replace_unhealthy_without_quorum_check",
        "replacing an unhealthy member keeps quorum",
        ((planner, "_replace_or_shrink", _replace_without_quorum_check),),
    ),
    Mutant(
        "replace_without_waiting_the_timeout",
        "an unhealthy member is replaced only after memberUnhealthyTimeout",
        ((planner, "_replace_or_shrink", _replace_without_waiting),),
    ),
    Mutant(
        "act_under_alarm_or_when_cut_off",
        "nothing removed/replaced/rolled under an alarm or when cut off",
        ((planner, "HOLD_STATES", frozenset()),),
    ),
    Mutant(
        "recovery_not_called_off_when_quorum_returns",
        "a recorded recovery is abandoned once quorum is back",
        ((planner, "quorum_loss_evidence", _evidence_always),),
        "focus:kill_member+crash_loop+partition",
    ),
    Mutant(
        "disrupt_while_a_pod_stops",
        "nothing rolled, defragmented or removed while a voter's pod stops",
        ((health, "pod_stopping", _no_pod_stopping),),
        "focus:version+resize",
    ),
    Mutant(
        "pod_taken_without_dry_run",
        "a pod is taken away, or a member added, only on the API server's acceptance of its new pod (admission.gate)",
        ((admission, "gate", lambda action, observed, pod_spec_hash: action),),
        "refused_pod",
    ),
    Mutant(
        "foreign_answers_trusted",
        "answers from another cluster ID are not used (observer, identity.py)",
        ((view, "split_foreign", _trust_every_answer),),
        "focus:foreign_etcd+evict_pod",
    ),
    # The executor's live hold fence, as the model executor mirrors it (cluster/executor.py HeldByRestore).
    Mutant(
        "steps_taken_against_a_live_hold",
        "no member step while the live object carries a restore hold",
        ((effects, "PERMITTED_WHILE_HELD", (a.Step,)),),
        "restore_hold",
    ),
    Mutant(
        "restore_skips_hold_ack",
        "an in-place restore touches nothing before the cluster acknowledged its "
        "hold (restore.planner WaitingForHoldAck)",
        ((restore_planner, "_plan_restoring", _restoring_without_hold_ack),),
        "restore_race",
    ),
    # The restore executor's live fence, as the model executor mirrors it (restore/executor.py _fence).
    Mutant(
        "restore_creates_without_live_fence",
        "the restore creates nothing for a target the live object "
        "shows gone or being deleted (restore.fence.creation_refusal)",
        ((restore_fence, "creation_refusal", lambda decided_on, live: None),),
        "restore_race",
    ),
    Mutant(
        "restore_forgets_set_aside_pvcs",
        "an in-place restore chooses members above the PVCs observed as set "
        "aside from the target (restore.planner._plan_set_aside)",
        ((restore_planner, "_plan_set_aside", _set_aside_forgetting_preserved_pvcs),),
        "restore_race",
    ),
    Mutant(
        "unhealthy_timer_read_from_status",
        "memberUnhealthyTimeout timed on the acting process's own "
        "clock (cluster/timers.py), never from status.members[].unhealthySince",
        ((runner, "observe", _observe_reading_status_timers),),
    ),
    Mutant(
        "snapshot_source_of_any_cluster",
        "a snapshot only from a member answering with status.clusterID (backup.source_choice)",
        ((source_choice, "choose_source", _choose_source_of_any_cluster),),
        "focus:foreign_etcd+evict_pod",
    ),
    Mutant(
        "verification_listens_on_the_pod_ip",
        "the verification's scratch etcd listens on unix sockets only (backup.scratch_pod)",
        ((seed_containers, "SCRATCH_CLIENT_URL", "http://0.0.0.0:2379"),),
        "restore_race",
    ),
    # The backup controller beside the cluster (backup_race, backup_actor.py).
    Mutant(
        "backup_slot_started_again",
        "a cron slot is started once (backup.schedule.due: latest <= last_slot)",
        ((schedule, "due", _due_forgetting_the_last_slot),),
        "backup_race",
    ),
    Mutant(
        "backup_catch_up_from_the_oldest_slot",
        "after missed slots one catch-up run, for the latest (backup.schedule.due)",
        ((schedule, "due", _due_oldest_missed_slot),),
        "backup_race",
    ),
    Mutant(
        "backup_one_shot_runs_again",
        "a completed one-shot backup never runs again (backup.planner)",
        ((backup_planner, "COMPLETED", "NeverCompleted"),),
        "backup_race",
    ),
    Mutant(
        "backup_runs_on_a_cluster_being_deleted",
        "a run waits while its cluster is being deleted (prerequisites.cluster_wait)",
        ((backup_state, "cluster_wait", _cluster_wait_ignoring_deletion),),
        "backup_race",
    ),
    Mutant(
        "backup_creates_without_live_fence",
        "no upload or scratch pod for a backup (or a run's cluster) the "
        "live object shows being deleted (backup.fence.creation_refusal)",
        ((backup_fence, "creation_refusal", lambda *args: None),),
        "backup_race",
    ),
    # The runner's manifest check, as the model runs it (backup/runner.py _attempt).
    Mutant(
        "backup_slot_snapshotted_again",
        "a slot run again finds its manifest and takes no second snapshot",
        ((backup_actor, "slot_already_ran", lambda bucket, key: None),),
        "backup_race",
    ),
    Mutant(
        "retention_ages_on_the_operators_clock",
        "maxAge needs the store's clock to agree with the operator's (backup.retention._age_seconds)",
        ((retention, "_age_seconds", _age_on_the_operators_clock),),
        "backup_race",
    ),
    Mutant(
        "retention_ignores_the_order",
        "retention keeps the newest by revision (backup.retention.newest_first)",
        ((retention, "newest_first", _newest_first_by_position),),
        "backup_race",
    ),
    Mutant(
        "retention_forgets_the_newest_verified",
        "retention keeps the newest verified backup (backup.retention.newest_verified)",
        ((retention, "newest_verified", lambda manifests, history=(): None),),
        "backup_race",
    ),
    Mutant(
        "orphaned_uploads_never_aborted",
        "an upload status does not record is found by listing and aborted (backup.orphans.orphaned)",
        ((orphans, "orphaned", lambda *args: []),),
        "backup_race",
    ),
    Mutant(
        "orphans_of_deeper_folders_aborted",
        "only snapshot keys directly in the backup's folder (backup.orphans.in_folder)",
        ((orphans, "in_folder", lambda key, folder: key.startswith(folder)),),
        "backup_race",
    ),
    Mutant(
        "retention_takes_a_namesakes_backups",
        "retention deletes only manifests naming this EtcdBackup's uid (Manifest.belongs_to)",
        ((Manifest, "belongs_to", _belongs_by_name),),
        "backup_race",
    ),
)

# Mutants the simulator cannot kill, and why (checked by the test: they must indeed survive).
SURVIVORS: dict[str, str] = {
    "removal_keeps_quorum_always_true": (
        "redundant in the current planner: every caller already requires health.has_quorum, a scale-down "
        "picks an unhealthy victim first, and removing an unhealthy voter (or a healthy one when all are "
        "healthy) cannot take the healthy voters below the quorum of the remaining ones; etcd's strict "
        "reconfiguration check would refuse it besides"
    ),
    "replace_unhealthy_without_quorum_check": (
        "redundant for the same reason: replacing an unhealthy voter happens only with health.has_quorum, "
        "and removing an unhealthy voter never lowers the healthy count"
    ),
    "roll_while_degraded": (
        "redundant in the current planner: plan() reaches _roll_outdated_member only after _replace_or_shrink "
        "returned nothing (so every voter is healthy), no learner is pending, the voter count equals spec.size, "
        "no voter's pod is stopping (the planner waits for it first) and no alarm or cut-off holds, which is "
        "HEALTHY"
    ),
    "cleanup_trusts_non_leader_member_list": (
        "a coverage gap rather than a redundant guard: a non-leader list can only lack a started voter if it "
        "comes from a member that missed an add (etcd's strict check refuses adds while any voter is "
        "disconnected), i.e. a removed member still isolated and answering while the operator reaches "
        "nothing else; the model produces lagging lists, but that combination did not occur in the hunted "
        "schedules (with a lagging list only a just-added learner's pod goes, which no invariant forbids)"
    ),
    "cleanup_pvc_while_pod_present": (
        "redundant given Kubernetes' pvc-protection finalizer (a PVC in use stays until its pod is gone, as "
        "the model does) and because the same cleanup deletes a non-member's pod first"
    ),
}
