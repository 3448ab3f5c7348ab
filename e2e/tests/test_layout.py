from __future__ import annotations

import pathlib

from hypothesis import given
from hypothesis import strategies as st

from localkube import layout


@given(
    st.text(alphabet="abcdefgh-_/0123", min_size=1, max_size=40),
    st.text(alphabet="abcdefgh-_/0123", min_size=1, max_size=40),
)
def test_checkouts_get_disjoint_port_blocks_or_identical_ones(a, b):
    base_a = layout.port_base_for(layout.checkout_id(pathlib.Path("/w") / a))
    base_b = layout.port_base_for(layout.checkout_id(pathlib.Path("/w") / b))
    assert base_a == base_b or abs(base_a - base_b) >= layout.PORT_BLOCK_SIZE


def test_every_port_fits_in_the_block():
    ports = layout.Ports.from_base(20000).named()
    assert len(ports) <= layout.PORT_BLOCK_SIZE
    assert len(set(ports.values())) == len(ports)
    assert max(ports.values()) < 20000 + layout.PORT_BLOCK_SIZE


@given(st.text(alphabet="abcdefgh-_/0123", min_size=1, max_size=40))
def test_pod_range_never_uses_the_control_planes_127_0(name):
    octet = layout.pod_octet_for(layout.checkout_id(pathlib.Path(name)))
    assert 1 <= octet <= 253


@given(st.text(alphabet="abcdefgh-_/0123", min_size=1, max_size=40))
def test_real_node_block_avoids_the_default_services_and_this_machines_resolver(name):
    import ipaddress

    octet = layout.node_octet_for(layout.checkout_id(pathlib.Path(name)))
    block = ipaddress.ip_network(layout.NodeNetwork(octet).block)
    for taken in ("10.0.0.0/24", "10.255.255.53/32", "192.0.2.0/24", "127.0.0.0/8"):
        assert not block.overlaps(ipaddress.ip_network(taken))


def test_real_node_ranges_nest_in_the_block_without_overlapping():
    import ipaddress
    import itertools

    net = layout.NodeNetwork(48)
    block = ipaddress.ip_network(net.block)
    pods = [ipaddress.ip_network(net.pod_cidr(i)) for i in range(1, layout.NODE_COUNT + 1)]
    ranges = [ipaddress.ip_network(net.node_subnet), ipaddress.ip_network(net.service_cidr), *pods]
    assert all(r.subnet_of(block) for r in ranges)
    assert not any(a.overlaps(b) for a, b in itertools.combinations(ranges, 2))
    assert all(p.subnet_of(ipaddress.ip_network(net.pods_cidr)) for p in pods)
    assert not ipaddress.ip_network(net.service_cidr).overlaps(ipaddress.ip_network(net.pods_cidr))
    assert ipaddress.ip_address(net.kubernetes_service_ip) in ipaddress.ip_network(net.service_cidr)


def test_without_a_root_the_instance_is_the_one_its_state_directory_names(tmp_path, monkeypatch):
    """A nested instance's processes (the helpers of its tests) are given only
    LOCALKUBE_STATE_DIR; they must find that instance's ports, not the checkout's."""
    monkeypatch.setenv("ETCD_OPERATOR_TESTBIN", str(tmp_path / "testbin"))
    for name in ("LOCALKUBE_PORT_BASE", "LOCALKUBE_POD_OCTET", "LOCALKUBE_NODE_OCTET"):
        monkeypatch.delenv(name, raising=False)
    nested = tmp_path / ".localkube" / "realnodes-test"
    monkeypatch.setenv("LOCALKUBE_STATE_DIR", str(nested / ".localkube"))
    assert layout.current() == layout.current(nested)
    assert layout.current().state_dir == nested / ".localkube"
    monkeypatch.delenv("LOCALKUBE_STATE_DIR")
    assert layout.current().root == layout.REPO_ROOT
