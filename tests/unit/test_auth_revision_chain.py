"""etcd's auth revision through a continuous backup: the writer records it with each segment
and asks for a new base when it moved past the newest snapshot's (core/backup/planner.py);
a point-in-time restore says when its base's auth state is not the target's
(core/restore/replay_planner.py)."""

from __future__ import annotations

import asyncio

import pytest

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.planner import plan
from etcd_operator.core.backup.segment_cutting import SegmentCutter
from etcd_operator.core.backup.segments import KeyChange, RevisionRecord, chain_id
from tests.unit.test_backup_continuous import CHAIN_100, CLUSTER, CONTINUOUS, NOW, lease_writer, observed, state, view
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
    return state(lastBackup=record, continuous=CHAIN_100, **fields)


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
