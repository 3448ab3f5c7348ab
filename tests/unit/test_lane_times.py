"""hack/lane_times.py sums each lane's seconds by test module, from the JUnit XML that pytest
itself writes (a module with a class, a parametrized test, a module-scoped fixture's setup)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import hack_scripts

MODULE = """
import time

import pytest


@pytest.fixture(scope="module")
def slow_setup():
    time.sleep(0.3)


def test_one(slow_setup):
    pass


@pytest.mark.parametrize("n", [1, 2])
def test_two(n):
    time.sleep(0.1)


class TestGroup:
    def test_three(self):
        time.sleep(0.1)
"""


@pytest.fixture(scope="module")
def lane_times():
    return hack_scripts.load("lane_times")


def test_modules_are_summed_from_what_pytest_writes(lane_times, tmp_path):
    package = tmp_path / "lanes_sample"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "test_sample.py").write_text(MODULE)
    (package / "test_other.py").write_text("def test_quick():\n    pass\n")
    xml = tmp_path / "lane.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "-c",
            "/dev/null",
            f"--junitxml={xml}",
            str(package),
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    seconds = lane_times.module_seconds(xml.read_text())
    assert set(seconds) == {"lanes_sample/test_sample.py", "lanes_sample/test_other.py"}
    assert seconds["lanes_sample/test_sample.py"] >= 0.3 + 2 * 0.1 + 0.1
    assert seconds["lanes_sample/test_other.py"] < 0.3

    (line,) = lane_times.report({"host1": seconds}, top=1)
    assert line.startswith("host1: ") and line.endswith(f"test_sample {seconds['lanes_sample/test_sample.py']:.0f}")


def test_a_lane_without_its_file_reports_nothing_in_it(lane_times):
    assert lane_times.report({"real": {}}, top=5) == ["real: 0s in tests; "]
