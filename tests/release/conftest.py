"""`make release` run twice, once for every test module here (it builds the image for two
architectures, about a minute each); the first run also publishes into a local registry,
signed with a key made for the session."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import subprocess
import time

import pytest

from tests.support import oci_registry
from tests.support.helm import helm_binary, helm_environment

ROOT = pathlib.Path(__file__).resolve().parents[2]


PASSWORD = "a-release-key-for-tests"


@dataclasses.dataclass(frozen=True)
class Published:
    registry: oci_registry.Registry
    public_key: pathlib.Path
    cosign_env: dict


def release(out: pathlib.Path, publish: dict | None = None) -> None:
    result = subprocess.run(
        [str(ROOT / "packaging" / "release.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        # HEAD is what is built; a test run from a tree with edits still checks HEAD's release.
        env={**os.environ, **helm_environment(), "ALLOW_DIRTY": "1", "HELM": str(helm_binary()), **(publish or {})},
    )
    assert result.returncode == 0, result.stderr


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def published(tmp_path_factory):
    """A registry on loopback and the release's cosign key pair (made here, as a release
    manager makes one with `cosign generate-key-pair`)."""
    folder = tmp_path_factory.mktemp("registry")
    env, public_key = oci_registry.cosign_key_pair(tmp_path_factory.mktemp("keys"), PASSWORD)
    with oci_registry.running(folder) as registry:
        yield Published(registry, public_key, env)


@pytest.fixture(scope="session")
def releases(tmp_path_factory, published) -> tuple[pathlib.Path, pathlib.Path]:
    first, second = tmp_path_factory.mktemp("release-a"), tmp_path_factory.mktemp("release-b")
    release(
        first,
        {
            "RELEASE_REGISTRY": published.registry.host,
            "RELEASE_PLAIN_HTTP": "1",
            "COSIGN_KEY": published.cosign_env["COSIGN_KEY"],
            "COSIGN_PASSWORD": PASSWORD,
        },
    )
    time.sleep(1.1)  # a timestamp of the wall clock anywhere would now differ
    release(second)
    return first, second


@pytest.fixture(scope="session")
def out(releases) -> pathlib.Path:
    return releases[0]
