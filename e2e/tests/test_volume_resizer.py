"""The resizer beside the real nodes' expandable class (tests/support/volume_resizer.py) grows
only what was asked for: a bound claim asking more than its reported capacity."""

from __future__ import annotations

from tests.support.volume_resizer import quantity_bytes, resize_pending


def claim(name: str, wanted: str, have: str | None, volume: str | None = "pv-1") -> dict:
    status = {"capacity": {"storage": have}} if have else {}
    return {
        "metadata": {"name": name},
        "spec": {"resources": {"requests": {"storage": wanted}}, **({"volumeName": volume} if volume else {})},
        "status": status,
    }


def test_only_bound_claims_asking_for_more_are_resized():
    grown = claim("grown", "2Gi", "1Gi")
    claims = [grown, claim("same", "1Gi", "1Gi"), claim("unbound", "2Gi", None, None), claim("bigger", "1Gi", "2Gi")]
    assert resize_pending(claims) == [(grown, "2Gi")]


def test_quantities_in_binary_units_and_bytes():
    assert quantity_bytes("1Gi") == 1 << 30 and quantity_bytes("512Mi") == 512 << 20 and quantity_bytes("4096") == 4096
