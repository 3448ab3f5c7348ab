"""The point-in-time replay's writer (cmd/etcd-replay-apply through clients/etcd/backend_apply.py
and programs/replay.apply_into_backend) on real etcd 3.5 and 3.6 processes from testbin.

A source member takes a realistic mix from a real client: puts of 100 B to 2 KiB values,
deletes, transactions of several puts and deletes, leases granted and revoked or left to
expire (etcd deletes their keys in a revision of its own), keys moved from one lease to
another. A watch from the base snapshot's revision records every revision as the continuous
backup's writer does. The base snapshot is restored with etcdutl, the records are replayed
into its backend before any etcd serves it, and an etcd started on the result must be the
source: the same HashKV at the last revision (every key's create, mod revision, version,
value and lease, in revision order), the same keys at sampled earlier revisions, the same
leases."""

from __future__ import annotations

import asyncio
import json
import pathlib
import random
import subprocess
import time

import pytest

from etcd_operator.clients.etcd.backend_apply import ApplyFailed, BackendApplier
from etcd_operator.clients.etcd.replay import ReplayMember
from etcd_operator.core.backup.segments import KeyChange, RevisionRecord, SegmentBody, encode
from etcd_operator.core.restore.point_in_time import ReplayRecord
from etcd_operator.programs import replay as replay_program
from localkube import layout as localkube_layout
from localkube.layout import replay_apply_program
from tests.support.etcd_process import EtcdProcess

pytestmark = pytest.mark.needs_etcd

REVISIONS = 3000  # of the mix, after the base snapshot
FIRST_LEASE = 0x1000
# A session its client stops renewing: etcd expires it and deletes its key in a revision of
# its own. The mix's sessions outlive the test (a real client renews them) and end by revocation.
EXPIRING_LEASE = 0x5E55
EXPIRING_KEY = b"/sessions/expiring"


@pytest.fixture(params=["3.5", "3.6"])
def binary_dir(request) -> pathlib.Path:
    return localkube_layout.testbin_dir() / f"etcd-{request.param}"


async def mix(member: ReplayMember, rng: random.Random, revisions: int) -> dict[int, int]:
    """Writes until the source has made `revisions` more revisions; the leases granted, with their TTLs."""
    keys = [f"/registry/pods/ns-{i % 7}/pod-{i:04}".encode() for i in range(400)]
    leases: dict[int, int] = {}
    live: list[int] = []
    start = await member.revision()
    while (now := await member.revision()) < start + revisions:
        roll = rng.random()
        if roll < 0.04 or not live:
            lease = FIRST_LEASE + len(leases)
            leases[lease] = rng.choice([60, 600, 3600])
            assert await member.grant_lease(lease, leases[lease])
            live.append(lease)
        elif roll < 0.07 and len(live) > 1:  # a session ends: its keys go in one revision of etcd's
            await member.revoke_lease(live.pop(rng.randrange(len(live))))
        elif roll < 0.22:  # a transaction of several changes
            chosen = rng.sample(keys, rng.randint(2, 6))
            changes = [
                KeyChange(k, None) if rng.random() < 0.3 else KeyChange(k, rng.randbytes(rng.randint(100, 2048)))
                for k in chosen
            ]
            try:
                await member.txn(changes)
            except Exception:  # a delete of absent keys only changes nothing: etcd makes no revision
                pass
        elif roll < 0.35:
            await member.txn([KeyChange(rng.choice(keys), None)])
        else:
            lease = rng.choice(live) if rng.random() < 0.3 else 0
            await member.txn([KeyChange(rng.choice(keys), rng.randbytes(rng.randint(100, 2048)), lease)])
    assert now >= start + revisions
    return leases


async def expired(member: ReplayMember, key: bytes, within: float = 60.0) -> None:
    """Waits until etcd has expired the lease that `key` was put with (its key is gone)."""
    deadline = time.monotonic() + within
    while any(k == key for k, _, _ in await member.key_values()):
        assert time.monotonic() < deadline, f"{key!r} outlived its lease by {within:.0f}s"
        await asyncio.sleep(0.2)


async def recorded(member: ReplayMember, start: int, end: int) -> list[RevisionRecord]:
    """Every revision from `start` to `end` as the watch delivers it, its changes in order."""
    changes: dict[int, list[KeyChange]] = {}
    async for batch in member.watch_keyspace(start):
        for event in batch.events:
            changes.setdefault(event.revision, []).append(KeyChange(event.key, event.value, event.lease))
        if changes and max(changes) >= end and not batch.fragment:
            break
    assert sorted(changes) == list(range(start, end + 1)), "the watch skipped a revision"
    return [RevisionRecord(r, float(r), tuple(changes[r])) for r in range(start, end + 1)]


def etcdutl_restore(binary_dir: pathlib.Path, snapshot: pathlib.Path, member: EtcdProcess) -> None:
    subprocess.run(
        [str(binary_dir / "etcdutl"), "snapshot", "restore", str(snapshot), f"--name={member.name}",
         f"--data-dir={member.data_dir}", f"--initial-cluster={member.name}={member.peer_url}",
         f"--initial-advertise-peer-urls={member.peer_url}"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def settings(tmp_path: pathlib.Path, base_revision: int, up_to: int) -> replay_program.Settings:
    record = ReplayRecord("revision", "base.db", base_revision, "", chain="c", first_sequence=1, last_sequence=1,
                          segments=1, up_to_revision=up_to, replayed_key="out.db")  # fmt: skip
    return replay_program.Settings(
        socket="", tls_dir="", result_file=tmp_path / "result", work=tmp_path / "work", segments_folder="",
        output_key="out.db", restore="r", until_time=None, record=record, apply_program=replay_apply_program(),
    )  # fmt: skip


async def state(member: ReplayMember, revision: int, samples: list[int]) -> dict:
    return {
        "hash_kv": await member.hash_kv(revision),
        "keys": await member.key_values(revision),
        "samples": {r: await member.key_values(r) for r in samples},
        "leases": sorted(await member.leases()),
    }


def test_a_replayed_mix_is_the_source_revision_for_revision(binary_dir, tmp_path):
    rng = random.Random(44)
    source = EtcdProcess("src", binary_dir, tmp_path / "src").start()
    try:
        source.wait_healthy()

        async def written():
            async with ReplayMember(source.endpoint, timeout=10) as member:
                assert await member.grant_lease(0xBA5E, 3600)
                for i in range(50):
                    await member.txn([KeyChange(f"/base/{i}".encode(), b"x" * 300, 0xBA5E if i % 5 == 0 else 0)])
                base = await member.revision()
                await asyncio.to_thread(
                    subprocess.run,
                    [str(binary_dir / "etcdctl"), f"--endpoints={source.endpoint}", "snapshot", "save",
                     str(tmp_path / "base.db")],
                    check=True, capture_output=True, timeout=60,
                )  # fmt: skip
                assert await member.grant_lease(EXPIRING_LEASE, 2)
                await member.txn([KeyChange(EXPIRING_KEY, b"held", EXPIRING_LEASE)])
                leases = await mix(member, rng, REVISIONS)
                leases[EXPIRING_LEASE] = 2
                await expired(member, EXPIRING_KEY)
                end = await member.revision()
                records = await recorded(member, base + 1, end)
                samples = sorted(rng.sample(range(base, end + 1), 12))
                return base, end, records, leases, samples, await state(member, end, samples)

        base, end, records, leases, samples, expected = asyncio.run(written())
    finally:
        source.stop()
    assert any(len(r.changes) > 1 for r in records) and any(c.deleted for r in records for c in r.changes)
    assert any(c.lease for r in records for c in r.changes)
    assert any(c.key == EXPIRING_KEY and c.deleted for r in records for c in r.changes)
    segment = tmp_path / "0000000001.segment"
    segment.write_bytes(encode(SegmentBody(tuple(records), tuple(sorted(leases.items())))))

    replayed = EtcdProcess("replayed", binary_dir, tmp_path / "replayed")
    etcdutl_restore(binary_dir, tmp_path / "base.db", replayed)
    started = time.monotonic()
    progress = asyncio.run(
        replay_program.apply_into_backend(
            replayed.data_dir / "member" / "snap" / "db", [segment], settings(tmp_path, base, end)
        )
    )
    elapsed = time.monotonic() - started
    assert (progress.revision, progress.applied) == (end, end - base)
    replayed.start()
    try:
        replayed.wait_healthy()

        async def served():
            async with ReplayMember(replayed.endpoint, timeout=10) as member:
                assert await member.revision() == end
                return await state(member, end, samples)

        found = asyncio.run(served())
    finally:
        replayed.stop()
    assert found["hash_kv"] == expected["hash_kv"]
    assert found["keys"] == expected["keys"]
    for r in samples:
        assert found["samples"][r] == expected["samples"][r], f"revision {r} differs"
    # Every lease the source still holds that a key was put with is held, with its granted
    # TTL (the writer records the leases puts use: docs/operations/backup.md). A revoked one
    # is granted again by the replay (its keys' deletions are revisions of the chain) and is
    # left to expire in the restored cluster.
    used = {c.lease for r in records for c in r.changes if c.lease} | {0xBA5E}
    assert {(lease, ttl) for lease, ttl in expected["leases"] if lease in used} <= set(found["leases"])
    assert {lease for lease, _ in found["leases"]} <= used
    print(f"replayed {end - base} revisions in {elapsed:.2f}s ({(end - base) / elapsed:.0f}/s)")


@pytest.fixture
def restored(binary_dir, tmp_path) -> tuple[pathlib.Path, int]:
    """A restored backend of a source with /a and /b at revision 3; its db and revision."""
    source = EtcdProcess("src", binary_dir, tmp_path / "src").start()
    try:
        source.wait_healthy()

        async def fill() -> int:
            async with ReplayMember(source.endpoint, timeout=10) as member:
                await member.txn([KeyChange(b"/a", b"1")])
                await member.txn([KeyChange(b"/b", b"2")])
                return await member.revision()

        revision = asyncio.run(fill())
        subprocess.run(
            [str(binary_dir / "etcdctl"), f"--endpoints={source.endpoint}", "snapshot", "save",
             str(tmp_path / "base.db")],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    finally:
        source.stop()
    member = EtcdProcess("replayed", binary_dir, tmp_path / "replayed")
    etcdutl_restore(binary_dir, tmp_path / "base.db", member)
    return member.data_dir / "member" / "snap" / "db", revision


def test_a_revision_that_would_land_on_another_number_is_refused_and_nothing_after_it_applies(restored, tmp_path):
    """A recorded delete of a key the store does not hold changes nothing, so etcd would make
    no revision: every later revision would land one number early."""
    db, base = restored
    body = SegmentBody(
        (
            RevisionRecord(base + 1, 1.0, (KeyChange(b"/a", b"changed"),)),
            RevisionRecord(base + 2, 2.0, (KeyChange(b"/never-there", None),)),
            RevisionRecord(base + 3, 3.0, (KeyChange(b"/b", None),)),
        )
    )
    segment = tmp_path / "0000000001.segment"
    segment.write_bytes(encode(body))
    with pytest.raises(replay_program.Refused) as refused:
        asyncio.run(replay_program.apply_into_backend(db, [segment], settings(tmp_path, base, base + 3)))
    assert refused.value.reason == "RevisionMismatch"
    assert f"revision {base + 2} of the source was applied as revision {base + 1}" in refused.value.message

    async def reopened() -> tuple[int, str]:
        async with BackendApplier(db, replay_apply_program()) as backend:
            return backend.revision, json.dumps(backend.leases)

    assert asyncio.run(reopened())[0] == base + 1  # /b's deletion never applied


def test_the_writer_refuses_a_revision_out_of_order_and_a_put_under_a_lease_it_does_not_hold(restored):
    db, base = restored

    async def send(frames) -> ApplyFailed:
        async with BackendApplier(db, replay_apply_program()) as backend:
            assert backend.revision == base
            with pytest.raises(ApplyFailed) as failed:
                for revision, changes in frames:
                    await backend.apply(revision, changes)
                await backend.finish()
            return failed.value

    skipped = asyncio.run(send([(base + 2, [KeyChange(b"/c", b"3")])]))
    assert skipped.reason == "RevisionMismatch" and f"revision {base + 2} would follow" in skipped.message
    unleased = asyncio.run(send([(base + 1, [KeyChange(b"/c", b"3", lease=0x77)])]))
    assert unleased.reason == "LeaseUnknown" and "lease 77" in unleased.message
