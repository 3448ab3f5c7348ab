"""The restore planner, pure: every check happens before anything is touched, existing
data is never restored over, a restore is applied once, the version is read from the
snapshot, recorded quorum recoveries are dropped, names fit labels."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etcd_operator.core import prerequisites as pre
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import Outcome
from etcd_operator.core.restore import builders
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.observed import (
    ObjectState,
    Observed,
    RestoreRecord,
    SourceState,
    TargetCluster,
    parse_records,
)
from etcd_operator.core.restore.planner import SEED_ATTEMPTS, plan, plan_deletion, snapshot_etcd_version
from etcd_operator.core.restore.spec import RestoreSpec, RestoreStatus, spec_hash
from etcd_operator.core.restore.status import build_status
from etcd_operator.core.timefmt import format_time

UID = "uid-of-this-restore"
SOURCE = {"backupRef": {"name": "nightly"}}
NEW = {"source": SOURCE, "target": {"newCluster": {"name": "keep", "spec": {"size": 1}}}}
IN_PLACE = {"source": SOURCE, "target": {"inPlace": {"clusterName": "keep", "confirm": True}}}
VERIFIED = RestoreStatus(phase="Verifying", source_key="ns/nightly/1.db", sha256="ab" * 32, snapshot_version="3.6.16")
RESTORING = dataclasses.replace(VERIFIED, phase="Restoring", target="keep")
NOW = 1_800_000_000.0

# Steps that change nothing outside the restore's own status.
READ_ONLY = (s.Idle, s.Wait, s.Fail, s.SkipAlreadyApplied, s.StartVerifying, s.VerifySnapshot, s.BeginRestore)


def cluster(
    name: str = "keep",
    *,
    spec: dict | None = None,
    holder: str | None = None,
    records: tuple[RestoreRecord, ...] = (),
    records_error: str | None = None,
    operation: str | None = None,
    approved: bool = False,
    ready: int = 0,
    available: bool = False,
    phase: str | None = "Running",
    min_ordinal: int = 0,
    hold_uid: str | None = None,
    hold_ack: tuple[str, str] | None = None,
) -> TargetCluster:
    """A cluster that has served (phase Running), unless told otherwise. A hold by this
    restore (r1) carries its uid and is acknowledged, unless told otherwise."""
    ours = holder == "r1"
    return TargetCluster(
        name,
        "cluster-uid",
        "42",
        ClusterSpec.from_dict(spec or {"size": 1}),
        None,
        holder,
        hold_uid or (UID if ours else None),
        hold_ack or ((holder, UID) if ours else None),
        records,
        records_error,
        operation,
        approved,
        min_ordinal,
        phase,
        available,
        ready,
        "c1d",
    )


def observed(target: TargetCluster | None = None, *, restore: str = "r1", uid: str = UID, **fields) -> Observed:
    return Observed("ns", restore, uid, 1, target, **fields)


def obj(kind: str, name: str, labels: dict | None = None, **fields) -> ObjectState:
    return ObjectState(kind, name, f"uid-{name}", labels=tuple(sorted((labels or {}).items())), **fields)


def record(restore: str = "r1", spec: dict = IN_PLACE, uid: str = "uid-of-an-earlier-object") -> RestoreRecord:
    return RestoreRecord(restore, uid, 1, spec_hash(spec), "ns/nightly/1.db", "ab" * 32, "2026-11-21T12:00:00Z")


def step_for(spec: dict, status: RestoreStatus, seen: Observed) -> s.Step:
    return plan(RestoreSpec.from_dict(spec), status, seen, NOW)


# --- 1. a new cluster never takes over existing objects -----------------------------------


@pytest.mark.parametrize(
    "existing",
    [
        obj("PersistentVolumeClaim", "data-keep-0"),  # retained by a deleted cluster
        obj("PersistentVolumeClaim", "data-keep-7", {builders.LABEL_PRESERVED_BY: "old"}),
        obj("PersistentVolumeClaim", "something", {naming.LABEL_CLUSTER: "keep"}),
        obj("Pod", "keep-2"),
        obj("Pod", "x", {"app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": "keep"}),
        obj("Service", "keep-peer"),
        obj("Service", "keep-client"),
        obj("PodDisruptionBudget", "keep"),
    ],
)
@pytest.mark.parametrize("status", [RestoreStatus(), RestoreStatus(phase="Pending"), VERIFIED])
def test_a_new_cluster_is_refused_when_objects_of_its_name_exist(existing, status):
    seen = observed(namespace_objects=(obj("PersistentVolumeClaim", "data-other-0"), existing))
    step = step_for(NEW, status, seen)
    assert isinstance(step, s.Fail) and step.code == "TargetDataExists"
    assert existing.ref in step.reason and "data-other-0" not in step.reason


@pytest.mark.parametrize("status", [RestoreStatus(), VERIFIED, RESTORING])
def test_a_new_cluster_is_refused_when_a_secret_of_a_name_it_creates_exists(status):
    """The observer reads only the Secrets of the names the new cluster would create
    (controllers/restore/observer.py): any of them found refuses the restore before the
    EtcdCluster is created, which would stop at its certificates (cluster/ownership.py)."""
    seen = observed(namespace_objects=(obj("Secret", "keep-client-tls"),))
    step = step_for(NEW, status, seen)
    assert isinstance(step, s.Fail) and step.code == "SecretNameTaken"
    assert "Secret keep-client-tls" in step.reason


@pytest.mark.parametrize(
    "unrelated",
    [
        obj("PersistentVolumeClaim", "data-keeper-0"),
        obj("PersistentVolumeClaim", "data-keep-x"),
        obj("PersistentVolumeClaim", "keep-0"),  # a member's name, not its PVC's
        obj("Pod", "keep-seed"),
        obj("Service", "keep-peer-x"),
        obj("PodDisruptionBudget", "keeper"),
        obj("Pod", "keep-0x", {naming.LABEL_CLUSTER: "other", "app.kubernetes.io/instance": "keep"}),
    ],
)
def test_objects_of_other_names_do_not_block_a_new_cluster(unrelated):
    step = step_for(NEW, VERIFIED, observed(namespace_objects=(unrelated,)))
    assert isinstance(step, s.BeginRestore)


def test_a_new_cluster_is_not_created_over_objects_that_appeared_after_the_checks():
    seen = observed(namespace_objects=(obj("PersistentVolumeClaim", "data-keep-0"),))
    step = step_for(NEW, RESTORING, seen)
    assert isinstance(step, s.Fail) and step.code == "TargetDataExists"
    assert isinstance(step_for(NEW, RESTORING, observed()), s.CreateTargetCluster)


def test_an_existing_cluster_is_never_a_new_target():
    for target in (cluster(), cluster(holder="r1"), cluster(holder="other")):
        step = step_for(NEW, VERIFIED, observed(target))
        assert isinstance(step, s.Fail) and step.code == "TargetExists"
    step = step_for(NEW, RESTORING, observed(cluster()))
    assert isinstance(step, s.Fail) and step.code == "TargetExists"
    step = step_for(NEW, RESTORING, observed(cluster(holder="someone-else")))
    assert isinstance(step, s.Fail) and step.code == "TargetBusy"


def test_a_snapshot_goes_only_into_a_volume_this_restore_created():
    status = dataclasses.replace(RESTORING, seed_members=("keep-0", "keep-1"))
    foreign = obj("PersistentVolumeClaim", "data-keep-1")
    ours = obj("PersistentVolumeClaim", "data-keep-0", annotations=((builders.ANNOTATION_SEED_OF, UID),))
    step = step_for(NEW, status, observed(cluster(holder="r1"), seed_pvcs=(ours, foreign)))
    assert isinstance(step, s.Fail) and step.code == "SeedVolumeNotOurs" and "data-keep-1" in step.reason
    ours_too = dataclasses.replace(foreign, annotations=((builders.ANNOTATION_SEED_OF, UID),))
    step = step_for(NEW, status, observed(cluster(holder="r1"), seed_pvcs=(ours, ours_too)))
    assert isinstance(step, s.StartSeedPods) and step.members == ("keep-0", "keep-1")


# --- 2. a restore is applied once --------------------------------------------------------


@pytest.mark.parametrize("spec", [IN_PLACE, NEW])
@pytest.mark.parametrize("status", [RestoreStatus(), VERIFIED])
def test_the_same_restore_applied_again_is_recognised_from_the_record_on_the_target(spec, status):
    step = step_for(spec, status, observed(cluster(records=(record(spec=spec),))))
    assert isinstance(step, s.SkipAlreadyApplied)
    assert "2026-11-21T12:00:00Z" in step.reason and "new name" in step.reason


def test_a_new_name_or_a_changed_spec_is_a_new_intent():
    target = cluster(records=(record(spec=IN_PLACE),))
    assert isinstance(step_for(IN_PLACE, RestoreStatus(), observed(target, restore="r2")), s.StartVerifying)
    changed = {**IN_PLACE, "source": {"backupRef": {"name": "nightly", "key": "ns/nightly/0.db"}}}
    assert isinstance(step_for(changed, RestoreStatus(), observed(target)), s.StartVerifying)


def test_an_older_record_is_remembered_too():
    target = cluster(records=(record(spec=IN_PLACE), record("r2", uid="u2"), record("r3", uid="u3")))
    assert isinstance(step_for(IN_PLACE, RestoreStatus(), observed(target)), s.SkipAlreadyApplied)


def test_an_unreadable_record_means_waiting_not_guessing():
    step = step_for(IN_PLACE, RestoreStatus(), observed(cluster(records_error="not JSON")))
    assert isinstance(step, s.Wait) and step.code == "RestoreRecordUnreadable"


def released_state(spec: dict, **cluster_fields) -> tuple[RestoreStatus, Observed]:
    status = dataclasses.replace(RESTORING, seed_members=("keep-3",), preserved=("data-keep-0",))
    pvc = obj(
        "PersistentVolumeClaim",
        "data-keep-3",
        annotations=((builders.ANNOTATION_SEED_OF, UID), (builders.ANNOTATION_RESTORED_BY, UID)),
    )
    return status, observed(cluster(holder="r1", **cluster_fields), seed_pvcs=(pvc,))


@pytest.mark.parametrize("spec", [IN_PLACE, NEW])
def test_the_release_records_this_restore_on_the_target_in_the_same_patch(spec):
    earlier = record("r0", uid="u0")
    status, seen = released_state(spec, records=(earlier,))
    step = step_for(spec, status, seen)
    assert isinstance(step, s.ReleaseCluster)
    records = parse_records(step.records)
    assert records[0] == earlier
    assert records[1] == RestoreRecord("r1", UID, 1, spec_hash(spec), "ns/nightly/1.db", "ab" * 32, format_time(NOW))


def test_its_own_record_leads_to_completion_not_to_a_skip():
    own = record(uid=UID)
    waiting = step_for(IN_PLACE, RESTORING, observed(cluster(records=(own,), ready=0)))
    assert isinstance(waiting, s.Wait)
    done = step_for(IN_PLACE, RESTORING, observed(cluster(records=(own,), ready=1, available=True, phase="Running")))
    assert isinstance(done, s.Complete) and done.cluster_id == "c1d"


def test_records_keep_a_bounded_history():
    from etcd_operator.core.restore.observed import RECORD_HISTORY, records_text

    many = tuple(record(f"r{i}", uid=f"u{i}") for i in range(RECORD_HISTORY + 5))
    kept = parse_records(records_text(many))
    assert len(kept) == RECORD_HISTORY and kept[-1].restore == f"r{RECORD_HISTORY + 4}"
    with pytest.raises(ValueError):
        parse_records(json.dumps({"restore": "r1"}))


# --- 3. the version comes from the snapshot ----------------------------------------------


@pytest.mark.parametrize(
    "manifest, storage, readable, expected",
    [
        (None, "3.6.0", True, "3.6.0"),  # etcdctl snapshot save from 3.6: no manifest
        (None, None, True, "3.5"),  # 3.5 (or older) schema
        (None, "", True, "3.6"),  # a 3.6 member still migrating
        ("3.6.16", "3.6.0", True, "3.6.16"),
        ("3.6.16", None, True, "3.6.16"),  # the manifest knows better
        ("3.5.35", "3.6.0", True, "3.6.0"),  # the data knows better
        (None, "garbage", True, None),
        (None, None, False, None),  # the storage version cannot be read: unknown
        ("3.6.16", None, False, None),
    ],
)
def test_snapshot_version(manifest, storage, readable, expected):
    assert snapshot_etcd_version(manifest, storage, readable) == expected


def version_step(snapshot_version: str | None, target_version: str) -> s.Step:
    status = dataclasses.replace(VERIFIED, snapshot_version=snapshot_version)
    spec = {**NEW, "target": {"newCluster": {"name": "keep", "spec": {"version": target_version}}}}
    return step_for(spec, status, observed())


def test_a_36_snapshot_without_manifest_is_not_restored_into_35():
    step = version_step(snapshot_etcd_version(None, "3.6.0", True), "3.5.35")
    assert isinstance(step, s.Fail) and step.code == "VersionTooOld"
    assert isinstance(version_step("3.6.0", "3.6.16"), s.BeginRestore)
    assert isinstance(version_step("3.5", "3.5.35"), s.BeginRestore)
    assert isinstance(version_step("3.5", "3.6.16"), s.BeginRestore)


def test_an_unknown_snapshot_version_is_refused():
    step = version_step(None, "3.6.16")
    assert isinstance(step, s.Fail) and step.code == "SnapshotVersionUnknown"


def test_in_place_uses_the_target_clusters_version():
    status = dataclasses.replace(VERIFIED, snapshot_version="3.6.0")
    step = step_for(IN_PLACE, status, observed(cluster(spec={"version": "3.5.35"})))
    assert isinstance(step, s.Fail) and step.code == "VersionTooOld"


# --- 4. never into emptyDir --------------------------------------------------------------


def test_an_empty_dir_target_is_refused_before_anything():
    empty = {"size": 1, "storage": {"emptyDir": {}}}
    spec = {**NEW, "target": {"newCluster": {"name": "keep", "spec": empty}}}
    for status in (RestoreStatus(), VERIFIED):
        step = step_for(spec, status, observed())
        assert isinstance(step, s.Fail) and step.code == "EmptyDirTarget"
    step = step_for(IN_PLACE, RestoreStatus(), observed(cluster(spec=empty)))
    assert isinstance(step, s.Fail) and step.code == "EmptyDirTarget"


# --- 5. a recorded quorum recovery does not survive an in-place restore -----------------


@pytest.mark.parametrize("operation, approved", [("QuorumRecovery", False), (None, True), ("QuorumRecovery", True)])
def test_a_recorded_quorum_recovery_is_cleared_before_the_release(operation, approved):
    for status in (RESTORING, dataclasses.replace(RESTORING, seed_members=("keep-3",))):
        step = step_for(IN_PLACE, status, observed(cluster(holder="r1", operation=operation, approved=approved)))
        assert isinstance(step, s.ClearQuorumRecovery)
        assert step.clear_operation == bool(operation) and step.clear_approval == approved
    status, seen = released_state(IN_PLACE, operation=operation, approved=approved)
    assert isinstance(step_for(IN_PLACE, status, seen), s.ClearQuorumRecovery)
    status, seen = released_state(IN_PLACE)
    assert isinstance(step_for(IN_PLACE, status, seen), s.ReleaseCluster)


# --- 6. names must fit label values ------------------------------------------------------


def test_a_restore_name_too_long_for_a_label_is_refused_first():
    long_name = "r" * 64
    step = step_for(IN_PLACE, RestoreStatus(), observed(cluster(), restore=long_name))
    assert isinstance(step, s.Fail) and step.code == "NameTooLong" and "64" in step.reason
    assert isinstance(step_for(IN_PLACE, RestoreStatus(), observed(cluster(), restore="r" * 63)), s.StartVerifying)


def test_a_target_name_too_long_for_a_label_is_refused():
    spec = {"source": SOURCE, "target": {"inPlace": {"clusterName": "c" * 64, "confirm": True}}}
    step = step_for(spec, RestoreStatus(), observed(cluster("c" * 64)))
    assert isinstance(step, s.Fail) and step.code == "NameTooLong"


# --- 7. verification first, old data kept ------------------------------------------------


def test_the_order_of_a_clean_run():
    assert isinstance(step_for(IN_PLACE, RestoreStatus(), observed(cluster())), s.StartVerifying)
    assert isinstance(step_for(IN_PLACE, RestoreStatus(phase="Verifying"), observed(cluster())), s.VerifySnapshot)
    assert isinstance(step_for(IN_PLACE, VERIFIED, observed(cluster())), s.BeginRestore)
    assert isinstance(step_for(IN_PLACE, RESTORING, observed(cluster())), s.HoldCluster)


def test_in_place_stops_records_sets_aside_then_chooses_a_fresh_seed():
    held = cluster(holder="r1", min_ordinal=0)
    pods = (obj("Pod", "keep-0", phase="Running"), obj("Pod", "keep-1", deleting=True))
    pvcs = (obj("PersistentVolumeClaim", "data-keep-0"), obj("PersistentVolumeClaim", "data-keep-1"))
    step = step_for(IN_PLACE, RESTORING, observed(held, pods=pods, pvcs=pvcs))
    assert isinstance(step, s.StopMembers) and step.pods == (("keep-0", "uid-keep-0"),)
    step = step_for(IN_PLACE, RESTORING, observed(held, pods=pods[1:], pvcs=pvcs))
    assert isinstance(step, s.Wait)
    step = step_for(IN_PLACE, RESTORING, observed(held, pvcs=pvcs))
    assert isinstance(step, s.RecordPreservedData) and step.pvcs == ("data-keep-0", "data-keep-1")
    recorded = dataclasses.replace(RESTORING, preserved=step.pvcs)
    step = step_for(IN_PLACE, recorded, observed(held, pvcs=pvcs))
    assert isinstance(step, s.SetAsideData) and [n for n, _ in step.pvcs] == ["data-keep-0", "data-keep-1"]
    step = step_for(IN_PLACE, recorded, observed(held))
    assert isinstance(step, s.ChooseMembers) and step.members == ("keep-2",) and step.min_ordinal == 2
    step = step_for(IN_PLACE, recorded, observed(cluster(holder="r1", min_ordinal=5, spec={"size": 3})))
    assert step.members == ("keep-5", "keep-6", "keep-7") and step.min_ordinal == 5


def test_a_hold_removed_by_hand_after_data_was_set_aside_stops_the_restore():
    status = dataclasses.replace(RESTORING, preserved=("data-keep-0",))
    step = step_for(IN_PLACE, status, observed(cluster()))
    assert isinstance(step, s.Fail) and step.code == "Aborted" and "data-keep-0" in step.reason


def test_another_restore_holding_the_target_is_refused():
    step = step_for(IN_PLACE, RestoreStatus(), observed(cluster(holder="other")))
    assert isinstance(step, s.Fail) and step.code == "TargetBusy"
    step = step_for(IN_PLACE, RESTORING, observed(cluster(holder="other")))  # it won the race to hold it
    assert isinstance(step, s.Fail) and step.code == "TargetBusy"


def test_its_own_hold_seen_on_an_old_copy_of_its_status_is_no_obstacle():
    """A pass on a copy of its status from before BeginRestore was recorded sees the hold it
    set since (tests/sim family restore_race): it goes on instead of failing as TargetBusy,
    which left the cluster held forever. The same name with another uid is another object."""
    step = step_for(IN_PLACE, VERIFIED, observed(cluster(holder="r1")))
    assert isinstance(step, s.BeginRestore)
    step = step_for(IN_PLACE, VERIFIED, observed(cluster(holder="r1", hold_uid="uid-of-an-earlier-object")))
    assert isinstance(step, s.Fail) and step.code == "TargetBusy"


def test_nothing_is_created_for_a_target_being_deleted():
    """tests/sim family restore_race, deletion cascade: the seed PVCs outlived the cluster."""
    deleting = dataclasses.replace(cluster(holder="r1"), deleting=True)
    for status in (VERIFIED, RESTORING):
        step = step_for(IN_PLACE, status, observed(deleting))
        assert isinstance(step, s.Wait) and step.code == "ClusterBeingDeleted"
    assert isinstance(step_for(IN_PLACE, RESTORING, observed(None)), s.Fail)


MEMBERS = ("keep-0", "keep-1", "keep-2")
OURS = (builders.ANNOTATION_SEED_OF, UID)
MARKED = (builders.ANNOTATION_RESTORED_BY, UID)


def seed_pvc(member: str, restored: bool = False) -> ObjectState:
    return obj("PersistentVolumeClaim", f"data-{member}", annotations=(OURS, MARKED) if restored else (OURS,))


def seed_pod(member: str, phase: str = "Running", owner: str = UID) -> ObjectState:
    return obj(
        "Pod",
        f"r1-s{member[-1]}",
        {builders.LABEL_RESTORE: "r1", builders.LABEL_RESTORE_MEMBER: member},
        phase=phase,
        owner_uids=(owner,),
        created_at="2026-11-21T12:00:00Z",
        started_at=f"2026-11-21T12:00:0{member[-1]}Z",
        finished_at="2026-11-21T12:00:30Z" if phase == "Succeeded" else "",
    )


# Every state of a restore in which, once the hold is acknowledged, it stops or creates something.
TOUCHING = [
    (
        IN_PLACE,
        RESTORING,
        dict(pods=(obj("Pod", "keep-0", phase="Running"),), pvcs=(obj("PersistentVolumeClaim", "data-keep-0"),)),
        s.StopMembers,
    ),
    (
        IN_PLACE,
        dataclasses.replace(RESTORING, preserved=("data-keep-0",)),
        dict(pvcs=(obj("PersistentVolumeClaim", "data-keep-0"),)),
        s.SetAsideData,
    ),
    (
        IN_PLACE,
        dataclasses.replace(RESTORING, preserved=("data-keep-0",), seed_members=("keep-1",)),
        {},
        s.CreateSeedVolumes,
    ),
    (
        NEW,
        dataclasses.replace(RESTORING, seed_members=("keep-0",)),
        dict(seed_pvcs=(seed_pvc("keep-0"),)),
        s.StartSeedPods,
    ),
]
UNACKNOWLEDGED = [
    None,  # the cluster's controller has not run a pass on a copy with the hold
    ("r1", "uid-of-an-earlier-r1"),  # the ack of an earlier restore of the same name
    ("other", UID),
]


@pytest.mark.parametrize("spec, status, fields, touching", TOUCHING)
@pytest.mark.parametrize("ack", UNACKNOWLEDGED)
def test_nothing_is_stopped_or_created_before_the_cluster_acknowledges_this_hold(spec, status, fields, touching, ack):
    acknowledged = cluster(holder="r1", hold_ack=("r1", UID))
    assert isinstance(step_for(spec, status, observed(acknowledged, **fields)), touching)
    unacknowledged = dataclasses.replace(acknowledged, hold_ack=ack)
    step = step_for(spec, status, observed(unacknowledged, **fields))
    assert isinstance(step, s.Wait) and step.code == "WaitingForHoldAck", step
    assert "status.restoreHold" in step.reason


def test_a_hold_without_this_restores_uid_is_marked_again_before_anything_else():
    """A hold set by an operator that did not write the uid: marked again, then acknowledged."""
    seen = observed(
        dataclasses.replace(cluster(holder="r1"), hold_uid=None, hold_ack=("r1", "")),
        pods=(obj("Pod", "keep-0", phase="Running"),),
    )
    assert isinstance(step_for(IN_PLACE, RESTORING, seen), s.HoldCluster)


def test_the_hold_carries_the_restores_name_and_uid():
    assert builders.hold_annotations("r1", UID) == {
        naming.ANNOTATION_RESTORE_IN_PROGRESS: "r1",
        naming.ANNOTATION_RESTORE_HOLD: UID,
    }
    created = builders.new_cluster("r1", "ns", "keep", {"size": 1}, restore_uid=UID)
    assert created["metadata"]["annotations"] == builders.hold_annotations("r1", UID)


def deletion_step(spec: dict, status: RestoreStatus, seen: Observed) -> s.Step:
    return plan_deletion(RestoreSpec.from_dict(spec), status, seen)


def test_a_restore_deleted_before_the_cluster_acknowledged_its_hold_releases_it():
    running = (obj("Pod", "keep-0", phase="Running"),)
    for ack in (None, ("r1", "uid-of-an-earlier-r1")):  # not acknowledged (yet)
        seen = observed(dataclasses.replace(cluster(holder="r1"), hold_ack=ack), pods=running)
        assert isinstance(deletion_step(IN_PLACE, RESTORING, seen), s.ReleaseHold)
    step = deletion_step(IN_PLACE, RESTORING, observed(cluster(holder="r1"), pods=running))  # acknowledged
    assert isinstance(step, s.Wait) and step.code == "HeldAfterDeletion" and "identity" in step.reason


@pytest.mark.parametrize(
    "status, pods",
    [
        (RESTORING, (obj("Pod", "keep-0", deleting=True),)),  # its members are stopping
        (dataclasses.replace(RESTORING, preserved=("data-keep-0",)), ()),  # the old data is recorded, set aside
        (dataclasses.replace(RESTORING, preserved=("data-keep-0",), seed_members=("keep-1",)), ()),
    ],
)
def test_a_restore_deleted_after_it_stopped_the_cluster_leaves_the_hold_and_says_why(status, pods):
    unacknowledged = dataclasses.replace(cluster(holder="r1"), hold_ack=None)  # as if the ack had been lost
    step = deletion_step(IN_PLACE, status, observed(unacknowledged, pods=pods))
    assert isinstance(step, s.Wait) and step.code == "HeldAfterDeletion"
    assert naming.ANNOTATION_RESTORE_IN_PROGRESS in step.reason


def test_a_deleted_restore_never_releases_a_hold_that_is_not_its_own():
    for target in (None, cluster(), cluster(holder="other"), cluster(holder="r1", hold_uid="uid-of-another-r1")):
        assert isinstance(deletion_step(IN_PLACE, RESTORING, observed(target)), s.Idle)
    step = deletion_step(NEW, RESTORING, observed(cluster(holder="r1")))  # the cluster it created
    assert isinstance(step, s.Wait) and step.code == "HeldAfterDeletion"


def three(pvcs=(), pods=()) -> Observed:
    return observed(cluster(holder="r1", spec={"size": 3}), seed_pvcs=tuple(pvcs), seed_pods=tuple(pods))


def test_every_member_is_restored_at_once_and_the_cluster_released_only_when_all_are():
    step = step_for(NEW, RESTORING, three())
    assert isinstance(step, s.ChooseMembers) and step.members == MEMBERS
    status = dataclasses.replace(RESTORING, seed_members=MEMBERS)
    step = step_for(NEW, status, three([seed_pvc("keep-1")]))
    assert isinstance(step, s.CreateSeedVolumes) and step.members == ("keep-0", "keep-2")
    pvcs = [seed_pvc(m) for m in MEMBERS]
    step = step_for(NEW, status, three(pvcs))
    assert isinstance(step, s.StartSeedPods) and step.members == MEMBERS  # one step: all pods at once
    step = step_for(NEW, status, three(pvcs, [seed_pod("keep-0")]))
    assert isinstance(step, s.StartSeedPods) and step.members == ("keep-1", "keep-2")
    running = [seed_pod(m) for m in MEMBERS]
    assert isinstance(step_for(NEW, status, three(pvcs, running)), s.Wait)
    running[1] = seed_pod("keep-1", "Succeeded")
    step = step_for(NEW, status, three(pvcs, running))
    assert isinstance(step, s.MarkSeedsRestored) and step.pvcs == ("data-keep-1",)
    assert step.timings == (("keep-1", "2026-11-21T12:00:00Z", "2026-11-21T12:00:01Z", "2026-11-21T12:00:30Z"),)
    pvcs[1] = seed_pvc("keep-1", restored=True)
    assert isinstance(step_for(NEW, status, three(pvcs, running)), s.Wait)  # two still restoring: held
    done = [seed_pod(m, "Succeeded") for m in MEMBERS]
    all_marked = [seed_pvc(m, restored=True) for m in MEMBERS]
    step = step_for(NEW, status, three(all_marked, done))
    assert isinstance(step, s.RemoveSeedPods) and len(step.pods) == 3
    assert isinstance(step_for(NEW, status, three(all_marked)), s.ReleaseCluster)


@pytest.mark.parametrize(
    "transport, tls_spec, expected",
    [(None, False, False), (None, True, True), ("https", False, True), ("http", True, False)],
)
def test_restore_pods_use_the_transport_the_cluster_recorded_else_its_spec(transport, tls_spec, expected):
    status = dataclasses.replace(RESTORING, seed_members=MEMBERS)
    target = cluster(holder="r1", spec={"size": 3, "tls": {"enabled": tls_spec}})
    seen = observed(dataclasses.replace(target, transport=transport), seed_pvcs=tuple(seed_pvc(m) for m in MEMBERS))
    step = step_for(NEW, status, seen)
    assert isinstance(step, s.StartSeedPods) and step.tls is expected


def test_a_member_is_restored_once_and_pods_are_retried_a_bounded_number_of_times():
    status = dataclasses.replace(RESTORING, seed_members=MEMBERS)
    pvcs = [seed_pvc("keep-0", restored=True), seed_pvc("keep-1"), seed_pvc("keep-2")]
    step = step_for(NEW, status, three(pvcs))
    assert isinstance(step, s.StartSeedPods) and step.members == ("keep-1", "keep-2")  # never keep-0 again
    pods = [seed_pod("keep-1", "Failed"), seed_pod("keep-2")]
    step = step_for(NEW, status, three(pvcs, pods))
    assert isinstance(step, s.RetrySeedPod) and step.attempt == 1 and step.pod == "r1-s1"
    going = [dataclasses.replace(pods[0], deleting=True), pods[1]]
    assert isinstance(step_for(NEW, status, three(pvcs, going)), s.Wait)  # a retry counts once, not per pass
    last = dataclasses.replace(status, seed_attempts=SEED_ATTEMPTS - 1)
    step = step_for(NEW, last, three(pvcs, pods))
    assert isinstance(step, s.Fail) and step.code == "SeedFailed"
    foreign = seed_pod("keep-2", owner="someone")
    step = step_for(NEW, status, three(pvcs, [foreign]))
    assert isinstance(step, s.Fail) and step.code == "SeedPodNameTaken"


def test_an_unreadable_target_spec_mid_restore_waits():
    target = dataclasses.replace(cluster(holder="r1"), spec=None, spec_error="bad")
    step = step_for(NEW, RESTORING, observed(target))
    assert isinstance(step, s.Wait) and step.code == "InvalidClusterSpec"


def test_ended_restores_stay_ended():
    for phase in ("Completed", "Failed", "AlreadyApplied"):
        assert isinstance(step_for(IN_PLACE, RestoreStatus(phase=phase), observed(cluster())), s.Idle)


KEEPS = {
    ("Pod", "keep-0"),
    ("Pod", "keep-1"),
    ("PersistentVolumeClaim", "data-keep-0"),
    ("Service", "keep-peer"),
    ("Service", "keep-client"),
    ("PodDisruptionBudget", "keep"),
}
names = st.sampled_from(["keep-0", "keep-1", "data-keep-0", "keep", "keep-peer", "keep-client", "x", "data-x-0"])
kinds = st.sampled_from(["Pod", "PersistentVolumeClaim", "Service", "PodDisruptionBudget"])
objects = st.builds(
    lambda k, n, own: obj(k, n, {naming.LABEL_CLUSTER: "keep"} if own else {}), kinds, names, st.booleans()
)
targets = st.one_of(
    st.none(),
    st.builds(
        lambda holder, records, operation, approved: cluster(
            holder=holder, records=records, operation=operation, approved=approved
        ),
        st.sampled_from([None, "r1", "other"]),
        st.sampled_from([(), (record(),), (record(spec=NEW),)]),
        st.sampled_from([None, "QuorumRecovery"]),
        st.booleans(),
    ),
)
statuses = st.sampled_from(
    [
        RestoreStatus(),
        RestoreStatus(phase="Pending"),
        RestoreStatus(phase="Verifying"),
        VERIFIED,
        dataclasses.replace(VERIFIED, snapshot_version=None),
    ]
)


@settings(max_examples=300)
@given(
    spec=st.sampled_from([IN_PLACE, NEW]),
    status=statuses,
    target=targets,
    around=st.lists(objects, max_size=4),
    restore=st.sampled_from(["r1", "r" * 70]),
)
def test_nothing_is_touched_before_every_check_passed(spec, status, target, around, restore):
    """Before phase Restoring, every step is read-only; and a step that begins restoring
    only comes after a verified snapshot, with no objects in the way of a new cluster."""
    seen = observed(target, restore=restore, namespace_objects=tuple(around) if target is None else ())
    step = step_for(spec, status, seen)
    assert isinstance(step, READ_ONLY)
    if isinstance(step, s.BeginRestore):
        assert status.verified and len(restore) <= 63
        if spec is NEW:
            assert target is None and not [o for o in around if dict(o.labels) or (o.kind, o.name) in KEEPS]
        else:
            # Unheld, or held by this very restore (name and uid): a pass on an old copy of its
            # status sees the hold it set since.
            assert target is not None and target.holder in (None, restore)
            assert target.holder is None or target.hold_uid == UID


# --- a restore that arrives early waits; one being deleted creates nothing -------------------

S3_SOURCE = {"s3": {"bucket": "bk", "key": "k.db", "credentialsSecretRef": {"name": "creds"}}}
NEW_FROM_S3 = {**NEW, "source": S3_SOURCE}
NO_SUCH_BACKUP = SourceState("nightly", backup_found=False, backup_completed=False)
BACKUP_RUNNING = SourceState("nightly", backup_completed=False, backup_phase="Pending")
EARLY = [
    # (spec, target cluster, source, the Progressing reason, words its message must hold)
    (IN_PLACE, None, SourceState("nightly"), pre.WAITING_FOR_CLUSTER, "EtcdCluster ns/keep does not exist yet"),
    (IN_PLACE, cluster(phase=None), SourceState("nightly"), pre.WAITING_FOR_BOOTSTRAP, "still bootstrapping"),
    (IN_PLACE, cluster(phase="Creating", ready=1), SourceState("nightly"), pre.WAITING_FOR_BOOTSTRAP, "Creating"),
    (NEW, None, NO_SUCH_BACKUP, pre.WAITING_FOR_BACKUP, "EtcdBackup ns/nightly does not exist yet"),
    (NEW, None, BACKUP_RUNNING, pre.WAITING_FOR_BACKUP, "has not completed a backup yet (phase Pending)"),
    (NEW, None, SourceState("nightly", missing_secrets=("creds",)), pre.WAITING_FOR_SECRET, "Secret ns/creds"),
    (NEW_FROM_S3, None, SourceState(missing_secrets=("creds",)), pre.WAITING_FOR_SECRET, "Secret ns/creds"),
    (IN_PLACE, cluster(), NO_SUCH_BACKUP, pre.WAITING_FOR_BACKUP, "does not exist yet"),
]


@pytest.mark.parametrize("spec, target, source, code, words", EARLY)
@pytest.mark.parametrize("status", [RestoreStatus(), RestoreStatus(phase="Pending")])
def test_a_restore_that_arrives_early_waits_pending_and_says_for_what(spec, target, source, code, words, status):
    step = step_for(spec, status, observed(target, source=source))
    assert isinstance(step, s.Wait) and step.code == code and words in step.reason, step
    written = build_status({}, step, Outcome(), 1, "2026-11-21T12:00:00Z")
    assert written["phase"] == "Pending"
    progressing = next(c for c in written["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"], progressing["message"]) == ("True", code, step.reason)
    assert next(c for c in written["conditions"] if c["type"] == "Failed")["status"] == "False"


@pytest.mark.parametrize(
    "spec, target",
    [
        (NEW, None),
        (IN_PLACE, cluster(phase="Running", ready=1, available=True)),
        (IN_PLACE, cluster(phase="QuorumLost")),
        (NEW_FROM_S3, None),
    ],
)
def test_once_everything_is_there_it_starts_without_a_spec_change(spec, target):
    source = SourceState() if "s3" in spec["source"] else SourceState("nightly")
    assert isinstance(step_for(spec, RestoreStatus(phase="Pending"), observed(target, source=source)), s.StartVerifying)


def test_a_verified_snapshot_does_not_wait_for_its_source_again():
    step = step_for(NEW, VERIFIED, observed(None, source=NO_SUCH_BACKUP))
    assert isinstance(step, s.BeginRestore)


@pytest.mark.parametrize(
    "status, seen",
    [
        (RestoreStatus(), observed(None, source=SourceState("nightly"))),
        (VERIFIED, observed(None)),  # would begin
        (RESTORING, observed(None)),  # would create the cluster
        (
            dataclasses.replace(RESTORING, seed_members=MEMBERS),
            three([seed_pvc(m) for m in MEMBERS]),
        ),  # would start seed pods
        (dataclasses.replace(RESTORING, seed_members=MEMBERS), three()),  # would create seed volumes
    ],
)
def test_nothing_is_created_for_a_restore_being_deleted(status, seen):
    step = step_for(NEW, status, dataclasses.replace(seen, deleting=True))
    assert isinstance(step, s.Wait) and step.code == "Deleting"


# --- in place, the data set aside keeps its names, whatever copy of the status a pass reads ---


def preserved_pvc(name: str, by: str = "r1") -> ObjectState:
    return obj("PersistentVolumeClaim", name, {builders.LABEL_PRESERVED_BY: by, builders.LABEL_PRESERVED_FROM: "keep"})


@pytest.mark.parametrize(
    "listed, seen, min_ordinal, members",
    [
        # An old copy of this restore's status, from before RecordPreservedData landed: it lists nothing.
        ((), ("data-keep-0", "data-keep-1"), 0, ("keep-2", "keep-3")),
        # ... or lists part of what was set aside.
        (("data-keep-0",), ("data-keep-0", "data-keep-1", "data-keep-2"), 0, ("keep-3", "keep-4")),
        # A status that lists more than is observed (a PVC deleted by hand since) still counts it.
        (("data-keep-0", "data-keep-4"), ("data-keep-0",), 0, ("keep-5", "keep-6")),
        # The cluster's minimum ordinal is above the set-aside data: it decides.
        ((), ("data-keep-0",), 7, ("keep-7", "keep-8")),
    ],
)
def test_members_are_chosen_above_the_data_observed_set_aside(listed, seen, min_ordinal, members):
    status = dataclasses.replace(RESTORING, preserved=listed)
    target = cluster(holder="r1", min_ordinal=min_ordinal, spec={"size": 2})
    step = step_for(IN_PLACE, status, observed(target, preserved_pvcs=tuple(preserved_pvc(n) for n in seen)))
    assert isinstance(step, s.ChooseMembers)
    assert (step.members, step.min_ordinal) == (members, int(members[0].split("-")[1]))


def test_data_an_earlier_restore_set_aside_keeps_its_names_too():
    earlier = (preserved_pvc("data-keep-0", by="r0"), preserved_pvc("data-keep-1", by="r0"))
    step = step_for(IN_PLACE, RESTORING, observed(cluster(holder="r1"), preserved_pvcs=earlier))
    assert isinstance(step, s.ChooseMembers) and step.members == ("keep-2",)


def test_a_stale_copy_of_the_status_without_the_set_aside_data_chose_ordinal_0_before():
    """The defect this guards against (restore_forgets_set_aside_data): without the observed
    set-aside PVCs, an old copy of the status leads to ordinal 0, whose PVC name is taken."""
    target = cluster(holder="r1", spec={"size": 1})
    assert step_for(IN_PLACE, RESTORING, observed(target)).members == ("keep-0",)
    step = step_for(IN_PLACE, RESTORING, observed(target, preserved_pvcs=(preserved_pvc("data-keep-0"),)))
    assert step.members == ("keep-1",)


@settings(max_examples=200, deadline=None)
@given(
    set_aside=st.sets(st.integers(0, 40), max_size=6),
    listed_share=st.integers(0, 6),
    min_ordinal=st.integers(0, 45),
    size=st.integers(1, 7),
)
def test_a_chosen_member_never_takes_the_name_of_data_set_aside(set_aside, listed_share, min_ordinal, size):
    names = sorted(f"data-keep-{o}" for o in set_aside)
    status = dataclasses.replace(RESTORING, preserved=tuple(names[:listed_share]))
    target = cluster(holder="r1", min_ordinal=min_ordinal, spec={"size": size})
    step = step_for(IN_PLACE, status, observed(target, preserved_pvcs=tuple(preserved_pvc(n) for n in names)))
    assert isinstance(step, s.ChooseMembers) and len(step.members) == size
    assert not {naming.pvc_name(m) for m in step.members} & set(names)
    assert step.min_ordinal >= min_ordinal
