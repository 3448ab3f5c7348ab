"""Space management: NOSPACE remediation walked step by step, the quota derived from the
volume, PVC expansion and defragmentation on request or inside a window."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.core.cluster import naming, quota, space
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.decision import plan
from etcd_operator.core.cluster.observed import PVCView
from etcd_operator.core.cluster.planner import next_step
from etcd_operator.core.cluster.recorded import DefragmentationRecord, SpaceRecoveryRecord
from etcd_operator.core.cluster.spec import ClusterSpec
from tests.unit.cluster_scenarios import HASH, NOW, RECORDED, M, health_of, observed, recorded, spec

MiB = quota.MiB
NOSPACE = ((0x100, "NOSPACE"),)
QUOTA = 16 * MiB


def small_quota() -> ClusterSpec:
    s = spec(3)
    return dataclasses.replace(s, etcd=dataclasses.replace(s.etcd, quota_backend_bytes=QUOTA))


def step_of(s, o, st=RECORDED, now=NOW):
    return next_step(s, st, o, health_of(s, o, st), now, desired_hash=HASH)


def full(db=QUOTA, in_use=QUOTA, **kw):
    return [M(i, db_size=db, db_in_use=in_use, **kw) for i in range(3)]


# --- NOSPACE remediation --------------------------------------------------------------


def test_nospace_remediation_runs_compact_then_followers_then_leader_then_disarm():
    s = small_quota()
    o = observed(full(), alarms=NOSPACE)
    assert isinstance(step_of(s, o), a.BeginSpaceRecovery)

    st = recorded(space_recovery=SpaceRecoveryRecord(NOW))
    step = step_of(s, o, st)
    assert isinstance(step, a.CompactRevisions)
    assert step.revision == 0  # revision 100 less the default 100 retained: nothing to compact yet

    done: list[str] = []
    order = []
    for _ in range(3):
        st = recorded(space_recovery=SpaceRecoveryRecord(NOW, 0, tuple(done)))
        step = step_of(s, o, st)
        assert isinstance(step, a.DefragmentForSpace), step
        order.append(step.member)
        done.append(step.member)
    assert order == ["c-1", "c-2", "c-0"]  # followers by ordinal, the leader (c-0) last

    # Defragmented, but the database still fills the quota: no disarm, the bytes missing named.
    st = recorded(space_recovery=SpaceRecoveryRecord(NOW, 0, tuple(done)))
    step = step_of(s, o, st)
    assert isinstance(step, a.Wait) and "too large" in step.reason
    fits = space.database_condition(s, st.space_recovery, o, health_of(s, o, st), step)
    missing = QUOTA - (QUOTA - quota.fits_headroom(QUOTA))
    assert fits.status is False and fits.reason == "QuotaExceeded" and f"{missing} bytes are missing" in fits.message

    # Compacted and defragmented down: disarm.
    o = observed(full(db=2 * MiB, in_use=2 * MiB), alarms=NOSPACE)
    st = recorded(space_recovery=SpaceRecoveryRecord(NOW, 0, tuple(done)))
    step = step_of(s, o, st)
    assert isinstance(step, a.DisarmNoSpaceAlarm) and step.member_ids == (0x100,)

    # The alarm is gone: the record is dropped.
    o, st = observed(full(db=2 * MiB, in_use=2 * MiB)), recorded(space_recovery=SpaceRecoveryRecord(NOW, 0))
    assert isinstance(step_of(s, o, st), a.FinishSpaceRecovery)


def test_compaction_keeps_the_retention_window():
    s = small_quota()
    s = dataclasses.replace(s, space_recovery=dataclasses.replace(s.space_recovery, retain_revisions=10))
    o, st = observed(full(applied=500), alarms=NOSPACE), recorded(space_recovery=SpaceRecoveryRecord(NOW))
    step = step_of(s, o, st)
    assert isinstance(step, a.CompactRevisions) and step.revision == 490


def test_deletes_after_compaction_compact_again_and_restart_defragmentation():
    s = small_quota()
    s = dataclasses.replace(s, space_recovery=dataclasses.replace(s.space_recovery, retain_revisions=10))
    o = observed(full(applied=700), alarms=NOSPACE)
    st = recorded(space_recovery=SpaceRecoveryRecord(NOW, 490, ("c-1", "c-2", "c-0")))
    step = step_of(s, o, st)
    assert isinstance(step, a.CompactRevisions) and step.revision == 690


def test_nospace_never_defragments_a_member_that_would_block_quorum():
    s = small_quota()
    members = full()
    members[2] = M(2, healthy=False, unhealthy_for=10_000, db_size=QUOTA, db_in_use=QUOTA)
    o = observed(members, alarms=NOSPACE)
    st = recorded(space_recovery=SpaceRecoveryRecord(NOW, 0))
    step = step_of(s, o, st)
    assert isinstance(step, a.Wait), step
    assert "quorum" in step.reason or "answer" in step.reason


def test_nospace_defragmentation_needs_room_on_the_volume():
    s = small_quota()
    o = observed(full(db=QUOTA, in_use=QUOTA // 2), alarms=NOSPACE)
    tight = {n: dataclasses.replace(p, capacity=QUOTA + quota.WAL_RESERVE) for n, p in o.pvcs.items()}
    o, st = dataclasses.replace(o, pvcs=tight), recorded(space_recovery=SpaceRecoveryRecord(NOW, 0))
    step = step_of(s, o, st)
    assert isinstance(step, a.Wait) and "lacks" in step.reason, step


@pytest.mark.parametrize(
    "record",
    [
        None,
        SpaceRecoveryRecord(NOW),
        SpaceRecoveryRecord(NOW, 0, ("c-1",)),
        SpaceRecoveryRecord(NOW, 0, ("c-0", "c-1", "c-2")),
    ],
)
def test_nospace_never_removes_replaces_or_rolls(record):
    s = small_quota()
    members = full(outdated=True)
    o = observed(members + [M(3, db_size=QUOTA, db_in_use=QUOTA)], alarms=NOSPACE)
    step = step_of(s, o, recorded(space_recovery=record))
    assert isinstance(
        step, (a.Wait, a.BeginSpaceRecovery, a.CompactRevisions, a.DefragmentForSpace, a.DisarmNoSpaceAlarm)
    ), step


# --- quota and volume -----------------------------------------------------------------


@pytest.mark.parametrize(
    "size, expected", [("2Gi", (2048 - 384) // 2 * MiB), ("1Gi", 320 * MiB), ("100Gi", 8 * 1024 * MiB)]
)
def test_quota_derives_from_the_volume(size, expected):
    s = ClusterSpec.from_dict({"storage": {"size": size}})
    decision = plan(s, with_quota(64 * MiB), observed([M(0)]), NOW)
    assert decision.acting_spec.etcd.quota_backend_bytes == expected


def test_default_storage_and_quota_are_consistent():
    decision = plan(ClusterSpec.from_dict({}), recorded(bootstrapped=False), observed([]), NOW)
    q = decision.acting_spec.etcd.quota_backend_bytes
    assert quota.disk_needed(q) <= quota.parse_quantity("2Gi")


def test_a_quota_larger_than_the_disk_is_refused():
    s = ClusterSpec.from_dict({"storage": {"size": "1Gi"}, "etcd": {"quotaBackendBytes": 1 << 30}})
    decision = plan(s, RECORDED, observed([M(0)]), NOW)
    assert [p.reason for p in decision.problems] == ["QuotaExceedsStorage"]
    accepted = next(c for c in decision.conditions if c.type == "SpecAccepted")
    assert accepted.status is False and "needs a volume of at least" in accepted.message
    assert decision.acting_spec.etcd.quota_backend_bytes == 320 * MiB


def test_the_quota_follows_the_smallest_volume_until_it_grew():
    s = ClusterSpec.from_dict({"storage": {"size": "2Gi"}})
    o, st = observed([M(0), M(1), M(2)]), with_quota(320 * MiB)
    small = {n: dataclasses.replace(p, requested=1 << 30, capacity=1 << 30, expandable=True) for n, p in o.pvcs.items()}
    o = dataclasses.replace(o, pvcs=small)
    decision = plan(s, st, o, NOW)
    assert decision.acting_spec.etcd.quota_backend_bytes == 320 * MiB
    assert isinstance(decision.action, a.ExpandMemberPVC) and decision.action.size == "2Gi"


# --- PVC expansion --------------------------------------------------------------------


def pvcs_of(o, **changes):
    return {n: dataclasses.replace(p, **changes) for n, p in o.pvcs.items()}


def test_pvcs_grow_one_at_a_time_where_the_class_allows():
    s = ClusterSpec.from_dict({"storage": {"size": "2Gi"}})
    o = observed([M(0), M(1), M(2)])
    o = dataclasses.replace(o, pvcs=pvcs_of(o, requested=1 << 30, capacity=1 << 30, expandable=True))
    step = space.plan_volume_expansion(s, o)
    assert isinstance(step, a.ExpandMemberPVC) and step.member == "c-0"


def test_a_class_without_expansion_is_explained_and_nothing_patched():
    s = ClusterSpec.from_dict({"storage": {"size": "2Gi"}})
    o = observed([M(0)])
    o = dataclasses.replace(
        o, pvcs=pvcs_of(o, requested=1 << 30, capacity=1 << 30, expandable=False, storage_class="fixed")
    )
    assert space.plan_volume_expansion(s, o) is None
    cond = space.storage_condition(s, o)
    assert cond.status is False and cond.reason == "ExpansionNotAllowed" and "fixed" in cond.message


def test_shrinking_is_refused_and_touches_nothing():
    s = ClusterSpec.from_dict({"storage": {"size": "1Gi"}})
    o = observed([M(0)])
    o = dataclasses.replace(o, pvcs=pvcs_of(o, requested=2 << 30, capacity=2 << 30, expandable=True))
    decision = plan(s, RECORDED, o, NOW)
    assert "StorageShrink" in [p.reason for p in decision.problems]
    assert quota.parse_quantity(decision.acting_spec.storage.size) == 2 << 30
    assert not isinstance(decision.action, a.ExpandMemberPVC)


# --- defragmentation ------------------------------------------------------------------


def test_a_requested_defragmentation_covers_every_member_once_followers_first():
    s = spec(3)
    o = dataclasses.replace(observed([M(0), M(1), M(2)]), defrag_requested="t1")
    done, order = (), []
    for _ in range(3):
        st = recorded(defragmentation=DefragmentationRecord(None, "t1", done))
        step = step_of(s, o, st)
        assert isinstance(step, a.DefragmentOnRequest) and step.token == "t1"
        order.append(step.member)
        done = (*done, step.member)
    assert order == ["c-1", "c-2", "c-0"]
    st = recorded(defragmentation=DefragmentationRecord(None, "t1", done))
    assert isinstance(step_of(s, o, st), a.FinishDefragmentRequest)
    st = recorded(defragmentation=DefragmentationRecord("t1"))
    assert isinstance(step_of(s, o, st), a.Steady)


def test_a_new_token_starts_over():
    s = spec(3)
    o = dataclasses.replace(observed([M(0), M(1), M(2)]), defrag_requested="t2")
    step = step_of(s, o, recorded(defragmentation=DefragmentationRecord("t1", "t1", ("c-1",))))
    assert isinstance(step, a.DefragmentOnRequest) and step.member == "c-1" and step.token == "t2"


FRAGMENTED = dict(db_size=200 * MiB, db_in_use=10 * MiB)


def test_threshold_defragmentation_waits_for_its_window():
    s = spec(3)
    s = dataclasses.replace(s, defrag=dataclasses.replace(s.defrag, window_start="02:00", window_seconds=3600))
    members = [M(0, **FRAGMENTED), M(1, **FRAGMENTED), M(2, **FRAGMENTED)]
    o = observed(members)
    at = lambda seconds: 86400 * 1000 + seconds  # noqa: E731
    assert isinstance(step_of(s, o, now=at(2 * 3600 + 60)), a.Defragment)
    assert isinstance(step_of(s, o, now=at(3 * 3600 + 60)), a.Steady)
    assert isinstance(step_of(s, o, now=at(1 * 3600)), a.Steady)
    no_window = spec(3)
    assert isinstance(step_of(no_window, o, now=at(12 * 3600)), a.Defragment)


def test_threshold_defragmentation_skips_a_member_without_room():
    s = spec(3)
    members = [M(0, **FRAGMENTED), M(1, **FRAGMENTED), M(2, **FRAGMENTED)]
    o = observed(members)
    tight = dict(o.pvcs)
    name = naming.pvc_name("c-1")
    tight[name] = dataclasses.replace(tight[name], capacity=200 * MiB + quota.WAL_RESERVE)
    o = dataclasses.replace(o, pvcs=tight)
    step = step_of(s, o)
    assert isinstance(step, a.Defragment) and step.member == "c-2"


def test_quantities():
    assert quota.parse_quantity("2Gi") == 2 << 30
    assert quota.parse_quantity("500M") == 500_000_000
    assert quota.parse_quantity("1.5Gi") == 3 << 29
    assert quota.parse_quantity(1024) == 1024
    assert quota.parse_quantity("bogus") is None


def test_pvc_view_parses_sizes_and_expansion():
    from etcd_operator.controllers.cluster.observer import pvc_view

    raw = {
        "metadata": {"name": "data-c-0", "uid": "u"},
        "spec": {"storageClassName": "localkube", "resources": {"requests": {"storage": "2Gi"}}},
        "status": {"capacity": {"storage": "1Gi"}},
    }
    view = pvc_view(raw, {"localkube": True})
    assert (view.requested, view.capacity, view.expandable) == (2 << 30, 1 << 30, True)
    assert pvc_view(raw, {}).expandable is None
    assert isinstance(view, PVCView)


def test_a_derived_quota_follows_volume_growth_and_never_drops():
    """The quota recorded in status is what the members run: a derived quota rises with the
    volume, and never drops below the recorded one (data may already fill it)."""
    s = ClusterSpec.from_dict({"storage": {"size": "2Gi"}})
    assert plan(s, with_quota(3 << 30), observed([M(0)]), NOW).acting_spec.etcd.quota_backend_bytes == 3 << 30
    assert plan(s, with_quota(320 * MiB), observed([M(0)]), NOW).acting_spec.etcd.quota_backend_bytes == 832 * MiB


def test_members_created_before_quotas_were_derived_keep_etcds_default():
    """An operator upgrade never restarts running members by itself: a cluster with members
    and no quota recorded keeps etcd's default, and records it, until quotaBackendBytes is set."""
    s = ClusterSpec.from_dict({"storage": {"size": "2Gi"}})
    legacy, legacy_status = observed([M(0, db_size=100 * MiB, db_in_use=100 * MiB)]), RECORDED
    assert not legacy_status.quota_recorded
    decision = plan(s, legacy_status, legacy, NOW)
    assert decision.acting_spec.etcd.quota_backend_bytes is None
    assert not isinstance(decision.action, a.RollMember)
    assert decision.status_fields()["quota"] == {"backendBytes": None}
    default_recorded = dataclasses.replace(legacy_status, quota_recorded=True, recorded_quota=None)
    assert plan(s, default_recorded, legacy, NOW).acting_spec.etcd.quota_backend_bytes is None
    # A new cluster (no member yet) gets the derived quota, and records it.
    new = plan(s, recorded(bootstrapped=False), observed([]), NOW)
    assert new.status_fields()["quota"] == {"backendBytes": 832 * MiB}


def with_quota(quota_bytes: int):
    """As if the operator had recorded `quota_bytes` in status.quota."""
    return recorded(quota_recorded=True, recorded_quota=quota_bytes)


def test_pod_view_reads_the_running_quota():
    from etcd_operator.controllers.cluster.observer import quota_arg

    assert quota_arg([{"args": ["--name=c-0", "--quota-backend-bytes=16777216"]}]) == 16 * MiB
    assert quota_arg([{"args": ["--name=c-0"]}]) is None
