"""The side-by-side race with etcd-io/etcd-operator v0.2.0 (`make bench BENCH=race`).

Both operators run on the same substrate at the same time, each in its own namespace,
and take turns on the same scenarios (the one that goes first alternates):

1. apply a 3-member cluster with a PVC per member;
2. scale 3 -> 5;  3. scale 5 -> 3;  4. scale 3 -> 5 again;
5. a fresh 3-member cluster (a second sample of 1), then one member loses its pod and
   its PVC together.

"Done" is read from etcd itself, the same way for both: `size` live pods, as many
members, all voting and started, each endpoint answering a health check (a quorum read);
for 5, also no pod left of the one that was lost. Operator CPU is /proc user+system time
of each operator's process during its own turns.

The official operator is built from a source checkout of v0.2.0 (the module proxy does not
serve that version): $OFFICIAL_OPERATOR_SRC, else a `git clone` of the tag. The binary and
its CRD are cached under the testbin cache directory (e2e/testbin/build.sh --dir).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable

from localkube import layout as localkube_layout
from tests.support.clusters import PLAINTEXT, is_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.operator_process import OperatorProcess
from tests.support.processes import stop_gracefully

OFFICIAL_TAG = "v0.2.0"
OFFICIAL_REPOSITORY = "https://github.com/etcd-io/etcd-operator"
OFFICIAL_MODULE = "go.etcd.io/etcd-operator"
OFFICIAL_CRD = "config/crd/bases/operator.etcd.io_etcdclusters.yaml"
# Both CRDs are kind EtcdCluster: always name the resource with its group.
OFFICIAL_RESOURCE = "etcdclusters.operator.etcd.io"
OURS_RESOURCE = "etcdclusters.etcd.operator.dev"
ETCD_VERSION = "3.6.16"
CLIENT_PORT = 2379
TIMEOUT = float(os.environ.get("RACE_TIMEOUT_SECONDS", "240"))
# Scenarios 4 and 5, where the official operator is expected to stall: this bounds them.
STALL_TIMEOUT = float(os.environ.get("RACE_STALL_TIMEOUT_SECONDS", "120"))
POLL = 0.25
HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent


# --- building the official operator ---------------------------------------------------------


def _cache_dir() -> pathlib.Path:
    testbin = subprocess.run(
        [str(REPO / "e2e" / "testbin" / "build.sh"), "--dir"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return pathlib.Path(testbin) / f"official-etcd-operator-{OFFICIAL_TAG}"


def official_build() -> tuple[pathlib.Path, pathlib.Path]:
    """The manager binary and the CRD file of the official operator, built once."""
    cache = _cache_dir()
    binary, crd = cache / "manager", cache / "crd.yaml"
    if binary.exists() and crd.exists():
        return binary, crd
    given = os.environ.get("OFFICIAL_OPERATOR_SRC")
    with tempfile.TemporaryDirectory() as scratch:
        if given:
            source = pathlib.Path(given)
        else:
            source = pathlib.Path(scratch) / "etcd-operator"
            print(f"  cloning {OFFICIAL_REPOSITORY} at {OFFICIAL_TAG} (set OFFICIAL_OPERATOR_SRC to skip)", flush=True)
            subprocess.run(
                ["git", "clone", "--quiet", "--depth=1", "--branch", OFFICIAL_TAG, OFFICIAL_REPOSITORY, str(source)],
                check=True,
            )
        if f"module {OFFICIAL_MODULE}" not in (source / "go.mod").read_text():
            raise RuntimeError(f"{source} is not a checkout of {OFFICIAL_MODULE}")
        cache.mkdir(parents=True, exist_ok=True)
        log = cache / "build.log"
        print(f"  building the official operator from {source} (a few minutes; log {log})", flush=True)
        with open(log, "w") as out:
            subprocess.run(
                ["go", "build", "-o", str(binary) + ".tmp", "./cmd"],
                cwd=source,
                check=True,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "GOFLAGS": "-buildvcs=false"},
            )
        shutil.copyfile(source / OFFICIAL_CRD, crd)
        os.replace(str(binary) + ".tmp", binary)
    return binary, crd


# --- measuring ------------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _etcdctl(endpoints: list[str], *args: str) -> dict | list | None:
    binary = localkube_layout.testbin_dir() / "etcd-3.6" / "etcdctl"
    try:
        done = subprocess.run(
            [
                str(binary),
                f"--endpoints={','.join(endpoints)}",
                "--dial-timeout=1s",
                "--command-timeout=2s",
                "-w",
                "json",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    try:
        return json.loads(done.stdout)
    except ValueError:
        return None


def etcd_settled(pods: list[dict], size: int, gone_uid: str | None = None) -> bool:
    """etcd's own view: `size` live pods and as many started voting members, every endpoint
    healthy; and none of the pods is the one that was lost."""
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if len(live) != size or any(p["metadata"]["uid"] == gone_uid for p in live):
        return False
    ips = [(p.get("status") or {}).get("podIP") for p in live]
    if not all(ips) or any((p.get("status") or {}).get("phase") != "Running" for p in live):
        return False
    endpoints = [f"http://{ip}:{CLIENT_PORT}" for ip in ips]
    listing = _etcdctl(endpoints, "member", "list")
    if not isinstance(listing, dict):
        return False
    members = listing.get("members") or []
    if len(members) != size or any(m.get("isLearner") or not m.get("name") for m in members):
        return False
    health = _etcdctl(endpoints, "endpoint", "health")
    return isinstance(health, list) and len(health) == size and all(h.get("health") for h in health)


@dataclasses.dataclass
class Turn:
    seconds: float | None  # None: not done within the timeout
    cpu: float
    timeout: float
    note: str = ""
    etcd_seconds: float | None = None  # when etcd's view alone was settled


# --- the two contestants ---------------------------------------------------------------------


class Side:
    """One operator, its namespace and its clusters."""

    label: str
    resource: str
    namespace: str

    def pid(self) -> int:
        raise NotImplementedError

    def manifest(self, name: str, size: int) -> dict:
        raise NotImplementedError

    def selector(self, name: str) -> str:
        raise NotImplementedError

    def own_view_settled(self, name: str, size: int) -> bool:
        return True

    def apply(self, name: str, size: int) -> None:
        kubectl("apply", "-f", "-", input=json.dumps(self.manifest(name, size)))

    def scale(self, name: str, size: int) -> None:
        kubectl(
            "patch",
            self.resource,
            name,
            "-n",
            self.namespace,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"size": size}}),
        )

    def delete(self, name: str) -> None:
        kubectl("delete", self.resource, name, "-n", self.namespace, "--wait=false", check=False)

    def pods(self, name: str) -> list[dict]:
        return kubectl_json("get", "pods", "-n", self.namespace, "-l", self.selector(name))["items"]

    def lose_member(self, name: str) -> str:
        """Deletes one member's pod and its PVC together; returns the pod's uid."""
        pod = sorted(self.pods(name), key=lambda p: p["metadata"]["name"])[0]
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in pod["spec"].get("volumes") or []
            if v.get("persistentVolumeClaim")
        ]
        if not claims:
            raise RuntimeError(f"{self.label}: pod {pod['metadata']['name']} has no PVC")
        for claim in claims:
            kubectl("delete", "pvc", claim, "-n", self.namespace, "--wait=false")
        kubectl("delete", "pod", pod["metadata"]["name"], "-n", self.namespace, "--wait=false")
        return pod["metadata"]["uid"]

    def turn(
        self, act: Callable[[], object], name: str, size: int, timeout: float, gone: Callable[[], str] | None = None
    ) -> Turn:
        pid = self.pid()
        cpu = _cpu_seconds(pid)
        start = time.monotonic()
        gone_uid = gone() if gone else None
        act()
        deadline = start + timeout
        etcd_at = None
        while time.monotonic() < deadline:
            settled = etcd_settled(self.pods(name), size, gone_uid)
            if settled and etcd_at is None:
                etcd_at = time.monotonic() - start
            if settled and self.own_view_settled(name, size):
                return Turn(time.monotonic() - start, _cpu_seconds(pid) - cpu, timeout, etcd_seconds=etcd_at)
            time.sleep(POLL)
        return Turn(None, _cpu_seconds(pid) - cpu, timeout, self.stalled_because(name, size), etcd_at)

    def stalled_because(self, name: str, size: int) -> str:
        pods = self.pods(name)
        states = []
        for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
            for s in (p.get("status") or {}).get("containerStatuses") or []:
                waiting = (s.get("state") or {}).get("waiting") or {}
                states.append(
                    f"{p['metadata']['name']} {waiting.get('reason') or 'running'}"
                    f" (restarts {s.get('restartCount', 0)})"
                )
        return "; ".join(states) or "no pods"


class Ours(Side):
    label = "this operator"
    resource = OURS_RESOURCE

    def __init__(self, layout, namespace: str):
        self.namespace = namespace
        self.operator = OperatorProcess(layout, namespace, resolver=layout.node_network.dns_address)

    def start(self) -> None:
        self.operator.start()

    def stop(self) -> None:
        self.operator.stop()

    def pid(self) -> int:
        return self.operator.process.pid

    def manifest(self, name: str, size: int) -> dict:
        return {
            "apiVersion": "etcd.operator.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {**PLAINTEXT, "size": size, "version": ETCD_VERSION, "storage": {"size": "1Gi"}},
        }

    def selector(self, name: str) -> str:
        from etcd_operator.core.cluster import naming

        return naming.label_selector(naming.selector_labels(name))

    def own_view_settled(self, name: str, size: int) -> bool:
        """Also what this operator says: Available with `size` healthy members (what
        `make bench` times elsewhere), so ours is not timed on etcd alone."""
        return is_healthy(kubectl_json("get", self.resource, name, "-n", self.namespace), size)


class Official(Side):
    label = f"etcd-io/etcd-operator {OFFICIAL_TAG}"
    resource = OFFICIAL_RESOURCE

    def __init__(self, layout, namespace: str, binary: pathlib.Path, crd: pathlib.Path):
        self.namespace = namespace
        self.binary, self.crd = binary, crd
        self.log_path = layout.logs_dir / f"official-operator-{namespace}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        kubectl("apply", "--server-side", "-f", str(self.crd))
        kubectl("wait", "--for=condition=Established", f"crd/{OFFICIAL_RESOURCE}", "--timeout=60s")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(self.binary), "--health-probe-bind-address=0", "--metrics-bind-address=0", "--leader-elect=false"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ},
            )

    def stop(self) -> None:
        stop_gracefully(self.process, 10)

    def pid(self) -> int:
        if self.process.poll() is not None:
            raise RuntimeError(f"the official operator exited ({self.process.returncode}); see {self.log_path}")
        return self.process.pid

    def manifest(self, name: str, size: int) -> dict:
        return {
            "apiVersion": "operator.etcd.io/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"size": size, "version": f"v{ETCD_VERSION}", "storageSpec": {"volumeSizeRequest": "1Gi"}},
        }

    def selector(self, name: str) -> str:
        return f"app={name},controller={name}"


# --- the race ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Scenario:
    title: str
    official: Turn
    ours: Turn


def _seconds(turn: Turn) -> str:
    if turn.seconds is None:
        return f"stalled, > {turn.timeout:.0f} s"
    return f"{turn.seconds:.1f} s"


def _ratio(official: Turn, ours: Turn) -> str:
    if ours.seconds is None:
        return "-"
    if official.seconds is None:
        return f"> {official.timeout / ours.seconds:.1f}x"
    return f"{official.seconds / ours.seconds:.2f}x"


def run(bench) -> None:
    """Runs the race; adds its rows to bench's table and prints its own."""
    try:
        binary, crd = official_build()
    except (OSError, subprocess.CalledProcessError, RuntimeError) as e:
        bench.row("race with the official operator", "not run", f"(could not build it: {e})")
        return
    suffix = uuid.uuid4().hex[:6]
    official = Official(bench.layout, f"race-official-{suffix}", binary, crd)
    ours = Ours(bench.layout, f"race-ours-{suffix}")
    for side in (official, ours):
        kubectl("create", "namespace", side.namespace)
    official.start()
    ours.start()
    scenarios: list[Scenario] = []
    try:
        scenarios = _race(official, ours)
    finally:
        for side in (official, ours):
            kubectl("delete", "namespace", side.namespace, "--wait=false", check=False)
        official.stop()
        ours.stop()
        # Once gone, `etcdcluster` is unambiguous again for whatever uses this substrate next.
        kubectl("delete", "crd", OFFICIAL_RESOURCE, "--wait=false", check=False)
    _report(bench, scenarios)


def _race(official: Official, ours: Ours) -> list[Scenario]:
    out: list[Scenario] = []

    def both(title: str, turn_of: Callable[[Side], Turn], official_first: bool) -> None:
        turns = {}
        for side in (official, ours) if official_first else (ours, official):
            turns[side.label] = turn_of(side)
            t = turns[side.label]
            print(
                f"  race: {title}: {side.label}: {_seconds(t)} ({t.cpu:.2f} CPU s){' ' + t.note if t.note else ''}",
                flush=True,
            )
        out.append(Scenario(title, turns[official.label], turns[ours.label]))

    both("1. apply, 3 healthy voters", lambda s: s.turn(lambda: s.apply("race", 3), "race", 3, TIMEOUT), True)
    both("2. scale 3 -> 5", lambda s: s.turn(lambda: s.scale("race", 5), "race", 5, TIMEOUT), False)
    both("3. scale 5 -> 3", lambda s: s.turn(lambda: s.scale("race", 3), "race", 3, TIMEOUT), True)
    both("4. scale 3 -> 5 again", lambda s: s.turn(lambda: s.scale("race", 5), "race", 5, STALL_TIMEOUT), False)
    for side in (official, ours):
        side.delete("race")  # a stalled cluster would crash-loop through the last scenario
    both(
        "1'. apply, 3 healthy voters (second cluster)",
        lambda s: s.turn(lambda: s.apply("heal", 3), "heal", 3, TIMEOUT),
        True,
    )
    both(
        "5. a member lost its pod and its PVC",
        lambda s: s.turn(lambda: None, "heal", 3, STALL_TIMEOUT, gone=lambda: s.lose_member("heal")),
        False,
    )
    return out


def _report(bench, scenarios: list[Scenario]) -> None:
    if not scenarios:
        return
    head = (
        "scenario",
        "official v0.2.0",
        "this operator",
        "official / ours",
        "CPU s official / ours",
        "ours, etcd's view alone",
    )
    rows = [
        (
            s.title,
            _seconds(s.official),
            _seconds(s.ours),
            _ratio(s.official, s.ours),
            f"{s.official.cpu:.2f} / {s.ours.cpu:.2f}",
            "-" if s.ours.etcd_seconds is None else f"{s.ours.etcd_seconds:.1f} s",
        )
        for s in scenarios
    ]
    four = scenarios[:4]
    rows.append(
        (
            "operator CPU, scenarios 1-4",
            "",
            "",
            "",
            f"{sum(s.official.cpu for s in four):.2f} / {sum(s.ours.cpu for s in four):.2f}",
            "",
        )
    )
    rows.append(
        (
            "operator CPU, all turns",
            "",
            "",
            "",
            f"{sum(s.official.cpu for s in scenarios):.2f} / {sum(s.ours.cpu for s in scenarios):.2f}",
            "",
        )
    )
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    print(
        f"\nside-by-side race with etcd-io/etcd-operator {OFFICIAL_TAG} (done: etcd's own view for both;"
        " this operator must also report Available)"
    )
    for r in [head] + rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for s in scenarios:
        for who, turn in (("official", s.official), ("ours", s.ours)):
            if turn.seconds is None:
                print(f"  {s.title}, {who}: stalled, not done in {turn.timeout:.0f} s; pods then: {turn.note}")
    ahead = [
        s
        for s in scenarios
        if s.ours.seconds is not None and (s.official.seconds is None or s.ours.seconds < s.official.seconds)
    ]
    every = len(ahead) == len(scenarios)
    bench.row(
        "race: ours ahead on every scenario",
        "met" if every else "missed",
        f"({len(ahead)} of {len(scenarios)}; behind on: "
        f"{', '.join(s.title for s in scenarios if s not in ahead) or 'none'})",
    )
    # Time to reach 5 members: apply 3 + scale 3 -> 5, the first pass of each.
    official5 = _sum(scenarios[0].official, scenarios[1].official)
    ours5 = _sum(scenarios[0].ours, scenarios[1].ours)
    if official5 is not None and ours5 is not None:
        bench.row(
            "race: time to 5 members (apply 3 + scale 3 -> 5)",
            f"{ours5:.1f} s",
            f"(official {official5:.1f} s, ratio {ours5 / official5:.2f}; target <= 0.5: "
            f"{'met' if ours5 <= official5 / 2 else 'missed'})",
        )
    else:
        bench.row("race: time to 5 members (apply 3 + scale 3 -> 5)", "-", "(a side did not finish)")


def _sum(*turns: Turn) -> float | None:
    if any(t.seconds is None for t in turns):
        return None
    return sum(t.seconds for t in turns)
