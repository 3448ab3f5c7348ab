"""Real etcd members started directly from testbin, for client-level tests that do not
need pods. Ports come from the kernel so parallel runs never collide."""

from __future__ import annotations

import dataclasses
import pathlib
import socket
import subprocess
import time
import urllib.request

from tests.support.processes import stop_gracefully


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class EtcdProcess:
    name: str
    binary_dir: pathlib.Path
    data_dir: pathlib.Path
    client_port: int = dataclasses.field(default_factory=free_port)
    peer_port: int = dataclasses.field(default_factory=free_port)
    process: subprocess.Popen | None = None
    extra_flags: tuple[str, ...] = ()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def start(self, initial_cluster: str | None = None, state: str = "new") -> EtcdProcess:
        log = open(self.data_dir.parent / f"{self.name}.log", "ab")
        self.process = subprocess.Popen(
            [
                str(self.binary_dir / "etcd"),
                f"--name={self.name}",
                f"--data-dir={self.data_dir}",
                f"--listen-client-urls=http://{self.endpoint}",
                f"--advertise-client-urls=http://{self.endpoint}",
                f"--listen-peer-urls={self.peer_url}",
                f"--initial-advertise-peer-urls={self.peer_url}",
                f"--initial-cluster={initial_cluster or f'{self.name}={self.peer_url}'}",
                f"--initial-cluster-state={state}",
                "--log-level=warn",
                *self.extra_flags,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        return self

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd {self.name} exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"etcd {self.name} not healthy after {timeout}s")

    def stop(self) -> None:
        stop_gracefully(self.process, 10)
