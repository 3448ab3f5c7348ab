"""e2e/testbin/build.sh on two recipes of its own shape (a go.mod, a `binaries` table and a
program), built into a cache of the test's: the exit status a make target sees."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

BUILD = pathlib.Path(__file__).resolve().parents[1] / "testbin" / "build.sh"

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="needs the Go toolchain")


def recipe(root: pathlib.Path, name: str) -> None:
    folder = root / name
    (folder / "cmd" / name).mkdir(parents=True)
    (folder / "go.mod").write_text(f"module example.test/{name}\n\ngo 1.22\n")
    (folder / "go.sum").write_text("")
    (folder / "binaries").write_text(f"{name}|./cmd/{name}|-s -w\n")
    (folder / "cmd" / name / "main.go").write_text('package main\n\nfunc main() { println("hello") }\n')


def test_a_cold_build_whose_prefetch_finished_first_exits_zero_and_a_second_run_builds_nothing(tmp_path):
    here = tmp_path / "testbin"
    here.mkdir()
    shutil.copy(BUILD, here / "build.sh")
    # The second recipe's modules are prefetched while the first builds; with no dependencies
    # that ends long before the build does.
    recipe(here, "first")
    recipe(here, "second")
    env = {**os.environ, "ETCD_OPERATOR_TESTBIN": str(tmp_path / "cache"), "GOFLAGS": "", "GOPROXY": "off"}

    cold = subprocess.run(["bash", str(here / "build.sh")], env=env, capture_output=True, text=True, timeout=300)
    assert cold.returncode == 0, cold.stderr
    assert "built 2 binaries" in cold.stderr
    cache = pathlib.Path(cold.stdout.strip())
    for name in ("first", "second"):
        assert subprocess.run([cache / name / name], capture_output=True, text=True).stderr == "hello\n"

    warm = subprocess.run(["bash", str(here / "build.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert warm.returncode == 0 and "up to date" in warm.stderr, warm.stderr
