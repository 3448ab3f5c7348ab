"""The operator as a real subprocess against the substrate, one per test, watching only
the test's namespace. Fault points can be enabled to kill it at a chosen step. Several
replicas of one namespace (leader election) get an `identity` each, with its own log.

On real nodes (`resolver`: their DNS address) it runs as on a node: with the host's network,
which routes pod IPs, and the nodes' DNS (tests/support/nodes_resolver.py)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request

from localkube.layout import Layout
from tests.support import nodes_resolver
from tests.support.etcd_process import free_port
from tests.support.processes import stop_gracefully


class OperatorProcess:
    def __init__(
        self,
        substrate: Layout,
        namespace: str,
        kubeconfig: pathlib.Path | None = None,
        identity: str | None = None,
        env: dict[str, str] | None = None,
        python: str | None = None,
        resolver: str | None = None,
    ):
        self.substrate = substrate
        # Another interpreter (e.g. a production install's) runs isolated (-I): its own
        # installed package, not this checkout's through PYTHONPATH or the working directory.
        self.command = [python, "-I", "-m", "etcd_operator"] if python else [sys.executable, "-m", "etcd_operator"]
        self.namespace = namespace
        self.kubeconfig = kubeconfig or substrate.kubeconfig
        self.identity = identity  # POD_NAME of this replica
        self.extra_env = dict(env or {})
        suffix = f"-{identity}" if identity else ""
        self.log_path = substrate.logs_dir / f"operator-{namespace}{suffix}.log"
        self.process: subprocess.Popen | None = None
        self.health_port = free_port()
        if resolver:
            resolv_conf = substrate.run_dir / f"operator-{namespace}-resolv.conf"
            self.command = nodes_resolver.command(resolv_conf, resolver, self.command)

    def start(self, faults: str = "") -> OperatorProcess:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "WATCH_NAMESPACES": self.namespace,
            "HEALTH_PORT": str(self.health_port),
            "ETCD_OPERATOR_FAULTS": faults,
            **({"POD_NAME": self.identity} if self.identity else {}),
            **self.extra_env,
        }
        log = open(self.log_path, "ab")
        log.write(f"\n===== operator start (faults={faults!r}) =====\n".encode())
        log.flush()
        self.process = subprocess.Popen(self.command, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self._wait_live()
        return self

    def _wait_live(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return  # exited (maybe by a fault point); callers check exited()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"operator not live; see {self.log_path}")

    def exited(self) -> int | None:
        return self.process.poll() if self.process else None

    def wait_exit(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def freeze(self) -> None:
        """SIGSTOP: the process stays, as a paused VM or a stalled node would."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: no graceful stop, as an OOM kill or a lost node would end it."""
        self.process.kill()
        self.process.wait(30)

    def mark_log(self, text: str) -> None:
        """Appends a line to the process's log (in order with its own lines: both append)."""
        with open(self.log_path, "a") as log:
            log.write(f"{text}\n")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a frozen process would not see SIGTERM
            stop_gracefully(self.process, 30)

    def log_text(self) -> str:
        return pathlib.Path(self.log_path).read_text(errors="replace")
