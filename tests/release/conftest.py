"""`make release` run twice, once for every test module here: it builds the image for two
architectures, so each run takes about a minute."""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import time

import pytest

from tests.support.helm import helm_binary, helm_environment

ROOT = pathlib.Path(__file__).resolve().parents[2]


def release(out: pathlib.Path) -> None:
    result = subprocess.run(
        [str(ROOT / "packaging" / "release.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        # HEAD is what is built; a test run from a tree with edits still checks HEAD's release.
        env={**os.environ, **helm_environment(), "ALLOW_DIRTY": "1", "HELM": str(helm_binary())},
    )
    assert result.returncode == 0, result.stderr


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def releases(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    first, second = tmp_path_factory.mktemp("release-a"), tmp_path_factory.mktemp("release-b")
    release(first)
    time.sleep(1.1)  # a timestamp of the wall clock anywhere would now differ
    release(second)
    return first, second


@pytest.fixture(scope="session")
def out(releases) -> pathlib.Path:
    return releases[0]
