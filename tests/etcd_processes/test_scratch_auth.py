"""Backup verification and point-in-time replay on snapshots of a cluster with etcd
authentication on, and off, with real etcd 3.5 and 3.6 processes from testbin (no pods).

A private etcd gets data, a lease and (with auth) the users the operator makes (`root` and
`etcd-operator`, role root) and `etcdctl auth enable`; its snapshot is restored with etcdutl
as the pods' restore container does it; the scratch member runs with the builder's own flags
on the throwaway certificates the pods' init container writes (programs/scratch_tls.py).
Then the real check program (programs/scratch_check.main) and the real replay steps
(programs/replay.apply_into_backend before the member starts, then serving_replayed and
save_snapshot over its TLS unix socket) write and read it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator

import pytest

from etcd_operator.clients.etcd.client import EtcdError, EtcdMemberClient
from etcd_operator.clients.etcd.replay import ReplayMember
from etcd_operator.core import seed_containers
from etcd_operator.core.backup.scratch_verdict import CHECK_EXIT_CODES
from etcd_operator.core.backup.segments import KeyChange, RevisionRecord, SegmentBody, encode
from etcd_operator.core.restore import replay_pod
from etcd_operator.core.restore.point_in_time import ReplayRecord
from etcd_operator.programs import replay as replay_program
from etcd_operator.programs import scratch_check
from etcd_operator.programs import scratch_tls as scratch_tls_program
from localkube import layout as localkube_layout
from localkube.layout import replay_apply_program
from tests.support.etcd_process import EtcdProcess
from tests.support.processes import stop_gracefully

pytestmark = pytest.mark.needs_etcd

ETCD_MINORS = ["3.5", "3.6"]
PORTS = range(41000, 41100)  # this test's own ports, for the source member
ROOT_PASSWORD = "test-only-root-password"  # the source's root; the scratch member never gets it
SOURCE_LEASE, REPLAYED_LEASE = 0x5EED, 0x7E57


def free_ports(count: int) -> list[int]:
    found = []
    for port in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise RuntimeError(f"fewer than {count} free ports in {PORTS}")


@pytest.fixture(params=ETCD_MINORS)
def binary_dir(request) -> pathlib.Path:
    return localkube_layout.testbin_dir() / f"etcd-{request.param}"


def image_of(binary_dir: pathlib.Path) -> str:
    """An image name tagged with the binary's own version, as the operator names images."""
    out = subprocess.run([str(binary_dir / "etcd"), "--version"], capture_output=True, text=True, check=True).stdout
    return f"etcd:v{out.split()[2]}"  # "etcd Version: 3.6.16"


@pytest.fixture
def short_dir() -> Iterator[pathlib.Path]:
    """A unix socket's path must stay under 108 bytes: pytest's tmp_path can be longer."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="scr-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@dataclasses.dataclass(frozen=True)
class Source:
    snapshot: pathlib.Path
    revision: int
    key_count: int
    hash_kv: int
    compact_revision: int
    keys: list[tuple[bytes, bytes, int]]
    auth_revision: int  # the source's when its snapshot was saved (etcdctl auth status)


def etcdctl(binary_dir: pathlib.Path, endpoint: str, *args: str, user: str | None = None) -> str:
    auth = [f"--user=root:{ROOT_PASSWORD}"] if user == "root" else []
    done = subprocess.run(
        [str(binary_dir / "etcdctl"), f"--endpoints={endpoint}", *auth, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"etcdctl {' '.join(args)}: {done.stderr}"
    return done.stdout


def enable_auth(binary_dir: pathlib.Path, endpoint: str) -> None:
    """As an operator with spec.auth does: root (etcd requires it, with the root role) and
    etcd-operator, whose certificate's CN maps to it; no password is given to the pods."""
    etcdctl(binary_dir, endpoint, "user", "add", "root", f"--new-user-password={ROOT_PASSWORD}")
    etcdctl(binary_dir, endpoint, "user", "grant-role", "root", "root")
    etcdctl(binary_dir, endpoint, "user", "add", "etcd-operator", "--no-password")
    etcdctl(binary_dir, endpoint, "user", "grant-role", "etcd-operator", "root")
    etcdctl(binary_dir, endpoint, "auth", "enable")


async def fill(endpoint: str) -> None:
    async with ReplayMember(endpoint, timeout=10) as client:
        assert await client.grant_lease(SOURCE_LEASE, 3600)
        for i in range(40):
            await client.txn([KeyChange(f"/app/{i:03}".encode(), f"value {i}".encode())])
        await client.txn([KeyChange(b"/app/005", None), KeyChange(b"/leased", b"held", SOURCE_LEASE)])
        await client.compact(20)


@pytest.fixture(params=["auth-on", "auth-off"])
def source(request, binary_dir, tmp_path) -> Iterator[Source]:
    client_port, peer_port = free_ports(2)
    member = EtcdProcess("src", binary_dir, tmp_path / "src", client_port=client_port, peer_port=peer_port).start()
    try:
        member.wait_healthy()
        asyncio.run(fill(member.endpoint))

        async def answers():
            async with ReplayMember(member.endpoint, timeout=10) as client:
                revision = await client.revision()
                hash_kv, compact_revision = await client.hash_kv(revision)
                return revision, await client.count_keys(revision), hash_kv, compact_revision, await client.key_values()

        revision, key_count, hash_kv, compact_revision, keys = asyncio.run(answers())
        user = None
        if request.param == "auth-on":
            enable_auth(binary_dir, member.endpoint)
            user = "root"

            async def refused_without_credentials() -> str:
                async with EtcdMemberClient(member.endpoint, timeout=10) as client:
                    with pytest.raises(EtcdError) as refused:
                        await client.count_keys()
                return refused.value.detail

            assert "user name is empty" in asyncio.run(refused_without_credentials())
        snapshot = tmp_path / "source.db"
        etcdctl(binary_dir, member.endpoint, "snapshot", "save", str(snapshot), user=user)
        auth = json.loads(etcdctl(binary_dir, member.endpoint, "auth", "status", "-w", "json", user=user))
        auth_revision = int(auth.get("authRevision") or 0)
    finally:
        member.stop()
    status = subprocess.run(
        [str(binary_dir / "etcdutl"), "snapshot", "status", str(snapshot), "-w", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(status.stdout)["revision"] == revision  # enabling auth made no revision
    yield Source(snapshot, revision, key_count, hash_kv, compact_revision, keys, auth_revision)


@contextlib.contextmanager
def scratch_member(
    binary_dir: pathlib.Path,
    image: str,
    snapshot: pathlib.Path,
    workdir: pathlib.Path,
    *flags: str,
    before_start: Callable[[pathlib.Path], None] | None = None,
):
    """What the pods run: etcdutl's restore, the scratch-tls init container's program, then
    (`before_start`, given the restored data directory: the replay pod's apply container)
    the scratch member with the builders' own arguments, in `workdir` (the emptyDir)."""
    member, data_dir = "scratch", str(workdir / "data")
    peer = seed_containers.PLACEHOLDER_PEER_URL
    restore = seed_containers.etcdutl_restore(
        "etcd", str(snapshot), member, data_dir, f"{member}={peer}", peer, "token", []
    )
    subprocess.run([str(binary_dir / "etcdutl"), *restore["args"]], check=True, capture_output=True, timeout=60)
    tls_dir = seed_containers.scratch_tls_dir(str(workdir))
    assert scratch_tls_program.main({"SCRATCH_TLS_DIR": tls_dir}) == 0
    if before_start is not None:
        before_start(pathlib.Path(data_dir))
    etcd = seed_containers.scratch_member(image, str(workdir), member, data_dir, [], *flags)
    with open(workdir / "etcd.log", "ab") as log:
        process = subprocess.Popen(
            [str(binary_dir / "etcd"), *etcd["args"], "--log-level=warn"],
            cwd=etcd["workingDir"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield str(workdir / seed_containers.SCRATCH_CLIENT_SOCKET), tls_dir
    finally:
        stop_gracefully(process, 10)


async def refusal(client: EtcdMemberClient) -> str:
    """etcd's or gRPC's words for refusing `client`; fails the test if it answers."""
    with pytest.raises(EtcdError) as refused:
        await client.count_keys()
    return refused.value.detail


@pytest.mark.parametrize("listeners", ["http-apart", "one-listener"])
def test_verification_verifies_the_snapshot_with_no_secret_and_only_for_its_own_certificate(
    source, binary_dir, short_dir, listeners
):
    # one-listener: as for an etcd before 3.5.8 (no --listen-client-http-urls), gRPC through
    # etcd's HTTP server on the one TLS socket
    image = image_of(binary_dir) if listeners == "http-apart" else "etcd:v3.5.7"
    with scratch_member(binary_dir, image, source.snapshot, short_dir) as (socket_path, tls_dir):
        verdict_file = short_dir / "verdict"
        env = {
            "ETCD_SOCKET": socket_path,
            "SCRATCH_TLS_DIR": tls_dir,
            "VERDICT_FILE": str(verdict_file),
            "EXPECTED_REVISION": str(source.revision),
            "EXPECTED_KEY_COUNT": str(source.key_count),
            "EXPECTED_HASH_KV": str(source.hash_kv),
            "EXPECTED_COMPACT_REVISION": str(source.compact_revision),
        }
        code = scratch_check.main(env)
        assert code == CHECK_EXIT_CODES["Verified"], verdict_file.read_text()
        assert (short_dir / "etcd-http:0").exists() == (listeners == "http-apart")

        # A verdict the other way, so the pass above is the comparison's: a wrong hash is caught.
        wrong = {**env, "EXPECTED_HASH_KV": str(source.hash_kv + 1)}
        assert scratch_check.main(wrong) == CHECK_EXIT_CODES["HashKVMismatch"], verdict_file.read_text()

        # Nothing else reaches the restored data: no client without a certificate of this pod's
        # CA, though it trusts the member's certificate.
        other_ca = short_dir / "other-tls"
        scratch_tls_program.write(other_ca, time.time())
        own, other = (scratch_tls_program.read_client_tls(str(f)) for f in (tls_dir, other_ca))
        foreign_cert = dataclasses.replace(own, cert=other.cert, key=other.key)

        async def strangers() -> list[str]:
            async with (
                EtcdMemberClient(f"unix://{socket_path}", timeout=5) as plain,
                EtcdMemberClient(f"unix://{socket_path}", timeout=5, tls=foreign_cert) as foreign,
            ):
                return [await refusal(plain), await refusal(foreign)]

        asyncio.run(strangers())  # each refusal() fails the test if the member answers


def test_the_replay_writes_into_and_snapshots_the_restored_base_with_no_secret(source, binary_dir, short_dir):
    base = source.revision
    body = SegmentBody(
        revisions=(
            RevisionRecord(base + 1, 1.0, (KeyChange(b"/app/new", b"replayed", REPLAYED_LEASE),)),
            RevisionRecord(base + 2, 2.0, (KeyChange(b"/app/000", None), KeyChange(b"/app/001", b"changed"))),
            RevisionRecord(base + 3, 3.0, (KeyChange(b"/leased", b"again", SOURCE_LEASE),)),
        ),
        leases=((REPLAYED_LEASE, 600),),
    )
    segment = short_dir / "0000000001.segment"
    segment.write_bytes(encode(body))
    record = ReplayRecord("revision", "base.db", base, "", chain="c", first_sequence=1, last_sequence=1,
                          segments=1, up_to_revision=base + 3, replayed_key="out.db")  # fmt: skip
    flags = replay_pod.REPLAY_MEMBER_FLAGS
    image = image_of(binary_dir)
    workdir = short_dir / "pod"
    settings = replay_program.Settings(
        socket=str(workdir / seed_containers.SCRATCH_CLIENT_SOCKET),
        tls_dir=seed_containers.scratch_tls_dir(str(workdir)),
        result_file=short_dir / "result", work=short_dir / "work", segments_folder="", output_key="out.db",
        restore="r", until_time=None, record=record, apply_program=replay_apply_program(),
    )  # fmt: skip
    applied = []

    def apply(data_dir: pathlib.Path) -> None:  # the apply container, before etcd starts
        db = data_dir / "member" / "snap" / "db"
        applied.append(asyncio.run(replay_program.apply_into_backend(db, [segment], settings)))

    with scratch_member(binary_dir, image, source.snapshot, workdir, *flags, before_start=apply) as (
        socket_path,
        tls_dir,
    ):

        async def replayed():
            tls = await asyncio.to_thread(scratch_tls_program.read_client_tls, tls_dir)
            async with ReplayMember(f"unix://{socket_path}", tls=tls) as member:
                progress = await replay_program.serving_replayed(member, applied[0])
                snapshot = short_dir / "replayed.db"
                await asyncio.to_thread(replay_program.save_snapshot, socket_path, member.tls, snapshot)
                after = await replay_program.scratch_auth_revision(member)
                return progress, await member.key_values(), sorted(await member.leases()), snapshot, after

        progress, keys, leases, snapshot, auth_after = asyncio.run(replayed())
    assert (progress.revision, progress.applied) == (base + 3, 3)
    # The restored base keeps the source's auth revision, and the replay does not move it: what
    # the replayed snapshot's manifest records as baseAuthRevision (programs/replay.store).
    assert progress.base_auth_revision == source.auth_revision == auth_after
    assert replay_program.held_auth_revision(progress.base_auth_revision, auth_after) == source.auth_revision
    expected = {k: (v, lease) for k, v, lease in source.keys}
    del expected[b"/app/000"]
    expected |= {
        b"/app/new": (b"replayed", REPLAYED_LEASE),
        b"/app/001": (b"changed", 0),
        b"/leased": (b"again", SOURCE_LEASE),
    }
    assert {k: (v, lease) for k, v, lease in keys} == expected
    assert [lease for lease, _ in leases] == sorted([SOURCE_LEASE, REPLAYED_LEASE])
    status = subprocess.run(
        [str(binary_dir / "etcdutl"), "snapshot", "status", str(snapshot), "-w", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(status.stdout)["revision"] == base + 3
