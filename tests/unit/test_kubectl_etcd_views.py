"""The kubectl-etcd plugin's pure views: member table, backup catalogue, restore choice.
Every view reads objects whose status the operator's own pure builders wrote: EtcdClusters
from the cluster's decision and status builder, EtcdBackups from the backup status builder
over the steps and outcomes its planner and executor produce."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from etcd_operator.controllers.cluster import execute_membership
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.continuous import ChainBreak, ChainStart, SegmentsWritten, StreamView
from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.backup.status import build_status as backup_status
from etcd_operator.core.cluster import quota
from etcd_operator.core.cluster.decision import plan
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.planner import next_step
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.cluster.status import build_status
from etcd_operator.core.restore.spec import RestoreSpec
from etcd_operator_kubectl import views
from tests.sim.world import merge_patch
from tests.unit.cluster_scenarios import CLUSTER, HASH, NAMESPACE, M, health_of, observed
from tests.unit.cluster_scenarios import NOW as NOW_SECONDS

NOW = datetime.datetime(2026, 11, 21, 12, 0, tzinfo=datetime.UTC)


MiB = 1024 * 1024


def operator_status(raw_spec: dict, seen: Observed, previous: dict) -> dict:
    """The status one reconcile pass writes, as the reconciler builds it: the pure decision,
    then status.build_status with the decision's own fields (quota, rollout...)."""
    spec, recorded = ClusterSpec.from_dict(raw_spec), ClusterStatus.from_dict(previous)
    decision = plan(spec, recorded, seen, NOW_SECONDS, stored_spec=raw_spec)
    conditions = list(decision.conditions)
    return build_status(
        spec,
        recorded,
        seen,
        NOW_SECONDS,
        decision.health,
        decision.action,
        conditions,
        previous,
        1,
        extra=decision.status_fields(),
    )


def cluster_after(raw_spec: dict, *passes: Observed, status: dict | None = None) -> dict:
    """The EtcdCluster as `kubectl get` returns it after the operator's passes over `passes`."""
    written = dict(status or {})
    for seen in passes:
        written = operator_status(raw_spec, seen, written)
    return {"metadata": {"name": CLUSTER, "namespace": NAMESPACE}, "spec": raw_spec, "status": written}


def members(*ms: M) -> list[M]:
    return list(ms)


RUNNING = members(M(0, db_size=208 * MiB), M(1, db_size=200 * MiB), M(2, db_size=204 * MiB))


def test_the_quota_shown_is_the_one_the_operator_derived_from_the_volume():
    """No quotaBackendBytes: the members run the quota derived from the 2Gi default volume,
    (2Gi - 384Mi) / 2, not etcd's 2 GiB default (2.5 times as much headroom)."""
    created = cluster_after({"size": 3}, observed([]), observed(RUNNING))
    derived = quota.quota_for_disk(2 * 1024 * MiB)
    assert created["status"]["quota"] == {"backendBytes": derived} == {"backendBytes": 832 * MiB}
    rows = views.member_rows(created)
    assert [r["quotaBytes"] for r in rows] == [derived] * 3
    text = views.status_table(views.status_view(created))
    assert "208.0MiB / 832.0MiB (25%)" in text and "quota 832.0MiB" in text


def test_an_explicit_quota_is_shown_as_set():
    created = cluster_after({"size": 3, "etcd": {"quotaBackendBytes": 64 * MiB}}, observed([]), observed(RUNNING))
    assert {r["quotaBytes"] for r in views.member_rows(created)} == {64 * MiB}


def test_a_cluster_that_kept_etcds_default_quota_shows_etcds_default():
    """Members created before quotas were derived: the operator records null (etcd's default)."""
    legacy = cluster_after({"size": 3}, observed(RUNNING), status={"clusterID": "1"})
    assert legacy["status"]["quota"] == {"backendBytes": None}
    assert {r["quotaBytes"] for r in views.member_rows(legacy)} == {2 * 1024 * MiB}


def test_before_the_operators_first_pass_the_quota_is_unknown():
    fresh = {"metadata": {"name": CLUSTER, "namespace": NAMESPACE}, "spec": {"size": 3}}
    view = views.status_view(fresh)
    assert view["quotaBytes"] is None and view["members"] == []
    assert "quota -" in views.status_table(view)


def test_alarms_are_shown_on_the_member_etcd_raised_them_for():
    nospace_on_c1 = observed(RUNNING, alarms=((M(1).id, "NOSPACE"),))
    alarmed = cluster_after({"size": 3}, observed([]), observed(RUNNING), nospace_on_c1)
    assert alarmed["status"]["alarms"] == [{"member": M(1).name, "memberID": f"{M(1).id:x}", "alarm": "NOSPACE"}]
    rows = {r["name"]: r["alarms"] for r in views.member_rows(alarmed)}
    assert rows == {M(0).name: [], M(1).name: ["NOSPACE"], M(2).name: []}
    text = views.status_table(views.status_view(alarmed))
    assert f"ALARMS RAISED: NOSPACE on {M(1).name}" in text
    assert "Alarm" in text and "NoSpace" in text  # the condition says the same


def test_an_alarm_of_a_member_no_longer_listed_is_still_shown():
    gone = 0x999
    corrupt = observed(RUNNING, alarms=((gone, "CORRUPT"),))
    alarmed = cluster_after({"size": 3}, observed([]), observed(RUNNING), corrupt)
    assert all(r["alarms"] == [] for r in views.member_rows(alarmed))
    assert "ALARMS RAISED: CORRUPT on 999" in views.status_table(views.status_view(alarmed))


def test_the_alarms_clear_once_etcd_no_longer_reports_them():
    raw = {"size": 3}
    alarmed = cluster_after(raw, observed([]), observed(RUNNING, alarms=((M(1).id, "NOSPACE"),)))
    cleared = cluster_after(raw, observed(RUNNING), status=alarmed["status"])
    assert cleared["status"]["alarms"] == []
    assert "ALARMS RAISED" not in views.status_table(views.status_view(cleared))


def test_member_rows_report_lag_against_the_most_advanced_member():
    lagging = members(M(0, applied=120), M(1, applied=100), M(2, healthy=False))
    created = cluster_after({"size": 3}, observed([]), observed(lagging))
    rows = {r["name"]: r for r in views.member_rows(created)}
    assert [rows[m.name]["revisionLag"] for m in lagging] == [0, 20, None]
    assert rows[M(0).name]["role"] == "leader" and rows[M(2).name]["healthy"] is False
    assert "Available" in views.status_table(views.status_view(created))


# ---- backups: status as core/backup/status.py writes it --------------------------------

BACKUP = "nightly"


def snapshot(slot: str, revision: int, at: str) -> Manifest:
    return Manifest(
        snapshot_key=f"p/{NAMESPACE}/{BACKUP}/{slot}.db",
        backup=BACKUP,
        namespace=NAMESPACE,
        cluster=CLUSTER,
        cluster_id="c1",
        etcd_version="3.6.16",
        revision=revision,
        size=4096,
        sha256="ab" * 32,
        created_at=at,
        member=f"{CLUSTER}-0",
        slot=slot,
    )


def backup_object(status: dict) -> dict:
    return {
        "apiVersion": "etcd.operator.dev/v1alpha1",
        "kind": "EtcdBackup",
        "metadata": {"name": BACKUP, "namespace": NAMESPACE},
        "spec": {"clusterRef": {"name": CLUSTER}, "schedule": "0 * * * *"},
        "status": status,
    }


def passes(status: dict, *steps: tuple[s.Step, s.Outcome, str]) -> dict:
    """The status after the operator's passes, each patch applied as the API server does."""
    for step, outcome, now in steps:
        status = merge_patch(status, backup_status(step, outcome, status, 1, now))
    return status


def scheduled_run(status: dict, slot: str, revision: int, at: str) -> dict:
    made = snapshot(slot, revision, at)
    return passes(
        status,
        (s.StartSlot(slot=slot, slot_time=None, next_slot=None, one_shot=False), s.NOTHING_DONE, at),
        (
            s.RunBackup(slot=slot, one_shot=False),
            s.RunSucceeded(record=made.status_record(), completed_at=at),
            at,
        ),
    )


def verified(status: dict, key: str, verdict: bool | None, at: str) -> dict:
    reason = {True: "Verified", False: "HashMismatch", None: "Inconclusive"}[verdict]
    return passes(
        status,
        (s.StartVerification(key=key, attempt=1), s.NOTHING_DONE, at),
        (
            s.FinishVerification(key=key, pod_name="v", pod_uid="u", verified=verdict, reason=reason, complete=True),
            s.VerificationDone(key=key, verified=verdict, reason=reason, message="compared", at=at),
            at,
        ),
    )


def three_runs() -> dict:
    status: dict = {}
    for slot, revision, at in (
        ("20261121T090000Z", 100, "2026-11-21T09:00:10Z"),
        ("20261121T100000Z", 150, "2026-11-21T10:00:10Z"),
        ("20261121T110000Z", 180, "2026-11-21T11:00:10Z"),
    ):
        status = scheduled_run(status, slot, revision, at)
    return status


def key(slot: str) -> str:
    return f"p/{NAMESPACE}/{BACKUP}/{slot}.db"


def test_backups_lists_the_snapshots_the_operator_recorded_newest_first():
    status = verified(three_runs(), key("20261121T100000Z"), True, "2026-11-21T10:05:00Z")
    view = views.backups_view(backup_object(status))
    assert [e["revision"] for e in view["snapshots"]] == [180, 150, 100]
    by_revision = {e["revision"]: e for e in view["snapshots"]}
    assert by_revision[150]["verification"] == "verified 2026-11-21T10:05:00Z"
    assert by_revision[180]["verification"] == "not verified"
    assert by_revision[180] | {"verification": ""} == {
        "key": key("20261121T110000Z"),
        "revision": 180,
        "size": 4096,
        "sha256": "ab" * 32,
        "completionTime": "2026-11-21T11:00:10Z",
        "clusterID": "c1",
        "etcdVersion": "3.6.16",
        "member": f"{CLUSTER}-0",
        "verification": "",
    }
    text = views.backups_table(view, NOW)
    assert f"EtcdBackup {NAMESPACE}/{BACKUP} of cluster {CLUSTER}: phase Scheduled, last success 59m ago" in text
    assert text.index(key("20261121T110000Z")) < text.index(key("20261121T090000Z"))
    assert "BackupAvailable" in text and "Continuous" not in text


def test_a_verification_under_way_and_a_failed_one_are_shown():
    status = verified(three_runs(), key("20261121T110000Z"), False, "2026-11-21T11:05:00Z")
    status = passes(
        status, (s.StartVerification(key=key("20261121T100000Z"), attempt=1), s.NOTHING_DONE, "2026-11-21T11:06:00Z")
    )
    by_revision = {e.revision: e.verification for e in views.catalogue(backup_object(status))}
    assert by_revision == {180: "FAILED (HashMismatch)", 150: "verifying", 100: "not verified"}


def test_before_the_first_backup_there_is_nothing_to_list_or_restore():
    waiting = passes(
        {},
        (
            s.WaitForSlot(next_slot=datetime.datetime(2026, 11, 21, 13, tzinfo=datetime.UTC)),
            s.NOTHING_DONE,
            "2026-11-21T12:00:00Z",
        ),
    )
    backup = backup_object(waiting)
    assert views.catalogue(backup) == []
    assert "No backups recorded in status yet." in views.backups_table(views.backups_view(backup), NOW)
    with pytest.raises(LookupError, match="lists no snapshot"):
        views.choose(backup, None, None, None, False)


def streaming(status: dict) -> dict:
    """A continuous backup's writer started on a chain from the newest snapshot, then reporting."""
    base = key("20261121T110000Z")
    start = s.StartStream(start=ChainStart("chain-1", "c1", base, 180))
    first = s.StreamReport(view=StreamView(chain="chain-1", last_revision=180, cluster_revision=180))
    caught = 1_795_000_000.0
    later = s.StreamReport(
        view=StreamView(
            chain="chain-1",
            last_revision=240,
            cluster_revision=245,
            last_segment_at=caught,
            caught_up=(238, caught),
        ),
        written=SegmentsWritten(segments=3, events=60, bytes=9000),
    )
    return passes(
        status,
        (start, first, "2026-11-21T11:01:00Z"),
        (s.Stream(chain="chain-1"), later, "2026-11-21T11:30:00Z"),
    )


def test_the_continuous_chain_shows_the_revisions_it_holds_and_its_lag():
    chain = views.continuous_view(backup_object(streaming(three_runs())))
    assert chain is not None
    assert (chain["chain"], chain["baseRevision"], chain["lastRevision"], chain["lagRevisions"]) == (
        "chain-1",
        180,
        240,
        5,
    )
    assert chain["caughtUp"]["revision"] == 238
    text = views.continuous_text(chain, NOW)
    assert f"chain chain-1 holds revisions 180 (base {key('20261121T110000Z')}) to 240" in text
    assert "lag 5 revisions" in text and "held the whole cluster at revision 238" in text


def test_a_broken_chain_is_shown_with_why_it_broke():
    broken = s.MarkChainBroken(chain_break=ChainBreak("chain-1", "Compacted", "revision 241 was compacted", 240))
    status = passes(streaming(three_runs()), (broken, s.NOTHING_DONE, "2026-11-21T11:40:00Z"))
    chain = views.continuous_view(backup_object(status))
    assert chain is not None and chain["chain"] is None and chain["needsFullSnapshot"]
    text = views.continuous_text(chain, NOW)
    assert "no chain is being written" in text and "a full snapshot is due" in text
    assert "last break: chain chain-1 at revision 240 (Compacted: revision 241 was compacted)" in text


def restore_spec(
    backup: dict, key_: str | None = None, revision: int | None = None, time: str | None = None, latest: bool = False
) -> tuple[views.Choice, dict]:
    choice = views.choose(backup, key_, revision, time, latest)
    obj = views.restore_object(NAMESPACE, "r", BACKUP, choice, "app", None, None)
    return choice, obj["spec"]


def test_a_restore_pins_a_snapshot_the_status_lists_and_skips_a_failed_one_by_default():
    backup = backup_object(verified(three_runs(), key("20261121T110000Z"), False, "2026-11-21T11:05:00Z"))
    choice, spec = restore_spec(backup)
    assert spec == {
        "source": {"backupRef": {"name": BACKUP, "key": key("20261121T100000Z")}},
        "target": {"inPlace": {"clusterName": "app", "confirm": True}},
    }
    assert RestoreSpec.from_dict(spec).point is None  # the operator reads a whole-snapshot restore
    plan = views.restore_plan(views.restore_object(NAMESPACE, "r", BACKUP, choice, "app", None, None), choice, NOW)
    assert "revision  150" in plan and "INTO the existing cluster app" in plan
    assert restore_spec(backup, revision=100)[1]["source"] == {
        "backupRef": {"name": BACKUP, "key": key("20261121T090000Z")}
    }
    older = restore_spec(backup, key_="p/old.db")
    assert older[1]["source"]["backupRef"]["key"] == "p/old.db" and older[0].entry is None


def test_a_point_restore_names_the_point_and_no_key_as_the_crd_requires():
    backup = backup_object(streaming(three_runs()))
    for kwargs, point in (
        ({"revision": 239}, {"revision": 239}),
        ({"time": "2026-11-21T11:20:00Z"}, {"time": "2026-11-21T11:20:00Z"}),
        ({"latest": True}, {"latest": True}),
    ):
        choice, spec = restore_spec(backup, **kwargs)
        assert spec["source"] == {"backupRef": {"name": BACKUP}, "pointInTime": point}
        parsed = RestoreSpec.from_dict(spec)
        assert parsed.point is not None and parsed.backup == BACKUP
    assert RestoreSpec.from_dict(restore_spec(backup, revision=239)[1]).point.revision == 239
    with pytest.raises(LookupError, match="RFC 3339"):
        restore_spec(backup, time="yesterday")


def test_a_point_without_a_continuous_backup_is_refused_before_anything_is_created():
    backup = backup_object(three_runs())
    with pytest.raises(LookupError, match="no continuous backup"):
        restore_spec(backup, revision=160)
    with pytest.raises(LookupError):
        restore_spec(backup, latest=True)


def test_restore_object_needs_one_target():
    choice = views.choose(backup_object(three_runs()), None, None, None, False)
    with pytest.raises(ValueError):
        views.restore_object(NAMESPACE, "r", BACKUP, choice, "app", "new", None)


def test_hibernation_is_the_spec_field_the_operator_reads():
    for enabled in (True, False):
        patched = merge_patch({"size": 3}, views.hibernation_patch(enabled)["spec"])
        assert ClusterSpec.from_dict(patched).hibernation.enabled is enabled


# ---- move-leader: status.members as the status builder writes them, status.leaderMove as the executor does


class LeaderMoveContext:
    """What the executor's leader-move steps use of their context: the leader's client and events."""

    def __init__(self):
        self.moved_to, self.events = [], []

    def leader_client(self, seen):
        context = self

        class Leader:
            async def move_leader(self, member_id):
                context.moved_to.append(member_id)

        return Leader()

    def post_event(self, kind, reason, message):
        self.events.append((kind, reason, message))


def after_the_step(cluster: dict, seen: Observed, context: LeaderMoveContext) -> dict:
    """`cluster` after one pass over `seen` whose step the real executor carries out."""
    spec, recorded = ClusterSpec.from_dict(cluster["spec"]), ClusterStatus.from_dict(cluster["status"])
    step = next_step(spec, recorded, seen, health_of(spec, seen, recorded), NOW_SECONDS, desired_hash=HASH)
    executors = {
        "MoveLeaderOnRequest": execute_membership.move_leader_on_request,
        "FinishLeaderMoveRequest": execute_membership.finish_leader_move_request,
    }
    outcome = asyncio.run(executors[step.kind](context, step, spec, seen))
    status = merge_patch(dict(cluster["status"]), outcome.status_fields)
    return {**cluster, "status": status}


def test_move_leader_goes_to_the_most_advanced_healthy_follower_by_default():
    lagging = members(M(0, applied=120), M(1, applied=100), M(2, applied=110))
    assert views.most_advanced_follower(cluster_after({"size": 3}, observed([]), observed(lagging))) == M(2).name
    down = members(M(0, applied=120), M(1, applied=100), M(2, applied=110, healthy=False))
    assert views.most_advanced_follower(cluster_after({"size": 3}, observed([]), observed(down))) == M(1).name
    alone = cluster_after({"size": 1}, observed([]), observed(members(M(0))))
    assert views.most_advanced_follower(alone) is None


def test_move_leader_reads_the_outcome_the_operator_records():
    import dataclasses as dc

    created = cluster_after({"size": 3}, observed([]), observed(RUNNING))
    request = views.leader_move_request("t1", M(2).name)
    assert views.leader_move_outcome(created, request) is None
    context = LeaderMoveContext()
    moved = after_the_step(created, dc.replace(observed(RUNNING), leader_move_requested=request), context)
    assert views.leader_move_outcome(moved, request) == f"moved from {M(0).name} to {M(2).name}"
    assert context.moved_to == [M(2).id] and [e[1] for e in context.events] == ["LeaderMoved"]
    typo = views.leader_move_request("t2", "nope")
    refused = after_the_step(moved, dc.replace(observed(RUNNING), leader_move_requested=typo), context)
    assert views.leader_move_outcome(refused, typo) == "refused: nope is not a voting member of the cluster"
    assert views.leader_move_outcome(refused, request) is None  # the record holds the newest request only
    assert context.moved_to == [M(2).id] and context.events[-1][:2] == ("Warning", "LeaderMoveRefused")
