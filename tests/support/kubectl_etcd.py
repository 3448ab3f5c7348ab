"""`kubectl etcd` as users run it: the plugin this checkout installs in its venv
(.venv/bin/kubectl-etcd), against the cluster KUBECONFIG names, with the testbin's kubectl and
etcdctl on PATH (what `kubectl etcd etcdctl` runs); and its status table read back by column."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import subprocess
import sys

from localkube import layout as localkube_layout

PLUGIN = pathlib.Path(sys.executable).parent / "kubectl-etcd"


@functools.cache
def tools_path() -> str:
    """PATH with the testbin's kubectl and etcdctl first (found once: testbin_dir runs a script)."""
    testbin = localkube_layout.testbin_dir()
    return os.pathsep.join([str(testbin / "kube"), str(testbin / "etcd-3.6"), os.environ["PATH"]])


def plugin(*args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PLUGIN), *args],
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
        env={**os.environ, "KUBECONFIG": os.environ["KUBECONFIG"], "PATH": tools_path()},
    )


def plugin_json(*args: str):
    result = plugin(*args, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def member_table(status_table: str) -> dict[str, dict[str, str]]:
    """The member rows of `kubectl etcd status`'s table, by member name: each row's cells by
    column title (MEMBER, ROLE, ..., ALARMS, VERSION). Cells are set apart by two spaces or
    more (views.table), a cell holds at most single spaces."""
    lines = status_table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("MEMBER "))
    titles = re.split(r" {2,}", lines[start].strip())
    rows = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells = re.split(r" {2,}", line.strip())
        assert len(cells) == len(titles), f"a row of {len(cells)} cells under {titles}: {line!r}"
        rows[cells[0]] = dict(zip(titles, cells, strict=True))
    return rows
