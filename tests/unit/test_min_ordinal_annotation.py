"""A malformed etcd.operator.dev/min-ordinal annotation is reported in a condition and
ignored: the pass goes on as if it were absent (it used to raise in int(), every pass)."""

from __future__ import annotations

import pytest

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.decision import plan
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec
from tests.unit.fake_members import FakeCluster, cluster_body, observer_of

SPEC = {"size": 3, "version": "3.6.16"}
NOW = 1_700_000_000.0


async def conditions_with(value: str, monkeypatch):
    etcd = FakeCluster()
    body = cluster_body(SPEC, annotations={naming.ANNOTATION_MIN_ORDINAL: value})
    status = ClusterStatus.from_dict(body.get("status") or {})
    observed = await observer_of(etcd, monkeypatch).observe(body, status, etcd.children())
    decision = plan(ClusterSpec.from_dict(SPEC), status, observed, NOW, stored_spec=SPEC)
    return observed, {c.type: c for c in decision.conditions}


@pytest.mark.parametrize("value", ["abc", "3.5", "-1", "0x10", "²"])
async def test_a_malformed_min_ordinal_is_reported_and_ignored(value, monkeypatch):
    observed, conditions = await conditions_with(value, monkeypatch)
    assert observed.min_ordinal == 0
    accepted = conditions["AnnotationsAccepted"]
    assert (accepted.status, accepted.reason) == (False, "InvalidAnnotation")
    assert naming.ANNOTATION_MIN_ORDINAL in accepted.message and repr(value) in accepted.message


@pytest.mark.parametrize("value,ordinal", [("7", 7), (" 7 ", 7), ("", 0)])
async def test_a_well_formed_min_ordinal_is_used(value, ordinal, monkeypatch):
    observed, conditions = await conditions_with(value, monkeypatch)
    assert observed.min_ordinal == ordinal
    assert conditions["AnnotationsAccepted"].status is True
