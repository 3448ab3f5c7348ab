from __future__ import annotations

import pathlib

from hypothesis import given, strategies as st

from localkube import layout


@given(st.text(alphabet="abcdefgh-_/0123", min_size=1, max_size=40), st.text(alphabet="abcdefgh-_/0123", min_size=1, max_size=40))
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
