"""The benchmark scenarios. Each figure is measured side by side with its baseline in the
same run, because these machines are shared and noisy: ratios mean more than seconds."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import pathlib
import statistics
import subprocess
import tempfile
import time
import uuid

from etcd_operator.clients.etcd.client import EtcdMemberClient
from etcd_operator.core.buffer_budget import DEFAULT_LIMIT_BYTES
from etcd_operator.core.timefmt import parse_time
from localkube import containerfaults, controlplane, processes
from localkube import layout as localkube_layout
from tests.support import crds, shared_real_nodes
from tests.support.clusters import apply_cluster, get_cluster, is_healthy, member_endpoints, patch_spec, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.operator_process import OperatorProcess
from tests.support.s3 import create_credentials_secret, s3_client, s3_storage_spec
from tests.support.waiting import wait_for

GROUP = "etcd.operator.dev/v1alpha1"
MIB = 1 << 20
SMALL_DB_MIB = 128
LARGE_DB_MIB = 512
THROUGHPUT_RUNS = int(os.environ.get("BENCH_THROUGHPUT_RUNS", "3"))
RESTORE_RUNS = int(os.environ.get("BENCH_RESTORE_RUNS", "3"))
CONCURRENT_BACKUPS = 4
# A 512 MiB database with room to spare; the CRD wants twice the quota plus 384 MiB of volume.
BIG_QUOTA_BYTES = 1536 * MIB
CLUSTER_RUNS = int(os.environ.get("BENCH_CLUSTER_RUNS", "5"))
CREATE_3_TARGET = 10.0  # seconds to a healthy cluster (issue 17)
CREATE_3_TLS_TARGET, CREATE_5_TARGET = 6.0, 8.0  # the default path, TLS on; size 5 (issue 44: static bootstrap)
FIXED_OVERHEAD_MIB = (
    32  # beyond the part buffers, for 4 backups at once (tests/nodes/host_operator/test_backup_memory.py)
)


def _rss_kib(pid: int, field: str) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def _reset_peak_rss(pid: int) -> None:
    pathlib.Path(f"/proc/{pid}/clear_refs").write_text("5")


def _cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and its descendants (a pod's container is a shell wrapper
    with the real process as its child)."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            total += _cpu_seconds(current)
            for task in pathlib.Path(f"/proc/{current}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def _recycle_page_cache(directory: pathlib.Path, mib: int = 1024) -> None:
    """Writes and deletes a file, so the next writer gets recycled page-cache pages. On these
    VMs the first touch of a guest page costs the writer ~1.3 s of kernel time per 512 MiB,
    which would otherwise land at random on etcdctl's file or on MinIO's object."""
    path = directory / "page-cache-recycle"
    block = bytes(8 * MIB)
    with open(path, "wb") as f:
        for _ in range(mib // 8):
            f.write(block)
    path.unlink()


def _spread(values: list[float], spec: str = ".0f") -> str:
    return "min " + format(min(values), spec) + ", max " + format(max(values), spec)


def _fill_to(endpoint: str, target_mib: int, start: int) -> int:
    """Writes 1 MiB values until the backend holds about `target_mib`; returns the next key index."""

    async def write() -> int:
        index = start
        async with EtcdMemberClient(endpoint, timeout=30) as client:
            while (await client.status()).db_size < target_mib * MIB:
                for _ in range(16):
                    await client.put(f"/bench/{index:08}".encode(), os.urandom(MIB))
                    index += 1
        return index

    return asyncio.run(write())


class Bench:
    def __init__(self):
        self.layout = localkube_layout.current(localkube_layout.REAL_NODES_TEST_ROOT)  # the tests' real nodes
        self.namespace = f"bench-{uuid.uuid4().hex[:6]}"
        self.s3_prefix = f"bench/{self.namespace}"
        self.rows: list[tuple[str, str, str]] = []
        self.operator: OperatorProcess | None = None
        self.use: shared_real_nodes.SharedUse | None = None

    def __enter__(self) -> Bench:
        self.use = shared_real_nodes.SharedUse(localkube_layout.REAL_NODES_TEST_ROOT, self.layout).start()
        os.environ["KUBECONFIG"] = str(self.layout.kubeconfig)
        os.environ["LOCALKUBE_STATE_DIR"] = str(self.layout.state_dir)
        crds.install()
        kubectl("create", "namespace", self.namespace)
        self.operator = OperatorProcess(
            self.layout, self.namespace, resolver=self.layout.node_network.dns_address
        ).start()
        create_credentials_secret(self.layout, self.namespace)
        return self

    def __exit__(self, *exc) -> None:
        # The custom objects go first, while the operator runs and its Lease's namespace is not
        # terminating, so it lifts their finalizers and the members' processes end; left to the
        # namespace's deletion, they kept running beside the next benchmark.
        try:
            for kind in ("etcdrestores", "etcdbackups", "etcdclusters"):
                kubectl("delete", kind, "--all", "-n", self.namespace, "--timeout=100s", check=False)
        except subprocess.TimeoutExpired:
            print(f"bench: objects in {self.namespace} outlived their deletion; left behind", flush=True)
        self.operator.stop()
        kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)
        self._delete_bench_objects()
        self.use.end()  # down, unless a run of the tests uses the nodes too

    def _delete_bench_objects(self) -> None:
        client = s3_client(self.layout)
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=controlplane.S3_BUCKET, Prefix=self.s3_prefix + "/"
        ):
            for item in page.get("Contents", []):
                client.delete_object(Bucket=controlplane.S3_BUCKET, Key=item["Key"])

    def row(self, what: str, value: str, note: str = "") -> None:
        self.rows.append((what, value, note))
        print(f"  {what}: {value} {note}", flush=True)

    def report(self) -> None:
        width = max(len(r[0]) for r in self.rows)
        print("\nbenchmark results (make bench)")
        for what, value, note in self.rows:
            print(f"  {what:<{width}}  {value:>12}  {note}")

    # --- EtcdCluster ------------------------------------------------------------------

    def _time_to_healthy(self, name: str, size: int, apply) -> float:
        """Seconds from the kubectl call to the status wait_healthy waits for, polled every
        0.2 s (each poll is a kubectl call, so the figure is that coarse)."""
        start = time.monotonic()
        apply()
        wait_for(
            lambda: is_healthy(get_cluster(self.namespace, name), size),
            600,
            interval=0.2,
            what=f"{name} healthy with {size} members",
        )
        return time.monotonic() - start

    def _step_timeline(self, name: str, since: float) -> str:
        """The operator's steps for one cluster, as seconds after `since` (wall clock), from
        its log: where creation time goes."""
        steps: list[list] = []  # [seconds, step, count]
        prefix = f" {self.namespace}/{name}: "
        for line in self.operator.log_path.read_text(errors="replace").splitlines():
            if prefix not in line:
                continue
            try:
                stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000
            except ValueError:
                continue
            if stamp < since:
                continue
            text = line.split(prefix, 1)[1]
            step = text.split(" ", 1)[0]
            if " not taken yet" in text:
                if steps and steps[-1][1] == step:
                    steps.pop()  # its attempt line
                if steps and steps[-1][1] == step + " refused":
                    steps[-1][2] += 1
                    continue
                step += " refused"
            steps.append([stamp - since, step, 1])
        return ", ".join(f"{at:.1f} {step}" + (f" x{count}" if count > 1 else "") for at, step, count in steps)

    def _apply_default(self, name: str, spec: dict) -> None:
        """An EtcdCluster as a user writes it: no spec.tls, so TLS is on (the CRD's default)."""
        kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": GROUP,
                    "kind": "EtcdCluster",
                    "metadata": {"name": name, "namespace": self.namespace},
                    "spec": spec,
                }
            ),
        )

    def cluster_timings(self) -> None:
        """Creation of 3 and 5 members and scaling 3 -> 5, CLUSTER_RUNS times each (medians,
        with their spread), then the heal after kill -9 once. Targets: a healthy default
        3-member cluster (TLS on) in at most 6 s and 5 members in at most 8 s (issue 44), a
        plaintext 3-member one, taken in turn before and after the default one, in 10 s."""
        storage = {"storage": {"size": "1Gi"}}
        timings: dict[str, list[float]] = {"create 3": [], "create 3 TLS": [], "create 5": [], "scale 3 -> 5": []}
        for run in range(1, CLUSTER_RUNS + 1):
            creations = [
                (
                    f"c3-{run}",
                    "create 3",
                    3,
                    lambda name: apply_cluster(self.namespace, name, {"size": 3, **storage}, raft=None),
                ),
                (f"t3-{run}", "create 3 TLS", 3, lambda name: self._apply_default(name, {"size": 3, **storage})),
            ]
            if run % 2 == 0:
                creations.reverse()  # neither goes first every time
            creations.append(
                (
                    f"c5-{run}",
                    "create 5",
                    5,
                    lambda name: apply_cluster(self.namespace, name, {"size": 5, **storage}, raft=None),
                )
            )
            for name, key, size, apply in creations:
                wall = time.time()
                seconds = self._time_to_healthy(name, size, lambda apply=apply, name=name: apply(name))
                timings[key].append(seconds)
                print(f"  run {run}: {key} in {seconds:.1f} s: {self._step_timeline(name, wall)}", flush=True)
            kubectl("delete", "etcdcluster", f"t3-{run}", "-n", self.namespace, "--wait=false")
            name = f"c3-{run}"
            wall = time.time()
            seconds = self._time_to_healthy(name, 5, lambda name=name: patch_spec(self.namespace, name, {"size": 5}))
            timings["scale 3 -> 5"].append(seconds)
            print(f"  run {run}: scale 3 -> 5 in {seconds:.1f} s: {self._step_timeline(name, wall)}", flush=True)
            if run < CLUSTER_RUNS:
                for size in (3, 5):
                    kubectl("delete", "etcdcluster", f"c{size}-{run}", "-n", self.namespace, "--wait=false")
        targets = {"create 3": CREATE_3_TARGET, "create 3 TLS": CREATE_3_TLS_TARGET, "create 5": CREATE_5_TARGET}
        labels = {
            "create 3": "apply to Available, size 3",
            "create 3 TLS": "apply to Available, size 3, TLS (default)",
            "create 5": "apply to Available, size 5",
            "scale 3 -> 5": "scale 3 -> 5",
        }
        for key, values in timings.items():
            median = statistics.median(values)
            note = f"(median of {len(values)}: {_spread(values, '.1f')}"
            if key in targets:
                note += f"; target <= {targets[key]:.0f} s: {'met' if median <= targets[key] else 'NOT met'}"
            self.row(labels[key], f"{median:.1f} s", note + ")")
        ratios = [tls / plain for tls, plain in zip(timings["create 3 TLS"], timings["create 3"], strict=True)]
        self.row(
            "TLS (default) / plaintext, size 3",
            f"{statistics.median(ratios):.2f}x",
            f"(median of the pairs: {_spread(ratios, '.2f')})",
        )
        name = f"c3-{CLUSTER_RUNS}"
        pod = sorted(m["name"] for m in get_cluster(self.namespace, name)["status"]["members"])[0]
        start = time.monotonic()
        containerfaults.crash(self.layout, self.namespace, pod, "etcd")
        wait_for(
            lambda: (
                not all(m["healthy"] for m in get_cluster(self.namespace, name)["status"]["members"])
                or time.monotonic() - start > 5
            ),
            30,
            interval=0.1,
        )
        wait_healthy(self.namespace, name, 5, timeout=600)
        self.row(
            "heal after a member's process is killed",
            f"{time.monotonic() - start:.1f} s",
            "(kill -9 until all members healthy again)",
        )
        for size in (3, 5):
            kubectl("delete", "etcdcluster", f"c{size}-{CLUSTER_RUNS}", "-n", self.namespace, "--wait=false")

    # --- EtcdBackup -------------------------------------------------------------------

    def _apply_backup(self, name: str, cluster: str) -> None:
        kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": GROUP,
                    "kind": "EtcdBackup",
                    "metadata": {"name": name, "namespace": self.namespace},
                    "spec": {"clusterRef": {"name": cluster}, "storage": s3_storage_spec(self.layout, self.s3_prefix)},
                }
            ),
        )

    def _wait_backup(self, name: str) -> dict:
        backup = wait_for(
            lambda: (
                (b := kubectl_json("get", "etcdbackup", name, "-n", self.namespace))["status"].get("phase")
                in ("Completed", "Failed")
                and b
            ),
            1800,
            interval=0.5,
        )
        if backup["status"]["phase"] != "Completed":
            raise RuntimeError(f"backup failed: {backup['status']}")
        return backup["status"]["lastBackup"]

    def _backup(self, name: str) -> dict:
        pid = self.operator.process.pid
        baseline = _rss_kib(pid, "VmRSS")
        _reset_peak_rss(pid)
        cpu_before = _cpu_seconds(pid)
        kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": GROUP,
                    "kind": "EtcdBackup",
                    "metadata": {"name": name, "namespace": self.namespace},
                    "spec": {"clusterRef": {"name": "big"}, "storage": s3_storage_spec(self.layout, self.s3_prefix)},
                }
            ),
        )
        backup = wait_for(
            lambda: (
                (b := kubectl_json("get", "etcdbackup", name, "-n", self.namespace))["status"].get("phase")
                in ("Completed", "Failed")
                and b
            ),
            900,
            interval=0.5,
        )
        if backup["status"]["phase"] != "Completed":
            raise RuntimeError(f"backup failed: {backup['status']}")
        record = backup["status"]["lastBackup"]
        record["rssGrowthMiB"] = (_rss_kib(pid, "VmHWM") - baseline) / 1024
        record["operatorCpuSeconds"] = _cpu_seconds(pid) - cpu_before  # includes the operator's idle work
        return record

    def _etcdctl_snapshot(self, endpoint: str) -> tuple[float, int, float]:
        """Seconds, bytes and CPU seconds of `etcdctl snapshot save` to a file on local disk."""
        etcdctl = localkube_layout.testbin_dir() / "etcd-3.6" / "etcdctl"
        with tempfile.TemporaryDirectory(dir=self.layout.state_dir) as scratch:
            target = pathlib.Path(scratch) / "snapshot.db"
            before = os.times()
            start = time.monotonic()
            subprocess.run(
                [str(etcdctl), f"--endpoints={endpoint}", "snapshot", "save", str(target)],
                check=True,
                capture_output=True,
            )
            seconds = time.monotonic() - start
            after = os.times()
            return (
                seconds,
                target.stat().st_size,
                (after.children_user + after.children_system - before.children_user - before.children_system),
            )

    def _two_pass(self, endpoint: str) -> float:
        """(a) What users run without the operator: etcdctl snapshot save to local disk,
        then boto3's managed upload_file of that file to the same MinIO. Seconds."""
        etcdctl = localkube_layout.testbin_dir() / "etcd-3.6" / "etcdctl"
        key = f"{self.s3_prefix}/two-pass.db"
        client = s3_client(self.layout)
        with tempfile.TemporaryDirectory(dir=self.layout.state_dir) as scratch:
            target = pathlib.Path(scratch) / "snapshot.db"
            start = time.monotonic()
            subprocess.run(
                [str(etcdctl), f"--endpoints={endpoint}", "snapshot", "save", str(target)],
                check=True,
                capture_output=True,
            )
            client.upload_file(str(target), controlplane.S3_BUCKET, key)
            seconds = time.monotonic() - start
        client.delete_object(Bucket=controlplane.S3_BUCKET, Key=key)
        return seconds

    def _store_from_memory(self, data: bytes) -> float:
        """(c) MinIO ingesting the same number of bytes from memory, no etcd: the store's
        ceiling on this machine. boto3's upload_file from a tmpfs file, its fastest path
        (upload_fileobj from a BytesIO measured 10-30% slower). Seconds."""
        key = f"{self.s3_prefix}/from-memory.db"
        client = s3_client(self.layout)
        in_memory = "/dev/shm" if os.path.isdir("/dev/shm") else None
        with tempfile.NamedTemporaryFile(dir=in_memory) as source:
            source.write(data)
            source.flush()
            start = time.monotonic()
            client.upload_file(source.name, controlplane.S3_BUCKET, key)
            seconds = time.monotonic() - start
        client.delete_object(Bucket=controlplane.S3_BUCKET, Key=key)
        return seconds

    def backup_throughput_and_memory(self) -> None:
        apply_cluster(
            self.namespace,
            "big",
            {"size": 1, "storage": {"size": "4Gi"}, "etcd": {"quotaBackendBytes": BIG_QUOTA_BYTES}},
            raft=None,
        )
        wait_healthy(self.namespace, "big", 1, timeout=300)
        endpoint = member_endpoints(self.namespace, "big")[0]
        index = _fill_to(endpoint, SMALL_DB_MIB, 0)
        small = self._backup("small")
        self.row(
            f"backup {small['size'] / MIB:.0f} MiB: operator RSS growth",
            f"{small['rssGrowthMiB']:.1f} MiB",
            "(peak VmHWM during the run minus VmRSS before it)",
        )
        _fill_to(endpoint, LARGE_DB_MIB, index)
        # Side by side, alternating, THROUGHPUT_RUNS times; medians are reported because one
        # pair on a shared 2-core machine can be off by 2x either way.
        store_pid = processes.read_pid(self.layout.run_dir, "minio")
        theirs, ours, ratios, records, etcdctl_cpus = [], [], [], [], []
        two_pass, from_memory, speedups, cpu_bounds = [], [], [], []
        for run in range(1, THROUGHPUT_RUNS + 1):
            _recycle_page_cache(self.layout.state_dir)
            seconds, size, etcdctl_cpu = self._etcdctl_snapshot(endpoint)
            theirs.append(size / MIB / seconds)
            etcdctl_cpus.append(etcdctl_cpu)
            _recycle_page_cache(self.layout.state_dir)
            two_pass_seconds = self._two_pass(endpoint)
            two_pass.append(size / MIB / two_pass_seconds)
            data = os.urandom(size)
            from_memory.append(size / MIB / self._store_from_memory(data))
            del data
            _recycle_page_cache(self.layout.state_dir)
            store_cpu = _cpu_seconds(store_pid)
            source_pid = containerfaults.pid(self.layout, self.namespace, "big-0", "etcd")
            source_cpu = _tree_cpu_seconds(source_pid)
            record = self._backup(f"large-{run}")
            record["storeCpuSeconds"] = _cpu_seconds(store_pid) - store_cpu
            record["sourceCpuSeconds"] = _tree_cpu_seconds(source_pid) - source_cpu
            # All three share this machine's CPUs: however well they overlap, the stream takes
            # at least their CPU time over the CPU count.
            cpu_floor = (
                record["operatorCpuSeconds"] + record["storeCpuSeconds"] + record["sourceCpuSeconds"]
            ) / os.cpu_count()
            cpu_bounds.append(two_pass_seconds / cpu_floor)
            records.append(record)
            ours.append(record["size"] / MIB / record["durationSeconds"])
            ratios.append(ours[-1] / theirs[-1])
            speedups.append(ours[-1] / two_pass[-1])
            print(
                f"  run {run}: etcdctl {theirs[-1]:.0f} MiB/s ({etcdctl_cpu:.2f} CPU s), etcdctl + upload_file "
                f"{two_pass[-1]:.0f} MiB/s, MinIO from memory {from_memory[-1]:.0f} MiB/s, operator {ours[-1]:.0f}"
                f" MiB/s ({record['operatorCpuSeconds']:.2f} CPU s, MinIO {record['storeCpuSeconds']:.2f}"
                f" CPU s, etcd {record['sourceCpuSeconds']:.2f} CPU s), ratio to etcdctl {ratios[-1]:.2f}, "
                f"to etcdctl + upload {speedups[-1]:.2f}",
                flush=True,
            )
        large = records[-1]
        self.row(
            f"backup {large['size'] / MIB:.0f} MiB: operator RSS growth",
            f"{max(r['rssGrowthMiB'] for r in records):.1f} MiB",
            f"(highest of {THROUGHPUT_RUNS} runs)",
        )
        self.row(
            "etcdctl snapshot save to local disk",
            f"{statistics.median(theirs):.0f} MiB/s",
            f"(median of {THROUGHPUT_RUNS}: {_spread(theirs)})",
        )
        self.row(
            "operator stream to MinIO (multipart, sha256)",
            f"{statistics.median(ours):.0f} MiB/s",
            f"(median of {THROUGHPUT_RUNS}: {_spread(ours)})",
        )
        self.row(
            "(a) etcdctl snapshot save + boto3 upload_file to MinIO",
            f"{statistics.median(two_pass):.0f} MiB/s",
            f"(median of {THROUGHPUT_RUNS}: {_spread(two_pass)})",
        )
        self.row(
            "(c) MinIO ingesting the same bytes from memory",
            f"{statistics.median(from_memory):.0f} MiB/s",
            f"(median of {THROUGHPUT_RUNS}: {_spread(from_memory)}; the store's ceiling)",
        )
        speedup = statistics.median(speedups)
        self.row(
            "speed-up operator / (a) two-pass",
            f"{speedup:.2f}x",
            f"(median of the pairs: {_spread(speedups, '.2f')}; target >= 1.5x: "
            f"{'met' if speedup >= 1.5 else 'NOT met'})",
        )
        # A stream is no faster than its slower half: etcd sending the snapshot (b) or the
        # store taking it in (c). So (a) over the slower of the two bounds any streaming
        # backup on this machine, however it is built.
        bounds = [min(b, c) / a for a, b, c in zip(two_pass, theirs, from_memory, strict=True)]
        self.row(
            "best speed-up any stream can reach here",
            f"{statistics.median(bounds):.2f}x",
            f"(median of the runs: {_spread(bounds, '.2f')}; (a) over the slower of (b) and (c))",
        )
        self.row(
            "best speed-up this stream's CPU allows here",
            f"{statistics.median(cpu_bounds):.2f}x",
            f"(median of the runs: {_spread(cpu_bounds, '.2f')}; (a)'s time over (etcd + operator + MinIO CPU "
            f"seconds of the stream) / {os.cpu_count()} CPUs)",
        )
        self.row(
            "throughput ratio operator / (b) etcdctl to disk",
            f"{statistics.median(ratios):.2f}x",
            f"(median of the pairs: {_spread(ratios, '.2f')})",
        )
        self.row(
            "throughput ratio operator / (c) store from memory",
            f"{statistics.median(ours) / statistics.median(from_memory):.2f}x",
            "(medians)",
        )
        self.row(
            "CPU for one snapshot: etcd / etcdctl / operator / MinIO",
            f"{statistics.median(r['sourceCpuSeconds'] for r in records):.2f} / "
            f"{statistics.median(etcdctl_cpus):.2f} / "
            f"{statistics.median(r['operatorCpuSeconds'] for r in records):.2f} / "
            f"{statistics.median(r['storeCpuSeconds'] for r in records):.2f} s",
            f"(medians; the machine has {os.cpu_count()} CPUs, shared by etcd, the client and MinIO)",
        )
        self.large_backup_name = f"large-{THROUGHPUT_RUNS}"
        self.large_backup = large

    # --- EtcdRestore ------------------------------------------------------------------

    def _bare_restore(self, key: str, scratch: str) -> None:
        """One download of the snapshot and one `etcdutl snapshot restore` of it."""
        s3_client(self.layout).download_file(controlplane.S3_BUCKET, key, f"{scratch}/snap.db")
        etcdutl = localkube_layout.testbin_dir() / "etcd-3.6" / "etcdutl"
        subprocess.run(
            [
                str(etcdutl),
                "snapshot",
                "restore",
                f"{scratch}/snap.db",
                "--name=m",
                f"--data-dir={scratch}/data",
                "--initial-cluster=m=http://127.0.0.1:2380",
                "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            ],
            check=True,
            capture_output=True,
        )

    def _time_bare_restores(self, key: str, members: int) -> float:
        """Seconds for the bare steps of `members` members at once on this one machine (its
        disk and 2 CPUs): for 3, the work a 3-member restore has to do here."""
        _recycle_page_cache(self.layout.state_dir)
        with tempfile.TemporaryDirectory(dir=self.layout.state_dir) as scratch:
            folders = [pathlib.Path(scratch) / f"m{i}" for i in range(members)]
            for folder in folders:
                folder.mkdir()
            start = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(members) as pool:
                list(pool.map(lambda f: self._bare_restore(key, str(f)), folders))
            return time.monotonic() - start

    def _restore(self, name: str, target: str) -> tuple[float, dict, float]:
        """An EtcdRestore of the large backup into a new 3-member cluster: seconds from apply
        to Completed, its status, and the wall clock at apply."""
        wall_start = time.time()
        start = time.monotonic()
        kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": GROUP,
                    "kind": "EtcdRestore",
                    "metadata": {"name": name, "namespace": self.namespace},
                    "spec": {
                        "source": {"backupRef": {"name": self.large_backup_name}},
                        "target": {
                            "newCluster": {
                                "name": target,
                                "spec": {
                                    "size": 3,
                                    "storage": {"size": "4Gi"},
                                    "reclaimPolicy": "Delete",
                                    "etcd": {"quotaBackendBytes": BIG_QUOTA_BYTES},
                                },
                            }
                        },
                    },
                }
            ),
        )
        wait_for(
            lambda: (
                kubectl_json("get", "etcdrestore", name, "-n", self.namespace)["status"].get("phase") == "Completed"
            ),
            1800,
            interval=0.5,
        )
        seconds = time.monotonic() - start
        return seconds, kubectl_json("get", "etcdrestore", name, "-n", self.namespace)["status"], wall_start

    def restore_overhead(self) -> None:
        """RESTORE_RUNS times, alternating: the bare steps for one member, the same for 3 members
        at once, and an EtcdRestore into a new 3-member cluster (deleted after each run)."""
        backup = self.large_backup
        bares, bare_threes, fulls, phases = [], [], [], []
        for run in range(1, RESTORE_RUNS + 1):
            bares.append(self._time_bare_restores(backup["key"], 1))
            bare_threes.append(self._time_bare_restores(backup["key"], 3))
            _recycle_page_cache(self.layout.state_dir)
            target = f"restored-{run}"
            full, restore, wall_start = self._restore(f"bench-{run}", target)
            fulls.append(full)
            pods = restore.get("seedPods") or []
            parallel = bool(pods) and max(p["startedAt"] for p in pods) < min(p["finishedAt"] for p in pods)
            if pods:
                first = min(parse_time(p["startedAt"]) for p in pods) - wall_start
                last = max(parse_time(p["finishedAt"]) for p in pods) - wall_start
                phases.append((first, last - first, full - last))
            print(
                f"  run {run}: bare {bares[-1]:.1f} s, bare x3 at once {bare_threes[-1]:.1f} s, EtcdRestore "
                f"{full:.1f} s ({len(pods)} members restored {'in parallel' if parallel else 'NOT in parallel'}"
                + (
                    f"; {phases[-1][0]:.0f} s to the first restore pod, {phases[-1][1]:.0f} s of restore pods, "
                    f"{phases[-1][2]:.0f} s to Completed"
                    if pods
                    else ""
                )
                + ")",
                flush=True,
            )
            kubectl("delete", "etcdcluster", target, "-n", self.namespace, "--timeout=300s", check=False)
        size = f"{backup['size'] / MIB:.0f} MiB"
        ratios = [f / b for f, b in zip(fulls, bares, strict=True)]
        ratios_three = [f / b for f, b in zip(fulls, bare_threes, strict=True)]
        self.row(
            f"bare steps: download + etcdutl restore ({size})",
            f"{statistics.median(bares):.1f} s",
            f"(median of {RESTORE_RUNS}: {_spread(bares, '.1f')})",
        )
        self.row(
            "bare steps for 3 members at once on this machine",
            f"{statistics.median(bare_threes):.1f} s",
            f"(median of {RESTORE_RUNS}: {_spread(bare_threes, '.1f')}; 3 downloads + 3 etcdutl restores in parallel)",
        )
        self.row(
            "EtcdRestore into a new 3-member cluster",
            f"{statistics.median(fulls):.1f} s",
            f"(median of {RESTORE_RUNS}: {_spread(fulls, '.1f')}; verify, then all members restored in "
            f"parallel, then started together)",
        )
        ratio = statistics.median(ratios)
        self.row(
            "restore overhead ratio (to one member's bare steps)",
            f"{ratio:.2f}x",
            f"(median of the runs: {_spread(ratios, '.2f')}; target <= 2.0x: {'met' if ratio <= 2.0 else 'NOT met'})",
        )
        ratio_three = statistics.median(ratios_three)
        self.row(
            "restore overhead ratio (to the same 3 members' bare steps)",
            f"{ratio_three:.2f}x",
            f"(median of the runs: {_spread(ratios_three, '.2f')}; <= 2.0x: {'yes' if ratio_three <= 2.0 else 'no'})",
        )
        if phases:
            for index, what, note in (
                (
                    0,
                    "apply to first restore pod started",
                    "(verification of the whole snapshot, then the target's objects; 1 s resolution)",
                ),
                (1, "restore pods (first start to last finish)", ""),
                (2, "last restore pod finished to Completed", "(release, members started together, all ready)"),
            ):
                values = [p[index] for p in phases]
                self.row(
                    f"  of which: {what}",
                    f"{statistics.median(values):.0f} s",
                    f"(median of {len(values)}) {note}".rstrip(),
                )

    # --- Backup verification ----------------------------------------------------------

    def verification_time(self) -> None:
        """A verification of the large backup (fetch, etcdutl restore, scratch etcd, HashKV)
        against the backup's own time. Uses the backup measured above, or takes one."""
        name = getattr(self, "large_backup_name", None)
        if name is None:
            apply_cluster(
                self.namespace,
                "big",
                {"size": 1, "storage": {"size": "4Gi"}, "etcd": {"quotaBackendBytes": BIG_QUOTA_BYTES}},
                raft=None,
            )
            wait_healthy(self.namespace, "big", 1, timeout=300)
            _fill_to(member_endpoints(self.namespace, "big")[0], LARGE_DB_MIB, 0)
            name = "verify-source"
            self.large_backup = self._backup(name)
        backup = self.large_backup
        start = time.monotonic()
        kubectl(
            "patch",
            "etcdbackup",
            name,
            "-n",
            self.namespace,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"verification": {"enabled": True}}}),
        )
        verified = wait_for(
            lambda: kubectl_json("get", "etcdbackup", name, "-n", self.namespace)["status"].get("lastVerification"),
            1800,
            interval=0.5,
        )
        seconds = time.monotonic() - start
        if verified.get("verified") is not True:
            raise RuntimeError(f"verification of the bench backup failed: {verified}")
        self.row(
            f"verification of a {backup['size'] / MIB:.0f} MiB backup",
            f"{seconds:.1f} s",
            "(fetch + sha256, etcdutl restore, scratch etcd, HashKV)",
        )
        self.row(
            "verification / backup time",
            f"{seconds / backup['durationSeconds']:.2f}x",
            f"(backup took {backup['durationSeconds']:.1f} s)",
        )

    # --- the memory budget ------------------------------------------------------------

    def concurrent_backup_memory(self) -> None:
        """4 backups of 512 MiB at once (one cluster each: backups of a cluster never
        overlap), with the default budget and part settings."""
        clusters = ["big"] + [f"big{i}" for i in range(1, CONCURRENT_BACKUPS)]
        spec = {"size": 1, "storage": {"size": "4Gi"}, "etcd": {"quotaBackendBytes": BIG_QUOTA_BYTES}}
        for name in clusters[1:]:
            apply_cluster(self.namespace, name, spec, raft=None)
        for name in clusters[1:]:
            wait_healthy(self.namespace, name, 1, timeout=300)
        with concurrent.futures.ThreadPoolExecutor(CONCURRENT_BACKUPS) as pool:
            list(
                pool.map(
                    lambda n: _fill_to(member_endpoints(self.namespace, n)[0], LARGE_DB_MIB, 1 << 20), clusters[1:]
                )
            )
        pid = self.operator.process.pid
        baseline = _rss_kib(pid, "VmRSS")
        _reset_peak_rss(pid)
        start = time.monotonic()
        for i, name in enumerate(clusters):
            self._apply_backup(f"together-{i}", name)
        records = [self._wait_backup(f"together-{i}") for i in range(len(clusters))]
        seconds = time.monotonic() - start
        growth = (_rss_kib(pid, "VmHWM") - baseline) / 1024
        budget = DEFAULT_LIMIT_BYTES / MIB
        sizes = ", ".join(f"{r['size'] / MIB:.0f}" for r in records)
        per_backup = growth / len(records)
        within = growth <= budget + FIXED_OVERHEAD_MIB
        self.row(
            f"{len(records)} backups at once ({sizes} MiB): operator RSS growth",
            f"{growth:.1f} MiB",
            f"(in {seconds:.0f} s; budget {budget:.0f} MiB + {FIXED_OVERHEAD_MIB} MiB fixed overhead: "
            f"{'met' if within else 'NOT met'})",
        )
        self.row(
            "RSS growth per backup",
            f"{per_backup:.1f} MiB",
            f"(target <= 64 MiB: {'met' if per_backup <= 64 else 'NOT met'})",
        )
