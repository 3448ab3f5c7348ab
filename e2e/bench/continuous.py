"""`python -m bench continuous`: what a continuous backup gives and costs (issue 28), measured
side by side in one run, on real parts: a 3-member etcd 3.6 cluster of processes (fsync on),
a MinIO, the operator's own continuous writer and the operator's own replay.

The Kubernetes layer is not needed to measure these, and is not run: the writer
(controllers/backup/continuous_writer.SegmentWriter) runs in a process of its own
(bench/continuous_writer_process.py: members given on its command line, credentials from its
environment), and the replay program's steps (programs/replay.py: fetch_segments,
replay_into, store) run here against a scratch etcd started as the replay pod starts it.

(a) RPO. A full snapshot is taken (the chain's base), then two writers follow the same
    cluster at once, one with segmentSeconds 1 (the default) and one with 20
    (etcd-backup-restore's default delta period; segmentBytes 16 MiB, the most the CRD allows,
    so that the period cuts, not the size). A load of RATE writes/s (Mix: puts of 100 B to
    2 KiB values, some under leases, deletes, transactions of several changes, sessions whose
    lease is revoked) runs over 3 clients, each acknowledged write's revision and wall time
    recorded; after LOAD_SECONDS all three members are killed with SIGKILL at once. Once the
    writers' last uploads have landed (the store stays up), the stored segment manifests say
    what a restore would have: the acknowledged writes above the newest stored revision are
    lost, and so are the seconds between that revision's ack and the newest lost ack. One
    kill is one sample of where in a segment's period it falls, so the bench also prints the
    worst moment of the run: just before each upload landed, what a kill would have lost.
(b) Point-in-time restore against a full-snapshot restore of the same data. The members are
    started again (no write was lost to them: fsync was on); the 1 s writer catches up to the
    cluster's revision; a full snapshot is saved at that revision. Timed: the full restore
    (download, `etcdutl snapshot restore`), and the point-in-time path as the replay pod
    runs it (download the base, `etcdutl snapshot restore`; the apply container's steps:
    fetch and check the segments, replay them into the restored backend with
    etcd-replay-apply; then a scratch etcd on unix sockets on the result, its snapshot
    and upload). Both restored stores must have the same HashKV at the revision and hold
    the same keys and values: the bench fails otherwise.
(c) The writers' CPU seconds per second of load (/proc/<pid>/stat) and peak RSS (VmHWM),
    beside an idle process with the same imports.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence

from etcd_operator.clients.etcd.client import EtcdError, EtcdMemberClient
from etcd_operator.clients.etcd.replay import ReplayMember
from etcd_operator.clients.storage.s3 import S3Location, S3Storage
from etcd_operator.core import seed_containers
from etcd_operator.core.backup.continuous import DEFAULT_SEGMENT_BYTES
from etcd_operator.core.backup.manifest import Manifest, backup_prefix, manifest_key
from etcd_operator.core.backup.segments import (
    SEGMENT_MANIFEST_SUFFIX,
    KeyChange,
    SegmentManifest,
    chain_id,
    segments_prefix,
)
from etcd_operator.core.restore import replay_pod
from etcd_operator.core.timefmt import now_text
from etcd_operator.programs import replay as replay_program
from etcd_operator.programs import scratch_tls as scratch_tls_program
from localkube import layout as localkube_layout

RATE = float(os.environ.get("BENCH_CONTINUOUS_RATE", "1000"))  # writes/s asked
LOAD_SECONDS = float(os.environ.get("BENCH_CONTINUOUS_SECONDS", "45"))
VALUE_BYTES = (100, 2048)  # a put's value: a size drawn between these
FILL_VALUE_BYTES = 1024
KEYS = 10_000  # distinct keys: written once before the base snapshot, then changed by the load
IN_FLIGHT = 48  # writes outstanding at once, over 3 clients (one per member)
SESSIONS, FIRST_SESSION, SESSION_TTL = 16, 0x5E550000, 600  # the Mix's leases
SESSION_ENDS_EVERY = 2000  # writes
REPLAY_GOAL = 10_000  # revisions/s (issue 44)
# etcd-backup-restore's published figure (its PR #991: 131,812 delta events in 22 s, fsync
# off); it is not built or run here.
REPLAY_ANCHOR = "etcd-backup-restore about 6,000 events/s (published, its PR #991; not run here)"
# (segmentSeconds, segmentBytes): the default, and etcd-backup-restore's 20 s period
WRITERS = {"1 s (default)": (1, DEFAULT_SEGMENT_BYTES), "20 s": (20, 16 << 20)}
DEFAULT_WRITER = "1 s (default)"
PORTS = range(*(int(p) for p in os.environ.get("BENCH_CONTINUOUS_PORTS", "19600-19700").split("-")))
SETTLE_QUIET_SECONDS = 3.0  # after the kill: no new segment for this long, and the writers noticed
CATCH_UP_SECONDS = 120.0
BUCKET = "bench-continuous"
NAMESPACE, CLUSTER = "bench", "source"
ACCESS_KEY, SECRET_KEY = "bench-access", "bench-secret-key"
OPERATOR_PYTHON = os.path.abspath(os.environ.get("BENCH_OPERATOR_PYTHON") or sys.executable)  # run elsewhere
HERE = pathlib.Path(__file__).resolve().parent
MIB = 1 << 20
REPLAY_PHASE = "replay into the restored backend"
# The scratch member's flags follow its image's version (seed_containers.http_listener_flags): the
# testbin's etcd 3.6 runs with a 3.6 tag's.
BENCH_ETCD_IMAGE = "etcd:v3.6.0"


# --- pure: what a kill loses (e2e/tests/test_bench_continuous.py) -----------------------


@dataclasses.dataclass(frozen=True)
class Ack:
    revision: int
    at: float  # wall time the put's answer came back


@dataclasses.dataclass(frozen=True)
class Loss:
    writes: int  # acknowledged puts above the newest stored revision
    seconds: float  # from the newest stored revision's ack to the newest lost ack


def loss(acks: Sequence[Ack], stored_revision: int) -> Loss:
    """What a restore from the store loses of `acks` when it holds every revision up to `stored_revision`."""
    lost = [a for a in acks if a.revision > stored_revision]
    if not lost:
        return Loss(0, 0.0)
    kept = [a.at for a in acks if a.revision <= stored_revision]
    since = max(kept) if kept else min(a.at for a in acks)
    # concurrent clients: a lost put's answer may come back before a kept one's
    return Loss(len(lost), max(0.0, max(a.at for a in lost) - since))


def losses_before_uploads(acks: Sequence[Ack], uploads: Sequence[tuple[float, int]], until: float) -> list[Loss]:
    """For each upload after the first (landed at, last revision), before `until`: what a kill
    just before it landed would have lost, the store then holding the previous upload's revisions."""
    by_time = sorted(acks, key=lambda a: a.at)
    times = [a.at for a in by_time]
    out = []
    for (_, held), (landed, _) in zip(uploads, uploads[1:], strict=False):
        if landed > until:
            break
        out.append(loss(by_time[: bisect.bisect_left(times, landed)], held))
    return out


def cpu_seconds(stat: str) -> float:
    """utime + stime of a /proc/<pid>/stat line."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_bytes(status: str) -> int:
    """VmHWM of a /proc/<pid>/status text."""
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no VmHWM line")


# --- processes -------------------------------------------------------------------------


class Ports:
    def __init__(self) -> None:
        self._given: set[int] = set()

    def take(self) -> int:
        for port in PORTS:
            if port in self._given:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            self._given.add(port)
            return port
        raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def _binary(recipe: str, name: str) -> str:
    return str(localkube_layout.testbin_dir() / recipe / name)


def _wait_for(what: str, ready, process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:.0f} s")
        time.sleep(0.1)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except OSError:
        return False


def _stop(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclasses.dataclass
class Member:
    name: str
    folder: pathlib.Path
    client_port: int
    peer_port: int
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def start(self, initial_cluster: str) -> None:
        with open(self.folder / f"{self.name}.log", "ab") as log:
            self.process = subprocess.Popen(
                [_binary("etcd-3.6", "etcd"), f"--name={self.name}", f"--data-dir={self.folder / self.name}",
                 f"--listen-client-urls=http://{self.endpoint}", f"--advertise-client-urls=http://{self.endpoint}",
                 f"--listen-peer-urls={self.peer_url}", f"--initial-advertise-peer-urls={self.peer_url}",
                 f"--initial-cluster={initial_cluster}", "--initial-cluster-token=bench-continuous",
                 "--log-level=warn"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip


class Cluster:
    def __init__(self, folder: pathlib.Path, ports: Ports):
        self.members = [Member(f"m{i}", folder, ports.take(), ports.take()) for i in range(3)]

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    def start(self) -> None:
        for member in self.members:
            member.start(self.initial_cluster)
        for member in self.members:
            assert member.process is not None
            _wait_for(member.name, lambda m=member: _answers(f"http://{m.endpoint}/health"), member.process)

    def kill_all_at_once(self) -> float:
        for member in self.members:
            assert member.process is not None
            os.kill(member.process.pid, signal.SIGKILL)
        killed_at = time.time()
        for member in self.members:
            assert member.process is not None
            member.process.wait()
        return killed_at

    def stop(self) -> None:
        for member in self.members:
            _stop(member.process)


class Minio:
    def __init__(self, folder: pathlib.Path, ports: Ports):
        self.folder = folder / "minio"
        self.port, self.console_port = ports.take(), ports.take()
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "MINIO_ROOT_USER": ACCESS_KEY, "MINIO_ROOT_PASSWORD": SECRET_KEY}
        with open(self.folder.parent / "minio.log", "ab") as log:
            self.process = subprocess.Popen(
                [_binary("minio", "minio"), "server", str(self.folder), f"--address=127.0.0.1:{self.port}",
                 f"--console-address=127.0.0.1:{self.console_port}", "--quiet"],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        _wait_for("minio", lambda: _answers(f"{self.endpoint}/minio/health/live"), self.process)

    def location(self) -> S3Location:
        return S3Location(
            BUCKET, self.endpoint, "us-east-1", True, ACCESS_KEY, SECRET_KEY, insecure=True
        )  # fmt: skip

    def create_bucket(self) -> None:
        import boto3

        client = boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        )  # fmt: skip
        client.create_bucket(Bucket=BUCKET)
        client.close()

    def s3_spec(self, prefix: str) -> dict:
        return {
            "bucket": BUCKET,
            "endpoint": self.endpoint,
            "region": "us-east-1",
            "forcePathStyle": True,
            "insecure": True,
            "prefix": prefix,
        }


class WriterProcess:
    """bench/continuous_writer_process.py: its lines read by a thread as they come."""

    def __init__(self, config: dict | None, log: pathlib.Path, environment: dict[str, str]):
        argv = [OPERATOR_PYTHON, str(HERE / "continuous_writer_process.py")]
        argv.append(json.dumps(config) if config is not None else "--idle")
        self.log = log
        with open(log, "ab") as err:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                env={**os.environ, **environment}, cwd=log.parent,
            )  # fmt: skip
        self.uploads: list[tuple[float, int]] = []  # (drained at, last revision)
        self.waiting: str | None = "starting"
        self.lines: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            said = json.loads(line)
            self.lines.append(said)
            if "last_revision" in said:
                self.uploads.append((said["drained_at"], said["last_revision"]))
            if "waiting" in said:
                self.waiting = said["waiting"]

    def cpu_seconds(self) -> float:
        return cpu_seconds(pathlib.Path(f"/proc/{self.process.pid}/stat").read_text())

    def peak_rss(self) -> int:
        return peak_rss_bytes(pathlib.Path(f"/proc/{self.process.pid}/status").read_text())

    def check_alive(self) -> None:
        ended = [line["ended"] for line in self.lines if "ended" in line]
        if self.process.poll() is not None or ended:
            raise RuntimeError(f"the writer ended: {ended or self.process.returncode}; see {self.log}")

    def stop(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- the load --------------------------------------------------------------------------


def _key(i: int) -> bytes:
    return f"/registry/bench/key-{i % KEYS:05d}".encode()


async def fill(endpoint: str) -> None:
    async with EtcdMemberClient(endpoint, timeout=30) as client:
        for first in range(0, KEYS, 500):
            await asyncio.gather(
                *(client.put(_key(i), os.urandom(FILL_VALUE_BYTES)) for i in range(first, first + 500))
            )


class Mix:
    """The load's writes, as a cluster's clients make them: mostly puts of 100 B to 2 KiB
    values, some under a session's lease; deletes; transactions of 2 to 6 puts and deletes;
    and every SESSION_ENDS_EVERY writes a session ends (its lease revoked: etcd deletes its
    keys in one revision) and another begins. Each write is one request and one ack."""

    def __init__(self, seed: int = 44):
        self.rng = random.Random(seed)
        self.sessions = [FIRST_SESSION + n for n in range(SESSIONS)]
        self.next_session = FIRST_SESSION + SESSIONS
        # A session's lease is revoked one rotation after it stopped being chosen, so that no
        # write still in flight uses it.
        self.retired: int | None = None

    def value(self) -> bytes:
        return self.rng.randbytes(self.rng.randint(*VALUE_BYTES))

    def changes(self) -> list[KeyChange]:
        roll, key = self.rng.random(), _key(self.rng.randrange(KEYS))
        if roll < 0.10:
            return [KeyChange(key, None)]
        if roll < 0.25:
            keys = {_key(self.rng.randrange(KEYS)) for _ in range(self.rng.randint(2, 6))}
            return [KeyChange(k, None if self.rng.random() < 0.3 else self.value()) for k in sorted(keys)]
        lease = self.rng.choice(self.sessions) if roll < 0.40 else 0
        return [KeyChange(key, self.value(), lease)]

    async def begin_sessions(self, client: ReplayMember) -> None:
        for lease in self.sessions:
            await client.grant_lease(lease, SESSION_TTL)

    async def write(self, client: ReplayMember, i: int) -> int:
        """One write; the revision its answer names."""
        if i and i % SESSION_ENDS_EVERY == 0:
            begun, self.next_session = self.next_session, self.next_session + 1
            await client.grant_lease(begun, SESSION_TTL)
            self.sessions.append(begun)
            ended, self.retired = self.retired, self.sessions.pop(0)
            if ended is not None:
                return await client.revoke_lease(ended)
        return await client.txn(self.changes())


async def load_until_killed(cluster: Cluster) -> tuple[list[Ack], float, float, int]:
    """RATE writes/s of the Mix from IN_FLIGHT workers over one client per member; every
    member is killed LOAD_SECONDS in. (acks, load start, kill time, writes that failed)."""
    clients = [ReplayMember(m.endpoint, timeout=5) for m in cluster.members]
    mix = Mix()
    await mix.begin_sessions(clients[0])
    acks: list[Ack] = []
    failed = 0
    next_put = 0
    started = time.monotonic()
    started_at = time.time()
    killed = asyncio.Event()

    async def worker() -> None:
        nonlocal next_put, failed
        while not killed.is_set():
            i, next_put = next_put, next_put + 1
            due = started + i / RATE - time.monotonic()
            if due > 0:
                await asyncio.sleep(due)
            try:
                revision = await mix.write(clients[i % len(clients)], i)
            except EtcdError:
                failed += 1
                continue
            acks.append(Ack(revision, time.time()))

    async def killer() -> float:
        await asyncio.sleep(LOAD_SECONDS)
        killed_at = await asyncio.to_thread(cluster.kill_all_at_once)
        killed.set()
        return killed_at

    workers = [asyncio.create_task(worker()) for _ in range(IN_FLIGHT)]
    killed_at = await killer()
    await asyncio.gather(*workers)
    for client in clients:
        await client.close()
    return acks, started_at, killed_at, failed


# --- the store -------------------------------------------------------------------------


async def stored_segments(storage: S3Storage, prefix: str) -> list[SegmentManifest]:
    manifests = []
    for key in await storage.list_keys(prefix):
        if key.endswith(SEGMENT_MANIFEST_SUFFIX):
            manifests.append(SegmentManifest.from_json(await storage.get(key)))
    manifests.sort(key=lambda m: m.sequence)
    for before, after in zip(manifests, manifests[1:], strict=False):
        if after.first_revision != before.last_revision + 1:
            raise RuntimeError(f"the stored chain has a gap: {before.segment_key} then {after.segment_key}")
    return manifests


async def upload_snapshot(
    storage: S3Storage, path: pathlib.Path, key: str, revision: int, cluster_id: str, backup: str
) -> Manifest:
    data = await asyncio.to_thread(path.read_bytes)
    manifest = Manifest(
        snapshot_key=key, backup=backup, namespace=NAMESPACE, cluster=CLUSTER, cluster_id=cluster_id,
        etcd_version="3.6", revision=revision, size=len(data), sha256=hashlib.sha256(data).hexdigest(),
        created_at=now_text(), member="m0", slot="bench",
    )  # fmt: skip
    await storage.put(key, data)
    await storage.put(manifest.key, manifest.to_json(), "application/json")
    return manifest


def save_snapshot(endpoint: str, path: pathlib.Path) -> None:
    subprocess.run(
        [_binary("etcd-3.6", "etcdctl"), f"--endpoints={endpoint}", "snapshot", "save", str(path)],
        check=True, capture_output=True,
    )  # fmt: skip


# --- restores --------------------------------------------------------------------------


def etcdutl_restore(snapshot: pathlib.Path, data_dir: pathlib.Path) -> None:
    """As the restore's seed container runs it (core/seed_containers.etcdutl_restore), unbumped."""
    peer = replay_pod.PLACEHOLDER_PEER_URL
    subprocess.run(
        [_binary("etcd-3.6", "etcdutl"), "snapshot", "restore", str(snapshot), f"--name={replay_pod.MEMBER}",
         f"--data-dir={data_dir}", f"--initial-cluster={replay_pod.MEMBER}={peer}",
         f"--initial-advertise-peer-urls={peer}", "--initial-cluster-token=bench-restore"],
        check=True, capture_output=True,
    )  # fmt: skip


@contextlib.contextmanager
def scratch_member(folder: pathlib.Path, flags: Sequence[str] = replay_pod.REPLAY_MEMBER_FLAGS) -> Iterator[str]:
    """A single etcd on `folder`/data, as the replay pod runs it (core/restore/replay_pod.py):
    unix sockets in its working directory, TLS of a throwaway CA made first, as the pod's
    scratch-tls init container does; yields the client socket's path."""
    scratch_tls_program.write(pathlib.Path(seed_containers.scratch_tls_dir(str(folder))), time.time())
    member = seed_containers.scratch_member(
        BENCH_ETCD_IMAGE, str(folder), replay_pod.MEMBER, str(folder / "data"), [], *flags
    )
    with open(folder / "etcd.log", "ab") as log:
        process = subprocess.Popen(
            [_binary("etcd-3.6", "etcd"), *member["args"], "--log-level=warn"],
            cwd=folder,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield str(folder / seed_containers.SCRATCH_CLIENT_SOCKET)
    finally:
        _stop(process)


def scratch_client(folder: pathlib.Path, sock: str) -> ReplayMember:
    """The replay's client of the scratch member in `folder`: its throwaway client certificate."""
    return ReplayMember(
        f"unix://{sock}", tls=scratch_tls_program.read_client_tls(seed_containers.scratch_tls_dir(str(folder)))
    )


async def contents(member: ReplayMember) -> tuple[int, tuple[int, int], list[tuple[bytes, bytes, int]]]:
    """The store's revision, its HashKV there (hash, compact revision), and every key."""
    async with member:
        revision = await replay_program.member_ready(member)
        return revision, await member.hash_kv(revision), await member.key_values()


@dataclasses.dataclass
class Timed:
    phases: dict[str, float]
    contents: tuple[int, tuple[int, int], list[tuple[bytes, bytes, int]]]
    replayed: int = 0

    @property
    def total(self) -> float:
        return sum(self.phases.values())


async def full_restore(storage: S3Storage, key: str, folder: pathlib.Path) -> Timed:
    await asyncio.to_thread(folder.mkdir)
    started = time.perf_counter()
    await asyncio.to_thread((folder / "full.db").write_bytes, await storage.get(key))
    fetched = time.perf_counter()
    await asyncio.to_thread(etcdutl_restore, folder / "full.db", folder / "data")
    restored = time.perf_counter()
    with scratch_member(folder, flags=()) as sock:  # fsync on, as a restored member runs
        found = await contents(scratch_client(folder, sock))
    return Timed({"download": fetched - started, "etcdutl snapshot restore": restored - fetched}, found)


async def point_in_time_restore(storage: S3Storage, env: dict[str, str], folder: pathlib.Path) -> Timed:
    """The replay pod's work, each part timed: its init containers (fetch the base,
    etcdutl restore, the apply container: fetch and check the segments, replay them into the
    restored backend), then the scratch member on the result and the replay container's
    snapshot and upload."""
    await asyncio.to_thread(folder.mkdir)
    settings = replay_program.Settings.from_env(
        {
            **env,
            "ETCD_SOCKET": "",
            "SCRATCH_TLS_DIR": seed_containers.scratch_tls_dir(str(folder)),
            "RESULT_FILE": str(folder / "result"),
            "WORK_DIR": str(folder / "work"),
            "BACKEND_DB": str(folder / "data" / "member" / "snap" / "db"),
            "APPLY_PROGRAM": await asyncio.to_thread(localkube_layout.replay_apply_program),
        }
    )
    phases = {}
    started = time.perf_counter()
    await asyncio.to_thread((folder / "base.db").write_bytes, await storage.get(settings.record.base_key))
    await asyncio.to_thread(etcdutl_restore, folder / "base.db", folder / "data")
    phases["base: download, etcdutl snapshot restore"] = time.perf_counter() - started
    started = time.perf_counter()
    files, _ = await replay_program.fetch_segments(storage, settings, {})  # the bench seals nothing
    phases["segments: download, check, decode"] = time.perf_counter() - started
    started = time.perf_counter()
    progress = await replay_program.apply_into_backend(settings.backend_db, files, settings)
    phases[REPLAY_PHASE] = time.perf_counter() - started
    started = time.perf_counter()
    with scratch_member(folder) as sock:
        settings = dataclasses.replace(settings, socket=sock)
        async with scratch_client(folder, sock) as member:
            base = Manifest.from_json(await storage.get(manifest_key(settings.record.base_key)))
            encoding = replay_program.replayed_encoding(settings, {})
            await replay_program.store_replayed(storage, member, settings, progress, base, encoding)
        phases["scratch member, snapshot save + upload"] = time.perf_counter() - started
        found = await contents(scratch_client(folder, sock))
    return Timed(phases, found, progress.applied)


# --- the run ---------------------------------------------------------------------------


@dataclasses.dataclass
class WriterResult:
    label: str
    segments: int
    stored_revision: int
    at_kill: Loss
    before_uploads: list[Loss]
    cpu_per_second: float
    peak_rss: int


def _wait_settled(writers: dict[str, WriterProcess]) -> None:
    """Until every writer noticed the members were gone and none uploaded for SETTLE_QUIET_SECONDS."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        counts = {label: len(w.uploads) for label, w in writers.items()}
        time.sleep(SETTLE_QUIET_SECONDS)
        quiet = counts == {label: len(w.uploads) for label, w in writers.items()}
        if quiet and all(w.waiting for w in writers.values()):
            return
    raise TimeoutError("the writers did not settle within 60 s of the kill")


async def _wait_caught_up(writer: WriterProcess, revision: int) -> None:
    deadline = time.monotonic() + CATCH_UP_SECONDS
    while not writer.uploads or writer.uploads[-1][1] < revision:
        writer.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the writer did not reach revision {revision} in {CATCH_UP_SECONDS:.0f} s")
        await asyncio.sleep(0.2)


async def measure(folder: pathlib.Path) -> None:
    ports = Ports()
    cluster, minio = Cluster(folder, ports), Minio(folder, ports)
    writers: dict[str, WriterProcess] = {}
    idle: WriterProcess | None = None
    storage: S3Storage | None = None
    try:
        await asyncio.to_thread(minio.start)
        await asyncio.to_thread(cluster.start)
        storage = S3Storage(minio.location())
        await asyncio.to_thread(minio.create_bucket)
        await fill(cluster.members[0].endpoint)
        async with EtcdMemberClient(cluster.members[0].endpoint) as client:
            status = await client.status()
        cluster_id, base_revision = f"{status.cluster_id:x}", status.revision
        await asyncio.to_thread(save_snapshot, cluster.members[0].endpoint, folder / "base.db")
        environment = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        bases = {}
        for n, (label, (seconds, size)) in enumerate(WRITERS.items()):
            backup = f"every-{seconds}s"
            base_key = f"{backup_prefix('', NAMESPACE, backup)}base.db"
            bases[label] = await upload_snapshot(
                storage, folder / "base.db", base_key, base_revision, cluster_id, backup
            )
            writers[label] = WriterProcess(
                {
                    "members": {m.name: m.endpoint for m in cluster.members},
                    "namespace": NAMESPACE,
                    "cluster": CLUSTER,
                    "s3": minio.s3_spec(""),
                    "continuous": {"segmentSeconds": seconds, "segmentBytes": size},
                    "identity": {"namespace": NAMESPACE, "backup": backup, "uid": f"uid-{n}"},
                    "chain_start": {
                        "chain": chain_id(cluster_id, base_revision),
                        "cluster_id": cluster_id,
                        "base_key": base_key,
                        "base_revision": base_revision,
                    },
                },
                folder / f"writer-{seconds}s.log",
                environment,
            )
        idle = WriterProcess(None, folder / "idle.log", environment)
        while any(w.waiting for w in writers.values()):
            for w in writers.values():
                w.check_alive()
            await asyncio.sleep(0.1)
        cpu_before = {label: w.cpu_seconds() for label, w in writers.items()}
        acks, load_started, killed_at, failed = await load_until_killed(cluster)
        cpu_used = {label: w.cpu_seconds() - cpu_before[label] for label, w in writers.items()}
        await asyncio.to_thread(_wait_settled, writers)

        results = []
        for label, w in writers.items():
            stored = await stored_segments(storage, segments_prefix("", NAMESPACE, bases[label].backup))
            stored_revision = stored[-1].last_revision if stored else base_revision
            results.append(
                WriterResult(
                    label, len(stored), stored_revision, loss(acks, stored_revision),
                    losses_before_uploads(acks, w.uploads, killed_at),
                    cpu_used[label] / (killed_at - load_started), w.peak_rss(),
                )
            )  # fmt: skip
        idle_rss = idle.peak_rss()
        report_rpo(acks, killed_at - load_started, failed, results, idle_rss)

        # (b): the members come back whole (fsync was on); the default writer catches up.
        await asyncio.to_thread(writers.pop("20 s").stop)
        await asyncio.to_thread(cluster.start)
        async with EtcdMemberClient(cluster.members[0].endpoint) as client:
            end_revision = (await client.status()).revision
        await _wait_caught_up(writers[DEFAULT_WRITER], end_revision)
        await asyncio.to_thread(save_snapshot, cluster.members[0].endpoint, folder / "full.db")
        await asyncio.to_thread(cluster.stop)
        base = bases[DEFAULT_WRITER]
        full_key = f"{backup_prefix('', NAMESPACE, base.backup)}full.db"
        await upload_snapshot(storage, folder / "full.db", full_key, end_revision, cluster_id, base.backup)
        stored = await stored_segments(storage, segments_prefix("", NAMESPACE, base.backup))
        if stored[-1].last_revision != end_revision:
            raise RuntimeError(f"the chain ends at {stored[-1].last_revision}, the cluster at {end_revision}")
        env = {
            "BASE_KEY": base.snapshot_key,
            "BASE_REVISION": str(base.revision),
            "SEGMENTS_FOLDER": replay_pod.segments_folder(backup_prefix("", NAMESPACE, base.backup), stored[0].chain),
            "CHAIN": stored[0].chain,
            "FIRST_SEQUENCE": str(stored[0].sequence),
            "LAST_SEQUENCE": str(stored[-1].sequence),
            "UP_TO_REVISION": str(end_revision),
        }
        full = await full_restore(storage, full_key, folder / "restore-full")
        output = f"{backup_prefix('', NAMESPACE, base.backup)}replayed.db"
        replayed = await point_in_time_restore(
            storage, {**env, "OUTPUT_KEY": output, "RESTORE": "bench"}, folder / "restore-pitr"
        )
        if replayed.contents != full.contents:
            raise RuntimeError(
                "the point-in-time restore does not hold what the full restore holds: revision "
                f"{replayed.contents[0]} against {full.contents[0]}, HashKV {replayed.contents[1]} against "
                f"{full.contents[1]}, {len(replayed.contents[2])} keys against {len(full.contents[2])}"
            )
        report_restores(full, replayed, end_revision, base.revision)
    finally:
        for w in [*writers.values(), *([idle] if idle else [])]:
            w.stop()
        cluster.stop()
        if storage is not None:
            storage.close()
        _stop(minio.process)


# --- the report ------------------------------------------------------------------------


def _seconds(losses: list[Loss]) -> str:
    if not losses:
        return "-"
    values = [x.seconds for x in losses]
    return f"{max(values):.2f} s (median {statistics.median(values):.2f})"


def report_rpo(acks: list[Ack], seconds: float, failed: int, results: list[WriterResult], idle_rss: int) -> None:
    print(
        f"\ncontinuous backup, RPO: 3 etcd 3.6 members (processes, fsync on), MinIO, each writer in its own process;"
        f" the Mix ({VALUE_BYTES[0]} B to {VALUE_BYTES[1]} B values), {IN_FLIGHT} writes in flight over 3 clients"
    )
    print(
        f"  load: {RATE:.0f} writes/s asked, {len(acks) / seconds:.0f}/s acknowledged over {seconds:.1f} s "
        f"({len(acks)} writes; {failed} failed at the kill), then SIGKILL to all three members at once"
    )
    rows = [
        ("segmentSeconds", [r.label for r in results]),
        ("segments stored", [str(r.segments) for r in results]),
        ("acknowledged writes lost at the kill", [str(r.at_kill.writes) for r in results]),
        ("seconds of acknowledged writes lost", [f"{r.at_kill.seconds:.2f} s" for r in results]),
        ("a kill just before an upload: worst", [_seconds(r.before_uploads) for r in results]),
        ("writer CPU s per s of load", [f"{r.cpu_per_second:.3f}" for r in results]),
        ("writer peak RSS (VmHWM)", [f"{r.peak_rss / MIB:.0f} MiB" for r in results]),
    ]
    for name, values in rows:
        print(f"  {name:<38}" + "".join(f"{v:>28}" for v in values))
    print(f"  {'idle process, same imports: peak RSS':<38}{idle_rss / MIB:>26.0f} MiB")
    default, slow = results[0], results[1]
    if default.at_kill.seconds > 0:
        print(f"  seconds lost at the kill, 20 s / 1 s: {slow.at_kill.seconds / default.at_kill.seconds:.1f}x")
    print("  (goal: at most 5 s of acknowledged writes lost; etcd-backup-restore's default delta period is 20 s)")


def report_restores(full: Timed, replayed: Timed, end_revision: int, base_revision: int) -> None:
    keys = len(full.contents[2])
    print(
        f"\npoint-in-time restore against a full-snapshot restore of the same data: {keys} keys at revision "
        f"{end_revision}; the point-in-time path replays {end_revision - base_revision} revisions onto a base"
        " snapshot; both stores checked equal: HashKV at that revision, and key by key"
    )
    print(f"  full restore: {full.total:.2f} s  (" + ", ".join(f"{k} {v:.2f} s" for k, v in full.phases.items()) + ")")
    print(f"  point-in-time: {replayed.total:.2f} s, {replayed.total / full.total:.1f}x the full restore")
    print("    " + ", ".join(f"{k} {v:.2f} s" for k, v in replayed.phases.items()))
    rate = replayed.replayed / replayed.phases[REPLAY_PHASE]
    met = "met" if rate >= REPLAY_GOAL else "NOT met"
    print(f"  replay: {rate:,.0f} revisions/s (goal >= {REPLAY_GOAL:,}: {met}; {REPLAY_ANCHOR})")


def run() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-continuous-") as folder:
        try:
            asyncio.run(measure(pathlib.Path(folder)))
        except BaseException:
            kept = pathlib.Path(tempfile.mkdtemp(prefix="bench-continuous-logs-"))
            for log in pathlib.Path(folder).glob("*.log"):
                shutil.copy(log, kept)
            print(f"continuous bench failed; logs kept in {kept}", file=sys.stderr)
            raise
