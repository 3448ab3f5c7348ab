"""Container processes: each runs in its own session, mount and UTS namespace
(`unshare --mount --uts --propagation private`), behind a small sh wrapper that
bind-mounts the volumes, sets the hostname, runs the command and records its exit code.

Every running process has a pid file `<records_dir>/<key>.pid` (pid only; `localkube
down` kills what these list) and a `<key>.json` with what the agent needs to adopt the
process after a restart. Both go when the process ends."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import pathlib
import shlex
import shutil
import signal
import time

from localkube.layout import REPO_ROOT
from nodeagent import clock

log = logging.getLogger(__name__)

KILLED_EXIT = 137
POLL_INTERVAL = 0.5


@dataclasses.dataclass(frozen=True)
class Mount:
    source: pathlib.Path
    target: str
    read_only: bool = False


@dataclasses.dataclass
class LaunchSpec:
    uid: str
    namespace: str
    pod: str
    container: str
    argv: list[str]
    env: dict[str, str]
    mounts: list[Mount]
    workdir: str
    hostname: str
    log_file: pathlib.Path
    exit_file: pathlib.Path


def record_key(uid: str, container: str) -> str:
    return f"{uid}_{container}"


STAGE = "/.localkube-stage"


def launch_script(spec: LaunchSpec) -> str:
    """The shell that sets up a container's private mount namespace, then runs it.

    Every host path the container needs (volume sources, this checkout, the exit-file
    directory) is first bound under a private staging tmpfs, so that a volume mounted over
    one of their ancestors (an emptyDir at /tmp over a checkout in /tmp) cannot hide them;
    the checkout and the exit-file directory are then bound back at their own paths."""
    q = shlex.quote
    lines = [
        f"S={STAGE}",
        'mkdir -p "$S" && mount -t tmpfs localkube-stage "$S" '
        '|| { echo "localkube: cannot prepare $S" >&2; exit 125; }',
        "stage() {",
        '  if [ -d "$2" ]; then mkdir -p "$S/$1"; else : > "$S/$1"; fi',
        '  mount --bind "$2" "$S/$1" || { echo "localkube: cannot stage $2" >&2; exit 125; }',
        "}",
        "m() {",
        '  if [ -d "$1" ]; then mkdir -p "$2"; else mkdir -p "$(dirname "$2")" && { [ -e "$2" ] || : > "$2"; }; fi',
        '  mount --bind "$1" "$2" || { echo "localkube: cannot mount $1 on $2" >&2; exit 125; }',
        '  if [ "$3" = ro ]; then mount -o remount,bind,ro "$2" || exit 125; fi',
        "}",
    ]
    mounts = sorted(spec.mounts, key=lambda m: m.target.rstrip("/").count("/"))
    kept = [str(REPO_ROOT), str(spec.exit_file.parent)]
    for i, mount in enumerate(mounts):
        lines.append(f"stage v{i} {q(str(mount.source))}")
    for i, path in enumerate(kept):
        lines.append(f"stage h{i} {q(path)}")
    for i, mount in enumerate(mounts):
        lines.append(f'm "$S/v{i}" {q(mount.target)} {"ro" if mount.read_only else "rw"}')
    for i, path in enumerate(kept):
        lines.append(f'm "$S/h{i}" {q(path)} rw')
    lines += [
        f"hostname {q(spec.hostname)} 2>/dev/null",
        f"mkdir -p {q(spec.workdir)} && cd {q(spec.workdir)} || exit 125",
        "trap : TERM INT HUP",
        # the wrapper's own messages (like "Terminated") stay out of the container log
        "exec 3>&2 2>/dev/null",
        '("$@" 2>&3 3>&-)',
        "rc=$?",
        f"echo $rc > {q(str(spec.exit_file))}",
        "exit $rc",
    ]
    return "\n".join(lines) + "\n"


def process_start_ticks(pid: int) -> int | None:
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])


def exit_code_of(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class ContainerProcess:
    """A running (or finished) container process, either our child or adopted."""

    def __init__(
        self,
        launcher: Launcher,
        key: str,
        pid: int,
        ticks: int | None,
        started_at: str,
        exit_file: pathlib.Path,
        child: asyncio.subprocess.Process | None,
    ):
        self.launcher = launcher
        self.key = key
        self.pid = pid
        self.ticks = ticks
        self.started_at = started_at
        self.exit_file = exit_file
        self.child = child
        self.exit_code: int | None = None
        self._done = asyncio.Event()
        self._waiter = asyncio.ensure_future(self._wait())

    @property
    def adopted(self) -> bool:
        return self.child is None

    async def _wait(self) -> None:
        try:
            if self.child is not None:
                self.exit_code = exit_code_of(await self.child.wait())
            else:
                # A process this agent did not start (adopted after a restart) gives no event to wait on.
                while self.ticks is not None and process_start_ticks(self.pid) == self.ticks:  # noqa: ASYNC110
                    await asyncio.sleep(POLL_INTERVAL)
                self.exit_code = _read_exit_file(self.exit_file, KILLED_EXIT)
        finally:
            self.launcher.forget(self.key, self.pid)
            self._done.set()

    async def wait(self) -> int:
        await self._done.wait()
        return self.exit_code if self.exit_code is not None else KILLED_EXIT

    def running(self) -> bool:
        return not self._done.is_set()

    def signal(self, sig: int) -> bool:
        if not self.running():
            return False
        try:
            os.killpg(self.pid, sig)
            return True
        except ProcessLookupError:
            return False


def _read_exit_file(path: pathlib.Path, default: int) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return default


class Launcher:
    def __init__(self, records_dir: pathlib.Path):
        self.records_dir = records_dir
        self.records_dir.mkdir(parents=True, exist_ok=True)
        self.processes: dict[str, ContainerProcess] = {}
        self._found = self._load_records()
        self.unshare = shutil.which("unshare") or "/usr/bin/unshare"

    def _load_records(self) -> dict[str, dict]:
        found = {}
        for path in self.records_dir.glob("*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if process_start_ticks(record["pid"]) == record.get("start_ticks"):
                found[path.stem] = record
            else:
                self._remove_record(path.stem)
        return found

    def adopt(self, uid: str, container: str) -> ContainerProcess | None:
        key = record_key(uid, container)
        record = self._found.pop(key, None)
        if record is None or process_start_ticks(record["pid"]) != record["start_ticks"]:
            return None
        process = ContainerProcess(
            self,
            key,
            record["pid"],
            record["start_ticks"],
            record["started_at"],
            pathlib.Path(record["exit_file"]),
            None,
        )
        self.processes[key] = process
        log.info("adopted %s/%s container %s (pid %d)", record["namespace"], record["pod"], container, record["pid"])
        return process

    async def start(self, spec: LaunchSpec) -> ContainerProcess:
        key = record_key(spec.uid, spec.container)
        previous = self.processes.get(key)
        if previous is not None and previous.running():
            raise RuntimeError(f"container {key} is already running (pid {previous.pid})")
        spec.log_file.parent.mkdir(parents=True, exist_ok=True)
        spec.exit_file.parent.mkdir(parents=True, exist_ok=True)
        spec.exit_file.unlink(missing_ok=True)
        with await asyncio.to_thread(open, spec.log_file, "ab") as logf:
            child = await asyncio.create_subprocess_exec(
                self.unshare,
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "/bin/sh",
                "-c",
                launch_script(spec),
                "localkube-container",
                *spec.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=logf,
                stderr=asyncio.subprocess.STDOUT,
                env=spec.env,
                start_new_session=True,
                cwd="/",
            )
        started_at = clock.rfc3339()
        ticks = process_start_ticks(child.pid)
        record = {
            "pid": child.pid,
            "start_ticks": ticks,
            "started_at": started_at,
            "uid": spec.uid,
            "namespace": spec.namespace,
            "pod": spec.pod,
            "container": spec.container,
            "exit_file": str(spec.exit_file),
        }
        (self.records_dir / f"{key}.json").write_text(json.dumps(record))
        (self.records_dir / f"{key}.pid").write_text(str(child.pid))
        process = ContainerProcess(self, key, child.pid, ticks, started_at, spec.exit_file, child)
        self.processes[key] = process
        return process

    def forget(self, key: str, pid: int) -> None:
        process = self.processes.get(key)
        if process is not None and process.pid == pid:
            del self.processes[key]
        self._remove_record(key)

    def _remove_record(self, key: str) -> None:
        (self.records_dir / f"{key}.pid").unlink(missing_ok=True)
        (self.records_dir / f"{key}.json").unlink(missing_ok=True)

    def kill_unadopted(self) -> None:
        """Kills what an earlier agent left behind that no pod claims any more."""
        for key, record in list(self._found.items()):
            log.info("killing orphaned container process %s (pid %d)", key, record["pid"])
            try:
                os.killpg(record["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._remove_record(key)
        self._found.clear()

    async def stop_all(self, grace: float) -> None:
        running = [p for p in self.processes.values() if p.running()]
        for p in running:
            p.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in running:
            try:
                await asyncio.wait_for(p.wait(), max(0.05, deadline - time.monotonic()))
            except TimeoutError:
                p.signal(signal.SIGKILL)
        for p in running:
            try:
                await asyncio.wait_for(p.wait(), 5)
            except TimeoutError:
                log.warning("process %d did not exit after SIGKILL", p.pid)
