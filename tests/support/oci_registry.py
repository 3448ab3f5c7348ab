"""A local OCI registry (distribution's `registry`, testbin recipe `registry`) on loopback, plain
HTTP, its storage in a test's folder: `make release` publishes into it (RELEASE_REGISTRY)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import subprocess
import urllib.error
import urllib.request

from tests.support.etcd_process import free_port
from tests.support.processes import stop_gracefully
from tests.support.waiting import wait_for

MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json")


def testbin(recipe: str, binary: str | None = None) -> pathlib.Path:
    folder = subprocess.run(
        [str(pathlib.Path(__file__).resolve().parents[2] / "e2e" / "testbin" / "build.sh"), "--dir"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return pathlib.Path(folder) / recipe / (binary or recipe)


@dataclasses.dataclass(frozen=True)
class Registry:
    host: str  # host:port, as image references and oci:// URLs name it

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def manifest(self, repository: str, reference: str) -> tuple[str, dict]:
        """The digest the registry gives a tag or digest, and the manifest or index itself."""
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repository}/manifests/{reference}",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.headers["Docker-Content-Digest"], json.load(response)


@contextlib.contextmanager
def running(folder: pathlib.Path):
    """The registry on 127.0.0.1 at a free port, its storage in `folder`; stopped on the way out."""
    host = f"127.0.0.1:{free_port()}"
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.yml"
    # distribution reads YAML; JSON is YAML. A fixed secret: it warns of a random one otherwise.
    config.write_text(
        json.dumps(
            {
                "version": "0.1",
                "log": {"level": "error", "accesslog": {"disabled": True}},
                "storage": {"filesystem": {"rootdirectory": str(folder / "storage")}},
                "http": {"addr": host, "secret": "a-test-registry"},
            }
        )
    )
    log = folder / "registry.log"
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none"}  # no collector to send traces to
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(testbin("registry")), "serve", str(config)], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    registry = Registry(host)
    try:
        wait_for(lambda: process.poll() is not None or registry.answers(), 30, what=f"the registry answering on {host}")
        assert process.poll() is None, f"the registry exited ({process.returncode}): {log.read_text()[-2000:]}"
        yield registry
    finally:
        stop_gracefully(process, 10)
