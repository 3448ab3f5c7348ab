"""Readers that choose decide only on manifests that authenticate (issue 41): with the backup's
keys, snapshot retention, segment retention, the writer resuming a chain, the latest-backup
lookup, an existing slot and the point-in-time planner go by authenticated manifests only. A
manifest someone who can write the bucket planted (no MAC, or a copied one that does not
match) is left out of every choice, never deleted on its word, and reported by its key."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import json

import pytest

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.backup import catalogue, continuous_writer, runner, segment_store
from etcd_operator.controllers.backup.failure import BackupFailed
from etcd_operator.controllers.restore import executor as restore_executor
from etcd_operator.controllers.restore import point_in_time, snapshot_lookup
from etcd_operator.core.backup import continuous as cb
from etcd_operator.core.backup import steps as backup_steps
from etcd_operator.core.backup.chain import Target, plan_replay
from etcd_operator.core.backup.continuous_status import continuous_fields
from etcd_operator.core.backup.manifest import Identity, Manifest
from etcd_operator.core.backup.segments import SegmentManifest, chain_id, segments_prefix
from etcd_operator.core.backup.spec import BackupSpec
from etcd_operator.core.buffer_budget import MemoryBudget
from etcd_operator.core.restore import steps as restore_steps
from etcd_operator.core.restore.observed import Observed
from etcd_operator.core.restore.planner import plan as restore_plan
from etcd_operator.core.restore.spec import RestoreSpec, RestoreStatus
from tests.support.backup_manifests import SEGMENT_BYTES, segment_manifest, snapshot_manifest
from tests.support.object_store import MemoryStore

KEY = bytes(range(32))
KEYS = {"k1": KEY}
ME = Identity("ns", "b", "u")
SEALED = {"compression": "zstd", "encryption": "aes-256-gcm", "key_id": "k1"}
NOW = datetime.datetime(2026, 11, 27, 12, tzinfo=datetime.UTC)
SPEC = BackupSpec.from_dict(
    {"clusterRef": {"name": "c"}, "storage": {"s3": {"bucket": "bk", "prefix": "p"}}, "retention": {"maxBackups": 3}}
)


def genuine_snapshot(store: MemoryStore, revision: int, cluster_id: str = "c1") -> Manifest:
    """A snapshot of an encrypted backup as the runner stores it: the body, then its manifest with a MAC."""
    manifest = dataclasses.replace(snapshot_manifest(revision, cluster_id=cluster_id), **SEALED)
    store.objects[manifest.snapshot_key] = b"sealed snapshot"
    store.objects[manifest.key] = manifest.to_json(KEY)
    return manifest


def planted_snapshot(store: MemoryStore, revision: int, cluster_id: str = "c1") -> Manifest:
    """What someone who can write the bucket but lacks the key can store: a manifest claiming
    this backup's identity and a newer revision, without a MAC, and a body beside it."""
    manifest = dataclasses.replace(snapshot_manifest(revision, cluster_id=cluster_id), **SEALED)
    store.objects[manifest.snapshot_key] = b"anything"
    store.objects[manifest.key] = manifest.to_json()
    return manifest


def genuine_segment(store: MemoryStore, manifest: SegmentManifest) -> SegmentManifest:
    manifest = dataclasses.replace(manifest, **SEALED)
    store.objects[manifest.segment_key] = SEGMENT_BYTES
    store.objects[manifest.key] = manifest.to_json(KEY)
    return manifest


def planted_segment(store: MemoryStore, manifest: SegmentManifest, mac_of: SegmentManifest | None = None) -> None:
    """A segment manifest without a MAC, or (`mac_of`) with the MAC copied from a genuine one."""
    manifest = dataclasses.replace(manifest, **SEALED)
    store.objects[manifest.segment_key] = SEGMENT_BYTES
    if mac_of is None:
        store.objects[manifest.key] = manifest.to_json()
    else:
        document = json.loads(manifest.to_json())
        document["mac"] = json.loads(store.objects[mac_of.key])["mac"]
        store.objects[manifest.key] = json.dumps(document).encode()


# --- snapshot retention -----------------------------------------------------------------------


def test_retention_never_deletes_a_genuine_backup_because_of_planted_newer_ones_nor_deletes_those():
    store = MemoryStore()
    genuine = [genuine_snapshot(store, revision) for revision in (10, 20, 30)]
    planted = [planted_snapshot(store, revision) for revision in (40, 50, 60)]
    before = set(store.objects)

    result = asyncio.run(
        catalogue.apply_retention(store, ME, SPEC, genuine[-1].snapshot_key, ("c1",), lambda: NOW, KEYS)  # type: ignore[arg-type]
    )

    assert result.deleted == () and store.deleted == []  # three genuine backups, maxBackups 3: none goes
    assert set(store.objects) == before  # the planted ones are not deleted on their word either
    assert sorted(i.key for i in result.ignored) == sorted(m.key for m in planted)
    assert {i.reason for i in result.ignored} == {"ManifestUnauthenticated"}


def test_retention_still_deletes_by_genuine_manifests_and_without_keys_reads_as_before():
    store = MemoryStore()
    genuine = [genuine_snapshot(store, revision) for revision in (10, 20, 30, 40)]
    result = asyncio.run(
        catalogue.apply_retention(store, ME, SPEC, genuine[-1].snapshot_key, ("c1",), lambda: NOW, KEYS)  # type: ignore[arg-type]
    )
    assert [m.snapshot_key for m in result.deleted] == [genuine[0].snapshot_key] and result.ignored == ()


# --- segment retention ------------------------------------------------------------------------


def test_segment_retention_never_deletes_a_segment_on_an_unauthenticated_manifests_word():
    store = MemoryStore()
    genuine_snapshot(store, 30)  # kept: segments wholly at or below 30 are not needed
    old_chain = chain_id("c1", 5)
    needless = genuine_segment(store, segment_manifest(old_chain, 1, 6, 20))
    planted_segment(store, segment_manifest(old_chain, 2, 21, 30))
    ignored: list = []

    deleted = asyncio.run(
        segment_store.apply_segment_retention(store, ME, "p", chain_id("c1", 30), lambda: NOW, KEYS, ignored)  # type: ignore[arg-type]
    )

    assert deleted == [needless]
    assert [i.key for i in ignored] == [segment_manifest(old_chain, 2, 21, 30).key]
    assert segment_manifest(old_chain, 2, 21, 30).key in store.objects


# --- the chain hand-over: where a new writer resumes ---------------------------------------------


def test_a_writer_never_resumes_from_a_planted_manifest():
    store = MemoryStore()
    chain = chain_id("c1", 100)
    prefix = segments_prefix("p", "ns", "b")
    for sequence, first, last in ((1, 101, 110), (2, 111, 120)):
        genuine_segment(store, segment_manifest(chain, sequence, first, last, base_revision=100))
    # Planted: the next sequence, following on, claiming 1000 revisions: a writer resuming after
    # it would never write 121..1120 (a gap a restore finds only when it needs them).
    planted_segment(store, segment_manifest(chain, 3, 121, 1120, base_revision=100))
    ignored: list = []

    last = asyncio.run(segment_store.last_segment(store, f"{prefix}{chain}/", prefix, chain, KEYS, ignored))  # type: ignore[arg-type]

    assert last is not None and (last.sequence, last.last_revision) == (2, 120)
    assert [i.key for i in ignored] == [segment_manifest(chain, 3, 121, 1120, base_revision=100).key]


def test_a_copied_mac_does_not_make_a_manifest_resumable():
    store = MemoryStore()
    chain = chain_id("c1", 100)
    prefix = segments_prefix("p", "ns", "b")
    first = genuine_segment(store, segment_manifest(chain, 1, 101, 110, base_revision=100))
    planted_segment(store, segment_manifest(chain, 2, 111, 5000, base_revision=100), mac_of=first)
    last = asyncio.run(segment_store.last_segment(store, f"{prefix}{chain}/", prefix, chain, KEYS, []))  # type: ignore[arg-type]
    assert last is not None and last.last_revision == 110


def test_the_writers_condition_names_the_manifests_it_passed_over():
    view = cb.StreamView(chain="c1-1", last_revision=120, ignored=("p/ns/b/segments/c1-1/x.segment.json",))
    step = backup_steps.Stream(message="streaming", chain="c1-1")
    _, condition = continuous_fields(step, backup_steps.StreamReport(view=view), {}, "2026-11-27T00:00:00Z")
    assert condition is not None and condition.status is True
    assert "p/ns/b/segments/c1-1/x.segment.json" in condition.message and "ignored" in condition.message


# --- the restore's choices ----------------------------------------------------------------------


def test_the_latest_backup_a_restore_takes_is_the_newest_genuine_one():
    store = MemoryStore()
    genuine = genuine_snapshot(store, 30)
    planted_snapshot(store, 40)
    source = {"backupRef": {"name": "b"}}
    found = asyncio.run(snapshot_lookup.resolve(store, "ns", source, {"bucket": "bk", "prefix": "p"}, KEYS))  # type: ignore[arg-type]
    assert found.key == genuine.snapshot_key


def test_an_unauthenticated_manifest_in_a_slot_fails_the_slot_and_is_left_alone():
    store = MemoryStore()
    planted = planted_snapshot(store, 40)
    with pytest.raises(BackupFailed) as failed:
        asyncio.run(runner._slot_manifest(store, planted.key, KEYS))  # type: ignore[arg-type]
    assert failed.value.reason == "ManifestUnauthenticated" and failed.value.permanent
    assert planted.key in store.objects and store.deleted == []


def point_in_time_store() -> tuple[MemoryStore, Manifest]:
    store = MemoryStore()
    base = genuine_snapshot(store, 100)
    chain = chain_id("c1", 100)
    for sequence, first, last in ((1, 101, 120), (2, 121, 140), (3, 141, 160)):
        genuine_segment(store, segment_manifest(chain, sequence, first, last, base_revision=100))
    return store, base


def test_the_point_in_time_planner_never_takes_a_planted_base():
    store, base = point_in_time_store()
    planted = planted_snapshot(store, 150)  # newer than the genuine base, inside the chain: the preferred base
    listed = asyncio.run(point_in_time.read_catalogue(store, "p", "ns", "b", KEYS))  # type: ignore[arg-type]
    plan = plan_replay(Target(revision=155), listed.snapshots, listed.segments)
    assert plan.base == base and [s.sequence for s in plan.segments] == [1, 2, 3]
    assert [i.key for i in listed.ignored] == [planted.key]


def test_the_point_in_time_planner_never_follows_a_planted_segment():
    store, _ = point_in_time_store()
    chain = chain_id("c1", 100)
    planted_segment(store, segment_manifest(chain, 4, 161, 900, base_revision=100))
    listed = asyncio.run(point_in_time.read_catalogue(store, "p", "ns", "b", KEYS))  # type: ignore[arg-type]
    assert plan_replay(Target(), listed.snapshots, listed.segments).up_to_revision == 160


def test_the_restores_plan_names_the_manifests_it_left_out():
    store, _ = point_in_time_store()
    planted = planted_snapshot(store, 150)
    listed = asyncio.run(point_in_time.read_catalogue(store, "p", "ns", "b", KEYS))  # type: ignore[arg-type]
    spec = RestoreSpec.from_dict(
        {
            "source": {"backupRef": {"name": "b"}, "pointInTime": {"revision": 155}},
            "target": {"newCluster": {"name": "keep", "spec": {"size": 3, "version": "3.6.0"}}},
        }
    )
    observed = Observed("ns", "r1", "uid", 1, None, catalogue=listed)
    step = restore_plan(spec, RestoreStatus(phase="Verifying"), observed, NOW.timestamp())
    assert isinstance(step, restore_steps.PlanReplay) and planted.key in step.reason


def test_a_planted_duplicate_never_replaces_the_genuine_segment_and_a_planted_gap_is_named():
    """A planted segment 2 that would reach further is ignored and the genuine chain planned;
    with the genuine segment 2 gone, the authentic ones leave a gap before the point: the
    restore fails PointNotReachable, saying where and naming the planted manifest."""
    store, base = point_in_time_store()
    chain = chain_id("c1", 100)
    planted_segment(store, segment_manifest(chain, 2, 121, 900, base_revision=100))
    planted = segment_manifest(chain, 2, 121, 900, base_revision=100).key
    step = restore_plan(RESTORE_TO_155, RestoreStatus(phase="Verifying"), observed_store(store), NOW.timestamp())
    assert isinstance(step, restore_steps.PlanReplay) and step.record is not None
    assert (step.record.base_key, step.record.last_sequence) == (base.snapshot_key, 3) and planted in step.ignored
    del store.objects[segment_manifest(chain, 2, 121, 140, base_revision=100).key]
    step = restore_plan(RESTORE_TO_155, RestoreStatus(phase="Verifying"), observed_store(store), NOW.timestamp())
    assert isinstance(step, restore_steps.Fail) and step.code == "PointNotReachable", step
    assert "no segment holds revisions 121..140" in step.reason and planted in step.reason


def test_the_plans_ignored_manifests_are_a_warning_event():
    store, _ = point_in_time_store()
    planted_snapshot(store, 150)
    step = restore_plan(RESTORE_TO_155, RestoreStatus(phase="Verifying"), observed_store(store), NOW.timestamp())
    assert isinstance(step, restore_steps.PlanReplay)
    events: list = []
    executor = restore_executor.RestoreExecutor(
        None, "op:1", {"metadata": {"name": "r1", "namespace": "ns"}}, lambda *e: events.append(e)
    )  # type: ignore[arg-type]
    asyncio.run(executor.run(step, RESTORE_TO_155, RestoreStatus(phase="Verifying"), observed_store(store)))
    # The manifests here record no auth revision, so AuthStateAtTarget is Unknown and said too.
    assert [(kind, reason) for kind, reason, _ in events] == [
        ("Warning", "ManifestUnauthenticated"),
        ("Warning", "AuthStateFromBase"),
    ]


RESTORE_TO_155 = RestoreSpec.from_dict(
    {
        "source": {"backupRef": {"name": "b"}, "pointInTime": {"revision": 155}},
        "target": {"newCluster": {"name": "keep", "spec": {"size": 3, "version": "3.6.0"}}},
    }
)


def observed_store(store: MemoryStore) -> Observed:
    listed = asyncio.run(point_in_time.read_catalogue(store, "p", "ns", "b", KEYS))  # type: ignore[arg-type]
    return Observed("ns", "r1", "uid", 1, None, catalogue=listed)


# --- the run that reads the keys: a rerun of a slot, then retention --------------------------


class RunStore(MemoryStore):
    """What a backup run asks of the store besides objects: the bucket, multipart uploads."""

    async def check_bucket(self) -> None:
        return None

    async def list_uploads(self, prefix: str):
        return [], None

    def close(self) -> None:
        return None


class KeysSecret:
    async def get(self, resource, namespace: str, name: str):
        assert (resource, name) == (kube.SECRETS, "backup-keys"), (resource, name)
        return {"data": {"k1": base64.b64encode(base64.b64encode(KEY)).decode()}}


def test_a_run_reads_the_backups_keys_and_its_retention_passes_over_planted_manifests(monkeypatch):
    store = RunStore()
    genuine = [genuine_snapshot(store, revision) for revision in (10, 20, 30)]
    planted = [planted_snapshot(store, revision) for revision in (40, 50)]

    async def location(*_):
        return None

    monkeypatch.setattr(runner, "s3_location", location)
    monkeypatch.setattr(runner, "S3Storage", lambda *_: store)
    spec = BackupSpec.from_dict(
        {
            "clusterRef": {"name": "c"},
            "storage": {"s3": {"bucket": "bk", "prefix": "p"}},
            "retention": {"maxBackups": 2},
            "encryption": {"secretRef": {"name": "backup-keys"}, "keyID": "k1"},
        }
    )
    run = runner.BackupRunner(KeysSecret(), cluster_id_history=("c1",), clock=lambda: NOW)  # type: ignore[arg-type]
    manifest, retained = asyncio.run(run.run(ME, spec, genuine[-1].slot))  # the slot already ran

    assert manifest == genuine[-1]
    assert [m.snapshot_key for m in retained.deleted] == [genuine[0].snapshot_key]  # by the genuine ones only
    assert sorted(i.key for i in retained.ignored) == sorted(m.key for m in planted)
    assert all(m.key in store.objects for m in planted + genuine[1:])


def test_a_writer_started_reads_the_backups_keys_and_resumes_after_the_last_genuine_segment(monkeypatch):
    store = RunStore()
    chain = chain_id("c1", 100)
    for sequence, first, last in ((1, 101, 110), (2, 111, 120)):
        genuine_segment(store, segment_manifest(chain, sequence, first, last, base_revision=100))
    planted_segment(store, segment_manifest(chain, 3, 121, 1120, base_revision=100))

    async def location(*_):
        return None

    async def stop_before_watching(self, storage):
        raise RuntimeError("stopped before the watch, for the test")

    monkeypatch.setattr(continuous_writer, "s3_location", location)
    monkeypatch.setattr(continuous_writer, "S3Storage", lambda *_: store)
    monkeypatch.setattr(continuous_writer.SegmentWriter, "_stream", stop_before_watching)
    spec = BackupSpec.from_dict(
        {
            "clusterRef": {"name": "c"},
            "storage": {"s3": {"bucket": "bk", "prefix": "p"}},
            "encryption": {"secretRef": {"name": "backup-keys"}, "keyID": "k1"},
        }
    )
    start = cb.ChainStart(chain=chain, cluster_id="c1", base_revision=100, base_key="p/ns/b/s100.db")
    writer = continuous_writer.SegmentWriter(
        KeysSecret(),  # type: ignore[arg-type]
        ME,
        spec,
        cb.ContinuousSpec(),
        start,
        budget=MemoryBudget(1 << 30),
    )
    asyncio.run(writer._run())

    assert writer.stopped_because == "RuntimeError: stopped before the watch, for the test"
    assert writer.view().last_revision == 120
    assert writer.view().ignored == (segment_manifest(chain, 3, 121, 1120, base_revision=100).key,)


def test_a_point_in_time_restore_lists_its_catalogue_with_the_restores_keys(monkeypatch):
    store, base = point_in_time_store()
    planted = planted_snapshot(store, 150)

    async def location(*_):
        return None

    monkeypatch.setattr(point_in_time, "s3_location", location)
    monkeypatch.setattr(point_in_time, "S3Storage", lambda *_: _closing(store))
    backup = {"metadata": {"name": "b"}, "spec": {"storage": {"s3": {"bucket": "bk", "prefix": "p"}}}}
    listed = asyncio.run(point_in_time.list_catalogue(KeysSecret(), "ns", backup, "backup-keys"))  # type: ignore[arg-type]
    assert listed.error is None and listed.snapshots == (base,)
    assert [i.key for i in listed.ignored] == [planted.key]


def _closing(store: MemoryStore) -> MemoryStore:
    store.close = lambda: None  # type: ignore[attr-defined]
    return store
