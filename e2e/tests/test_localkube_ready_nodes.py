"""`localkube up` counts a node whose kubelet it started again as Ready only once that kubelet
has reported: the Node the API server kept from before `make down` still says Ready."""

from __future__ import annotations

import pytest

from localkube import realnodes

STARTED = 1_795_000_000.4  # 2026-11-18T11:06:40Z, and 0.4 s


def node(name: str, status: str, heartbeat: str) -> dict:
    return {
        "metadata": {"name": name},
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": heartbeat},
                {"type": "Ready", "status": status, "lastHeartbeatTime": heartbeat},
            ]
        },
    }


@pytest.fixture
def nodes(monkeypatch):
    listing = {"items": []}
    monkeypatch.setattr(realnodes, "api_get", lambda layout, path: listing)
    return listing["items"]


def test_a_node_started_again_counts_once_its_kubelet_reported(nodes):
    nodes += [
        node("node-1", "True", "2026-11-18T11:00:00Z"),  # Ready from before the restart
        node("node-2", "True", "2026-11-18T11:06:40Z"),  # reported in the second it started
        node("node-3", "True", "2026-11-18T11:06:52Z"),
    ]
    restarted = {name: STARTED for name in ("node-1", "node-2", "node-3")}
    assert realnodes.ready_nodes(None, restarted) == {"node-2", "node-3"}
    assert realnodes.ready_nodes(None) == {"node-1", "node-2", "node-3"}


def test_a_node_left_running_counts_on_its_last_report(nodes):
    nodes += [node("node-1", "True", "2026-11-18T11:00:00Z"), node("node-2", "False", "2026-11-18T11:07:00Z")]
    assert realnodes.ready_nodes(None, {"node-2": STARTED}) == {"node-1"}
