"""The host-wide record of real nodes: a substrate killed without `down` (a CI job cut off)
must not leave the host unable to resolve names, and the next `up` or `down` takes back what
it held. Run against files of the test's own, never /etc/resolv.conf."""

from __future__ import annotations

import subprocess

import pytest

from localkube import hoststate

HOST_RESOLVER = "nameserver 10.255.255.53\noptions timeout:2\nsearch corp.example\n"


@pytest.fixture
def host(tmp_path, monkeypatch):
    resolver = tmp_path / "resolv.conf"
    resolver.write_text(HOST_RESOLVER)
    monkeypatch.setattr(hoststate, "RESOLV_CONF", resolver)
    monkeypatch.setattr(hoststate, "RECORD", tmp_path / "record" / "host-state.json")
    monkeypatch.setattr(hoststate, "CREATED_PATHS", [])
    monkeypatch.setattr(hoststate, "SYSCTLS", [])
    return resolver


@pytest.fixture
def dead_pid():
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture
def live_pid():
    child = subprocess.Popen(["sleep", "60"])
    yield child.pid
    child.kill()
    child.wait()


def _kill_owner(owner: str, pid: int) -> None:
    """What a killed substrate leaves: its record entry, naming processes that are gone."""
    state = hoststate.recorded()
    state["owners"][owner]["pid"] = pid
    hoststate._write(state)


def test_the_host_keeps_its_own_nameservers_after_the_substrates(host, tmp_path):
    hoststate.record("first", tmp_path / "run-first")
    assert hoststate.point_resolver("10.139.0.1", "first")
    lines = host.read_text().splitlines()
    assert lines[1:3] == ["nameserver 10.139.0.1", "nameserver 10.255.255.53"]
    assert "options timeout:2" in lines
    assert lines[-1] == "search cluster.local corp.example"


def test_a_killed_owner_is_dropped_at_the_next_up_and_its_resolver_given_back(host, tmp_path, dead_pid):
    hoststate.record("killed", tmp_path / "run-killed")
    hoststate.point_resolver("10.139.0.1", "killed")
    _kill_owner("killed", dead_pid)

    assert hoststate.record("next", tmp_path / "run-next") == ["killed"]
    assert list(hoststate.recorded()["owners"]) == ["next"]
    assert host.read_text() == HOST_RESOLVER
    assert hoststate.point_resolver("10.139.1.1", "next")  # free for the next checkout's DNS


def test_an_owner_whose_nodes_run_keeps_the_resolver(host, tmp_path, dead_pid, live_pid):
    run_dir = tmp_path / "run-running"
    run_dir.mkdir()
    (run_dir / "kubelet-node-1.pid").write_text(f"{live_pid}\n")
    hoststate.record("running", run_dir)
    hoststate.point_resolver("10.139.0.1", "running")
    _kill_owner("running", dead_pid)  # its `up` ended; its kubelet runs on

    assert hoststate.record("next", tmp_path / "run-next") == []
    assert not hoststate.point_resolver("10.139.1.1", "next")
    assert hoststate.RESOLVER_MARKER + "running" in host.read_text()


def test_the_last_live_owner_to_go_down_restores_the_host_past_a_killed_one(host, tmp_path, dead_pid):
    hoststate.record("killed", tmp_path / "run-killed")
    hoststate.record("last", tmp_path / "run-last")
    hoststate.point_resolver("10.139.0.1", "killed")
    _kill_owner("killed", dead_pid)

    assert hoststate.restore("last") == []
    assert hoststate.recorded() is None
    assert host.read_text() == HOST_RESOLVER


def test_a_record_from_before_owners_were_tracked_counts_its_owners_dead(host, tmp_path):
    hoststate.record("old", tmp_path / "run-old")
    hoststate.point_resolver("10.139.0.1", "old")
    state = hoststate.recorded()
    state["owners"] = ["old"]
    hoststate._write(state)

    assert hoststate.record("next", tmp_path / "run-next") == ["old"]
    assert host.read_text() == HOST_RESOLVER


def test_without_a_record_the_substrates_lines_are_taken_out(host, tmp_path):
    """/run is emptied by a reboot, /etc/resolv.conf is not."""
    host.write_text(hoststate.substrate_resolver_text(HOST_RESOLVER, "10.139.0.1", "before-reboot"))
    hoststate.record("next", tmp_path / "run-next")
    assert hoststate.recorded()["resolv_conf"] == HOST_RESOLVER
    assert host.read_text() == HOST_RESOLVER
    assert hoststate.point_resolver("10.139.1.1", "next")
