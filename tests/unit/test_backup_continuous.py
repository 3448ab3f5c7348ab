"""The continuous backup's pure parts: grouping watch events into whole revisions, when a
segment is cut, the planner's stream steps, the status they leave, and which segments
retention may delete (core/backup/segment_cutting.py, planner.py, continuous_status.py,
segment_retention.py); and the writer's stamps and its check of the member it watches."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import pathlib

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from etcd_operator.clients.etcd.client import EtcdError, WatchBatch, WatchEvent
from etcd_operator.clients.storage.s3 import S3Location, S3Storage, StorageClosed
from etcd_operator.controllers.backup import continuous_writer, segment_store
from etcd_operator.controllers.backup.continuous_writer import ChainBroken, MemberBehind, SegmentWriter
from etcd_operator.core.backup import continuous as cb
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.chain import ChainProblem, Target, plan_replay
from etcd_operator.core.backup.continuous_status import CONDITION
from etcd_operator.core.backup.manifest import Identity, Manifest
from etcd_operator.core.backup.planner import CHAIN_BROKEN, WAITING_FOR_BASE, plan
from etcd_operator.core.backup.segment_cutting import (
    LeaseNotLearnt,
    RevisionGap,
    RevisionGrouper,
    SegmentCutter,
    encoded_size,
)
from etcd_operator.core.backup.segment_retention import parse_manifest_key, segments_to_delete
from etcd_operator.core.backup.segments import (
    MAGIC,
    KeyChange,
    RevisionRecord,
    SegmentBody,
    SegmentManifest,
    chain_id,
    encode,
    segments_prefix,
)
from etcd_operator.core.backup.spec import BackupSpec
from etcd_operator.core.backup.state import Observed, RunState, ScheduleSpec
from etcd_operator.core.backup.status import build_status
from etcd_operator.core.buffer_budget import DEFAULT_LIMIT_BYTES
from etcd_operator.core.cluster.observed import MemberStatus
from etcd_operator.core.leadership_fence import LeadershipLost, install_process_write_guard
from etcd_operator.core.restore.point_in_time import caught_up_of
from tests.support.backup_manifests import SEGMENT_BYTES, segment_manifest, snapshot_manifest
from tests.support.object_store import MemoryStore

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
NOW = (T0 + datetime.timedelta(hours=1)).timestamp()
CREATED = Observed(T0, generation=1)
CONTINUOUS = ScheduleSpec(None, continuous=cb.ContinuousSpec())
CLUSTER = "c1"


def change(key: bytes, value: bytes | None = b"v", lease: int = 0) -> KeyChange:
    return KeyChange(key, value, lease)


# --- grouping events into revisions -------------------------------------------------------


def test_events_are_grouped_by_revision_and_a_complete_response_closes_its_last():
    grouper = RevisionGrouper(5)
    closed = grouper.feed([(5, change(b"a")), (6, change(b"b")), (6, change(b"c", None))], True, 10.0)
    assert [(r.revision, r.changes) for r in closed] == [
        (5, (change(b"a"),)),
        (6, (change(b"b"), change(b"c", None))),
    ]
    assert grouper.next_revision == 7 and not grouper.holds


def test_a_revision_split_across_fragments_stays_whole_with_its_first_time():
    grouper = RevisionGrouper(5)
    assert [r.revision for r in grouper.feed([(5, change(b"a")), (6, change(b"b"))], False, 1.0)] == [5]
    assert grouper.holds
    closed = grouper.feed([(6, change(b"c")), (6, change(b"d"))], True, 2.0)
    assert closed == [RevisionRecord(6, 1.0, (change(b"b"), change(b"c"), change(b"d")))]


@pytest.mark.parametrize("events", [[(6, change(b"a"))], [(5, change(b"a")), (7, change(b"b"))], [(4, change(b"a"))]])
def test_a_missing_or_repeated_revision_is_a_gap(events):
    with pytest.raises(RevisionGap):
        RevisionGrouper(5).feed(events, True, 1.0)


def test_an_open_revision_dropped_on_reconnect_is_taken_again_from_its_start():
    grouper = RevisionGrouper(5)
    grouper.feed([(5, change(b"a")), (6, change(b"b"))], False, 1.0)
    grouper.drop_open()
    assert grouper.next_revision == 6
    assert grouper.feed([(6, change(b"b")), (6, change(b"c"))], True, 3.0) == [
        RevisionRecord(6, 3.0, (change(b"b"), change(b"c")))
    ]


@given(st.lists(st.lists(st.binary(min_size=1, max_size=8), min_size=1, max_size=4), min_size=1, max_size=30))
def test_any_fragmentation_gives_the_same_revisions(per_revision):
    events = [(100 + i, change(k)) for i, keys in enumerate(per_revision) for k in keys]
    whole = RevisionGrouper(100).feed(events, True, 1.0)
    grouper, pieces = RevisionGrouper(100), []
    for start in range(0, len(events), 3):
        pieces += grouper.feed(events[start : start + 3], start + 3 >= len(events), 1.0)
    assert pieces == whole
    assert [r.revision for r in whole] == list(range(100, 100 + len(per_revision)))


# --- cutting segments -----------------------------------------------------------------------


def test_encoded_size_is_what_the_codec_writes():
    records = (RevisionRecord(3, 1.0, (change(b"key", b"value"), change(b"gone", None))),)
    body = SegmentBody(records)
    assert len(encode(body)) == len(MAGIC) + encoded_size(records[0]) + 1 + 4


def test_a_segment_is_cut_when_its_oldest_revision_waited_segment_seconds():
    cutter = SegmentCutter(segment_seconds=1.0, segment_bytes=1 << 20)
    assert not cutter.due(0.0) and cutter.seconds_left(0.0) == float("inf")
    cutter.add(RevisionRecord(1, 0.0, (change(b"a"),)), now=10.0)
    cutter.add(RevisionRecord(2, 0.0, (change(b"b"),)), now=10.9)
    assert not cutter.due(10.99) and cutter.seconds_left(10.5) == pytest.approx(0.5)
    assert cutter.due(11.0)
    cut = cutter.take({}, set())
    assert [r.revision for r in cut.body.revisions] == [1, 2] and cutter.empty
    assert cutter.seconds_left(11.0) == float("inf")


def test_a_segment_is_cut_by_size_and_a_large_revision_is_never_split():
    cutter = SegmentCutter(segment_seconds=60.0, segment_bytes=100)
    big = RevisionRecord(1, 0.0, (change(b"a", b"x" * 500),))
    cutter.add(big, now=0.0)
    assert cutter.full() and cutter.due(0.0)
    assert cutter.take({}, set()).body.revisions == (big,)


def test_a_lease_goes_with_the_first_segment_that_uses_it_with_its_ttl_or_as_gone():
    cutter = SegmentCutter(1.0, 1 << 20)
    known: dict[int, int | None] = {7: 30, 8: None}
    reported: set[int] = set()
    cutter.add(RevisionRecord(1, 0.0, (change(b"a", lease=7), change(b"b", lease=8))), 0.0)
    assert cutter.leases_used() == {7, 8}
    body = cutter.take(known, reported).body
    assert (body.leases, body.gone_leases) == (((7, 30),), (8,))
    cutter.add(RevisionRecord(2, 0.0, (change(b"c", lease=7),)), 0.0)
    body = cutter.take(known, reported).body
    assert (body.leases, body.gone_leases) == ((), ())


def test_a_lease_not_learnt_is_never_left_out_of_a_segment():
    cutter = SegmentCutter(1.0, 1 << 20)
    cutter.add(RevisionRecord(1, 0.0, (change(b"a", lease=7), change(b"b", lease=8))), 0.0)
    with pytest.raises(LeaseNotLearnt, match="lease 8"):
        cutter.take({7: 30}, set())
    assert not cutter.empty  # nothing was taken: the writer breaks the chain instead


# --- the planner --------------------------------------------------------------------------


def state(**fields) -> RunState:
    status: dict = {"lastBackup": {"key": "p/ns/b/full.db", "revision": 100, "clusterID": CLUSTER}}
    status.update(fields)
    return RunState.from_dict({k: v for k, v in status.items() if v is not None})


CHAIN_100 = {"chain": chain_id(CLUSTER, 100), "clusterID": CLUSTER, "baseKey": "p/ns/b/full.db", "baseRevision": 100}


def view(chain: str = CHAIN_100["chain"], last: int = 150, **fields) -> cb.StreamView:
    return cb.StreamView(chain=chain, last_revision=last, **fields)


def observed(stream: cb.StreamView | None = None, **fields) -> Observed:
    return dataclasses.replace(CREATED, stream=stream, **fields)


def test_without_a_full_snapshot_one_is_taken_first():
    step = plan(CONTINUOUS, RunState(), observed(), NOW)
    assert isinstance(step, s.StartSlot) and step.slot.startswith("full-") and step.base_for == WAITING_FOR_BASE


def test_with_a_full_snapshot_the_writer_starts_after_it():
    step = plan(CONTINUOUS, state(), observed(), NOW)
    assert isinstance(step, s.StartStream)
    assert step.start == cb.ChainStart(chain_id(CLUSTER, 100), CLUSTER, "p/ns/b/full.db", 100)


def test_a_running_writer_of_the_recorded_chain_streams_on():
    step = plan(CONTINUOUS, state(continuous=CHAIN_100), observed(view()), NOW)
    assert isinstance(step, s.Stream) and step.chain == CHAIN_100["chain"]


def test_a_restarted_operator_resumes_the_recorded_chain():
    step = plan(CONTINUOUS, state(continuous=CHAIN_100), observed(None), NOW)
    assert isinstance(step, s.StartStream) and step.start.chain == CHAIN_100["chain"]


def test_a_broken_chain_is_recorded_first_even_during_a_verification():
    broken = cb.ChainBreak(CHAIN_100["chain"], cb.COMPACTED, "compacted", 150)
    verifying = {"verification": {"key": "k", "attempts": 1, "startTime": "2026-01-01T00:30:00Z"}}
    step = plan(CONTINUOUS, state(continuous=CHAIN_100, **verifying), observed(view(broken=broken)), NOW)
    assert isinstance(step, s.MarkChainBroken) and step.chain_break == broken


def test_after_a_break_a_full_snapshot_comes_before_any_new_chain():
    after_break = state(continuous={"needsFullSnapshot": True})
    step = plan(CONTINUOUS, after_break, observed(), NOW)
    assert isinstance(step, s.StartSlot) and step.base_for == CHAIN_BROKEN
    # The snapshot run is finished before anything else; once it succeeded, a new chain starts from it.
    running = state(continuous={"needsFullSnapshot": True}, progress={"slot": step.slot})
    assert isinstance(plan(CONTINUOUS, running, observed(), NOW), s.RunBackup)
    fresh = state(lastBackup={"key": "p/ns/b/new.db", "revision": 900, "clusterID": CLUSTER})
    started = plan(CONTINUOUS, fresh, observed(), NOW)
    assert isinstance(started, s.StartStream) and started.start.base_revision == 900


def test_a_failed_full_snapshot_after_a_break_waits_for_its_retry_without_a_chain():
    failed = state(
        continuous={"needsFullSnapshot": True},
        lastFailure={"slot": "full-x"},
        nextAttemptTime="2026-01-01T01:00:30Z",
    )
    assert isinstance(plan(CONTINUOUS, failed, observed(), NOW), s.WaitForRetry)
    assert isinstance(plan(CONTINUOUS, failed, observed(), NOW + 31), s.RetrySlot)


@pytest.mark.parametrize(
    ("counters", "due"),
    [
        ({"eventsSinceFullSnapshot": 249_999}, False),
        ({"eventsSinceFullSnapshot": 250_000}, True),
        ({"bytesSinceFullSnapshot": (1 << 30) - 1}, False),
        ({"bytesSinceFullSnapshot": 1 << 30}, True),
    ],
)
def test_a_full_snapshot_follows_the_volume_written_since_the_last(counters, due):
    step = plan(CONTINUOUS, state(continuous={**CHAIN_100, **counters}), observed(view()), NOW)
    assert isinstance(step, s.StartSlot if due else s.Stream), step
    if due:
        assert step.base_for is None  # the writer keeps its chain meanwhile


def test_the_schedule_also_takes_full_snapshots_while_streaming():
    scheduled = dataclasses.replace(CONTINUOUS, schedule="*/10 * * * *")
    step = plan(scheduled, state(continuous=CHAIN_100), observed(view()), NOW)
    assert isinstance(step, s.StartSlot) and not step.slot.startswith("full-")


def test_a_newer_snapshot_starts_a_new_chain_only_once_the_old_one_reached_it():
    newer = state(lastBackup={"key": "p/ns/b/new.db", "revision": 200, "clusterID": CLUSTER}, continuous=CHAIN_100)
    behind = plan(CONTINUOUS, newer, observed(view(last=199)), NOW)
    assert isinstance(behind, s.Stream) and behind.chain == CHAIN_100["chain"]
    reached = plan(CONTINUOUS, newer, observed(view(last=200)), NOW)
    assert isinstance(reached, s.StartStream) and reached.start.chain == chain_id(CLUSTER, 200)


def test_a_restart_mid_chain_resumes_the_recorded_chain_until_it_reached_the_new_base():
    """What status holds after the operator died while its writer was at revision 150 and a
    full snapshot at 200 had just completed (status.lastBackup): no writer runs in the new
    process. Starting the chain at 200 would leave revisions 151..200 reachable from nowhere."""
    newer = {"lastBackup": {"key": "p/ns/b/new.db", "revision": 200, "clusterID": CLUSTER}}
    restarted = state(**newer, continuous={**CHAIN_100, "lastRevision": 150, "eventsSinceFullSnapshot": 0})
    step = plan(CONTINUOUS, restarted, observed(None), NOW)
    assert isinstance(step, s.StartStream) and step.start == cb.ChainStart(
        CHAIN_100["chain"], CLUSTER, "p/ns/b/full.db", 100
    )
    caught_up = state(**newer, continuous={**CHAIN_100, "lastRevision": 200})
    step = plan(CONTINUOUS, caught_up, observed(None), NOW)
    assert isinstance(step, s.StartStream) and step.start.chain == chain_id(CLUSTER, 200)


@pytest.mark.parametrize(
    ("spec", "meta"),
    [
        (CONTINUOUS, {"deleting": True}),
        (ScheduleSpec(None), {}),
        (dataclasses.replace(CONTINUOUS, suspend=True), {}),
        (CONTINUOUS, {"credentials_refusal": "no ambient credentials here"}),
    ],
)
def test_a_writer_that_should_not_run_is_stopped_before_anything_else(spec, meta):
    step = plan(spec, state(continuous=CHAIN_100), observed(view(), **meta), NOW)
    assert isinstance(step, s.StopStream)
    after = plan(spec, state(continuous=CHAIN_100), observed(None, **meta), NOW)
    assert not isinstance(after, (s.StopStream, s.StartStream, s.Stream))


def test_a_recorded_slot_is_finished_while_the_writer_runs():
    step = plan(CONTINUOUS, state(continuous=CHAIN_100, progress={"slot": "full-x"}), observed(view()), NOW)
    assert isinstance(step, s.RunBackup) and step.continuous_chain == CHAIN_100["chain"]


# --- status -------------------------------------------------------------------------------


def status_after(step: s.Step, outcome: s.Outcome, previous: dict) -> dict:
    return {**previous, **build_status(step, outcome, previous, 1, "2026-01-01T01:00:00Z")}


def condition(status: dict, type_: str = CONDITION) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_streaming_records_the_chain_and_adds_what_was_written():
    start = cb.ChainStart(CHAIN_100["chain"], CLUSTER, "p/ns/b/full.db", 100)
    status = status_after(s.StartStream(start=start), s.StreamReport(view=view(last=100)), {})
    assert status["continuous"]["chain"] == start.chain and status["phase"] == "Streaming"
    report = s.StreamReport(
        view=view(last=180, cluster_revision=185, last_segment_at=NOW), written=cb.SegmentsWritten(2, 80, 9000)
    )
    status = status_after(s.Stream(chain=start.chain), report, status)
    continuous = status["continuous"]
    assert (continuous["lastRevision"], continuous["lagRevisions"]) == (180, 5)
    assert (continuous["segmentsSinceFullSnapshot"], continuous["eventsSinceFullSnapshot"]) == (2, 80)
    assert condition(status)["status"] == "True" and condition(status)["reason"] == "Streaming"
    unavailable = s.StreamReport(view=view(last=180, store_error="503 SlowDown"))
    assert condition(status_after(s.Stream(chain=start.chain), unavailable, status))["reason"] == "StoreUnavailable"


def test_a_writer_resuming_the_recorded_chain_never_moves_its_last_revision_back():
    start = cb.ChainStart(CHAIN_100["chain"], CLUSTER, "p/ns/b/full.db", 100)
    previous = {"continuous": {**CHAIN_100, "lastRevision": 150}}
    status = status_after(s.StartStream(start=start), s.StreamReport(view=view(last=100)), previous)
    assert status["continuous"]["lastRevision"] == 150
    newer = cb.ChainStart(chain_id(CLUSTER, 200), CLUSTER, "p/ns/b/new.db", 200)
    status = status_after(s.StartStream(start=newer), s.StreamReport(view=view(newer.chain, last=200)), status)
    assert status["continuous"]["lastRevision"] == 200


def test_a_break_clears_the_chain_until_a_full_snapshot_resets_the_volume():
    previous = {"continuous": {**CHAIN_100, "eventsSinceFullSnapshot": 5}}
    broken = cb.ChainBreak(CHAIN_100["chain"], cb.COMPACTED, "revision 151 was compacted", 150)
    status = status_after(s.MarkChainBroken(chain_break=broken), s.NOTHING_DONE, previous)
    assert status["continuous"]["chain"] is None and status["continuous"]["needsFullSnapshot"] is True
    assert status["continuous"]["lastBreak"]["reason"] == cb.COMPACTED
    assert (condition(status)["status"], condition(status)["reason"]) == ("False", CHAIN_BROKEN)
    # Carried through the steps that say nothing of the writer.
    waited = status_after(s.WaitForPrerequisite(reason="WaitingForCluster"), s.NOTHING_DONE, status)
    assert condition(waited)["reason"] == CHAIN_BROKEN
    record = {"key": "p/ns/b/new.db", "revision": 900, "clusterID": CLUSTER}
    done = s.RunSucceeded(record=record, completed_at="2026-01-01T01:00:00Z")
    status = status_after(s.RunBackup(slot="full-x", one_shot=False), done, status)
    assert status["continuous"]["eventsSinceFullSnapshot"] == 0 and status["continuous"]["needsFullSnapshot"] is None
    assert isinstance(plan(CONTINUOUS, RunState.from_dict(status), observed(), NOW), s.StartStream)


# --- retention of segments ------------------------------------------------------------------


def snapshot(revision: int, cluster: str = CLUSTER) -> Manifest:
    return snapshot_manifest(revision, cluster_id=cluster, verified=None)


def segment(chain: str, sequence: int, first: int, last: int, cluster: str = CLUSTER) -> SegmentManifest:
    return segment_manifest(
        chain, sequence, first, last, cluster_id=cluster, base_revision=int(chain.rsplit("-", 1)[1])
    )


def test_a_segment_manifests_name_gives_its_chain_sequence_and_revisions():
    prefix = segments_prefix("p", "ns", "b")
    seg = segment(chain_id(CLUSTER, 100), 3, 101, 150)
    assert parse_manifest_key(prefix, seg.key) == (seg.chain, 3, 101, 150)
    assert parse_manifest_key(prefix, seg.segment_key) is None
    assert parse_manifest_key(prefix, "p/ns/b/s1.manifest.json") is None


def test_segments_wholly_below_the_oldest_kept_snapshot_go_the_newest_chain_stays():
    old, new = chain_id(CLUSTER, 100), chain_id(CLUSTER, 300)
    segments = [segment(old, 1, 101, 200), segment(old, 2, 201, 310), segment(new, 1, 301, 400)]
    doomed = segments_to_delete([snapshot(250), snapshot(300)], segments, newest_chain=new)
    assert doomed == [segments[0]]
    assert segments_to_delete([snapshot(500)], segments, newest_chain=new) == segments[:2]
    other = segment(chain_id("c2", 10), 1, 11, 20, cluster="c2")
    assert segments_to_delete([snapshot(500)], [other], newest_chain=new) == [other]  # nothing can replay it


def chains(draw) -> tuple[list[Manifest], list[SegmentManifest]]:
    """Snapshots at increasing revisions; a chain from each of some of them, each written
    up to some revision at or past the next snapshot (a handover) or a little less."""
    revisions = sorted(draw(st.sets(st.integers(1, 400), min_size=1, max_size=6)))
    snapshots = [snapshot(r) for r in revisions]
    segments: list[SegmentManifest] = []
    for base in revisions:
        if not draw(st.booleans()):
            continue
        chain = chain_id(CLUSTER, base)
        end = draw(st.integers(base + 1, base + 150))
        first, sequence = base + 1, 1
        while first <= end:
            last = min(end, first + draw(st.integers(0, 30)))
            segments.append(segment(chain, sequence, first, last))
            first, sequence = last + 1, sequence + 1
    return snapshots, segments


@given(st.data())
def test_retention_never_breaks_a_chain_a_kept_snapshot_needs(data):
    snapshots, segments = chains(data.draw)
    kept = data.draw(st.lists(st.sampled_from(snapshots), min_size=1, unique_by=lambda m: m.revision))
    newest = data.draw(st.sampled_from([s.chain for s in segments] or [""]))
    doomed = segments_to_delete(kept, segments, newest)
    left = [s for s in segments if s not in doomed]
    oldest = min(m.revision for m in kept)
    newest_revision = max([s.last_revision for s in segments] + [oldest])
    for revision in range(oldest, newest_revision + 1):
        try:
            before = plan_replay(Target(revision=revision), kept, segments)
        except ChainProblem:
            continue
        after = plan_replay(Target(revision=revision), kept, left)
        assert after.up_to_revision == before.up_to_revision == revision
    assert all(s.chain != newest for s in doomed)


# --- the CRD --------------------------------------------------------------------------------


def test_the_crd_defaults_are_the_cores_and_a_writer_fits_the_default_budget():
    crd = yaml.safe_load((pathlib.Path(__file__).resolve().parents[2] / "crds" / "etcdbackups.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    continuous = spec["properties"]["continuous"]["properties"]
    after = continuous["fullSnapshotAfter"]["properties"]
    defaults = cb.ContinuousSpec()
    assert continuous["segmentSeconds"]["default"] == defaults.segment_seconds
    assert continuous["segmentBytes"]["default"] == defaults.segment_bytes
    assert after["events"]["default"] == defaults.full_snapshot_after_events
    assert after["bytes"]["default"] == defaults.full_snapshot_after_bytes
    largest = cb.ContinuousSpec(segment_bytes=continuous["segmentBytes"]["maximum"])
    assert largest.budget_bytes <= DEFAULT_LIMIT_BYTES
    assert cb.ContinuousSpec.from_dict({"continuous": {"enabled": False}}) is None


def test_a_silent_watch_is_told_from_a_quiet_cluster():
    from etcd_operator.core.backup.segment_cutting import WatchProgress

    progress = WatchProgress(stall_seconds=10)
    assert progress.observe(100, 100, now=0) is None  # caught up: quiet
    assert progress.observe(105, 100, now=2) is None  # behind: owed 105 since 2
    assert progress.observe(110, 103, now=8) is None  # moving, but 105 still owed
    assert "revision 105" in progress.observe(112, 104, now=13)  # 105 owed for 11 s
    progress = WatchProgress(stall_seconds=10)
    assert progress.observe(105, 100, now=0) is None
    assert progress.observe(120, 106, now=5) is None  # 105 given: now owes 120 since 5
    assert progress.observe(120, 110, now=14) is None
    assert progress.observe(120, 110, now=16) is not None


def test_a_writer_holding_its_watch_back_is_not_stalled():
    from etcd_operator.core.backup.segment_cutting import WatchProgress

    progress = WatchProgress(stall_seconds=10)
    assert progress.observe(105, 100, now=0) is None
    assert progress.observe(130, 100, now=20, holding_back=True) is None
    assert progress.observe(130, 100, now=25) is None  # owed again from 25
    assert progress.observe(130, 100, now=36) is not None


# --- the segment store: created only where nothing is stored, duplicates on resume ---------


def stored_segment(store: MemoryStore, manifest: SegmentManifest, body: bytes = SEGMENT_BYTES) -> None:
    store.objects[manifest.segment_key] = body
    store.objects[manifest.key] = manifest.to_json()


def test_a_segment_is_never_written_over_another_writers_and_a_lost_answer_is_retried():
    store = MemoryStore()
    mine = segment(CHAIN_100["chain"], 1, 101, 110)
    store.objects[mine.segment_key] = b"another writer's segment"
    with pytest.raises(segment_store.SegmentTaken):
        asyncio.run(segment_store.upload_segment(store, mine, SEGMENT_BYTES))  # type: ignore[arg-type]
    assert store.objects[mine.segment_key] == b"another writer's segment" and mine.key not in store.objects
    # The same bytes there: this writer's own PUT whose answer was lost; it goes on.
    store.objects[mine.segment_key] = SEGMENT_BYTES
    asyncio.run(segment_store.upload_segment(store, mine, SEGMENT_BYTES))  # type: ignore[arg-type]
    assert store.objects[mine.key] == mine.to_json()


def test_a_writer_resumes_after_the_manifest_that_follows_its_predecessor():
    chain = CHAIN_100["chain"]
    store = MemoryStore()
    for manifest in (segment(chain, 1, 101, 110), segment(chain, 2, 111, 120), segment(chain, 2, 115, 125)):
        stored_segment(store, manifest)
    prefix = segments_prefix("p", "ns", "b")
    last = asyncio.run(segment_store.last_segment(store, f"{prefix}{chain}/", prefix, chain))  # type: ignore[arg-type]
    assert last is not None and (last.sequence, last.first_revision, last.last_revision) == (2, 111, 120)
    # A manifest whose segment is not stored is never resumed after.
    lone = segment(chain, 3, 121, 130)
    store.objects[lone.key] = lone.to_json()
    last = asyncio.run(segment_store.last_segment(store, f"{prefix}{chain}/", prefix, chain))  # type: ignore[arg-type]
    assert last is not None and last.last_revision == 120


# --- S3 writes: sent only while the replica may act and its writer runs -------------------


def unreachable_storage() -> tuple[S3Storage, list[dict]]:
    """A real boto3 client toward a port nothing listens on; what would go on the wire is
    recorded (and answered 200) by a handler registered after the storage's own."""
    from botocore.awsrequest import AWSResponse

    class EmptyBody:
        def stream(self, **_):
            return iter(())

    storage = S3Storage(
        S3Location(bucket="b", endpoint="http://127.0.0.1:9", insecure=True, access_key="a", secret_key="s")
    )
    sent: list[dict] = []

    def capture(request, **_):
        sent.append({k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()})
        return AWSResponse(request.url, 200, {"ETag": '"e"'}, EmptyBody())

    storage._client.meta.events.register("before-send.s3.PutObject", capture)
    return storage, sent


def test_a_manifest_is_put_only_where_nothing_is_stored():
    storage, sent = unreachable_storage()
    try:
        asyncio.run(storage.put("k.segment.json", b"{}", "application/json", create_only=True))
        asyncio.run(storage.put("k.db", b"data"))
    finally:
        storage.close()
    assert sent[0]["if-none-match"] == "*" and "if-none-match" not in sent[1]


class ActsOnce:
    """A replica whose right to act ends right after its first check: the deadline passes
    while the PUT waits in its worker thread."""

    def __init__(self) -> None:
        self.checks = 0

    def check(self, what: str) -> None:
        self.checks += 1
        if self.checks > 1:
            raise LeadershipLost(f"refused {what}: deadline passed")

    def time_left(self) -> float:
        return 1.0 if self.checks <= 1 else 0.0


def test_a_put_whose_deadline_passed_in_its_thread_is_never_sent():
    storage, sent = unreachable_storage()
    install_process_write_guard(ActsOnce())
    try:
        with pytest.raises(LeadershipLost):
            asyncio.run(storage.put("k.segment.json", b"{}", create_only=True))
    finally:
        install_process_write_guard(None)
        storage.close()
    assert sent == []


def test_a_stopped_writers_put_still_in_its_thread_is_never_sent():
    storage, sent = unreachable_storage()
    storage.refuse_writes()  # what SegmentWriter.stop does first
    try:
        with pytest.raises(StorageClosed):
            asyncio.run(storage.put("k.segment.json", b"{}", create_only=True))
    finally:
        storage.close()
    assert sent == []


# --- the writer learning the leases a segment's puts use ----------------------------------


class LeaseAnswers:
    """LeaseTimeToLive as a member answers it: a TTL, None (the lease is gone: TTL -1), or
    a failure (an EtcdError) for every ask."""

    def __init__(self, answers: dict[int, int | None | EtcdError]) -> None:
        self.answers = answers
        self.asked: list[int] = []

    async def lease_granted_ttl(self, lease: int) -> int | None:
        self.asked.append(lease)
        answer = self.answers[lease]
        if isinstance(answer, EtcdError):
            raise answer
        return answer


def lease_writer() -> SegmentWriter:
    spec = BackupSpec(cluster="src", s3={}, prefix="p", part_size=1, concurrency=1, max_backups=None, max_age=None)
    start = cb.ChainStart(chain=CHAIN_100["chain"], cluster_id=CLUSTER, base_revision=100, base_key="p/ns/b/full.db")
    return SegmentWriter(None, Identity("ns", "b", "u"), spec, cb.ContinuousSpec(), start)  # type: ignore[arg-type]


def test_the_writer_records_a_gone_lease_and_breaks_the_chain_for_one_it_cannot_learn(monkeypatch):
    monkeypatch.setattr(continuous_writer, "RETRY_FIRST", 0.0)
    writer = lease_writer()
    asyncio.run(writer._learn_leases(LeaseAnswers({7: 30, 8: None}), {7, 8}))  # type: ignore[arg-type]
    assert writer._known_leases == {7: 30, 8: None}
    failing = LeaseAnswers({9: EtcdError("m1:2379", "LeaseTimeToLive", None, "etcdserver: request timed out")})
    with pytest.raises(continuous_writer.ChainBroken) as broken:
        asyncio.run(writer._learn_leases(failing, {9}))  # type: ignore[arg-type]
    assert broken.value.reason == cb.LEASE_UNKNOWN and failing.asked == [9] * continuous_writer.LEASE_ATTEMPTS
    assert 9 not in writer._known_leases


# --- the writer's stamps and its source (controllers/backup/continuous_writer.py) ----------


class SegmentStore:
    """The store calls a writer makes to resume its chain."""

    def __init__(self, manifests: list[SegmentManifest]):
        self.objects = {m.key: m.to_json() for m in manifests} | {m.segment_key: SEGMENT_BYTES for m in manifests}

    async def list_keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    async def get(self, key: str) -> bytes:
        return self.objects[key]

    async def delete(self, key: str) -> None:
        self.objects.pop(key, None)


def chain_writer(clock: float) -> SegmentWriter:
    spec = BackupSpec(cluster="src", s3={}, prefix="p", part_size=1, concurrency=1, max_backups=None, max_age=None)
    start = cb.ChainStart(chain=chain_id(CLUSTER, 10), cluster_id=CLUSTER, base_revision=10, base_key="base")
    identity = Identity("ns", "b", "u")
    return SegmentWriter(None, identity, spec, cb.ContinuousSpec(), start, clock=lambda: clock)  # type: ignore[arg-type]


def test_a_writer_whose_clock_is_behind_the_chains_stamps_never_stamps_earlier():
    # the previous writer's last segment: revisions 11..20, the last seen at 1009
    store = SegmentStore([segment_manifest(chain_id(CLUSTER, 10), 1, 11, 20, seen=1000.0)])
    writer = chain_writer(clock=400.0)  # this replica's clock is ten minutes behind
    asyncio.run(writer._resume(store))  # type: ignore[arg-type]
    grouper, cutter = RevisionGrouper(writer._cut_next), SegmentCutter(60, 1 << 20)
    batch = WatchBatch(0xC1, 1, 21, (WatchEvent(21, b"/a", b"v", 0), WatchEvent(22, b"/b", b"v", 0)))
    asyncio.run(writer._take(batch, None, store, grouper, cutter))  # type: ignore[arg-type]
    stamps = [r.seen_at for r in cutter.take({}, set()).body.revisions]
    assert stamps == [1009.0, 1009.0] and writer._seen.behind == 609.0


class CatchingUpMember:
    """A member whose own revision is behind; `cluster`: the cluster's, read linearizably."""

    def __init__(self, own: int, cluster: int):
        self.own, self.cluster = own, cluster

    async def status(self) -> MemberStatus:
        return MemberStatus(0xC1, 1, 2, "3.6.0", 1, 1, self.own, 1, 1, 1, False, ())

    async def linearizable_revision(self) -> int:
        return self.cluster


def test_a_follower_catching_up_is_waited_for_and_never_breaks_the_chain():
    writer = chain_writer(clock=1000.0)
    with pytest.raises(MemberBehind, match="catching up to the cluster's 40"):
        asyncio.run(writer._check_member(CatchingUpMember(own=25, cluster=40), next_revision=31))  # type: ignore[arg-type]
    with pytest.raises(ChainBroken) as broken:
        asyncio.run(writer._check_member(CatchingUpMember(own=25, cluster=25), next_revision=31))  # type: ignore[arg-type]
    assert broken.value.reason == cb.REVISION_WENT_BACK


class QuietMember:
    """A member of a cluster that takes no write: its watch stays silent; a linearizable
    read answers `revision`, AuthStatus `auth` (asked counts them). `answered` is set after
    `reads` reads."""

    def __init__(self, revision: int, reads: int, auth: int = 1):
        self.revision, self.reads_wanted = revision, reads
        self.auth, self.auth_asked = auth, 0
        self.answered = asyncio.Event()

    async def auth_revision(self, timeout: float | None = None) -> int:
        self.auth_asked += 1
        return self.auth

    async def watch_keyspace(self, start: int):
        await asyncio.Event().wait()  # never delivers
        yield  # pragma: no cover

    async def linearizable_revision(self) -> int:
        self.reads_wanted -= 1
        if self.reads_wanted <= 0:
            self.answered.set()
        return self.revision


def follow_until_answered(writer: SegmentWriter, store: SegmentStore, member) -> None:
    """The writer's `_follow` against `member` until the member has answered what it was
    asked for (`member.answered`); the writer must still be following then."""

    async def go() -> None:
        grouper, cutter = RevisionGrouper(writer._cut_next), SegmentCutter(60, 1 << 20)
        task = asyncio.create_task(writer._follow(member, store, grouper, cutter))  # type: ignore[arg-type]
        answered = asyncio.create_task(member.answered.wait())
        await asyncio.wait([task, answered], return_when=asyncio.FIRST_COMPLETED)
        assert not task.done(), task  # nothing it was answered (or refused) ended it
        task.cancel()
        await asyncio.gather(task, answered, return_exceptions=True)

    asyncio.run(go())


def test_a_writer_records_when_a_linearizable_read_found_the_whole_cluster_in_its_chain(monkeypatch):
    monkeypatch.setattr(continuous_writer, "HEARTBEAT_SECONDS", 0.001)
    store = SegmentStore([segment_manifest(chain_id(CLUSTER, 10), 1, 11, 20, seen=1000.0)])
    writer = chain_writer(clock=1500.0)
    asyncio.run(writer._resume(store))  # type: ignore[arg-type]

    follow_until_answered(writer, store, QuietMember(25, reads=3))  # the cluster is ahead of the chain's 20
    assert writer.view().caught_up is None
    follow_until_answered(writer, store, QuietMember(20, reads=3))
    assert writer.view().caught_up == (20, 1500.0)
    written = status_after(s.Stream(chain=writer.chain), s.StreamReport(view=writer.view()), {})
    record = written["continuous"]["caughtUp"]
    assert record == {"chain": writer.chain, "revision": 20, "time": "1970-01-01T00:25:00.000Z"}
    # what a restore reads of it: a time after the last stamp (1009), before the read, reaches 20
    plan = plan_replay(
        Target(time=1200.0),
        [snapshot_manifest(10)],
        [segment_manifest(chain_id(CLUSTER, 10), 1, 11, 20, seen=1000.0)],
        caught_up_of(written),
    )
    assert plan.up_to_revision == 20 and [m.sequence for m in plan.segments] == [1]


class FencedMember:
    """The last member of a cluster going to sleep, with no quorum left: it answers Status
    with its own revision (twice, then `answered` is set and it answers no more); a
    linearizable read is never answered."""

    def __init__(self, revision: int):
        self.revision, self.calls = revision, 0
        self.answered = asyncio.Event()

    async def status(self) -> MemberStatus:
        self.calls += 1
        if self.calls == 2:
            self.answered.set()
        elif self.calls > 2:
            await asyncio.Event().wait()
        return MemberStatus(0xC1, 1, 0, "3.6.0", 1, 1, self.revision, 1, 1, 1, False, ())

    async def watch_keyspace(self, start: int):
        await asyncio.Event().wait()  # every revision it holds was delivered before
        yield  # pragma: no cover

    async def linearizable_revision(self) -> int:
        raise EtcdError("10.0.0.1:2379", "Range", None, "etcdserver: request timed out")


def test_a_fenced_writer_reads_the_members_own_revision_and_reports_the_chain_caught_up(monkeypatch):
    """Issue 41, item 12b: once no quorum is left, the chain can still be shown to hold
    every revision the members hold, which the cluster planner waits for."""
    monkeypatch.setattr(continuous_writer, "HEARTBEAT_SECONDS", 0.01)
    store = SegmentStore([segment_manifest(chain_id(CLUSTER, 10), 1, 11, 20, seen=1000.0)])
    writer = chain_writer(clock=1500.0)
    asyncio.run(writer._resume(store))  # type: ignore[arg-type]
    writer.fenced = True

    follow_until_answered(writer, store, FencedMember(20))  # no failed linearizable read ends it
    assert writer.view().caught_up == (20, 1500.0)
    with pytest.raises(MemberBehind, match="no quorum is left"):  # never a linearizable read, never a break
        asyncio.run(writer._check_member(FencedMember(15), next_revision=21))  # type: ignore[arg-type]
