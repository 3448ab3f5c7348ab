"""`localkube up` refuses a kept API-server store that was made for the other node mode
(the node agent's StorageClass, volumes and nodes mean nothing to real nodes), naming the way
out, and records the mode of a new store."""

from __future__ import annotations

import pytest

from localkube import controlplane
from localkube import layout as localkube_layout


@pytest.fixture
def instance(tmp_path, monkeypatch):
    monkeypatch.setenv("ETCD_OPERATOR_TESTBIN", str(tmp_path / "testbin"))
    where = localkube_layout.current(tmp_path)
    where.data_dir.mkdir(parents=True)
    return where


def in_mode(where, mode: str) -> None:
    path = where.state_dir / controlplane.NODES_MODE_FILE
    if mode == "real":
        path.write_text("real\n")
    else:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("mode", ["agent", "real"])
def test_a_new_store_is_claimed_for_the_mode_it_starts_in(instance, mode):
    in_mode(instance, mode)
    controlplane._claim_store(instance)
    assert (instance.data_dir / controlplane.STORE_MODE_FILE).read_text().strip() == mode
    controlplane._claim_store(instance)  # again: harmless


@pytest.mark.parametrize("made_for, wanted", [("agent", "real"), ("real", "agent")])
def test_a_store_made_for_the_other_mode_is_refused_with_the_way_out(instance, made_for, wanted):
    in_mode(instance, made_for)
    controlplane._claim_store(instance)
    in_mode(instance, wanted)
    with pytest.raises(controlplane.ModeConflict, match=r"make down PURGE=1.*make up NODES=" + made_for):
        controlplane._claim_store(instance)


def test_a_store_from_before_the_record_belongs_to_the_node_agent_unless_real_nodes_left_their_folders(instance):
    (instance.data_dir / "apiserver-etcd").mkdir()
    in_mode(instance, "real")
    with pytest.raises(controlplane.ModeConflict, match="made for the node agent"):
        controlplane._claim_store(instance)

    (instance.data_dir / controlplane.STORE_MODE_FILE).unlink()
    (instance.state_dir / "nodes").mkdir()
    controlplane._claim_store(instance)
    assert (instance.data_dir / controlplane.STORE_MODE_FILE).read_text().strip() == "real"
