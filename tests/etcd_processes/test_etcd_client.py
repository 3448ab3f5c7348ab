"""The etcd client library against real etcd 3.5 and 3.6 members built by testbin:
learner add, promote and remove; a snapshot streamed to bytes."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import subprocess

import pytest

from etcd_operator.clients.etcd.client import EtcdError, EtcdMemberClient
from etcd_operator.clients.etcd.snapshot import SnapshotStream
from etcd_operator.core.backup.bbolt import snapshot_revision
from etcd_operator.core.cluster import learners
from localkube import layout as localkube_layout
from tests.support.etcd_process import EtcdProcess

pytestmark = pytest.mark.needs_etcd

ETCD_MINORS = ["3.5", "3.6"]


@pytest.fixture(params=ETCD_MINORS)
def binary_dir(request):
    return localkube_layout.testbin_dir() / f"etcd-{request.param}"


@pytest.fixture
def first_member(binary_dir, tmp_path):
    member = EtcdProcess("m0", binary_dir, tmp_path / "m0").start()
    member.wait_healthy()
    yield member
    member.stop()


async def wait_until(predicate, timeout: float = 30.0, interval: float = 0.2):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await predicate()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


def retrying(call):
    async def attempt():
        try:
            return await call()
        except EtcdError as e:
            if e.learner_not_ready or e.cluster_not_ready:
                return None
            raise

    return attempt


async def test_learner_add_promote_remove(first_member, binary_dir, tmp_path):
    async with EtcdMemberClient(first_member.endpoint) as client:
        await client.put(b"/k", b"before-join")
        joiner = EtcdProcess("m1", binary_dir, tmp_path / "m1")

        learner, members = await client.add_learner([joiner.peer_url])
        assert learner.is_learner and not learner.started
        initial_cluster = ",".join(f"{m.name or 'm1'}={m.peer_urls[0]}" for m in members)
        joiner.start(initial_cluster=initial_cluster, state="existing")
        try:
            joiner.wait_healthy()

            promoted = await wait_until(retrying(lambda: client.promote(learner.id)))
            assert [m.is_learner for m in promoted if m.id == learner.id] == [False]

            async with EtcdMemberClient(joiner.endpoint) as joined:
                # The joiner learns of its promotion when it applies that entry, a moment
                # after the leader committed it.
                async def joiner_status():
                    status = await joined.status()
                    return status if not status.is_learner else None

                status = await wait_until(joiner_status)
                assert not status.is_learner
                assert await joined.get(b"/k") == b"before-join"

            cluster_id, listed = await client.member_list()
            assert cluster_id and {m.id for m in listed} == {learner.id, (await client.status()).member_id}

            # etcd refuses reconfiguration until the new voter has been connected a while.
            remaining = await wait_until(retrying(lambda: client.remove(learner.id)))
            assert learner.id not in {m.id for m in remaining}
        finally:
            joiner.stop()
        _, listed = await client.member_list()
        assert len(listed) == 1


@pytest.mark.parametrize("binary_dir", ["3.6"], indirect=True)
async def test_a_learner_held_at_its_snapshot_publishes_after_its_peer_urls_are_updated(binary_dir, tmp_path):
    """etcd 3.6 does not move a learner's applied index when it applies the leader's
    snapshot, only its committed index: from a snapshot above the apply gap (5000 entries)
    the learner's publish is refused ("too many requests") until an entry after the
    snapshot is applied, so with no client writing it never serves. A MemberUpdate to the
    peer URLs it has is such an entry (cluster/learners.py)."""
    # The leader must send a snapshot, not entries: with etcd's default snapshot count
    # (10000) it still holds every entry, and the learner catches up from them.
    leader = EtcdProcess("m0", binary_dir, tmp_path / "m0", extra_flags=("--snapshot-count=1000",)).start()
    leader.wait_healthy()
    try:
        held = await _hold_a_learner_then_free_it(leader, binary_dir, tmp_path)
    finally:
        leader.stop()
    assert "etcdserver: too many requests" in (tmp_path / f"{held}.log").read_text()


async def _hold_a_learner_then_free_it(leader, binary_dir, tmp_path, attempts: int = 4) -> str:
    """Returns the name of the learner that was held, then freed. A learner is held only when no
    entry follows the snapshot it receives; when one does (etcd proposes some of its own, and
    the leader may cut the snapshot just before the learner's own member-add entry), the
    learner publishes at once: it is removed and another joins, up to `attempts` times, and the
    test is skipped if none was held."""
    async with EtcdMemberClient(leader.endpoint) as client:
        for start in range(0, 2 * learners.MAX_APPLY_GAP + 2000, 100):
            await asyncio.gather(*(client.put(f"/k/{n}".encode(), b"v") for n in range(start, start + 100)))

        async def idle():
            before = (await client.status()).raft_index
            await asyncio.sleep(5)
            return (await client.status()).raft_index == before

        published_at_once = []
        for attempt in range(1, attempts + 1):
            await wait_until(idle, timeout=60)
            joiner = EtcdProcess(f"m{attempt}", binary_dir, tmp_path / f"m{attempt}")
            learner, members = await client.add_learner([joiner.peer_url])
            initial_cluster = ",".join(f"{m.name or joiner.name}={m.peer_urls[0]}" for m in members)
            joiner.start(initial_cluster=initial_cluster, state="existing")
            try:
                try:
                    joiner.wait_healthy(timeout=15)
                except TimeoutError:
                    pass
                else:
                    published_at_once.append(joiner.name)
                    await wait_until(retrying(functools.partial(client.remove, learner.id)))
                    continue
                await client.update_peer_urls(learner.id, [joiner.peer_url])
                joiner.wait_healthy(timeout=15)
                _, listed = await client.member_list()
                assert [(m.name, m.peer_urls, m.is_learner) for m in listed if m.id == learner.id] == [
                    (joiner.name, (joiner.peer_url,), True)
                ]
                return joiner.name
            finally:
                joiner.stop()
    # Not a pass: what this test is about did not happen here (seen under heavy load, where
    # some entry always followed the snapshot); the real-node rotation test still needs the fix.
    pytest.skip(f"etcd held no learner at its snapshot in {attempts} attempts ({published_at_once} published at once)")


async def test_adding_a_second_learner_is_refused_while_one_is_pending(first_member, binary_dir, tmp_path):
    async with EtcdMemberClient(first_member.endpoint) as client:
        await client.add_learner(["http://127.0.0.1:1"])
        with pytest.raises(EtcdError) as refused:
            await client.add_learner(["http://127.0.0.1:2"])
        # etcd allows one learner at a time, a second guard beside the operator's own.
        assert "too many learner" in refused.value.detail


async def test_snapshot_streams_to_bytes(first_member, binary_dir, tmp_path):
    async with EtcdMemberClient(first_member.endpoint) as client:
        for i in range(200):
            await client.put(f"/data/{i:04}".encode(), b"x" * 512)
        revision = (await client.status()).revision

    stream = SnapshotStream(first_member.endpoint)
    chunks = await asyncio.to_thread(list, stream)
    data = b"".join(chunks)

    assert len(chunks) > 1, "the snapshot should arrive as a stream of chunks"
    # etcd appends the sha256 of the database to the snapshot stream.
    assert hashlib.sha256(data[:-32]).digest() == data[-32:]

    snapshot_file = tmp_path / "snap.db"
    snapshot_file.write_bytes(data)
    out = await asyncio.to_thread(
        subprocess.run,
        [str(binary_dir / "etcdutl"), "snapshot", "status", str(snapshot_file), "-w", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert json.loads(out.stdout)["revision"] == revision

    async def read(offset, length):
        return data[offset : offset + length]

    assert await snapshot_revision(read) == revision, "the bbolt reader disagrees with etcdutl"


async def test_downgrade_validate_and_cancel_on_3_6(tmp_path):
    member = EtcdProcess("m0", localkube_layout.testbin_dir() / "etcd-3.6", tmp_path / "m0").start()
    try:
        member.wait_healthy()
        async with EtcdMemberClient(member.endpoint) as client:
            assert (await client.downgrade("VALIDATE", "3.5")).startswith("3.6")
            with pytest.raises(EtcdError, match="invalid downgrade target"):
                await client.downgrade("VALIDATE", "3.4")
            await client.downgrade("ENABLE", "3.5")
            with pytest.raises(EtcdError, match="downgrade job in progress"):
                await client.downgrade("ENABLE", "3.5")
            await client.downgrade("CANCEL", "3.5")
    finally:
        member.stop()


async def test_auth_revision_moves_with_auth_changes_and_not_with_keys(first_member):
    """What the continuous writer records per segment: the KV watch carries no auth change,
    the auth revision does (and a put does not move it)."""
    async with EtcdMemberClient(first_member.endpoint) as client:
        start = await client.auth_revision()
        await client.put(b"/k", b"v")
        assert await client.auth_revision() == start
        kv_revision = (await client.status()).revision

        await client.user_add("alice", "first-password")
        after_add = await client.auth_revision()
        await client.role_add("reader")
        await client.user_grant_role("alice", "reader")
        await client.user_change_password("alice", "second-password")
        after_changes = await client.auth_revision()

        assert start < after_add < after_changes
        assert (await client.status()).revision == kv_revision, "auth changes made no KV revision"


async def test_a_member_that_serves_again_is_reached_within_seconds(tmp_path):
    """A member refused connections for a while (its process restarting, a bootstrap's pods
    starting): once it serves, the next call reaches it. gRPC's own reconnect backoff grows
    to about 10 s after 16 s of refusals, and a member that came back stayed out of reach
    until then."""
    member = EtcdProcess("m0", localkube_layout.testbin_dir() / "etcd-3.6", tmp_path / "m0")
    client = EtcdMemberClient(member.endpoint, timeout=0.5)
    loop = asyncio.get_running_loop()
    refused_until = loop.time() + 16
    try:
        while loop.time() < refused_until:
            with pytest.raises(EtcdError):
                await client.status()
            await asyncio.sleep(0.3)
        member.start()
        member.wait_healthy()

        async def answers():
            try:
                return await client.status()
            except EtcdError:
                return None

        await wait_until(answers, timeout=3.0, interval=0.3)
    finally:
        await client.close()
        if member.process is not None:
            member.stop()
