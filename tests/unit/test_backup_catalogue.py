"""The backup catalogue: identities, order by revision within a cluster ID, what retention
may delete, and the pending-upload record in status. Pure."""

from __future__ import annotations

import dataclasses
import datetime

from etcd_operator.core.backup import retention
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.manifest import Identity, Manifest
from etcd_operator.core.backup.status import build_status

T0 = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
ME = Identity("ns", "b", "uid-1")


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def manifest(minutes: float, revision: int, cluster_id: str = "1", **extra) -> Manifest:
    created = at(minutes).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Manifest(
        f"p/ns/b/r{revision}-{minutes}.db",
        "b",
        "ns",
        "c",
        cluster_id,
        "3.6.16",
        revision,
        10,
        "x" * 64,
        created,
        "c-1",
        str(minutes),
        backup_uid="uid-1",
        **extra,
    )


def test_a_manifest_from_a_clock_in_the_future_does_not_push_out_newer_revisions():
    future = manifest(10_000, 100)  # written by a replica whose clock ran ahead
    later = [manifest(20, 200), manifest(30, 300)]
    assert retention.newest_first([future, *later], ("1",))[0] == later[1]
    assert retention.expired([future, *later], max_backups=2, max_age_seconds=None, now=at(31), history=("1",)) == [
        future
    ]


def test_lineages_are_ordered_by_the_recorded_cluster_id_history_not_by_writer_clocks():
    # Before the restore a replica's clock ran a week ahead; after it, the clocks are right.
    before_restore = [manifest(10_000, 5000, cluster_id="a"), manifest(10_060, 5100, cluster_id="a")]
    after_restore = [manifest(20, 30, cluster_id="b"), manifest(80, 40, cluster_id="b")]
    everything = before_restore + after_restore
    assert retention.newest_first(everything, ("a", "b")) == [
        after_restore[1],
        after_restore[0],
        before_restore[1],
        before_restore[0],
    ]
    doomed = retention.expired(everything, max_backups=2, max_age_seconds=None, now=at(90), history=("a", "b"))
    assert doomed == [before_restore[1], before_restore[0]]


def test_a_lineage_the_history_does_not_name_is_kept_and_placed_last():
    unknown = [manifest(10_000, 9, cluster_id="x"), manifest(10_001, 10, cluster_id="x")]
    current = [manifest(20, 30, cluster_id="b"), manifest(30, 40, cluster_id="b")]
    assert retention.newest_first(unknown + current, ("b",)) == [current[1], current[0], unknown[1], unknown[0]]
    assert retention.expired(unknown + current, max_backups=1, max_age_seconds=None, now=at(40), history=("b",)) == [
        current[0]
    ]


def test_the_history_grows_once_per_cluster_id_and_status_records_it():
    assert retention.extend_history(("a",), "b") == ("a", "b")
    assert retention.extend_history(("a", "b"), "a") == ("a", "b")
    long = tuple(str(i) for i in range(retention.HISTORY_LENGTH))
    assert retention.extend_history(long, "new") == long[1:] + ("new",)
    step = s.RunBackup(slot="x", one_shot=False)
    done = s.RunSucceeded(record={"key": "p/ns/b/x.db", "clusterID": "b"}, completed_at="2026-11-21T00:01:00Z")
    status = build_status(step, done, {"clusterIDHistory": ["a"]}, 1, "2026-11-21T00:01:00Z")
    assert status["clusterIDHistory"] == ["a", "b"]


def store_clock(backups, now_minutes: float, lag_minutes: float = 0) -> retention.StoreTimes:
    """The store's times: each object modified when its manifest says, minus `lag_minutes`."""
    return retention.StoreTimes(at(now_minutes), {b.snapshot_key: at(float(b.slot) - lag_minutes) for b in backups})


def test_max_age_deletes_only_when_the_store_and_the_operator_agree():
    old, newest = manifest(0, 10), manifest(600, 20)
    hour = 3600.0

    def doomed(now_minutes, store):
        return retention.expired([old, newest], None, hour, at(now_minutes), history=("1",), store=store)

    assert doomed(601, store_clock([old, newest], 601)) == [old]  # both: 601 minutes old
    assert doomed(601, None) == []  # the store's age unknown
    assert doomed(10_000, store_clock([old, newest], 30)) == []  # this operator's clock ahead
    assert doomed(30, store_clock([old, newest], 10_000)) == []  # the store's clock ahead
    writer_behind = dataclasses.replace(old, created_at="2000-01-01T00:00:00Z")  # its writer's clock behind
    assert (
        retention.expired(
            [writer_behind, newest], None, hour, at(30), history=("1",), store=store_clock([old, newest], 30)
        )
        == []
    )


def test_the_newest_verified_backup_and_the_key_just_written_are_kept():
    verified = manifest(0, 10, verified=True)
    failed = manifest(5, 20, verified=False)
    newest = manifest(10, 30)
    doomed = retention.expired(
        [verified, failed, newest], max_backups=1, max_age_seconds=None, now=at(11), history=("1",)
    )
    assert doomed == [failed]
    assert (
        retention.expired([verified, failed, newest], 1, None, at(11), keep_keys={failed.snapshot_key}, history=("1",))
        == []
    )


def test_only_this_backups_own_manifests_match_its_identity():
    own = manifest(0, 1)
    assert own.belongs_to(ME)
    assert not dataclasses.replace(own, namespace="other").belongs_to(ME)
    assert not dataclasses.replace(own, backup_uid="uid-2").belongs_to(ME)
    legacy = dataclasses.replace(own, backup_uid="")
    assert not legacy.belongs_to(ME) and not legacy.belongs_to(Identity("ns", "b", ""))


def test_manifests_without_identity_stay_readable():
    legacy = manifest(0, 1)
    body = legacy.to_json().replace(b'"backupUid": "uid-1",\n', b"")
    read = Manifest.from_json(body)
    assert read.backup_uid == "" and read.revision == 1 and read.verified is None
    assert Manifest.from_json(manifest(0, 1, verified=True, hash_kv=7).to_json()).hash_kv == 7


def test_pending_uploads_stay_in_status_through_a_failure_and_go_when_aborted():
    step = s.RunBackup(slot="x", one_shot=False)
    pending = ({"key": "p/ns/b/x.db", "uploadId": "u1"},)
    failed = build_status(
        step,
        s.RunFailed(reason="StorageError", message="down", pending_uploads=pending),
        {"pendingUploads": list(pending)},
        1,
        "2026-11-21T00:00:00Z",
    )
    assert failed["pendingUploads"] == list(pending)
    record = {"key": "p/ns/b/y.db"}
    ok = build_status(
        step, s.RunSucceeded(record=record, completed_at="2026-11-21T00:01:00Z"), failed, 1, "2026-11-21T00:01:00Z"
    )
    assert ok["pendingUploads"] is None


def test_degraded_stays_true_through_new_slots_until_a_run_succeeds():
    now = "2026-11-21T00:00:00Z"
    status = build_status(
        s.RunBackup(slot="a", one_shot=False), s.RunFailed(reason="StorageError", message="down"), {}, 1, now
    )
    for step in (
        s.WaitForSlot(next_slot=at(1)),
        s.StartSlot(slot="b", slot_time=at(1), next_slot=at(2), one_shot=False),
    ):
        status = {**status, **build_status(step, s.NOTHING_DONE, status, 1, now)}
        degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
        assert degraded["status"] == "True" and degraded["reason"] == "StorageError"


# --- the runner against an in-memory store (no snapshot is taken in these cases) -------

import asyncio  # noqa: E402

import pytest  # noqa: E402

from etcd_operator.controllers.backup import runner as runner_module  # noqa: E402
from etcd_operator.controllers.backup.failure import BackupFailed  # noqa: E402
from etcd_operator.controllers.backup.runner import BackupRunner  # noqa: E402
from etcd_operator.core.backup.manifest import manifest_key, snapshot_key  # noqa: E402
from etcd_operator.core.backup.object_lock import RetentionResult  # noqa: E402
from etcd_operator.core.backup.spec import BackupSpec  # noqa: E402

SPEC = BackupSpec.from_dict({"clusterRef": {"name": "c"}, "storage": {"s3": {"bucket": "bk", "prefix": "p"}}})


class CatalogueStore:
    """Objects in a dict and unfinished uploads (key, upload ID, initiated) in a list;
    records every abort and delete. `exact_key_listing`: lists uploads as MinIO does (a
    prefix matches one exact key; no prefix, every upload), else as AWS S3 (a key prefix)."""

    def __init__(
        self, objects: dict[str, bytes], uploads=(), now: datetime.datetime = T0, exact_key_listing: bool = False
    ):
        self.objects = dict(objects)
        self.uploads = list(uploads)
        self.now = now
        self.exact_key_listing = exact_key_listing
        self.aborted: list[tuple[str, str]] = []
        self.listed_uploads: list[str] = []
        self.deleted: list[str] = []

    async def list_uploads(self, prefix):
        self.listed_uploads.append(prefix)
        if self.exact_key_listing and prefix:
            return [u for u in self.uploads if u[0] == prefix], self.now
        return [u for u in self.uploads if u[0].startswith(prefix)], self.now

    async def abort_multipart(self, key, upload_id):
        self.aborted.append((key, upload_id))
        self.uploads = [u for u in self.uploads if u[1] != upload_id]

    async def check_bucket(self):
        pass

    async def exists(self, key):
        return key in self.objects

    async def get(self, key):
        return self.objects[key]

    async def delete(self, key):
        self.deleted.append(key)
        self.objects.pop(key, None)

    async def list_keys(self, prefix):
        return sorted(k for k in self.objects if k.startswith(prefix))

    def close(self):
        pass


def run_slot(store: CatalogueStore, slot: str, pending=None, grace: float = 3600) -> tuple[BackupRunner, object]:
    async def location(*_):
        return None

    runner = BackupRunner(None, pending_uploads=pending, orphan_grace_seconds=grace)
    patch = pytest.MonkeyPatch()
    patch.setattr(runner_module, "s3_location", location)
    patch.setattr(runner_module, "S3Storage", lambda *_: store)
    try:
        return runner, asyncio.run(runner._attempt(ME, SPEC, slot))
    except BackupFailed as failure:
        return runner, failure
    finally:
        patch.undo()


def slot_manifest(slot: str, uid: str) -> Manifest:
    return dataclasses.replace(
        manifest(0, 5), snapshot_key=snapshot_key("p", "ns", "b", slot), slot=slot, backup_uid=uid
    )


def test_a_slot_counts_as_done_only_with_this_backups_own_manifest():
    own = slot_manifest("s1", "uid-1")
    _, result = run_slot(CatalogueStore({own.key: own.to_json()}), "s1")
    assert result == (own, RetentionResult())
    foreign = slot_manifest("s1", "uid-of-another-cluster")
    store = CatalogueStore({foreign.key: foreign.to_json(), foreign.snapshot_key: b"theirs"})
    _, result = run_slot(store, "s1")
    assert isinstance(result, BackupFailed) and result.reason == "SlotTakenByForeignBackup"
    assert store.deleted == [] and store.objects[foreign.key] == foreign.to_json()


def test_recorded_uploads_are_aborted_by_exact_key_before_the_run():
    own = slot_manifest("s2", "uid-1")
    pending = [{"key": "p/ns/b/s1.db", "uploadId": "u-1"}]
    store = CatalogueStore({own.key: own.to_json()})
    runner, _ = run_slot(store, "s2", pending)
    assert store.aborted == [("p/ns/b/s1.db", "u-1")]
    assert runner.pending_uploads == []
    assert manifest_key(own.snapshot_key) == own.key
