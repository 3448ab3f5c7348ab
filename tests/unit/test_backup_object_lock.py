"""Retention under S3 Object Lock (core/backup/object_lock.py, controllers/backup/catalogue.py):
a backup the store holds is neither deleted nor attempted, is reported in status, and goes
on a later pass once its date has passed on both clocks; everything else is deleted by
version ID, snapshot first, so that no data stays behind a delete marker. Segment retention
(controllers/backup/segment_store.py) the same way."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime

import pytest

from etcd_operator.clients.storage.s3 import lock_arguments
from etcd_operator.controllers.backup import catalogue, segment_store
from etcd_operator.core.backup import object_lock as ol
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.manifest import Identity, Manifest
from etcd_operator.core.backup.segments import chain_id
from etcd_operator.core.backup.spec import BackupSpec
from etcd_operator.core.backup.status import build_status
from tests.support.backup_manifests import segment_manifest

T0 = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
ME = Identity("ns", "b", "uid-1")
DAY = datetime.timedelta(days=1)
NO_LOCK = ol.Lock()


def backup(revision: int) -> Manifest:
    return Manifest(
        f"p/ns/b/r{revision}.db",
        "b",
        "ns",
        "c",
        "1",
        "3.6.16",
        revision,
        10,
        "x" * 64,
        (T0 + datetime.timedelta(minutes=revision)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "c-1",
        str(revision),
        backup_uid="uid-1",
    )


def versions(key: str, *locks: ol.Lock, store_now: datetime.datetime | None = T0) -> ol.StoredObject:
    return ol.StoredObject(key, tuple(ol.StoredVersion(f"{key}@{i}", lock) for i, lock in enumerate(locks)), store_now)


def governance(until: datetime.datetime) -> ol.Lock:
    return ol.Lock("GOVERNANCE", until)


# --- which versions are held -----------------------------------------------------------


def test_a_retain_until_date_holds_until_both_clocks_have_passed_it():
    lock = governance(T0)
    assert not ol.held(lock, T0 + DAY, T0 + DAY)
    assert ol.held(lock, T0 - DAY, T0 + DAY)  # the store's clock behind
    assert ol.held(lock, T0 + DAY, T0 - DAY)  # this operator's clock behind
    assert ol.held(lock, T0, T0)  # the date itself: not passed yet
    assert ol.held(lock, None, T0 + DAY)  # the store's time unknown


def test_a_legal_hold_holds_whatever_the_date_and_no_lock_holds_nothing():
    assert ol.held(ol.Lock(legal_hold=True), T0 + DAY, T0 + DAY)
    assert ol.held(ol.Lock("GOVERNANCE", T0 - DAY, legal_hold=True), T0, T0)
    assert not ol.held(ol.Lock(), None, T0)


# --- what retention does with each expired backup ---------------------------------------


def test_an_unlocked_backup_is_deleted_version_by_version_snapshot_first():
    old = backup(1)
    stored = {
        old.snapshot_key: versions(old.snapshot_key, ol.Lock(), governance(T0 - DAY)),
        old.key: versions(old.key, ol.Lock()),
    }
    plan = ol.sort_out([old], stored, T0)
    assert plan.locked == ()
    assert plan.deletions == (
        (
            old,
            (
                ol.Deletion(old.snapshot_key, (f"{old.snapshot_key}@0", f"{old.snapshot_key}@1")),
                ol.Deletion(old.key, (f"{old.key}@0",)),
            ),
        ),
    )


def test_a_bucket_without_versions_gets_one_plain_delete_per_key():
    old = backup(1)
    stored = {key: ol.StoredObject(key, (ol.StoredVersion(None),), T0) for key in (old.snapshot_key, old.key)}
    (manifest, deletions), *_ = ol.sort_out([old], stored, T0).deletions
    assert manifest == old
    assert [(d.key, d.version_ids) for d in deletions] == [(old.snapshot_key, (None,)), (old.key, (None,))]


@pytest.mark.parametrize("locked_key", ["snapshot", "manifest"])
def test_a_backup_with_any_held_version_is_kept_whole_and_reported(locked_key):
    old, other = backup(1), backup(2)
    until = T0 + DAY
    held_key = old.snapshot_key if locked_key == "snapshot" else old.key
    free_key = old.key if locked_key == "snapshot" else old.snapshot_key
    stored = {
        held_key: versions(held_key, ol.Lock(), governance(until)),  # an older version is held
        free_key: versions(free_key, ol.Lock()),
        other.snapshot_key: versions(other.snapshot_key, ol.Lock()),
        other.key: versions(other.key, ol.Lock()),
    }
    plan = ol.sort_out([old, other], stored, T0)
    assert [m for m, _ in plan.deletions] == [other]
    assert plan.locked == (ol.LockedBackup(old.snapshot_key, "GOVERNANCE", until, False),)


def test_the_latest_held_date_of_a_backup_is_the_one_reported():
    old = backup(1)
    stored = {
        old.snapshot_key: versions(old.snapshot_key, governance(T0 + DAY)),
        old.key: versions(old.key, ol.Lock("COMPLIANCE", T0 + 2 * DAY)),  # the manifest, written later
    }
    (locked,) = ol.sort_out([old], stored, T0).locked
    assert locked.retain_until == T0 + 2 * DAY and locked.mode == "COMPLIANCE/GOVERNANCE"


def test_once_the_date_passed_on_both_clocks_a_later_pass_deletes_it():
    old = backup(1)
    stored = {
        old.snapshot_key: versions(old.snapshot_key, governance(T0 + DAY), store_now=T0 + 2 * DAY),
        old.key: versions(old.key, governance(T0 + DAY), store_now=T0 + 2 * DAY),
    }
    assert ol.sort_out([old], stored, T0 + 2 * DAY).locked == ()
    assert [m for m, _ in ol.sort_out([old], stored, T0 + 2 * DAY).deletions] == [old]
    assert ol.sort_out([old], stored, T0).deletions == ()  # this operator's clock not there yet


def test_a_key_already_gone_is_not_deleted_again_and_does_not_hold_its_partner():
    # An operator killed between the snapshot's delete and the manifest's left this manifest.
    old = backup(1)
    stored = {old.snapshot_key: ol.StoredObject(old.snapshot_key), old.key: versions(old.key, ol.Lock())}
    (manifest, deletions), *_ = ol.sort_out([old], stored, T0).deletions
    assert [d.key for d in deletions] == [old.key]


def test_delete_markers_are_deleted_with_the_versions_they_hide():
    old = backup(1)
    marker = ol.StoredVersion("marker")  # a delete marker: no data, no lock
    stored = {
        old.snapshot_key: ol.StoredObject(old.snapshot_key, (marker, ol.StoredVersion("v1")), T0),
        old.key: versions(old.key, ol.Lock()),
    }
    (_, deletions), *_ = ol.sort_out([old], stored, T0).deletions
    assert deletions[0].version_ids == ("marker", "v1")


# --- what status and people are told ----------------------------------------------------


def test_status_lists_the_earliest_to_go_first_bounded_with_legal_holds_last():
    held = [
        ol.LockedBackup(f"p/ns/b/r{i}.db", "GOVERNANCE", T0 + datetime.timedelta(hours=30 - i), False)
        for i in range(ol.LOCKED_IN_STATUS + 2)
    ]
    hold = ol.LockedBackup("p/ns/b/hold.db", "", None, True)
    fields = ol.status_fields([hold, *held])
    assert fields is not None and fields["lockedCount"] == len(held) + 1
    assert len(fields["locked"]) == ol.LOCKED_IN_STATUS
    assert fields["locked"][0] == {
        "key": held[-1].snapshot_key,
        "mode": "GOVERNANCE",
        "retainUntil": "2026-11-01T19:00:00Z",
    }
    assert [r["key"] for r in fields["locked"]] == [h.snapshot_key for h in reversed(held)][: ol.LOCKED_IN_STATUS]
    assert ol.status_fields([hold])["locked"] == [{"key": "p/ns/b/hold.db", "legalHold": True}]
    assert ol.status_fields([]) is None


def test_a_reported_date_is_never_before_the_lock_ends():
    until = T0 + datetime.timedelta(seconds=10, milliseconds=400)
    record = ol.LockedBackup("k", "GOVERNANCE", until, False).status_record()
    assert record["retainUntil"] == "2026-11-01T00:00:11Z"


def test_the_summary_says_how_many_and_when_the_first_may_go():
    one = ol.status_fields([ol.LockedBackup("k", "GOVERNANCE", T0 + DAY, False)])
    assert (
        ol.summary(one)
        == "1 expired backup kept by S3 Object Lock; the earliest may be deleted after 2026-11-02T00:00:00Z"
    )
    holds = ol.status_fields([ol.LockedBackup("a", "", None, True), ol.LockedBackup("b", "", None, True)])
    assert ol.summary(holds) == "2 expired backups kept by S3 Object Lock, each under a legal hold until it is removed"
    assert ol.summary(None) == ""


def test_a_run_reports_what_is_locked_in_status_and_available_and_clears_it_when_gone():
    step = s.RunBackup(slot="x", one_shot=False)
    now = "2026-11-01T00:10:00Z"
    locked = (ol.LockedBackup("p/ns/b/r1.db", "GOVERNANCE", T0 + DAY, False),)
    done = s.RunSucceeded(record={"key": "p/ns/b/r2.db"}, completed_at=now, locked=locked)
    status = build_status(step, done, {}, 1, now)
    assert status["retention"] == {
        "lockedCount": 1,
        "locked": [{"key": "p/ns/b/r1.db", "mode": "GOVERNANCE", "retainUntil": "2026-11-02T00:00:00Z"}],
    }
    available = next(c for c in status["conditions"] if c["type"] == "Available")
    assert available["message"] == (
        "latest backup p/ns/b/r2.db; 1 expired backup kept by S3 Object Lock; "
        "the earliest may be deleted after 2026-11-02T00:00:00Z"
    )
    later = build_status(
        step,
        s.RunSucceeded(record={"key": "p/ns/b/r3.db"}, completed_at=now, deleted_keys=("p/ns/b/r1.db",)),
        status,
        1,
        now,
    )
    assert later["retention"] is None
    assert next(c for c in later["conditions"] if c["type"] == "Available")["message"] == "latest backup p/ns/b/r3.db"


# --- the upload's own retention ----------------------------------------------------------


def test_spec_object_lock_sets_a_retention_from_the_upload_time():
    lock = ol.UploadLock.from_dict({"mode": "COMPLIANCE", "retainFor": "7d"})
    assert lock == ol.UploadLock("COMPLIANCE", 7 * 86400.0)
    assert lock_arguments(lock, T0) == {"ObjectLockMode": "COMPLIANCE", "ObjectLockRetainUntilDate": T0 + 7 * DAY}
    assert lock_arguments(None, T0) == {}
    assert ol.UploadLock.from_dict(None) is None
    with pytest.raises(ValueError):
        ol.UploadLock.from_dict({"mode": "LEGAL", "retainFor": "1d"})
    with pytest.raises(ValueError):
        ol.UploadLock.from_dict({"mode": "GOVERNANCE"})


# --- apply_retention against a versioned store -------------------------------------------


class VersionedStore:
    """A bucket with Object Lock: versions per key, each with a lock; records every delete."""

    def __init__(self, now: datetime.datetime):
        self.now = now
        self.versions: dict[str, list[tuple[str, ol.Lock]]] = {}
        self.bodies: dict[str, bytes] = {}
        self.deleted: list[tuple[str, str | None]] = []

    def put(self, key: str, body: bytes, lock: ol.Lock = NO_LOCK) -> None:
        self.versions.setdefault(key, []).append((f"v{len(self.deleted)}-{len(self.versions.get(key, []))}", lock))
        self.bodies[key] = body

    async def list_keys(self, prefix):
        return sorted(k for k, v in self.versions.items() if v and k.startswith(prefix))

    async def get(self, key):
        return self.bodies[key]

    async def stored(self, key):
        return ol.StoredObject(
            key, tuple(ol.StoredVersion(v, lock) for v, lock in self.versions.get(key, [])), self.now
        )

    async def delete(self, key, version_id=None):
        if version_id is None:
            raise AssertionError(f"a plain DELETE of {key} in a versioned bucket leaves its data behind")
        if any(v == version_id and ol.held(lock, self.now, self.now) for v, lock in self.versions[key]):
            raise AssertionError(f"deleted a held version of {key}")
        self.deleted.append((key, version_id))
        self.versions[key] = [(v, lock) for v, lock in self.versions[key] if v != version_id]


def test_retention_keeps_a_locked_backup_whole_until_its_date_then_deletes_every_version():
    store = VersionedStore(T0 + datetime.timedelta(minutes=10))
    spec = BackupSpec.from_dict(
        {
            "clusterRef": {"name": "c"},
            "storage": {"s3": {"bucket": "bk", "prefix": "p"}},
            "retention": {"maxBackups": 1},
        }
    )
    old, new = backup(1), backup(2)
    until = T0 + DAY
    store.put(old.snapshot_key, b"snap", governance(until))
    store.put(old.key, old.to_json(), governance(until))
    store.put(old.key, dataclasses.replace(old, verified=False).to_json(), governance(until))  # a verdict
    store.put(new.snapshot_key, b"snap")
    store.put(new.key, new.to_json())

    def apply(now: datetime.datetime) -> ol.RetentionResult:
        return asyncio.run(catalogue.apply_retention(store, ME, spec, new.snapshot_key, ("1",), lambda: now))

    kept = apply(store.now)
    assert kept.deleted == () and store.deleted == []
    assert kept.locked == (ol.LockedBackup(old.snapshot_key, "GOVERNANCE", until, False),)

    store.now = until + datetime.timedelta(seconds=1)
    gone = apply(store.now)
    assert [m.snapshot_key for m in gone.deleted] == [old.snapshot_key] and gone.locked == ()
    assert [key for key, _ in store.deleted] == [old.snapshot_key, old.key, old.key]
    assert store.versions[old.snapshot_key] == [] and store.versions[old.key] == []
    assert [k for k, v in store.versions.items() if v] == [new.snapshot_key, new.key]


# --- a continuous backup's segments ----------------------------------------------------------


def test_segment_retention_deletes_every_version_by_its_id_and_keeps_a_held_segment_whole():
    store = VersionedStore(T0 + datetime.timedelta(minutes=10))
    kept = backup(30)  # the oldest snapshot kept: segments wholly at or below 30 are not needed
    store.put(kept.snapshot_key, b"snap")
    store.put(kept.key, kept.to_json())
    old_chain = chain_id("1", 5)
    free, held_one = (
        dataclasses.replace(segment_manifest(old_chain, n, first, last, cluster_id="1"), backup_uid=ME.uid)
        for n, first, last in ((1, 6, 20), (2, 21, 30))
    )
    until = T0 + DAY
    store.put(free.segment_key, b"body")
    store.put(free.key, free.to_json())
    store.put(free.key, free.to_json())  # written twice: two versions, both to go
    store.put(held_one.segment_key, b"body", governance(until))
    store.put(held_one.key, held_one.to_json())

    def apply(now: datetime.datetime) -> list:
        return asyncio.run(segment_store.apply_segment_retention(store, ME, "p", chain_id("1", 30), lambda: now))

    assert apply(store.now) == [free]
    assert store.deleted == [(free.key, "v0-0"), (free.key, "v0-1"), (free.segment_key, "v0-0")]
    assert store.versions[free.key] == [] and store.versions[free.segment_key] == []
    assert len(store.versions[held_one.key]) == 1 and len(store.versions[held_one.segment_key]) == 1  # untouched

    store.now = until + datetime.timedelta(seconds=1)
    assert apply(store.now) == [held_one]
    assert store.versions[held_one.key] == [] and store.versions[held_one.segment_key] == []
