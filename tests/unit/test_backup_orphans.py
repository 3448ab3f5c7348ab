"""Orphaned multipart uploads: which a run aborts (pure), and the runner finding them with
either store's listing semantics (an in-memory store). The real MinIO case is
tests/nodes/host_operator/test_backup_storage.py."""

from __future__ import annotations

import datetime

import pytest

from etcd_operator.core.backup.orphans import Upload, in_folder, orphaned
from tests.unit.test_backup_catalogue import T0, CatalogueStore, run_slot, slot_manifest

FOLDER = "p/ns/b/"
HOUR = 3600.0


def minutes(n: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=n)


def test_only_snapshot_keys_directly_in_the_backups_folder_count():
    assert in_folder("p/ns/b/20261121T120000Z.db", FOLDER)
    assert not in_folder("p/ns/b/deeper/ns/b2/20261121T120000Z.db", FOLDER)  # another backup's folder
    assert not in_folder("q/ns/b/20261121T120000Z.db", FOLDER)
    assert not in_folder("p/ns/b/x.manifest.json", FOLDER)
    assert not in_folder("p/ns/b2/x.db", FOLDER)


def test_an_upload_is_aborted_only_when_old_enough_on_the_stores_clock_and_not_recorded():
    old = Upload("p/ns/b/s1.db", "old", minutes(0))
    young = Upload("p/ns/b/s2.db", "young", minutes(50))
    recorded = Upload("p/ns/b/s3.db", "recorded", minutes(0))
    foreign = Upload("q/ns/b/s1.db", "foreign", minutes(0))
    uploads = [old, young, recorded, foreign]
    assert orphaned(uploads, FOLDER, {"recorded"}, minutes(61), HOUR) == [old]
    assert orphaned(uploads, FOLDER, {"recorded"}, None, HOUR) == []  # the store's time unknown


@pytest.mark.parametrize("exact_key_listing", [False, True], ids=["key-prefix listing", "exact-key listing"])
def test_the_runner_aborts_its_own_orphans_and_nothing_elsewhere(exact_key_listing):
    own = slot_manifest("s9", "uid-1")
    uploads = [
        ("p/ns/b/s1.db", "orphan", minutes(0)),  # crashed before status recorded it
        ("p/ns/b/s9.db", "orphan-at-slot", minutes(0)),
        ("p/ns/b/s8.db", "young", minutes(59)),
        ("p/ns/b/deeper/ns/b2/s1.db", "other-backup", minutes(0)),
        ("q/ns/b/s1.db", "other-prefix", minutes(0)),
    ]
    store = CatalogueStore({own.key: own.to_json()}, uploads, now=minutes(61), exact_key_listing=exact_key_listing)
    run_slot(store, "s9")
    assert sorted(store.aborted) == [("p/ns/b/s1.db", "orphan"), ("p/ns/b/s9.db", "orphan-at-slot")]
    assert {u[1] for u in store.uploads} == {"young", "other-backup", "other-prefix"}
