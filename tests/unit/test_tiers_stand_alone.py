"""The pure tiers stand alone: tests/unit and tests/sim (and the root conftest, which pytest loads
for them) import nothing of the test harness — e2e/localkube, e2e/bench,
e2e/images, nor any module under e2e/, nor the tests/support modules that import those — so
they run on a checkout without it. The harness's own tests are in e2e/tests."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
BLOCKED_PACKAGES = ("localkube", "bench", "images")

# Run before pytest in a fresh interpreter: any import of a blocked package, or of a module found
# under e2e/, fails and is reported on stderr. A tests/support module that imports the harness
# fails with it, and so does every test module that imports that one.
BLOCKER = """
import importlib.abc, importlib.machinery, pathlib, sys

E2E = pathlib.Path({e2e!r})
BLOCKED = {blocked!r}


class Harness(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        spec = None if name.split(".")[0] in BLOCKED else importlib.machinery.PathFinder.find_spec(name, path)
        if name.split(".")[0] in BLOCKED or (spec and spec.origin and E2E in pathlib.Path(spec.origin).parents):
            print(f"HARNESS IMPORTED: {{name}}", file=sys.stderr, flush=True)
            raise ModuleNotFoundError(f"{{name}} is the test harness, which the pure tiers must not import")
        return None


sys.meta_path.insert(0, Harness())
import pytest

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
"""


def collect_without_the_harness(*paths: str) -> subprocess.CompletedProcess:
    code = BLOCKER.format(e2e=str(ROOT / "e2e"), blocked=BLOCKED_PACKAGES)
    return subprocess.run([sys.executable, "-c", code, *paths], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_unit_and_sim_collect_with_the_harness_blocked():
    result = collect_without_the_harness("tests/unit", "tests/sim")
    output = result.stdout + result.stderr
    assert "HARNESS IMPORTED" not in result.stderr, output[-4000:]
    assert result.returncode == 0, output[-4000:]
    assert "tests/unit/test_tiers_stand_alone.py::test_unit_and_sim_collect_with_the_harness_blocked" in result.stdout
    assert "tests/sim/" in result.stdout


def test_the_blocker_stops_a_tier_that_imports_the_harness():
    """The check above can fail: e2e/tests, which imports the harness, does not collect under it."""
    result = collect_without_the_harness("e2e/tests/test_layout.py")
    assert "HARNESS IMPORTED: localkube" in result.stderr, result.stdout + result.stderr
    assert result.returncode != 0
