"""etcd's auth revision through a continuous backup: the writer records it with each segment
and asks for a new base when it moved past the newest snapshot's (core/backup/planner.py);
a point-in-time restore says when its base's auth state is not the target's
(core/restore/replay_planner.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import types

import pytest

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.controllers.backup import continuous_writer
from etcd_operator.controllers.restore.executor import RestoreExecutor
from etcd_operator.core.backup import continuous as cb
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.chain import CaughtUp
from etcd_operator.core.backup.manifest import Manifest, ManifestUnauthenticated, manifest_key
from etcd_operator.core.backup.planner import plan
from etcd_operator.core.backup.segment_cutting import SegmentCutter
from etcd_operator.core.backup.segments import KeyChange, RevisionRecord, chain_id
from etcd_operator.core.backup.state import RunState
from etcd_operator.core.outcome import Outcome
from etcd_operator.core.restore import steps as restore_steps
from etcd_operator.core.restore.point_in_time import AUTH_CONDITION, AUTH_FROM_BASE, ReplayRecord
from etcd_operator.core.restore.status import build_status
from etcd_operator.programs import replay as program
from tests.support.backup_manifests import segment_manifest
from tests.unit import test_restore_point_in_time as pitr
from tests.unit import test_sealed_segments as sealed_segments
from tests.unit.test_backup_continuous import (
    CHAIN_100,
    CLUSTER,
    CONTINUOUS,
    NOW,
    QuietMember,
    SegmentStore,
    chain_writer,
    follow_until_answered,
    lease_writer,
    observed,
    state,
    status_after,
    view,
)
from tests.unit.test_sealed_segments import ObjectStore

# --- the writer ----------------------------------------------------------------------------


class AuthAnswers:
    """AuthStatus as a member answers it: an auth revision, or a failure."""

    def __init__(self, answer: int | EtcdError):
        self.answer = answer
        self.asked = 0

    async def auth_revision(self, timeout: float | None = None) -> int:
        self.asked += 1
        if isinstance(self.answer, EtcdError):
            raise self.answer
        return self.answer

    async def lease_granted_ttl(self, lease: int) -> int | None:
        raise AssertionError("no lease is used")


def cut_one(writer, client) -> list:
    """One segment of revisions 101..102 cut through the writer's own path, and uploaded."""
    cutter = SegmentCutter(1.0, 1 << 20)
    for revision in (101, 102):
        cutter.add(RevisionRecord(revision, 1000.0 + revision, (KeyChange(b"/k", b"v"),)), 0.0)

    async def go():
        await writer._cut(client, ObjectStore(), cutter)
        await writer._upload

    asyncio.run(go())
    return writer.drain()


def test_each_segment_records_the_auth_revision_read_when_it_was_cut_and_the_view_reports_it():
    writer = lease_writer()
    (manifest,) = cut_one(writer, AuthAnswers(7))
    assert manifest.auth_revision == 7 and (manifest.first_revision, manifest.last_revision) == (101, 102)
    assert writer.view().auth_revision == 7


def test_an_auth_revision_not_read_is_recorded_unknown_and_the_segment_still_goes():
    writer = lease_writer()
    refused = AuthAnswers(EtcdError("m1:2379", "AuthStatus", None, "etcdserver: request timed out"))
    (manifest,) = cut_one(writer, refused)
    assert manifest.auth_revision is None and writer.view().auth_revision is None
    fenced = lease_writer()
    fenced.fenced = True  # no quorum is left: etcd answers AuthStatus through raft
    silent = AuthAnswers(9)
    (manifest,) = cut_one(fenced, silent)
    assert manifest.auth_revision is None and silent.asked == 0


# --- the backup planner: a new base when the auth revision moved ---------------------------


def with_auth(base_auth: int | None, **fields):
    record = {"key": "p/ns/b/full.db", "revision": 100, "clusterID": CLUSTER}
    if base_auth is not None:
        record["authRevision"] = base_auth
    return state(lastBackup=record, **{"continuous": CHAIN_100, **fields})


@pytest.mark.parametrize(
    ("base_auth", "read", "new_base"),
    [(5, 5, False), (5, 6, True), (5, None, False), (None, 6, False)],
    ids=["unchanged", "moved", "writer-not-read-yet", "base-not-recorded"],
)
def test_a_full_snapshot_is_taken_once_the_writer_reads_a_newer_auth_revision_than_its_base(base_auth, read, new_base):
    step = plan(CONTINUOUS, with_auth(base_auth), observed(view(auth_revision=read)), NOW)
    assert isinstance(step, s.StartSlot if new_base else s.Stream), step
    if new_base:
        assert step.slot.startswith("full-") and step.base_for is None  # the chain goes on meanwhile
        assert "auth revision is 6" in step.message and "holds 5" in step.message


def test_once_a_newer_base_is_taken_the_old_chain_runs_to_it_without_asking_again():
    newer = {"key": "p/ns/b/new.db", "revision": 200, "clusterID": CLUSTER, "authRevision": 6}
    step = plan(CONTINUOUS, state(lastBackup=newer, continuous=CHAIN_100), observed(view(auth_revision=7)), NOW)
    assert isinstance(step, s.Stream) and step.chain == CHAIN_100["chain"]
    chain_200 = {"chain": chain_id(CLUSTER, 200), "clusterID": CLUSTER, "baseKey": newer["key"], "baseRevision": 200}
    handed_over = state(lastBackup=newer, continuous=chain_200)
    same = plan(CONTINUOUS, handed_over, observed(view(chain_200["chain"], 210, auth_revision=6)), NOW)
    assert isinstance(same, s.Stream)
    moved = plan(CONTINUOUS, handed_over, observed(view(chain_200["chain"], 210, auth_revision=7)), NOW)
    assert isinstance(moved, s.StartSlot) and "holds 6" in moved.message


# --- status.continuous.authRead: the newest reading outlives its writer ---------------------

OTHER_CLUSTER = "c2"  # the same backup's cluster after a restore gave it a new ID


def test_a_writer_resuming_its_chain_takes_the_auth_revision_its_last_segment_recorded():
    last = dataclasses.replace(segment_manifest(chain_id(CLUSTER, 10), 1, 11, 20, base_revision=10), auth_revision=7)
    writer = chain_writer(clock=1000.0)
    asyncio.run(writer._resume(SegmentStore([last])))  # type: ignore[arg-type]
    assert (writer.view().auth_revision, writer.view().cluster_id) == (7, CLUSTER)
    unrecorded = dataclasses.replace(last, auth_revision=None)
    fresh = chain_writer(clock=1000.0)
    asyncio.run(fresh._resume(SegmentStore([unrecorded])))  # type: ignore[arg-type]
    assert fresh.view().auth_revision is None


def test_a_caught_up_writer_reads_auth_at_most_every_auth_heartbeat_and_status_keeps_when(monkeypatch):
    """A cluster that writes nothing: no cut reads auth, so the heartbeat does, once caught up
    and once its last reading is AUTH_HEARTBEAT_SECONDS old (one raft entry each)."""
    monkeypatch.setattr(continuous_writer, "HEARTBEAT_SECONDS", 0.001)
    store = SegmentStore([segment_manifest(chain_id(CLUSTER, 10), 1, 11, 20, seen=1000.0)])
    now = [1500.0]
    writer = chain_writer(clock=0.0)
    writer.clock = lambda: now[0]
    asyncio.run(writer._resume(store))  # type: ignore[arg-type]

    def follow(revision: int) -> QuietMember:
        member = QuietMember(revision, reads=4, auth=5)
        follow_until_answered(writer, store, member)
        return member

    assert follow(25).auth_asked == 0  # behind the cluster: not caught up, nothing read
    assert follow(20).auth_asked == 1  # caught up: read once, then not again within 10 s
    assert (writer.view().auth_revision, writer.view().auth_read_at) == (5, 1500.0)
    now[0] = 1500.0 + continuous_writer.AUTH_HEARTBEAT_SECONDS
    assert follow(20).auth_asked == 1 and writer.view().auth_read_at == 1510.0
    written = status_after(s.Stream(chain=writer.chain), s.StreamReport(view=writer.view()), {})
    assert written["continuous"]["authRead"] == {
        "clusterID": CLUSTER,
        "authRevision": 5,
        "time": "1970-01-01T00:25:10.000Z",
    }
    assert cb.AuthRead.from_dict(written["continuous"]["authRead"]) == cb.AuthRead(CLUSTER, 5, 1510.0)


def test_a_later_reading_of_the_same_auth_revision_moves_its_time_on_and_an_older_one_never_back():
    read = cb.AuthRead(CLUSTER, 5, 100.0)
    assert read.newest(CLUSTER, 5, 110.0) == cb.AuthRead(CLUSTER, 5, 110.0)
    assert read.newest(CLUSTER, 5, 90.0) == read and read.newest(CLUSTER, 4, 120.0) == read
    assert read.newest(CLUSTER, 6, 105.0) == cb.AuthRead(CLUSTER, 6, 105.0)
    assert read.newest(CLUSTER, 5, None) == read and read.newest(CLUSTER, None, 130.0) == read


def report(auth: int | None, cluster: str = CLUSTER, chain: str = CHAIN_100["chain"]) -> s.StreamReport:
    return s.StreamReport(view=view(chain, 150, auth_revision=auth, cluster_id=cluster))


def test_the_newest_auth_reading_is_kept_in_status_and_never_goes_back():
    start = cb.ChainStart(CHAIN_100["chain"], CLUSTER, "p/ns/b/full.db", 100)
    status = status_after(s.StartStream(start=start), report(None), {})
    assert "authRead" not in status["continuous"]  # nothing read yet
    status = status_after(s.Stream(chain=start.chain), report(7), status)
    assert status["continuous"]["authRead"] == {"clusterID": CLUSTER, "authRevision": 7}
    # The operator restarts (or a standby takes over): its writer has read nothing yet, then
    # resumes after an older segment; what status recorded stays.
    for step, reading in ((s.StartStream(start=start), None), (s.Stream(chain=start.chain), 6)):
        status = status_after(step, report(reading), status)
        assert status["continuous"]["authRead"] == {"clusterID": CLUSTER, "authRevision": 7}
    status = status_after(s.Stream(chain=start.chain), report(9), status)
    assert status["continuous"]["authRead"]["authRevision"] == 9
    broken = cb.ChainBreak(start.chain, cb.COMPACTED, "compacted", 150)
    status = status_after(s.MarkChainBroken(chain_break=broken), s.NOTHING_DONE, status)
    assert status["continuous"]["authRead"]["authRevision"] == 9
    # A restore gave the cluster a new ID: its auth revisions start anew, and replace the old one's.
    restored = cb.ChainStart(chain_id(OTHER_CLUSTER, 5), OTHER_CLUSTER, "p/ns/b/r.db", 5)
    status = status_after(s.StartStream(start=restored), report(2, OTHER_CLUSTER, restored.chain), status)
    assert status["continuous"]["authRead"] == {"clusterID": OTHER_CLUSTER, "authRevision": 2}


def recorded(auth: int, cluster: str = CLUSTER) -> dict:
    return {**CHAIN_100, "authRead": {"clusterID": cluster, "authRevision": auth}}


@pytest.mark.parametrize(
    ("read", "cluster", "new_base"),
    [(7, CLUSTER, True), (5, CLUSTER, False), (7, OTHER_CLUSTER, False)],
    ids=["moved", "unchanged", "another-clusters"],
)
def test_after_a_restart_the_planner_compares_the_base_with_the_recorded_reading(read, cluster, new_base):
    """The writer started after the restart has read nothing yet (auth_revision None)."""
    step = plan(CONTINUOUS, with_auth(5, continuous=recorded(read, cluster)), observed(view()), NOW)
    assert isinstance(step, s.StartSlot if new_base else s.Stream), step
    if new_base:
        assert "auth revision is 7" in step.message and "holds 5" in step.message


def test_a_reading_of_the_old_chain_reported_before_a_restart_gets_a_new_base_once_handed_over():
    """The old chain's writer reads auth revision 7 after the newer base (6) was taken; it is
    not asked while the old chain runs to it. The operator restarts; the writer of the new
    chain has read nothing: the status the old writer's report left asks for a new base."""
    newer = {"key": "p/ns/b/new.db", "revision": 200, "clusterID": CLUSTER, "authRevision": 6}
    previous = {"lastBackup": newer, "continuous": CHAIN_100}
    running_old = plan(CONTINUOUS, RunState.from_dict(previous), observed(view(auth_revision=7)), NOW)
    assert isinstance(running_old, s.Stream) and running_old.chain == CHAIN_100["chain"]
    status = status_after(running_old, report(7), previous)
    chain_200 = {"chain": chain_id(CLUSTER, 200), "clusterID": CLUSTER, "baseKey": newer["key"], "baseRevision": 200}
    restarted = RunState.from_dict({**status, "continuous": {**status["continuous"], **chain_200}})
    step = plan(CONTINUOUS, restarted, observed(view(chain_200["chain"], 210)), NOW)
    assert isinstance(step, s.StartSlot) and "auth revision is 7" in step.message and "holds 6" in step.message


# --- the point-in-time restore: says when the base's auth state is not the target's --------


def auth_catalogue(base_25: int | None, segment_auths: tuple[int | None, ...]) -> pitr.Catalogue:
    segments = tuple(
        dataclasses.replace(seg, auth_revision=auth)
        for seg, auth in zip(pitr.CATALOGUE.segments, segment_auths, strict=True)
    )
    base_10, base_25_manifest = pitr.CATALOGUE.snapshots
    snapshots = (
        dataclasses.replace(base_10, auth_revision=3),
        dataclasses.replace(base_25_manifest, auth_revision=base_25),
    )
    return dataclasses.replace(pitr.CATALOGUE, snapshots=snapshots, segments=segments)


def restore_conditions(step: restore_steps.Step, previous: dict | None = None) -> dict:
    status = build_status(previous or {"phase": "Verifying"}, step, Outcome(), 1, "2026-11-27T00:00:00Z")
    return {c["type"]: c for c in status["conditions"]}, status


@pytest.mark.parametrize(
    ("point", "base_25", "segment_auths", "expected", "reason"),
    [
        ({"revision": 22}, 3, (3, 3, 5), "True", "AuthUnchanged"),  # base 10 (auth 3), segment 2 (auth 3)
        ({"revision": 35}, 3, (3, 3, 5), "False", AUTH_FROM_BASE),  # base 25 (auth 3), segment 3 (auth 5)
        ({"revision": 35}, None, (3, 3, 5), "Unknown", AUTH_FROM_BASE),  # the base recorded none
        ({"revision": 35}, 5, (3, 3, None), "Unknown", AUTH_FROM_BASE),  # the target's segment recorded none
        ({"revision": 25}, None, (3, 3, 5), "True", "BaseIsThePoint"),  # nothing replayed
    ],
    ids=["same", "moved", "base-unknown", "target-unknown", "base-is-the-point"],
)
def test_a_restore_says_when_its_bases_auth_state_may_not_be_the_targets(
    point, base_25, segment_auths, expected, reason
):
    step = pitr.planned(point, auth_catalogue(base_25, segment_auths))
    conditions, status = restore_conditions(step)
    auth = conditions[AUTH_CONDITION]
    assert (auth["status"], auth["reason"]) == (expected, reason), auth
    assert status["phase"] == "Replaying"  # the data is restored either way
    if expected != "True":
        record = step.record
        for revision in (record.base_auth_revision, record.target_auth_revision):
            assert f"auth revision {'none (not recorded)' if revision is None else revision} " in auth["message"]
        assert "spec.auth" in auth["message"] and "declared passwords set again" in auth["message"]


@pytest.mark.parametrize(
    ("time", "caught_up", "expected", "reason", "witness"),
    [
        # Revision 31 was seen at 31 s, after the point: segment 3, cut after it, read auth 5.
        # Segment 2 (auth 3) was cut before the point, so an auth change between could hide there.
        ("1970-01-01T00:00:30.500Z", (), "False", AUTH_FROM_BASE, 3),
        # Inside segment 2: its own reading, taken when it was cut after revision 30, is after the point.
        ("1970-01-01T00:00:25.500Z", (), "True", "AuthUnchanged", 2),
        # After the last segment, vouched for by the writer's heartbeat only: no auth reading
        # was taken after the point, so an auth change while no key changed is not ruled out.
        ("1970-01-01T00:00:42Z", (CaughtUp(pitr.CHAIN, 40, 45.0),), "Unknown", AUTH_FROM_BASE, None),
    ],
    ids=["after-a-cut", "inside-a-segment", "idle-after-the-last-cut"],
)
def test_a_time_target_takes_its_auth_reading_from_a_segment_cut_after_it(time, caught_up, expected, reason, witness):
    catalogue = dataclasses.replace(auth_catalogue(3, (3, 3, 5 if witness == 3 else 3)), caught_up=caught_up)
    step = pitr.planned({"time": time}, catalogue)
    conditions, status = restore_conditions(step)
    auth = conditions[AUTH_CONDITION]
    assert (auth["status"], auth["reason"], step.record.target_auth_segment) == (expected, reason, witness), auth
    if witness is None:
        assert "no segment was cut after it" in auth["message"], auth["message"]
    recorded = status["pointInTime"]
    assert recorded.get("targetAuthSegment") == witness and recorded["baseIsThePoint"] is False
    assert ReplayRecord.from_dict(recorded) == step.record


@pytest.mark.parametrize(
    ("auth_read", "expected", "reason"),
    [
        (cb.AuthRead("c1", 3, 44.0), "True", "AuthUnchanged"),  # read after the point: as the base
        (cb.AuthRead("c1", 5, 44.0), "False", AUTH_FROM_BASE),  # moved by then: maybe before the point
        (cb.AuthRead("c1", 3, 41.0), "Unknown", AUTH_FROM_BASE),  # read before the point
        (cb.AuthRead("c1", 3, None), "Unknown", AUTH_FROM_BASE),  # recorded without its time
        (cb.AuthRead(OTHER_CLUSTER, 3, 44.0), "Unknown", AUTH_FROM_BASE),  # another cluster's
    ],
    ids=["unchanged", "moved", "read-before", "no-time", "another-cluster"],
)
def test_a_time_after_the_last_cut_takes_its_auth_reading_from_the_writers_read_after_it(auth_read, expected, reason):
    """Status.continuous.authRead: the writer reads auth while caught up (at most every 10 s),
    so a cluster that writes nothing still has an auth reading after the point."""
    catalogue = dataclasses.replace(
        auth_catalogue(3, (3, 3, 3)), caught_up=(CaughtUp(pitr.CHAIN, 40, 45.0),), auth_read=auth_read
    )
    step = pitr.planned({"time": "1970-01-01T00:00:42Z"}, catalogue)
    conditions, status = restore_conditions(step)
    auth = conditions[AUTH_CONDITION]
    assert (auth["status"], auth["reason"], step.record.target_auth_segment) == (expected, reason, None), auth
    recorded = status["pointInTime"]
    if expected == "Unknown":
        assert "targetAuthReadTime" not in recorded and "no segment was cut after it" in auth["message"]
    else:
        assert recorded["targetAuthReadTime"] == "1970-01-01T00:00:44.000Z"
        assert recorded["targetAuthRevision"] == auth_read.auth_revision
    if expected == "False":
        assert "read by the backup's writer at 1970-01-01T00:00:44.000Z, after the point" in auth["message"]
    assert ReplayRecord.from_dict(recorded) == step.record


def test_a_record_written_before_the_auth_segment_was_recorded_reads_as_it_meant():
    """status.pointInTime of an earlier operator: the last segment replayed was the reading,
    and nothing replayed meant the base was the point."""
    replayed = ReplayRecord.from_dict({"baseKey": "k", "segments": 2, "lastSequence": 7, "targetAuthRevision": 4})
    assert replayed is not None and (replayed.target_auth_segment, replayed.base_is_point) == (7, False)
    alone = ReplayRecord.from_dict({"baseKey": "k", "baseAuthRevision": 4, "targetAuthRevision": 4})
    assert alone is not None and (alone.target_auth_segment, alone.base_is_point) == (None, True)


def test_the_auth_condition_stays_on_later_passes_and_the_plan_posts_one_warning_event():
    step = pitr.planned({"revision": 35}, auth_catalogue(3, (3, 3, 5)))
    _, status = restore_conditions(step)
    later, _ = restore_conditions(restore_steps.StartReplayPod("replaying"), status)
    assert later[AUTH_CONDITION]["status"] == "False"
    assert "auth revision 3 recorded with base snapshot p/ns/nightly/s25.db" in later[AUTH_CONDITION]["message"]
    events: list[tuple[str, str, str]] = []
    poster = types.SimpleNamespace(post_event=lambda *event: events.append(event))
    asyncio.run(RestoreExecutor._plan_replay(poster, step, None, None, None))  # type: ignore[arg-type]
    assert [(kind, reason) for kind, reason, _ in events] == [("Warning", AUTH_FROM_BASE)]
    unchanged = pitr.planned({"revision": 22}, auth_catalogue(3, (3, 3, 5)))
    asyncio.run(RestoreExecutor._plan_replay(poster, unchanged, None, None, None))  # type: ignore[arg-type]
    assert len(events) == 1


# --- the replayed snapshot's own manifest: the base's auth state, named as such ---------------


def replayed_manifest(tmp_path, monkeypatch, member, base_auth: int | None) -> tuple[Manifest, bytes]:
    """`store` run as the replay runs it, after a replay that read `base_auth` from the
    scratch member before its first revision: the manifest it uploaded, and as stored."""
    monkeypatch.setattr(program, "save_snapshot", lambda socket, tls, path: (path.write_bytes(b"db"), ("", 2))[1])
    s = sealed_segments.settings(tmp_path, replayed_key_id="k1")
    s.work.mkdir(exist_ok=True)
    store = ObjectStore()
    base = Manifest(sealed_segments.BASE_KEY, "nightly", "ns", "src", "c1", "3.6.0", 10, 1, "s", "t", "m", "s10")
    base = dataclasses.replace(base, auth_revision=3)  # read before the base: it holds 3 or newer
    progress = program.Progress(16, 116.0, 6, base_auth_revision=base_auth)
    encoding = program.replayed_encoding(s, {"k1": sealed_segments.KEY})
    asyncio.run(program.store(store, member, s, progress, base, encoding))  # type: ignore[arg-type]
    stored = store.objects[manifest_key(s.output_key)]
    return Manifest.read(stored, manifest_key(s.output_key), {"k1": sealed_segments.KEY}), stored


def test_the_replayed_snapshots_manifest_records_the_bases_auth_revision_and_never_claims_the_points(
    tmp_path, monkeypatch
):
    manifest, stored = replayed_manifest(tmp_path, monkeypatch, sealed_segments.ScratchMember(auth=4), base_auth=4)
    assert manifest.revision == 16 and manifest.base_auth_revision == 4
    # No reader can take it for the source's auth revision at revision 16: that field is absent.
    assert manifest.auth_revision is None and "authRevision" not in json.loads(stored)
    assert "authRevision" not in manifest.status_record()
    # The MAC covers it, as every field.
    document = json.loads(stored)
    document["baseAuthRevision"] = 5
    with pytest.raises(ManifestUnauthenticated):
        Manifest.read(json.dumps(document).encode(), manifest.key, {"k1": sealed_segments.KEY})


@pytest.mark.parametrize(
    ("before_replay", "before_snapshot"),
    [(4, 5), (None, 4), (4, EtcdError("unix:///s", "AuthStatus", None, "context deadline exceeded"))],
    ids=["moved-during-the-replay", "not-read-before", "not-read-after"],
)
def test_the_replayed_snapshots_auth_revision_is_left_unknown_unless_both_reads_agree(
    tmp_path, monkeypatch, before_replay, before_snapshot
):
    member = sealed_segments.ScratchMember(auth=before_snapshot)
    manifest, stored = replayed_manifest(tmp_path, monkeypatch, member, base_auth=before_replay)
    assert manifest.base_auth_revision is None and manifest.auth_revision is None
    assert not {"authRevision", "baseAuthRevision"} & json.loads(stored).keys()  # unknown, and the snapshot went
