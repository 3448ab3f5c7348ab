"""A local OCI registry (distribution's `registry`, testbin recipe `registry`), plain HTTP, its
storage in a test's folder: `make release` publishes into it (RELEASE_REGISTRY). On loopback
by default; on the real nodes' bridge, where their containerd pulls from it
(e2e/localkube/realnodes.py writes its hosts.toml), its access log tells which node fetched what."""

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

    def manifest_fetches(self, repository: str, tag: str) -> list[str]:
        """The access log's lines of manifest fetches of repository:tag, each naming the client."""
        path = f"/v2/{repository}/manifests/{tag} "
        return [line for line in self.log.read_text(errors="replace").splitlines() if path in line]

    def manifest(self, repository: str, reference: str) -> tuple[str, dict]:
        """The digest the registry gives a tag or digest, and the manifest or index itself."""
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repository}/manifests/{reference}",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.headers["Docker-Content-Digest"], json.load(response)


@contextlib.contextmanager
def running(folder: pathlib.Path, host: str | None = None):
    """The registry at `host` (127.0.0.1 at a free port unless given), its storage in `folder`;
    stopped on the way out."""
    host = host or f"127.0.0.1:{free_port()}"
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.yml"
    # distribution reads YAML; JSON is YAML. A fixed secret: it warns of a random one otherwise.
    config.write_text(
        json.dumps(
            {
                "version": "0.1",
                "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
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
    registry = Registry(host, log)
    try:
        wait_for(lambda: process.poll() is not None or registry.answers(), 30, what=f"the registry answering on {host}")
        assert process.poll() is None, f"the registry exited ({process.returncode}): {log.read_text()[-2000:]}"
        yield registry
    finally:
        stop_gracefully(process, 10)


def cosign_key_pair(folder: pathlib.Path, password: str) -> tuple[dict, pathlib.Path]:
    """A release key pair made as a release manager makes one (`cosign generate-key-pair`): the
    environment `make release` signs with (COSIGN_KEY, COSIGN_PASSWORD; cosign's trust root
    cache in `folder`), and the public key."""
    env = {**os.environ, "COSIGN_PASSWORD": password, "TUF_ROOT": str(folder / "tuf")}
    subprocess.run([str(testbin("cosign")), "generate-key-pair"], cwd=folder, env=env, check=True, capture_output=True)
    return env | {"COSIGN_KEY": str(folder / "cosign.key")}, folder / "cosign.pub"
