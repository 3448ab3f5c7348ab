"""A kube-apiserver on the host, as a client of an etcd cluster the operator runs: the
watch client etcd's restore guide has in mind. It authenticates the substrate's admin
certificate and allows everything; it is reached on 127.0.0.1 with plain urllib."""

from __future__ import annotations

import json
import pathlib
import ssl
import subprocess
import time
import urllib.error
import urllib.request

from tests.support.etcd_process import free_port
from tests.support.processes import stop_gracefully


class KubeAPIServer:
    def __init__(self, layout, etcd_endpoints: list[str], workdir: pathlib.Path):
        self.layout = layout
        self.etcd_servers = ",".join(f"http://{e}" for e in etcd_endpoints)
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.log = workdir / "kube-apiserver.log"

    def argv(self) -> list[str]:
        pki = self.layout.pki_dir
        return [
            str(self.layout.binary("kube", "kube-apiserver")),
            f"--etcd-servers={self.etcd_servers}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={self.workdir / 'certs'}",  # a self-signed serving certificate
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=AlwaysAllow",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.254.0.0/24",
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
        ]

    def start(self, timeout: float = 90) -> KubeAPIServer:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"kube-apiserver exited: {self.log.read_text()[-3000:]}")
            try:
                if self.get("/readyz", raw=True) == b"ok":
                    return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"kube-apiserver not ready in {timeout} s: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        stop_gracefully(self.process, 30)
        self.process = None

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # its serving certificate is self-signed
        pki = self.layout.pki_dir
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        return context

    def _open(self, method: str, path: str, body: dict | None = None, timeout: float = 30):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        return urllib.request.urlopen(request, context=self._context(), timeout=timeout)

    def get(self, path: str, raw: bool = False):
        with self._open("GET", path) as response:
            content = response.read()
        return content if raw else json.loads(content)

    def create(self, path: str, body: dict) -> dict:
        with self._open("POST", path, body) as response:
            return json.loads(response.read())

    def delete(self, path: str) -> None:
        with self._open("DELETE", path) as response:
            response.read()

    def first_watch_answer(self, path: str, resource_version: str) -> tuple[int, dict | None]:
        """A watch of `path` from `resource_version`: the HTTP status, and the first event
        (an ERROR event carries the Status the API server refused it with), or None when no
        event came within a few seconds."""
        try:
            response = self._open("GET", f"{path}?watch=1&resourceVersion={resource_version}", timeout=5)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")
        with response:
            try:
                line = response.readline()
            except TimeoutError:
                return response.status, None
            return response.status, json.loads(line) if line.strip() else None
