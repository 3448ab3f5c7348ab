"""A local OCI registry (distribution's `registry`, testbin recipe `registry`) on the real nodes'
bridge, where their containerd pulls from it over plain HTTP (e2e/localkube/realnodes.py writes
its hosts.toml). Its access log tells which node fetched what; docs/operations/releasing.md's
block pushes into it (helm push, crane push)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import subprocess
import urllib.error
import urllib.request

from localkube import layout as localkube_layout
from tests.support.processes import stop_gracefully
from tests.support.waiting import wait_for

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)


@dataclasses.dataclass(frozen=True)
class Registry:
    host: str  # host:port, as image references and oci:// URLs name it
    log: pathlib.Path

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def tags(self, repository: str) -> list[str]:
        with urllib.request.urlopen(f"http://{self.host}/v2/{repository}/tags/list", timeout=10) as response:
            return json.load(response)["tags"] or []

    def manifest_digest(self, repository: str, tag: str) -> str:
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repository}/manifests/{tag}",
            method="HEAD",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.headers["Docker-Content-Digest"]

    def manifest_fetches(self, repository: str, tag: str) -> list[str]:
        """The access log's lines of manifest fetches of repository:tag (GET or HEAD), each
        naming the client's address."""
        path = f"/v2/{repository}/manifests/{tag} "
        return [line for line in self.log.read_text(errors="replace").splitlines() if path in line]


def _binary(recipe: str) -> pathlib.Path:
    return localkube_layout.testbin_dir() / recipe / recipe


@contextlib.contextmanager
def running(where: localkube_layout.Layout, folder: pathlib.Path):
    """The registry on the bridge of `where`'s real nodes at the port of its layout, its
    storage in `folder`; stopped on the way out."""
    host = where.node_network.registry_host(where.ports)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.yml"
    # distribution reads YAML; JSON is YAML.
    config.write_text(
        json.dumps(
            {
                "version": "0.1",
                "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
                "storage": {"filesystem": {"rootdirectory": str(folder / "storage")}},
                "http": {"addr": host},
            }
        )
    )
    log = folder / "registry.log"
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none"}  # no collector to send traces to
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(_binary("registry")), "serve", str(config)], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    registry = Registry(host, log)
    try:
        wait_for(lambda: process.poll() is not None or registry.answers(), 30, what=f"the registry answering on {host}")
        assert process.poll() is None, f"the registry exited ({process.returncode}): {log.read_text()[-2000:]}"
        yield registry
    finally:
        stop_gracefully(process, 10)
