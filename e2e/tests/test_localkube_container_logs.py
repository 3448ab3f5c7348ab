"""The real nodes' `read_log` gives a container's output: every restart's file in order, the
kubelet's CRI prefixes taken off, partial lines joined."""

from __future__ import annotations

import pytest

from localkube import containerfaults, realnodes

ANY_LAYOUT = None  # what reads the layout is replaced below
POD = {"metadata": {"name": "db-0", "uid": "u-1"}, "spec": {"nodeName": "node-2"}}


@pytest.fixture
def logs(monkeypatch, tmp_path):
    monkeypatch.setattr(realnodes, "api_get", lambda layout, path: POD)
    monkeypatch.setattr(realnodes, "node_dir", lambda layout, index: tmp_path / f"node-{index}")
    folder = tmp_path / "node-2" / "pod-logs" / "ns_db-0_u-1" / "etcd"
    folder.mkdir(parents=True)
    return folder


def test_restarts_are_read_in_order_without_the_cri_prefixes(logs):
    (logs / "0.log").write_text('2026-11-27T05:00:00.1Z stderr F {"msg":"first run"}\n')
    (logs / "10.log").write_text("2026-11-27T05:02:00.1Z stdout F after the tenth restart\n")
    (logs / "2.log").write_text(
        "2026-11-27T05:01:00.1Z stdout P half a \n"
        "2026-11-27T05:01:00.2Z stdout F line\n"
        "2026-11-27T05:01:00.3Z stderr F \n"
    )
    assert containerfaults.read_log(ANY_LAYOUT, "ns", "db-0", "etcd") == (
        '{"msg":"first run"}\nhalf a line\n\nafter the tenth restart\n'
    )


def test_a_container_not_started_has_no_output(logs):
    assert containerfaults.read_log(ANY_LAYOUT, "ns", "db-0", "etcd") == ""
