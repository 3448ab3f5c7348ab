"""Point-in-time restore: the point in the spec, the replay's plan recorded once, the replay
pod's steps and how its end is read, the pod itself, and the replay program's core (one
transaction per original revision, leases before their first use, where it stops)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib

import pytest

from etcd_operator.core.backup.chain import ChainProblem, Target
from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.backup.segment_cutting import SegmentCutter
from etcd_operator.core.backup.segments import (
    GONE_LEASE_TTL,
    KeyChange,
    RevisionRecord,
    SegmentBody,
    SegmentManifest,
    chain_id,
    decode,
    encode,
    segments_prefix,
)
from etcd_operator.core.outcome import Outcome
from etcd_operator.core.restore import replay_pod
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.observed import Catalogue, ContainerEnd, Observed, ReplayPod
from etcd_operator.core.restore.planner import plan
from etcd_operator.core.restore.point_in_time import (
    REPLAY_EXIT_CODES,
    ReplayRecord,
    ReplayResult,
    chain_to_replay,
    replay_key,
    target_of,
)
from etcd_operator.core.restore.spec import RestoreSpec, RestoreStatus
from etcd_operator.core.restore.status import build_status
from etcd_operator.programs import replay as program
from tests.support.backup_manifests import segment_manifest, snapshot_manifest
from tests.support.object_store import MemoryStore

UID = "uid-of-this-restore"
NOW = 1_800_000_000.0
FOLDER = "p/ns/nightly/"
CHAIN = chain_id("c1", 10)


def spec(point: dict, version: str = "3.6.0") -> RestoreSpec:
    return RestoreSpec.from_dict(
        {
            "source": {"backupRef": {"name": "nightly"}, "pointInTime": point},
            "target": {"newCluster": {"name": "keep", "spec": {"size": 3, "version": version}}},
        }
    )


def snapshot(revision: int, version: str = "3.6.0") -> Manifest:
    return snapshot_manifest(revision, folder=FOLDER, backup="nightly", etcd_version=version)


def segment(sequence: int, first: int, last: int, seen: float | None = None, chain: str = CHAIN) -> SegmentManifest:
    return segment_manifest(
        chain, sequence, first, last, seen=seen, backup="nightly", base_revision=10, base_key=f"{FOLDER}s10.db"
    )


CATALOGUE = Catalogue(
    folder=FOLDER,
    snapshots=(snapshot(10), snapshot(25)),
    segments=(segment(1, 11, 20), segment(2, 21, 30), segment(3, 31, 40)),
)


def observed(**fields) -> Observed:
    return Observed("ns", "r1", UID, 1, None, **fields)


VERIFYING = RestoreStatus(phase="Verifying")


def planned(point: dict, catalogue: Catalogue = CATALOGUE) -> s.PlanReplay:
    step = plan(spec(point), VERIFYING, observed(catalogue=catalogue), NOW)
    assert isinstance(step, s.PlanReplay), step
    return step


def after(status: RestoreStatus, step: s.Step) -> RestoreStatus:
    """The status the next pass reads after `step` was taken."""
    previous = {"phase": status.phase}
    if status.point_in_time:
        previous["pointInTime"] = status.point_in_time.to_dict()
    return RestoreStatus.from_dict(build_status(previous, step, Outcome(), 1, "2026-11-27T00:00:00Z"))


def pod(**fields) -> ReplayPod:
    return ReplayPod(**{"name": "r1-pitr", "uid": "pod-uid", "owned": True, "phase": "Running", **fields})


# --- the point ----------------------------------------------------------------------------


def test_the_point_is_a_revision_a_time_or_the_latest():
    assert target_of({"backupRef": {"name": "b"}}) is None
    assert target_of({"pointInTime": {"revision": 42}}) == Target(revision=42)
    assert target_of({"pointInTime": {"time": "2026-11-27T10:00:00.250Z"}}) == Target(time=1_795_773_600.25)
    assert target_of({"pointInTime": {"latest": True}}) == Target()


# --- the plan, before anything is created ---------------------------------------------


def test_the_plan_is_the_newest_base_at_or_before_the_point_and_the_segments_after_it():
    record = planned({"revision": 33}).record
    assert (record.base_key, record.base_revision) == (f"{FOLDER}s25.db", 25)
    assert (record.chain, record.first_sequence, record.last_sequence, record.segments) == (CHAIN, 2, 3, 2)
    assert record.up_to_revision == 33
    assert record.replayed_key == replay_key(FOLDER, UID) == f"{FOLDER}restores/{UID}/replayed.db"


def test_a_point_no_chain_reaches_fails_before_anything_is_created():
    step = plan(spec({"revision": 41}), VERIFYING, observed(catalogue=CATALOGUE), NOW)
    assert isinstance(step, s.Fail) and step.code == "PointNotReachable"
    assert "newer than the newest backed up, 40" in step.reason
    broken = dataclasses.replace(
        CATALOGUE, snapshots=(snapshot(10),), segments=(segment(1, 11, 20), segment(3, 31, 40))
    )
    step = plan(spec({"revision": 25}), VERIFYING, observed(catalogue=broken), NOW)
    assert isinstance(step, s.Fail) and step.code == "PointNotReachable" and "chain is broken" in step.reason


def test_a_time_the_backup_has_not_seen_past_fails_before_anything_is_created():
    # CATALOGUE's segments were seen at their revision number in seconds: 11..40
    step = plan(spec({"time": "2026-12-01T00:00:00Z"}), VERIFYING, observed(catalogue=CATALOGUE), NOW)
    assert isinstance(step, s.Fail) and step.code == "PointNotReachable"
    assert "no revision backed up was seen after that time" in step.reason and "up to 40" in step.reason
    in_the_break = dataclasses.replace(CATALOGUE, segments=(segment(1, 11, 20), segment(3, 31, 40)))
    step = plan(spec({"time": "1970-01-01T00:00:25Z"}), VERIFYING, observed(catalogue=in_the_break), NOW)
    assert isinstance(step, s.Fail) and step.code == "PointNotReachable" and "chain is broken" in step.reason


def test_a_store_that_cannot_be_listed_waits_unless_listing_again_cannot_help():
    step = plan(spec({"latest": True}), VERIFYING, observed(catalogue=Catalogue(error="timeout")), NOW)
    assert isinstance(step, s.Wait) and step.code == "StorageUnavailable"
    denied = Catalogue(error="AccessDenied", permanent=True)
    step = plan(spec({"latest": True}), VERIFYING, observed(catalogue=denied), NOW)
    assert isinstance(step, s.Fail) and step.code == "StorageError"


def test_a_base_the_replay_etcd_cannot_read_is_refused_before_the_plan():
    catalogue = dataclasses.replace(CATALOGUE, snapshots=(snapshot(10, version="3.6.1"),))
    point_spec = spec({"revision": 15}, version="3.5.17")
    step = plan(point_spec, VERIFYING, observed(catalogue=catalogue), NOW)
    assert isinstance(step, s.Fail) and step.code == "VersionTooOld"


def test_the_recorded_plan_is_followed_even_when_newer_segments_arrived():
    status = after(VERIFYING, planned({"latest": True}))
    assert status.phase == "Replaying" and status.point_in_time.up_to_revision == 40
    grown = dataclasses.replace(CATALOGUE, segments=(*CATALOGUE.segments, segment(4, 41, 90)))
    step = plan(spec({"latest": True}), status, observed(catalogue=grown), NOW)
    assert isinstance(step, s.StartReplayPod)
    assert after(status, step).point_in_time == status.point_in_time


def test_a_base_at_the_point_replays_nothing_and_is_verified_as_is():
    status = after(VERIFYING, planned({"revision": 25}))
    record = status.point_in_time
    assert not record.replays and record.reached_revision == 25
    step = plan(spec({"revision": 25}), status, observed(), NOW)
    assert isinstance(step, s.VerifySnapshot) and step.key == f"{FOLDER}s25.db"


# --- the replay pod, step by step ----------------------------------------------------------


def test_a_clean_replay_from_plan_to_verification():
    point = spec({"revision": 33})
    status = after(VERIFYING, planned({"revision": 33}))
    step = plan(point, status, observed(), NOW)
    assert isinstance(step, s.StartReplayPod)
    status = after(status, step)
    step = plan(point, status, observed(replay_pod=pod()), NOW)
    assert isinstance(step, s.Wait) and step.code == "Replaying"
    result = ReplayResult(33, 1_795_773_600.25, 8, "cd" * 32, 4096)
    ended = pod(replay=ContainerEnd("replay", 0, result.to_json()))
    step = plan(point, status, observed(replay_pod=ended), NOW)
    assert isinstance(step, s.RecordReplayResult) and step.result == result
    status = after(status, step)
    record = status.point_in_time
    assert (record.reached_revision, record.reached_time, record.applied) == (33, "2026-11-27T10:00:00.250Z", 8)
    step = plan(point, status, observed(replay_pod=ended), NOW)
    assert isinstance(step, s.RemoveReplayPod) and (step.pod, step.pod_uid) == ("r1-pitr", "pod-uid")
    step = plan(point, status, observed(), NOW)
    assert isinstance(step, s.VerifySnapshot) and step.key == record.replayed_key


def replaying() -> RestoreStatus:
    return after(VERIFYING, planned({"revision": 33}))


@pytest.mark.parametrize(
    "seen, code",
    [
        (
            pod(replay=ContainerEnd("replay", REPLAY_EXIT_CODES["SegmentChecksumMismatch"], "x: sha256")),
            "SegmentChecksumMismatch",
        ),
        (pod(replay=ContainerEnd("replay", REPLAY_EXIT_CODES["ChainBroken"], "gap")), "ChainBroken"),
        (pod(replay=ContainerEnd("replay", REPLAY_EXIT_CODES["RevisionMismatch"], "off")), "RevisionMismatch"),
        (pod(replay=ContainerEnd("replay", 1, "boom")), "ReplayFailed"),
        (pod(replay=ContainerEnd("replay", 0, "not json")), "ReplayFailed"),
        (pod(init_failure=ContainerEnd("fetch", 3, "sha256 changed")), "ChecksumMismatch"),
        (pod(init_failure=ContainerEnd("restore", 1, "bad")), "SnapshotNotRestorable"),
        # the apply init container replays into the backend: its refusals are the replay's
        (pod(init_failure=ContainerEnd("apply", REPLAY_EXIT_CODES["RevisionMismatch"], "off")), "RevisionMismatch"),
        (pod(init_failure=ContainerEnd("apply", REPLAY_EXIT_CODES["LeaseUnknown"], "77")), "LeaseUnknown"),
        (pod(init_failure=ContainerEnd("apply", 1, "ReplayFailed: the program failed")), "ReplayFailed"),
        (pod(phase="Failed"), "ReplayFailed"),
    ],
)
def test_a_replay_that_refused_or_failed_fails_the_restore_and_removes_its_pod(seen, code):
    step = plan(spec({"revision": 33}), replaying(), observed(replay_pod=seen), NOW)
    assert isinstance(step, s.FailReplay) and step.code == code
    assert (step.pod, step.pod_uid) == ("r1-pitr", "pod-uid")
    assert build_status({"phase": "Replaying"}, step, Outcome(), 1, "t")["phase"] == "Failed"


def test_a_pod_of_its_name_that_is_not_its_own_is_left_alone():
    step = plan(spec({"revision": 33}), replaying(), observed(replay_pod=pod(owned=False)), NOW)
    assert type(step) is s.Fail and step.code == "ReplayPodNameTaken"


def test_a_replay_pod_removed_before_its_result_was_read_is_started_again():
    status = replaying()
    assert isinstance(plan(spec({"revision": 33}), status, observed(), NOW), s.StartReplayPod)


def test_a_replay_pod_reads_its_end_from_the_pod_status():
    raw = {
        "metadata": {"name": "r1-pitr", "uid": "p", "ownerReferences": [{"uid": UID}]},
        "status": {
            "phase": "Running",
            "initContainerStatuses": [{"name": "fetch", "state": {"terminated": {"exitCode": 0}}}],
            "containerStatuses": [
                {"name": "etcd", "state": {"running": {}}},
                {"name": "replay", "state": {"terminated": {"exitCode": 22, "message": "RevisionMismatch: x"}}},
            ],
        },
    }
    seen = ReplayPod.from_pod(raw, UID, replay_pod.REPLAY_CONTAINER)
    assert seen.owned and seen.init_failure is None
    assert seen.replay == ContainerEnd("replay", 22, "RevisionMismatch: x")


# --- the pod ------------------------------------------------------------------------------


def test_the_replay_pod_serves_its_scratch_store_on_unix_sockets_only_without_fsync():
    record = replaying().point_in_time
    source = {"bucket": "b", "endpoint": "https://s3.example", "credentialsSecretRef": {"name": "creds"}}
    manifest = replay_pod.replay_pod("r" * 58, "ns", "etcd:v3.6.0", "op:1", source, FOLDER, record, 1.5)
    assert len(manifest["metadata"]["name"]) <= 63
    pod_spec = manifest["spec"]
    fetch, restore, tls, apply = pod_spec["initContainers"]
    etcd, replay = pod_spec["containers"]
    assert tls["name"] == "scratch-tls" and tls["image"] == "op:1"
    # the revisions go into the restored backend before the scratch member starts on it
    assert apply["command"][-2:] == ["etcd_operator.programs.replay", "apply"] and apply["image"] == "op:1"
    apply_env = {e["name"]: e.get("value") for e in apply["env"]}
    assert apply_env["BACKEND_DB"] == f"{replay_pod.DATA_DIR}/member/snap/db"
    assert f"--data-dir={replay_pod.DATA_DIR}" in etcd["args"]
    assert apply["terminationMessagePath"] == replay["terminationMessagePath"]
    fetch_env = {e["name"]: e.get("value") for e in fetch["env"]}
    assert (fetch_env["S3_KEY"], fetch_env["EXPECTED_SHA256"]) == (record.base_key, record.base_sha256)
    assert not any(a.startswith("--bump-revision") or a == "--mark-compacted" for a in restore["args"])
    assert "--unsafe-no-fsync" in etcd["args"]
    urls = dict(a.split("=", 1) for a in etcd["args"] if a.startswith(("--listen-", "--advertise-")))
    assert urls == {
        "--listen-client-urls": "unixs://etcd-client:0",  # TLS on the socket, of the pod's throwaway CA
        "--advertise-client-urls": "unixs://etcd-client:0",
        "--listen-client-http-urls": "unixs://etcd-http:0",  # etcd 3.6.0: HTTP apart, gRPC served natively
        "--listen-peer-urls": "unix://etcd-peer:0",
    }
    assert all("ports" not in c for c in pod_spec["containers"])
    env = {e["name"]: e.get("value") for e in replay["env"]}
    assert env["OUTPUT_KEY"] == record.replayed_key and env["CHAIN"] == CHAIN
    assert (env["FIRST_SEQUENCE"], env["LAST_SEQUENCE"], env["UP_TO_REVISION"]) == ("2", "3", "33")
    assert env["UNTIL_TIME"] == "1.5" and env["SEGMENTS_FOLDER"] == f"{FOLDER}segments/{CHAIN}/"
    secret_env = [e for e in replay["env"] if "valueFrom" in e]
    assert {e["name"] for e in secret_env} == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert replay["terminationMessagePath"].startswith(replay_pod.SCRATCH)
    assert pod_spec["restartPolicy"] == "Never" and pod_spec["automountServiceAccountToken"] is False


# --- the chain, checked again where the replay runs --------------------------------------------


def test_the_replay_checks_the_chain_again():
    record = replaying().point_in_time  # base 25, sequences 2..3, up to 33
    listed = [segment(1, 11, 20), segment(2, 21, 30), segment(3, 31, 40), segment(2, 11, 20, chain="other")]
    assert [m.sequence for m in chain_to_replay(listed, record)] == [2, 3]
    with pytest.raises(ChainProblem, match="no segment"):
        chain_to_replay([segment(1, 11, 20)], record)
    with pytest.raises(ChainProblem, match="holds segments 2..2"):
        chain_to_replay([segment(2, 21, 30)], record)
    with pytest.raises(ChainProblem, match="gap"):
        chain_to_replay([segment(2, 21, 30), segment(3, 32, 40)], record)
    with pytest.raises(ChainProblem, match="base snapshot is at 25"):
        chain_to_replay([segment(2, 27, 30), segment(3, 31, 40)], record)
    with pytest.raises(ChainProblem, match="before 33"):
        chain_to_replay([segment(2, 21, 30), segment(3, 31, 32)], record)


def test_a_record_round_trips_through_status():
    record = dataclasses.replace(replaying().point_in_time, reached_revision=33, reached_time="t", applied=8)
    assert ReplayRecord.from_dict(record.to_dict()) == record
    assert RestoreStatus.from_dict({"pointInTime": record.to_dict()}).point_in_time == record


# --- the replay program's core, against a fake member ----------------------------------


class FakeMember:
    """A store that counts revisions as etcd does; the replay names the revision of each
    transaction (the real store, cmd/etcd-replay-apply, refuses any other:
    tests/etcd_processes/test_backend_apply.py)."""

    def __init__(self, revision: int, leases: set[int] = frozenset()):
        self.revision = revision
        self.leases = dict.fromkeys(leases, 0)
        self.data: dict[bytes, tuple[bytes, int]] = {}
        self.calls: list[tuple] = []

    async def grant_lease(self, lease: int, ttl: int) -> bool:
        self.calls.append(("grant", lease, ttl))
        self.leases[lease] = ttl
        return True

    async def apply(self, revision: int, changes) -> None:
        self.calls.append(("txn", tuple(c.key for c in changes)))
        assert revision == self.revision + 1, f"revision {revision} sent after {self.revision}"
        for change in changes:
            if change.lease and not change.deleted and change.lease not in self.leases:
                raise AssertionError(f"lease {change.lease} used before it was granted")
            if change.deleted:
                self.data.pop(change.key, None)
            else:
                self.data[change.key] = (change.value, change.lease)
        self.revision = revision


def bodies() -> list[SegmentBody]:
    return [
        SegmentBody(
            (
                RevisionRecord(9, 90.0, (KeyChange(b"/old", b"x"),)),  # before the base: skipped
                RevisionRecord(11, 100.0, (KeyChange(b"/a", b"1"), KeyChange(b"/b", b"2"))),
                RevisionRecord(12, 101.0, (KeyChange(b"/c", b"3", lease=7),)),
            ),
            ((7, 30),),
        ),
        SegmentBody(
            (
                RevisionRecord(13, 102.0, (KeyChange(b"/a", None), KeyChange(b"/d", b"4", lease=7))),
                RevisionRecord(14, 103.0, (KeyChange(b"/e", b"5", lease=5),)),
            )
        ),
    ]


def run_replay(member: FakeMember, up_to: int = 14, until: float | None = None, leases: set[int] | None = None):
    return asyncio.run(
        program.replay(member, iter(bodies()), 10, up_to, until, leases if leases is not None else set())
    )


def test_each_original_revision_is_one_transaction_and_leases_come_first():
    member = FakeMember(10, leases={5})
    progress = run_replay(member, leases={5})
    assert (progress.revision, progress.seen_at, progress.applied) == (14, 103.0, 4)
    assert member.calls == [
        ("txn", (b"/a", b"/b")),
        ("grant", 7, 30),
        ("txn", (b"/c",)),
        ("txn", (b"/a", b"/d")),
        ("txn", (b"/e",)),
    ]
    assert member.data == {b"/b": (b"2", 0), b"/c": (b"3", 7), b"/d": (b"4", 7), b"/e": (b"5", 5)}


def test_the_replay_stops_at_the_revision_or_at_the_first_revision_seen_after_the_time():
    assert run_replay(FakeMember(10, leases={5}), up_to=12).revision == 12
    progress = run_replay(FakeMember(10, leases={5}), until=101.5)
    assert (progress.revision, progress.seen_at) == (12, 101.0)
    nothing = run_replay(FakeMember(10), until=99.0)
    assert (nothing.revision, nothing.seen_at, nothing.applied) == (10, None, 0)


def test_a_lease_neither_the_base_nor_a_segment_holds_is_refused():
    with pytest.raises(program.Refused) as refused:
        run_replay(FakeMember(10))
    assert refused.value.reason == "LeaseUnknown"


def test_a_lease_granted_and_revoked_inside_one_segment_replays():
    """A lock session: grant, put under the lease, revoke, all before the writer asks the
    lease's TTL (it answers: gone). etcd deletes the lease's keys in a revision of their own,
    which the watch delivers; the segment records the lease as gone, and the replay grants it
    with a short TTL, puts the key, then deletes it where the source did."""
    lock_key = b"/locks/job/694d8a"
    cutter = SegmentCutter(1.0, 1 << 20)
    cutter.add(RevisionRecord(11, 100.0, (KeyChange(b"/a", b"1"),)), 0.0)
    cutter.add(RevisionRecord(12, 100.1, (KeyChange(lock_key, b"", lease=0x694D8A),)), 0.0)
    cutter.add(RevisionRecord(13, 100.2, (KeyChange(b"/job/result", b"done"),)), 0.0)
    cutter.add(RevisionRecord(14, 100.3, (KeyChange(lock_key, None),)), 0.0)  # the revocation's delete
    known: dict[int, int | None] = {0x694D8A: None}  # LeaseTimeToLive: not found
    body = decode(encode(cutter.take(known, set()).body))
    assert body.gone_leases == (0x694D8A,) and body.leases == ()

    member = FakeMember(10)
    progress = asyncio.run(program.replay(member, iter([body]), 10, 14, None, set()))
    assert progress.revision == 14
    assert ("grant", 0x694D8A, GONE_LEASE_TTL) in member.calls and GONE_LEASE_TTL == 10  # docs/operations/backup.md
    assert member.data == {b"/a": (b"1", 0), b"/job/result": (b"done", 0)}
    # a point while the lock was held has its key, under the lease
    held = FakeMember(10)
    assert asyncio.run(program.replay(held, iter([body]), 10, 13, None, set())).revision == 13
    assert held.data[lock_key] == (b"", 0x694D8A)


def test_of_two_manifests_under_one_sequence_the_replay_takes_the_one_whose_segment_is_stored_as_it_says(tmp_path):
    """Two writers raced for segment 2: the one that reaches further had its body replaced
    since (its sha256 no longer matches); the replay takes the other, and replays."""
    chain = chain_id("c1", 10)
    store = MemoryStore()

    def stored(sequence: int, first: int, last: int, body: bytes | None = None) -> SegmentManifest:
        data = encode(
            SegmentBody(
                tuple(RevisionRecord(r, float(r), (KeyChange(b"/k", b"%d" % r),)) for r in range(first, last + 1))
            )
        )
        manifest = dataclasses.replace(
            segment_manifest(chain, sequence, first, last, base_revision=10),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        store.objects[manifest.segment_key] = data if body is None else body
        store.objects[manifest.key] = manifest.to_json()
        return manifest

    first, kept = stored(1, 11, 13), stored(2, 14, 16)
    stored(2, 14, 17, body=b"replaced")
    record = ReplayRecord(
        "revision 16",
        "base",
        10,
        "3.6.0",
        chain=chain,
        first_sequence=1,
        last_sequence=2,
        segments=2,
        up_to_revision=16,
        replayed_key="out",
    )
    settings = program.Settings(
        socket="",
        tls_dir="",
        result_file=tmp_path / "result",
        work=tmp_path / "work",
        segments_folder=f"{segments_prefix('p', 'ns', 'b')}{chain}/",
        output_key="out",
        restore="r",
        until_time=None,
        record=record,
    )
    files, chain_read = asyncio.run(program.fetch_segments(store, settings, {}))  # type: ignore[arg-type]
    assert chain_read == [first, kept] and len(files) == 2
