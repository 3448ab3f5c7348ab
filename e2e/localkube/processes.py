"""Background processes of the substrate, each in its own session, tracked by pid file."""

from __future__ import annotations

import errno
import os
import pathlib
import signal
import socket
import subprocess
import time


class PortTaken(RuntimeError):
    pass


def pid_file(run_dir: pathlib.Path, name: str) -> pathlib.Path:
    return run_dir / f"{name}.pid"


def read_pid(run_dir: pathlib.Path, name: str) -> int | None:
    try:
        return int(pid_file(run_dir, name).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno == errno.EPERM
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def running(run_dir: pathlib.Path, name: str) -> int | None:
    pid = read_pid(run_dir, name)
    return pid if alive(pid) else None


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def require_free_ports(owner: str, ports: dict[str, int], patience: float = 15.0) -> None:
    """Raises PortTaken naming the port; a port freed within `patience` seconds (a process
    that just died) is waited for."""
    deadline = time.monotonic() + patience
    for purpose, port in ports.items():
        while port_in_use(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        if port_in_use(port):
            raise PortTaken(
                f"port {port} on 127.0.0.1 ({owner}: {purpose}) is already in use by another "
                f"process; find it with `ss -ltnp 'sport = :{port}'`, or move this checkout's "
                f"ports with LOCALKUBE_PORT_BASE=<free base>"
            )


def start(
    run_dir: pathlib.Path,
    logs_dir: pathlib.Path,
    name: str,
    argv: list[str],
    env: dict[str, str] | None = None,
    cwd: pathlib.Path | None = None,
) -> int:
    run_dir.mkdir(parents=True, exist_ok=True)
    logs_dir.mkdir(parents=True, exist_ok=True)
    log = open(logs_dir / f"{name}.log", "ab")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        start_new_session=True,
    )
    log.close()
    pid_file(run_dir, name).write_text(str(proc.pid))
    return proc.pid


def stop(run_dir: pathlib.Path, name: str, grace: float = 10.0) -> None:
    pid = read_pid(run_dir, name)
    if alive(pid):
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.1)
        if alive(pid):
            _signal_group(pid, signal.SIGKILL)
            while alive(pid):
                _reap(pid)
                time.sleep(0.05)
    pid_file(run_dir, name).unlink(missing_ok=True)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(pid, sig)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
