"""The markers of what a test needs (tests/support/needs.py, checked by the root conftest at
every collection) and the runs tests/run.sh schedules from them."""

from __future__ import annotations

import importlib
import itertools
import pathlib
import re
import tomllib

import pytest
from _pytest.mark.expression import Expression  # what `pytest -m` compiles

from tests.support import needs

ROOT = pathlib.Path(__file__).resolve().parents[2]
LANES = ("host1_lane", "host2_lane", "host3_lane", "host4_lane", "host5_lane", "real_lane", "pure_lane")


def registered() -> set[str]:
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    return {line.split(":")[0] for line in ini["markers"]}


def lanes() -> dict[str, Expression]:
    """tests/run.sh's marker expressions, as it assigns them (one `name="…"` a line)."""
    assigned = dict(re.findall(r'^(\w+)="([^"]*)"$', (ROOT / "tests/run.sh").read_text(), re.M))

    def expanded(text: str) -> str:
        return re.sub(r"\$(\w+)", lambda m: assigned[m.group(1)], text)

    return {lane: Expression.compile(expanded(assigned[lane])) for lane in LANES}


def test_every_marker_the_check_asks_for_is_registered():
    asked = {m for table in (needs.BY_FIXTURE, needs.BY_HELPER, needs.BY_MARKER) for ms in table.values() for m in ms}
    assert asked | set(needs.BY_MARKER) <= registered()


def test_each_combination_of_markers_runs_in_exactly_one_lane():
    markers = sorted(registered())
    expressions = lanes()
    for size in range(len(markers) + 1):
        for carried in itertools.combinations(markers, size):
            matched = [lane for lane, e in expressions.items() if e.evaluate(set(carried).__contains__)]
            assert len(matched) == 1, (carried, matched)


@pytest.mark.parametrize(
    ("module", "removed", "problem"),
    [
        (
            "tests.etcd_processes.test_etcd_client",
            "needs_etcd",
            "uses tests.support.etcd_process.EtcdProcess: mark one of needs_etcd",
        ),
        (
            "tests.nodes.test_backup_catalogue",
            "needs_store",
            "uses tests.support.s3.create_credentials_secret: mark one of needs_store",
        ),
        (
            "test_containerd_import",  # in e2e/tests, which is no package
            "needs_containerd",
            "uses images.containerd: mark one of needs_containerd, needs_nodes",
        ),
        (
            "tests.nodes.host_operator.test_sharding",
            "needs_operator_process",
            "uses tests.support.operator_process.OperatorProcess: mark one of needs_operator_process",
        ),
    ],
)
def test_a_module_that_uses_a_helper_without_its_marker_is_named(module, removed, problem):
    imported = importlib.import_module(module)
    module_marks = imported.pytestmark if isinstance(imported.pytestmark, list) else [imported.pytestmark]
    marks = [mark.name for mark in module_marks if mark.name.startswith(("needs_", "lane"))]
    assert needs.missing([], vars(imported), marks) == []
    assert problem in needs.missing([], vars(imported), [m for m in marks if m != removed])


@pytest.mark.parametrize(
    ("fixtures", "marks", "problem"),
    [
        (["real_nodes_use", "nodes_to_the_module"], ["needs_cluster"], "fixture nodes_to_the_module"),
        (["real_nodes_use", "operator_release"], ["needs_nodes"], "fixture operator_release"),
        (["real_nodes_use", "operator_process"], ["needs_nodes"], "fixture operator_process"),
        (["e2e_nodes", "s3_settings"], ["needs_nodes", "needs_release"], "fixture s3_settings"),
        (["tmp_path"], ["needs_release", "needs_nodes"], None),
        (["tmp_path"], ["needs_release"], "marker needs_release: mark one of needs_nodes"),
        (["tmp_path"], ["lane2"], "marker lane2"),
        (["tmp_path"], ["lane3"], "marker lane3"),
        (["tmp_path"], ["lane4"], "marker lane4"),
        (["real_nodes_use"], [], "fixture real_nodes_use: mark one of needs_cluster, needs_nodes"),
    ],
)
def test_a_fixture_or_marker_without_what_it_implies_is_named(fixtures, marks, problem):
    found = needs.missing(fixtures, {}, marks)
    assert found == [] if problem is None else any(problem in line for line in found), found
