"""The fault simulator as tests: thousands of random fault schedules against the real pure
pass, invariants after every step. A failing seed prints a short replay and the command
that re-runs exactly that seed."""

from __future__ import annotations

import os

import pytest

from tests.sim import effects, findings
from tests.sim.campaign import CAMPAIGNS, coverage_table
from tests.sim.runner import run_seed

MAIN = CAMPAIGNS["main"]
STALE = CAMPAIGNS["stale_replica"]
HOLD = CAMPAIGNS["restore_hold"]
REFUSED_POD = CAMPAIGNS["refused_pod"]
RESTORE_RACE = CAMPAIGNS["restore_race"]
BACKUP_RACE = CAMPAIGNS["backup_race"]
SHOWN = 3  # replays printed per failing block


def _unknown(results):
    """Violations that are not a known, still open finding (a FIXED one coming back is a regression)."""
    return [r for r in results if r.finding is None or r.finding in findings.FIXED]


def test_every_action_type_has_a_model_handler():
    missing = [t.__name__ for t in effects.action_types() if t not in effects.HANDLERS]
    assert not missing, f"action types without a model effect in tests/sim/effects.py HANDLERS: {missing}"


def test_an_action_without_handler_is_an_error():
    class Unheard(effects.a.Step):
        pass

    with pytest.raises(effects.UnknownAction):
        effects.run(None, Unheard("made up"))


@pytest.mark.parametrize("block", range(MAIN.block_count))
def test_fault_schedules_keep_every_invariant(block):
    unknown = _unknown(MAIN.block(block))
    if unknown:
        pytest.fail(
            f"{len(unknown)} schedule(s) broke an invariant:\n\n" + "\n\n".join(r.report() for r in unknown[:SHOWN]),
            pytrace=False,
        )


def test_a_refused_pod_spec_never_costs_a_member():
    """The refused_pod family: spec.pod names a PriorityClass that does not exist for a while.
    No step may take a pod away, or add a member, whose new pod the API server refuses
    (pod_recreatable), and every other invariant holds."""
    unknown = _unknown(REFUSED_POD.all_violations())
    if unknown:
        pytest.fail(
            f"{len(unknown)} schedule(s) broke an invariant:\n\n" + "\n\n".join(r.report() for r in unknown[:SHOWN]),
            pytrace=False,
        )
    assert REFUSED_POD.stats["fault:refused_pod_spec"] >= REFUSED_POD.schedules // 10
    assert REFUSED_POD.with_action["CheckPodSpec"] >= REFUSED_POD.schedules // 10


@pytest.mark.parametrize("name", sorted(findings.FINDINGS))
def test_known_finding(name, request):
    """One test per defect the simulator found in the current planner/observer. Marked
    xfail(strict): it fails while the defect reproduces; once fixed it passes and the strict
    xfail turns red, telling you to delete the entry from tests/sim/findings.py."""
    request.applymarker(
        pytest.mark.xfail(strict=name not in findings.RARE, reason=f"known defect {name}: {findings.FINDINGS[name]}")
    )
    hits = [r for r in MAIN.all_violations() if r.finding == name]
    if hits:
        pytest.fail(f"{len(hits)} schedules; first:\n{hits[0].report()}", pytrace=False)


def test_stale_replica_breaks_nothing_unexplained():
    """A replica that lost its lease acts on an old view for a bounded window. Violations
    it causes are the stale_replica finding below; anything else must hold."""
    unknown = _unknown(STALE.all_violations())
    if unknown:
        pytest.fail("\n\n".join(r.report() for r in unknown[:SHOWN]), pytrace=False)


@pytest.mark.xfail(strict=True, reason=findings.STALE["stale_replica"])
def test_stale_replica_cannot_break_invariants():
    hits = [r for r in STALE.all_violations() if r.finding == "stale_replica"]
    if hits:
        pytest.fail(f"{len(hits)} schedules; first:\n{hits[0].report()}", pytrace=False)


def test_a_restore_hold_set_while_a_pass_decides_breaks_nothing():
    """The hold lands between a pass's observation and its step (issue 25): no member pod or
    PVC is created and the membership does not change under it (no_member_created_while_held),
    and every other invariant holds."""
    unknown = _unknown(HOLD.all_violations())
    if unknown:
        pytest.fail("\n\n".join(r.report() for r in unknown[:SHOWN]), pytrace=False)
    # Not vacuous: in some schedules the pass under the hold had decided a step.
    assert HOLD.stats["step_decided_before_hold"] >= HOLD.schedules // 20, coverage_table(HOLD)


def test_an_in_place_restore_beside_its_cluster_breaks_nothing():
    """The restore_race family: the real restore planner and the cluster's act in one world,
    each now and then on an old copy of the EtcdCluster (the restore's without the cluster pass of
    the same step; the restore also on a copy of its own status some passes old). No member
    pod or PVC is created and the membership does not change while the hold stands
    (no_member_created_while_held), the restore touches nothing
    before the cluster acknowledged its hold (restore_waits_for_hold_ack), the cluster
    converges on the restored data, a backup starting at any pass would snapshot only the
    cluster's current data (snapshot_from_the_cluster_itself) and the verification pod serves
    nothing outside itself (verification_serves_only_inside_its_pod)."""
    unknown = _unknown(RESTORE_RACE.all_violations())
    if unknown:
        pytest.fail("\n\n".join(r.report() for r in unknown[:SHOWN]), pytrace=False)
    # Not vacuous: restores stop members and complete, old copies were decided on, and a
    # cluster was deleted under a restore (nothing_created_for_an_object_being_deleted).
    quarter = RESTORE_RACE.schedules // 4
    table = coverage_table(RESTORE_RACE)
    assert RESTORE_RACE.stats["cluster_deleted"] >= RESTORE_RACE.schedules // 8, table
    for stat in ("restore:StopMembers", "restore:SetAsideData", "old_cluster_copy", "old_restore_copy"):
        assert RESTORE_RACE.stats[stat] >= 3 * quarter, f"{stat}\n{table}"
    for stat in ("restore:StartSeedPods", "restore:Complete"):  # a deleted cluster takes no restore to the end
        assert RESTORE_RACE.stats[stat] >= 2 * quarter, f"{stat}\n{table}"
    assert RESTORE_RACE.with_action["StartRestoredMembers"] >= 2 * quarter, table
    # Backup runs were chosen a source before and after the cluster ID changed, and refused
    # while the restore had dropped it (snapshot_from_the_cluster_itself, backup_model.py).
    assert RESTORE_RACE.stats["snapshot_source_chosen"] >= 3 * quarter, table
    assert RESTORE_RACE.stats["snapshot_refused:ClusterIDUnknown"] >= 2 * quarter, table
    assert RESTORE_RACE.stats["step_decided_on_a_copy_without_the_hold"] >= RESTORE_RACE.schedules // 20, table


def test_a_restore_creates_nothing_for_a_cluster_deleted_after_its_copy():
    """FIXED restore_creates_on_a_copy_from_before_the_deletion: the restore executor reads the
    live target right before each create (restore/fence.py)."""
    hits = [
        r for r in RESTORE_RACE.all_violations() if r.finding == "restore_creates_on_a_copy_from_before_the_deletion"
    ]
    if hits:
        pytest.fail(f"{len(hits)} schedules; first:\n{hits[0].report()}", pytrace=False)
    # Not vacuous: passes decided to create on a copy from before the deletion, and the fence refused.
    assert RESTORE_RACE.stats["create_refused_by_the_live_target"] >= RESTORE_RACE.schedules // 100, coverage_table(
        RESTORE_RACE
    )


def test_a_restore_on_an_old_copy_of_its_status_keeps_track_of_the_data_it_set_aside():
    """FIXED restore_forgets_set_aside_data: members are chosen above the PVCs observed as set
    aside from the target, whatever the copy of the restore's status lists."""
    hits = [r for r in RESTORE_RACE.all_violations() if r.finding == "restore_forgets_set_aside_data"]
    if hits:
        pytest.fail(f"{len(hits)} schedules; first:\n{hits[0].report()}", pytrace=False)
    # Not vacuous: members were chosen on copies of the status that did not list the data set aside.
    assert RESTORE_RACE.stats["members_chosen_on_a_copy_without_the_set_aside_data"] >= RESTORE_RACE.schedules // 50, (
        coverage_table(RESTORE_RACE)
    )


def test_a_backup_beside_its_cluster_breaks_nothing():
    """The backup_race family: the real backup planner (a scheduled or a one-shot EtcdBackup)
    takes a pass after each of the cluster's, on the operator's wall clock (downtime, standby
    takeovers with a skewed clock, status from before), on old copies of the EtcdCluster, with
    S3 and API refusals, uploads cut off, and the backup, the cluster or the namespace deleted.
    A slot starts once, and after missed slots one catch-up run starts, for the latest
    (slot_started_once, catch_up_starts_the_latest_slot_once); a slot's snapshot is taken once
    (one_snapshot_per_slot) and only from the cluster itself (snapshot_from_the_cluster_itself);
    retention keeps the newest, N by revision, honours maxAge on the true age, and deletes only
    its own objects (retention_*); unfinished uploads are aborted, only its own
    (orphaned_uploads_aborted_only_own); nothing is started or created for a backup or cluster being
    deleted (nothing_created_for_an_object_being_deleted); every other invariant holds."""
    unknown = _unknown(BACKUP_RACE.all_violations())
    if unknown:
        pytest.fail("\n\n".join(r.report() for r in unknown[:SHOWN]), pytrace=False)
    # Not vacuous: each fault and each path of the planner and the runner was met.
    table = coverage_table(BACKUP_RACE)
    tenth = BACKUP_RACE.schedules // 10
    for stat in (
        "backup:StartSlot",
        "backup:RunBackup",
        "backup_snapshot_taken",
        "backup_retention_deleted",
        "backup:StartVerification",
        "backup:CreateScratchPod",
        "backup:FinishVerification",
        "backup:RetrySlot",
        "backup_killed",
        "backup_s3_refused",
        "backup_status_write_refused",
        "backup_upload_failed",
        "backup_pod_create_refused",
        "backup_deleted",
        "cluster_deleted",
        "fault:operator_down",
        "fault:standby_takeover",
        "old_cluster_copy",
        "restore:Complete",
    ):
        assert BACKUP_RACE.stats[stat] >= tenth, f"{stat}\n{table}"
    for stat in (
        "backup_slot_already_ran",
        "backup_create_refused_by_the_live_fence",
        "backup:WaitForPrerequisite",
        "backup_deleted_mid_pass",
    ):
        assert BACKUP_RACE.stats[stat] >= 2, f"{stat}\n{table}"


def test_a_backup_starts_nothing_for_an_object_being_deleted():
    """FIXED backup_runs_for_an_object_being_deleted and backup_creates_on_a_copy_from_before_the_deletion:
    a due run waits while its cluster is being deleted (prerequisites.cluster_wait), and the
    executor reads the backup and the cluster right before an upload or a scratch pod
    (backup/fence.py)."""
    names = ("backup_runs_for_an_object_being_deleted", "backup_creates_on_a_copy_from_before_the_deletion")
    hits = [r for r in BACKUP_RACE.all_violations() if r.finding in names]
    if hits:
        pytest.fail(f"{len(hits)} schedules; first:\n{hits[0].report()}", pytrace=False)


@pytest.mark.parametrize("seed", (604, 612, 1033))
def test_restore_race_seeds_found_beyond_the_campaign(seed):
    """Seeds of the restore_race family past the campaign's that once broke an invariant: 612
    and 1033, FIXED restored_member_bootstraps_alone; 604, a restore pass on a copy of the
    EtcdCluster from before the hold it had set itself (a GET cannot return that: the model
    gives the restore at most the copy taken after its previous pass, runner.cluster_copy)."""
    result = run_seed(seed, "restore_race")
    if result.violation is not None:
        pytest.fail(result.report(), pytrace=False)


def test_schedules_exercise_deletions_rolls_leader_moves_and_recoveries():
    MAIN.all_violations()  # every block has run
    print("\n" + coverage_table(MAIN) + "\n" + coverage_table(STALE))
    minimum = MAIN.schedules // 100  # each appears in at least 1 % of the schedules
    for kind in (
        "DeleteMemberPod",
        "DeleteMemberPVC",
        "RollMember",
        "MoveLeader",
        "RemoveMember",
        "AddLearner",
        "PromoteLearner",
        "BeginQuorumRecovery",
        "ForceNewCluster",
        "FinishQuorumRecovery",
        "Defragment",
        "StopMemberPod",
        "SettleMemberPod",
        "CreateMemberPod",
        "BootstrapMembers",
        "SettleStartedMembers",
        "RestartFailedPod",
        "SetAsideMemberData",
        "BeginSpaceRecovery",
        "CompactRevisions",
        "DefragmentForSpace",
        "DisarmNoSpaceAlarm",
    ):
        assert MAIN.with_action[kind] >= minimum, f"only {MAIN.with_action[kind]} schedules took {kind}"
    assert MAIN.stats["leader_changes"] >= minimum


@pytest.mark.skipif("SIM_SEED" not in os.environ, reason="set SIM_SEED (and SIM_FAMILY) to replay one schedule")
def test_replay():
    result = run_seed(int(os.environ["SIM_SEED"]), os.environ.get("SIM_FAMILY", "main"))
    print("\n" + result.report())
    if result.violation is not None:
        pytest.fail(result.report(), pytrace=False)
