"""Named invariants, checked against the model's TRUE state (never the operator's view).
Each raises Violation carrying its own name."""

from __future__ import annotations

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import HealthState, quorum_loss_timeout
from tests.sim.world import Group, World, api_refuses_pod


class Violation(AssertionError):
    def __init__(self, invariant: str, message: str):
        super().__init__(f"{invariant}: {message}")
        self.invariant = invariant
        self.message = message


def _fail(invariant: str, message: str) -> None:
    raise Violation(invariant, message)


# --- truth helpers --------------------------------------------------------------------------


def up_voters(world: World, group: Group, staying: bool = False) -> int:
    """Voters whose etcd runs; `staying`: leaving out pods being deleted (they stop soon)."""
    up = world.up_members(group)
    return sum(1 for m in group.voters() if m.id in up and not (staying and up[m.id].deleting))


def has_quorum(world: World, group: Group | None, staying: bool = False) -> bool:
    if group is None:
        return False
    voters = group.voters()
    return bool(voters) and up_voters(world, group, staying) >= naming.quorum(len(voters))


def surviving_data(world: World, exclude: str | None = None):
    """(pvc name, data) of every data directory of our clusters that still exists."""
    main = world.main
    if main is None:
        return []
    kept = [
        (p.name, p.data)
        for p in world.pvcs.values()
        if p.name != exclude and p.data is not None and not p.deleting and p.data.cluster_id == main.cluster_id
    ]
    return kept + [
        (f"set-aside {p.name}", p.data)
        for p in world.set_aside
        if p.data is not None and p.data.cluster_id == main.cluster_id
    ]


def true_leader_pod(world: World) -> str | None:
    main = world.main
    if main is None or main.leader is None:
        return None
    pod = world.up_members(main).get(main.leader)
    return pod.name if pod else None


def member_name_of(world: World, member_id: int) -> str | None:
    main = world.main
    member = main.member(member_id) if main else None
    if member is None:
        return None
    return naming.member_from_peer_url("sim", "ns", member.peer_urls[0])


# --- before an action: what it would break if it takes effect ---------------------------------

# Invariants about what the planner asks for, whether or not etcd or Kubernetes then refuse it.
ON_ATTEMPT = {"one_membership_change_in_flight", "recovery_needs_approval", "quorum_lost_waits"}


class ActionChecks:
    """Computed before an action runs; `after` raises once the action took effect."""

    def __init__(
        self,
        world: World,
        action: a.Step,
        recovery_allowed: bool,
        spec,
        quorum_lost_waiting: bool,
        seen_unhealthy_for: dict | None = None,
        held_by: str | None = None,
    ):
        self.world = world
        self.action = action
        self.held_by = held_by  # the EtcdRestore holding the cluster as the step runs (live annotations)
        self.children_before = {("pod", p.uid) for p in world.pods.values()} | {
            ("pvc", p.uid) for p in world.pvcs.values()
        }
        self.members_before = tuple(world.main.members) if world.main else ()
        self.quorum_before = has_quorum(world, world.main, staying=True)
        target = world.pods.get(getattr(action, "member", "") or "")
        self.target_ran = target is not None and world.member_up(target)
        self.voters_before = len(world.main.voters()) if world.main else 0
        self.pending: list[str] = []
        self._membership_in_flight()
        self._recovery_needs_approval(recovery_allowed)
        self._force_new_after_true_loss(spec)
        self._data_kept_while_needed()
        self._failed_roll_keeps_members()
        self._leader_kept_while_others_can_lead()
        self._nothing_destructive_while_waiting(quorum_lost_waiting)
        self._nospace_remediated_in_place()
        self._one_member_stops_at_a_time()
        self._replaced_after_own_timeout(spec, seen_unhealthy_for)
        self._pod_recreatable(spec)

    def _add(self, invariant: str, message: str) -> None:
        self.pending.append((invariant, message))

    def _membership_in_flight(self) -> None:
        """one_membership_change_in_flight: no membership change while another member is
        added but not yet a started voter."""
        action, main = self.action, self.world.main
        if not action.changes_membership or main is None:
            return
        subject = getattr(action, "member_id", None)
        pending = [m for m in main.members if (m.is_learner or not m.name) and m.id != subject]
        if pending:
            self._add(
                "one_membership_change_in_flight",
                f"{action.kind} while {len(pending)} other member(s) are still joining "
                f"({', '.join(f'{m.id:x}' for m in pending)})",
            )

    def _recovery_needs_approval(self, allowed: bool) -> None:
        if isinstance(self.action, (a.BeginQuorumRecovery, a.ForceNewCluster)) and not allowed:
            self._add(
                "recovery_needs_approval",
                f"{self.action.kind} without spec.recovery.automaticQuorumRecovery or the approval annotation",
            )

    def _force_new_after_true_loss(self, spec) -> None:
        """force_new_cluster_only_after_true_loss: quorum truly lost for the timeout (the
        operator times it on its monotonic clock: wall-clock steps do not count), and the
        survivor holds the newest data."""
        action, world = self.action, self.world
        main = world.main
        if isinstance(action, a.BeginQuorumRecovery):
            timeout = quorum_loss_timeout(spec)
            lost_for = None if main is None or main.lost_since is None else world.now - main.lost_since
            if lost_for is None or lost_for < timeout - 1.0:
                self._add(
                    "force_new_cluster_only_after_true_loss",
                    "recovery begun while quorum "
                    f"{'held' if lost_for is None else f'was lost for only {lost_for:.0f}s'}"
                    f" (timeout {timeout:.0f}s)",
                )
        if isinstance(action, (a.BeginQuorumRecovery, a.ForceNewCluster)):
            pvc = world.pvcs.get(naming.pvc_name(action.member))
            target = pvc.data if pvc is not None else None
            others = [
                d.applied
                for n, d in surviving_data(world, exclude=pvc.name if pvc else None)
                if main is not None and d.lineage == main.lineage and main.member(d.member_id) is not None
            ]
            newest = max(others, default=-1)
            if target is None or target.applied < newest:
                self._add(
                    "force_new_cluster_only_after_true_loss",
                    f"{action.kind} on {action.member} with applied index "
                    f"{target.applied if target else 'none (no data)'} while a surviving member has {newest}",
                )

    def _replaced_after_own_timeout(self, spec, seen_unhealthy_for: dict | None) -> None:
        """member_replaced_after_own_timeout: a member whose PVC is still there is replaced only
        after the acting process itself saw it unhealthy, in every one of its passes, for
        memberUnhealthyTimeout of model time. A restarted or newly elected operator waits the
        full timeout again. (A member whose PVC is gone is replaced on that evidence, untimed.)"""
        action, world = self.action, self.world
        if not (isinstance(action, a.RemoveMember) and action.replacing) or seen_unhealthy_for is None:
            return
        pvc = world.pvcs.get(naming.pvc_name(action.member))
        if pvc is None or pvc.deleting:
            return
        seen = seen_unhealthy_for.get(action.member_id)
        timeout = spec.recovery.member_unhealthy_timeout
        if seen is None or seen < timeout:
            self._add(
                "member_replaced_after_own_timeout",
                f"{action.member} replaced after the acting process saw it unhealthy for "
                f"{'no pass' if seen is None else f'{seen:.0f}s'} (memberUnhealthyTimeout {timeout:.0f}s)",
            )

    def _pod_recreatable(self, spec) -> None:
        """pod_recreatable: no step deletes a member's pod to re-create it, or adds a member,
        while the API server refuses that member's new pod (model truth)."""
        action, world = self.action, self.world
        takes_pod = isinstance(action, (a.RollMember, a.RestartFailedPod)) or (
            isinstance(action, a.ForceNewCluster) and action.member in world.pods
        )
        if (takes_pod or isinstance(action, a.AddLearner)) and api_refuses_pod(spec):
            self._add("pod_recreatable", f"{action.kind} of {action.member} while the API server refuses its new pod")

    def _data_kept_while_needed(self) -> None:
        action, world = self.action, self.world
        if not isinstance(action, a.DeleteMemberPVC):
            return
        pvc = world.pvcs.get(naming.pvc_name(action.member))
        if pvc is None or pvc.data is None:
            return
        data, main = pvc.data, world.main
        others = surviving_data(world, exclude=pvc.name)
        newest_other = max((d.applied for _, d in others), default=-1)
        if main is not None and data.cluster_id == main.cluster_id and data.applied > newest_other:
            self._add(
                "data_kept_while_needed",
                f"PVC of {action.member} deleted while it holds the newest data "
                f"(applied {data.applied} > {newest_other} elsewhere)",
            )
        if main is not None and data.lineage == main.lineage and data.applied >= main.committed:
            self._add(
                "data_kept_while_needed",
                f"PVC of {action.member} deleted while it holds every committed entry "
                f"(applied {data.applied} >= commit index {main.committed})",
            )
        if main is not None and data.lineage == main.lineage and main.member(data.member_id) is not None:
            member = main.member(data.member_id)
            voters = main.voters()
            with_data = {d.member_id for _, d in others if d.lineage == main.lineage}
            if not member.is_learner and len([m for m in voters if m.id in with_data]) < naming.quorum(len(voters)):
                self._add(
                    "data_kept_while_needed",
                    f"PVC of voting member {action.member} deleted; fewer than a quorum of voters keep data",
                )

    def _failed_roll_keeps_members(self) -> None:
        """failed_roll_keeps_members: a member whose pod cannot start its image (a bad image
        rolled onto it) still holds its data: it is rolled back or re-rolled, never replaced."""
        action, world = self.action, self.world
        if not (isinstance(action, a.RemoveMember) and action.replacing) or world.main is None:
            return
        pod = world.pods.get(action.member)
        pvc = world.pvcs.get(naming.pvc_name(action.member))
        if pod is None or not pod.bad_image or pvc is None or pvc.data is None:
            return
        if pvc.data.lineage == world.main.lineage and pvc.data.member_id == action.member_id:
            self._add(
                "failed_roll_keeps_members",
                f"{action.member} replaced while only its image fails (its data is intact on its PVC)",
            )

    def _leader_kept_while_others_can_lead(self) -> None:
        action, world = self.action, self.world
        voluntary = isinstance(action, a.RollMember) or (isinstance(action, a.RemoveMember) and not action.replacing)
        if not voluntary:
            return
        leader = true_leader_pod(world)
        main = world.main
        if leader is None or action.member != leader:
            return
        others_up = up_voters(world, main) - 1
        if others_up >= 1 and len(main.voters()) > 1:
            self._add(
                "leader_kept_while_others_can_lead",
                f"{action.kind} of the leader {leader} while {others_up} other voter(s) could lead",
            )

    def _nothing_destructive_while_waiting(self, waiting: bool) -> None:
        """Where recovery is impossible without a person (QuorumLost, no approval), the
        operator only waits."""
        main = self.world.main
        target = main.member(getattr(self.action, "member_id", 0)) if main else None
        learner = target is not None and target.is_learner  # removing a learner loses no data
        if (
            waiting
            and not learner
            and isinstance(
                self.action,
                (a.RemoveMember, a.DeleteMemberPVC, a.StopMemberPod, a.ForceNewCluster, a.BeginQuorumRecovery),
            )
        ):
            self._add("quorum_lost_waits", f"{self.action.kind} while QuorumLost=True without approval")

    def _one_member_stops_at_a_time(self) -> None:
        """one_member_stops_at_a_time: a pod being deleted still runs etcd for a while. A roll,
        defragmentation or scale-down must not leave fewer than a quorum of voters running once
        such a pod has stopped, and a pod already stopping is not rolled again."""
        action, world, main = self.action, self.world, self.world.main
        disrupts = isinstance(action, (a.RollMember, a.Defragment, a.DefragmentForSpace, a.DefragmentOnRequest)) or (
            isinstance(action, a.RemoveMember) and not action.replacing
        )
        if main is None or not disrupts or not self.target_ran:
            return  # restarting or removing a member whose etcd does not run takes nothing away
        target = world.pods.get(action.member)
        if isinstance(action, a.RollMember) and target is not None and target.deleting:
            self._add("one_member_stops_at_a_time", f"RollMember of {action.member}, whose pod is already stopping")
            return
        up = world.up_members(main)
        voters = [m for m in main.voters() if not (isinstance(action, a.RemoveMember) and m.id == action.member_id)]
        others = [up[m.id] for m in voters if m.id in up and up[m.id].name != action.member]
        stopping = sorted(pod.name for pod in others if pod.deleting)
        staying = [pod for pod in others if not pod.deleting]
        if stopping and len(staying) < naming.quorum(len(voters)):
            self._add(
                "one_member_stops_at_a_time",
                f"{action.kind} of {action.member} while the pod of {', '.join(stopping)} is stopping: "
                f"{len(staying)} of {len(voters)} voters would stay up",
            )

    def _nospace_remediated_in_place(self) -> None:
        """nospace_in_place: while NOSPACE is raised on a quorum that serves (model truth), no
        member is removed or replaced, no running member rolled or stopped, nothing recovered;
        only compaction, defragmentation and disarm."""
        main = self.world.main
        if main is None or "NOSPACE" not in main.alarms or main.leader is None or not self.quorum_before:
            return  # without a serving quorum the alarm is not what the operator acts on
        if isinstance(self.action, (a.RemoveMember, a.DeleteMemberPVC, a.ForceNewCluster, a.BeginQuorumRecovery)) or (
            isinstance(self.action, (a.RollMember, a.StopMemberPod)) and self.target_ran
        ):
            self._add("nospace_in_place", f"{self.action.kind} while NOSPACE is raised and quorum serves")

    def after(self, took_effect: bool) -> None:
        self._nothing_created_while_held()
        for invariant, message in self.pending:
            if took_effect or invariant in ON_ATTEMPT:
                _fail(invariant, message)
        if took_effect:
            self._quorum_kept()

    def _nothing_created_while_held(self) -> None:
        """no_member_created_while_held: while an EtcdRestore holds the cluster, no member pod or
        PVC is created and the membership does not change, whatever view the step was decided on."""
        if not self.held_by:
            return
        world = self.world
        children = {("pod", p.uid) for p in world.pods.values()} | {("pvc", p.uid) for p in world.pvcs.values()}
        created = sorted(uid for uid in children - self.children_before)
        members = tuple(world.main.members) if world.main else ()
        if created or members != self.members_before:
            _fail(
                "no_member_created_while_held",
                f"{self.action.kind}({getattr(self.action, 'member', '')}) while EtcdRestore {self.held_by} "
                f"holds the cluster: {len(created)} pod(s)/PVC(s) created"
                + ("" if members == self.members_before else ", membership changed"),
            )

    def _quorum_kept(self) -> None:
        """no operator action takes the healthy voters below quorum (model truth; a pod being
        deleted counts as down, since its etcd stops whatever happens next)."""
        if not self.quorum_before or has_quorum(self.world, self.world.main, staying=True):
            return
        if isinstance(self.action, a.RollMember) and self.voters_before <= 2:
            return  # a one- or two-voter cluster cannot restart a member and keep quorum
        if isinstance(self.action, a.ForceNewCluster):
            return  # the survivor's restart; recovery was checked when it began
        _fail(
            "quorum_kept_by_actions",
            f"{self.action.kind}({getattr(self.action, 'member', '')}) took the cluster below quorum"
            + (" (its pod ran etcd)" if self.target_ran else ""),
        )


def restore_waits_for_hold_ack(step: str, acknowledged: bool) -> None:
    """restore_waits_for_hold_ack: an EtcdRestore stops, sets aside, creates or clears nothing
    in its target before the cluster's controller has acknowledged its hold (a status write of
    a pass that saw the hold)."""
    if not acknowledged:
        _fail("restore_waits_for_hold_ack", f"the restore took {step} before the cluster acknowledged its hold")


def nothing_created_for_an_object_being_deleted(step: str, owner: str, deleting: bool) -> None:
    """nothing_created_for_an_object_being_deleted: no step creates an object for one that has a
    deletionTimestamp (it would outlive it, or be created only to be collected)."""
    if deleting:
        _fail("nothing_created_for_an_object_being_deleted", f"{step} for {owner}, which is being deleted")


def snapshot_from_the_cluster_itself(problem: str | None) -> None:
    """snapshot_from_the_cluster_itself: a backup run starting now would snapshot only a member
    serving the cluster's current dataset (backup.source_choice against status.clusterID)."""
    if problem:
        _fail("snapshot_from_the_cluster_itself", f"a backup would snapshot {problem}")


def verification_serves_only_inside_its_pod(found: list[str]) -> None:
    """verification_serves_only_inside_its_pod: the pod backup.scratch_pod builds declares
    no port, and its scratch etcd listens on unix sockets only."""
    if found:
        _fail(
            "verification_serves_only_inside_its_pod", "the verification pod serves outside itself: " + "; ".join(found)
        )


def slot_started_once(slot: str, started_at_step: int | None) -> None:
    """slot_started_once: a backup slot (a cron slot, or a one-shot backup's only one) is
    started at most once: its StartSlot status write lands once (backup.planner)."""
    if started_at_step is not None:
        _fail("slot_started_once", f"slot {slot} started again (first started at #{started_at_step})")


def catch_up_starts_the_latest_slot_once(slot: str, slot_time, last_started, next_fire, now) -> None:
    """catch_up_starts_the_latest_slot_once: cron slots start in order, and after missed slots
    (downtime, a clock behind) one catch-up run starts, for the latest slot the deciding clock
    has passed (schedule.due)."""
    if last_started is not None and slot_time <= last_started:
        _fail(
            "catch_up_starts_the_latest_slot_once",
            f"slot {slot} started after the later slot {last_started.isoformat()}",
        )
    if next_fire <= now:
        _fail(
            "catch_up_starts_the_latest_slot_once",
            f"slot {slot} started at {now.isoformat()}, when the later slot {next_fire.isoformat()} had passed too",
        )


def one_snapshot_per_slot(key: str, written_before: bool) -> None:
    """one_snapshot_per_slot: one slot's snapshot is taken and its manifest written once; a
    slot run again finds its manifest and takes nothing (backup/runner.py)."""
    if written_before:
        _fail("one_snapshot_per_slot", f"a second snapshot for {key}")


def orphaned_uploads_aborted_only_own(left: list[str], foreign_aborted: list[str]) -> None:
    """orphaned_uploads_aborted_only_own: after a run's aborts, no upload of this backup that was
    left unfinished (the operator killed before or after recording it, the store failing
    mid-stream) and is older than the grace remains, and no upload of anyone else was aborted."""
    if left or foreign_aborted:
        _fail("orphaned_uploads_aborted_only_own", f"left unfinished: {left}; others' aborted: {foreign_aborted}")


def retention_stays_in_its_folder(key: str, own: bool) -> None:
    """retention_stays_in_its_folder: retention deletes only this backup's own objects directly
    in its folder (never a sibling prefix, a deeper folder or another backup's manifest)."""
    if not own:
        _fail("retention_stays_in_its_folder", f"retention deleted {key}, which is not this backup's own")


def retention_keeps_the_newest(key: str, written: str) -> None:
    """retention_keeps_the_newest: retention never deletes the snapshot just written, nor the
    newest complete snapshot (by revision) of the dataset the cluster serves, nor its newest
    verified one."""
    _fail("retention_keeps_the_newest", f"retention deleted {key} (the run wrote {written})")


def retention_respects_max_age(key: str, true_age: float, max_age: float) -> None:
    """retention_respects_max_age: retention.maxAge deletes only what is truly older than it,
    whatever the clock of the process that applies it or of the one that wrote the manifest."""
    if true_age <= max_age:
        _fail(
            "retention_respects_max_age", f"retention deleted {key}, {true_age:.0f}s old, under maxAge {max_age:.0f}s"
        )


def retention_keeps_n_by_revision(n: int, missing: list[str], unverified_extra: list[str], verified_extra: int) -> None:
    """retention_keeps_n_by_revision: after a run with maxBackups N, the N newest snapshots of
    the cluster's dataset by revision are kept, and beyond them only the one just written and
    one verified snapshot (the newest verified is kept)."""
    if missing or unverified_extra or verified_extra > 1:
        _fail(
            "retention_keeps_n_by_revision",
            f"maxBackups {n}: missing {missing}, kept beyond them {unverified_extra} and {verified_extra} verified",
        )


# --- after every step -------------------------------------------------------------------------


def single_dataset_served(world: World) -> None:
    served = set()
    for pod in world.pods.values():
        if not world.member_up(pod):
            continue
        data = world.data_of(pod)
        group = world.groups.get(data.lineage)
        if group is not None and group.leader is not None and not world.cut_off(pod, group):
            served.add(data.lineage)
    if len(served) > 1:
        _fail("single_dataset_served", f"pods of {len(served)} datasets (lineages {sorted(served)}) serve at once")


def no_member_bootstrapped_twice(world: World) -> None:
    """A member that ran once never bootstraps again over an empty data directory: it would
    come back as itself, having forgotten its votes and its log."""
    if world.rebootstraps:
        _fail("no_member_bootstrapped_twice", f"bootstrapped again over lost data: {', '.join(world.rebootstraps)}")


def at_most_one_learner(world: World) -> None:
    main = world.main
    if main is None:
        return
    joining = [m for m in main.members if m.is_learner or not m.name]
    if len(joining) > 1:
        _fail("one_membership_change_in_flight", f"{len(joining)} members joining at once")


def diagnosis_matches_truth(world: World, health, unreachable: set, foreign_present: bool) -> None:
    """With nothing hidden from the operator, a quorum that truly holds with a leader is
    seen as a quorum (an alarm is a state, not a failure)."""
    if unreachable or foreign_present:
        return
    main = world.main
    if main is None or main.leader is None or not has_quorum(world, main):
        return
    if not health.has_quorum:
        _fail(
            "diagnosis_matches_truth",
            f"health {health.state.value} without quorum while {up_voters(world, main)} of "
            f"{len(main.voters())} voters are up with a leader ({health.message})",
        )


def converged(world: World, size: int, desired_hash: str) -> bool:
    main = world.main
    if main is None or main.leader is None:
        return False
    voters = main.voters()
    if len(voters) != size or len(main.members) != size:
        return False
    up = world.up_members(main)
    names = set()
    for m in voters:
        pod = up.get(m.id)
        if pod is None or pod.spec_hash != desired_hash:
            return False
        names.add(pod.name)
    return set(world.pods) == names


def waits_by_design(world: World, status: dict, recovery_allowed: bool) -> bool:
    """Convergence is impossible by design: the data of a quorum is gone (or only set aside by
    a quorum recovery), nobody approved recovery, and the operator says QuorumLost=True."""
    main = world.main
    quorum_lost = next((c for c in status.get("conditions") or [] if c["type"] == "QuorumLost"), {})
    if quorum_lost.get("status") != "True":
        return False
    if main is None:
        return True
    # A voter's data counts when that data knows itself as a voter (a promotion it never applied
    # leaves it a learner in its own eyes, and etcd acts on its own view).
    # Data a quorum recovery set aside survives, but only a person brings it back: the
    # operator never restarts a member from it.
    with_data = {
        d.member_id
        for name, d in surviving_data(world)
        if d.lineage == main.lineage
        and not name.startswith("set-aside ")
        and any(m.id == d.member_id and not m.is_learner for m in d.members_view)
    }
    voters_with_data = [m for m in main.voters() if m.id in with_data]
    if not voters_with_data:
        return True  # nothing survives: only a restore from a backup can help
    return not recovery_allowed and len(voters_with_data) < naming.quorum(len(main.voters()))


def converges_to_spec(world: World, size: int, desired_hash: str, status: dict, recovery_allowed: bool, health) -> None:
    if converged(world, size, desired_hash) or waits_by_design(world, status, recovery_allowed):
        return
    main = world.main
    quorum_lost = next((c for c in status.get("conditions") or [] if c["type"] == "QuorumLost"), {})
    summary = (
        "no cluster"
        if main is None
        else (
            f"{len(main.voters())} voters ({up_voters(world, main)} up), {len(main.members) - len(main.voters())} "
            f"learners, leader {'yes' if main.leader else 'no'}, pods {sorted(world.pods)}"
        )
    )
    _fail(
        "converges_to_spec",
        f"not converged to size {size} after faults stopped: {summary}; "
        f"health {health.state.value if health else '?'}, "
        f"QuorumLost={quorum_lost.get('status')}",
    )


def destructive(action: a.Step) -> bool:
    return isinstance(
        action,
        (
            a.RemoveMember,
            a.DeleteMemberPVC,
            a.DeleteMemberPod,
            a.StopMemberPod,
            a.ForceNewCluster,
            a.BeginQuorumRecovery,
            a.RollMember,
        ),
    )


__all__ = [
    "Violation",
    "ActionChecks",
    "single_dataset_served",
    "at_most_one_learner",
    "diagnosis_matches_truth",
    "converges_to_spec",
    "converged",
    "has_quorum",
    "HealthState",
]
