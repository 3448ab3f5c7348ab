"""Shards: the selector grammar kubectl takes with -l, and which objects a shard works on."""

from __future__ import annotations

import pytest

from etcd_operator.core.shard import (
    FINALIZER,
    LEASE_NAME,
    InvalidShardSetting,
    Shard,
    parse_selector,
    shard_from_settings,
)
from etcd_operator.runtime.config import OperatorConfig

BASE_ENV = {"POD_NAMESPACE": "ops"}


@pytest.mark.parametrize(
    "selector, labels, expected",
    [
        ("", {}, True),
        ("", {"a": "b"}, True),
        ("tier=gold", {"tier": "gold"}, True),
        ("tier==gold", {"tier": "gold"}, True),
        ("tier=gold", {"tier": "silver"}, False),
        ("tier=gold", {}, False),
        ("tier!=gold", {"tier": "silver"}, True),
        ("tier!=gold", {}, True),  # as in Kubernetes: an absent key matches !=
        ("tier!=gold", {"tier": "gold"}, False),
        ("tier in (gold, silver)", {"tier": "silver"}, True),
        ("tier in (gold,silver)", {"tier": "bronze"}, False),
        ("tier in (gold,silver)", {}, False),
        ("tier notin (gold,silver)", {"tier": "bronze"}, True),
        ("tier notin (gold,silver)", {}, True),
        ("tier notin (gold,silver)", {"tier": "gold"}, False),
        ("tier", {"tier": ""}, True),
        ("tier", {}, False),
        ("!tier", {}, True),
        ("!tier", {"tier": "gold"}, False),
        ("example.com/shard=a", {"example.com/shard": "a"}, True),
        ("a=b,c!=d,e in (x,y),!f", {"a": "b", "e": "y"}, True),
        ("a=b,c!=d,e in (x,y),!f", {"a": "b", "e": "y", "f": "1"}, False),
        ("a=b,c!=d,e in (x,y),!f", {"a": "b", "c": "d", "e": "y"}, False),
        (" a = b , e in ( x , y ) ", {"a": "b", "e": "x"}, True),
        ("a=", {"a": ""}, True),
        ("a=", {"a": "x"}, False),
    ],
)
def test_selector_matches_as_kubernetes_does(selector, labels, expected):
    assert parse_selector(selector).matches(labels) is expected


@pytest.mark.parametrize(
    "selector",
    [
        "a=b,",
        ",a=b",
        "a=b,,c=d",
        "a in (x,y",
        "a in x,y)",
        "a in ()",
        "a in ((x))",
        "a b",
        "a>1",
        "a=b=c",
        "a=b c",
        "-a=b",
        "a-=b",
        "a=-b",
        "a/b/c=d",
        "Exa_mple.com/a=b",
        "/a=b",
        "a=" + "x" * 64,
        "x" * 64,
        "a in (x,-y)",
        "!",
        "a=b)",
    ],
)
def test_an_invalid_selector_is_refused_with_the_term(selector):
    with pytest.raises(InvalidShardSetting, match="selector"):
        parse_selector(selector)


def test_the_parsed_selector_prints_in_its_canonical_form():
    assert str(parse_selector("a==b, c!=d, e in (y,x,y), !f, g, h notin (z)")) == "a=b,c!=d,e in (x,y),!f,g,h notin (z)"


def test_an_unnamed_instance_keeps_the_lease_and_finalizer_of_an_unsharded_install():
    shard = shard_from_settings("", "")
    assert shard == Shard()
    assert (shard.lease_name, shard.finalizer) == (LEASE_NAME, FINALIZER)
    assert LEASE_NAME == "etcd-operator-leader" and FINALIZER == "etcd.operator.dev/finalizer"
    assert shard.owns({"any": "label"}, None)


def test_each_named_shard_has_its_own_lease_and_finalizer_within_63_characters():
    a, b = shard_from_settings("a", "shard=a"), shard_from_settings("b", "shard=b")
    assert a.lease_name == "etcd-operator-leader-a" and b.lease_name == "etcd-operator-leader-b"
    assert a.finalizer == "etcd.operator.dev/finalizer-a" and b.finalizer == "etcd.operator.dev/finalizer-b"
    longest = shard_from_settings("x" * 40, "")
    assert len(longest.lease_name) <= 63 and len(longest.finalizer.split("/")[1]) <= 63


@pytest.mark.parametrize("name", ["A", "-a", "a-", "a_b", "a.b", "x" * 41])
def test_a_shard_name_that_cannot_name_a_lease_is_refused(name):
    with pytest.raises(InvalidShardSetting, match="SHARD_NAME"):
        shard_from_settings(name, "")


def test_a_selector_without_a_shard_name_is_refused():
    """Two unnamed instances would share one finalizer, and kopf strips its finalizer from
    every object it does not select: each would strip the other's."""
    with pytest.raises(InvalidShardSetting, match="SHARD_SELECTOR needs SHARD_NAME"):
        shard_from_settings("", "shard=a")


def test_a_shard_leaves_alone_an_object_another_instance_holds():
    a = shard_from_settings("a", "tier in (gold)")
    gold = {"tier": "gold"}
    assert a.owns(gold, None)
    assert a.owns(gold, ["etcd.operator.dev/finalizer-a"])
    assert a.owns(gold, ["kubernetes.io/pvc-protection", "example.com/finalizer"])  # not ours: no claim
    assert not a.owns(gold, ["etcd.operator.dev/finalizer-b"])  # shard b has not let it go yet
    assert not a.owns(gold, ["etcd.operator.dev/finalizer"])  # an unsharded instance holds it
    assert not a.owns(gold, ["etcd.operator.dev/finalizer-a", "etcd.operator.dev/finalizer-b"])
    assert a.foreign_claims(["etcd.operator.dev/finalizer-a", "etcd.operator.dev/finalizer-b"]) == [
        "etcd.operator.dev/finalizer-b"
    ]
    assert not a.owns({"tier": "silver"}, None)


def test_an_unsharded_instance_leaves_alone_an_object_a_shard_holds():
    assert not Shard().owns({}, ["etcd.operator.dev/finalizer-a"])
    assert Shard().owns({}, ["etcd.operator.dev/finalizer"])


def test_the_config_reads_the_shard_from_the_environment():
    config = OperatorConfig.from_env({**BASE_ENV, "SHARD_NAME": "a", "SHARD_SELECTOR": "tenant in (x,y)"})
    assert config.shard.name == "a"
    assert config.shard.selector.matches({"tenant": "y"}) and not config.shard.selector.matches({})
    assert OperatorConfig.from_env(BASE_ENV).shard == Shard()


def test_the_operator_refuses_to_start_on_an_invalid_selector(monkeypatch, capsys):
    from etcd_operator.__main__ import CONFIG_ERROR_EXIT_CODE, main

    monkeypatch.setattr("sys.argv", ["etcd_operator"])
    monkeypatch.setenv("SHARD_NAME", "a")
    monkeypatch.setenv("SHARD_SELECTOR", "tenant in (x")
    assert main() == CONFIG_ERROR_EXIT_CODE
    assert "selector 'tenant in (x': '(' without ')'" in capsys.readouterr().err


def test_the_handlers_filter_says_once_that_it_waits_for_another_instance(caplog):
    from types import SimpleNamespace

    from etcd_operator.handlers.sharding import in_shard

    memo = SimpleNamespace(config=SimpleNamespace(shard=shard_from_settings("a", "tier=gold")))
    held = {"uid": "u1", "namespace": "ns", "name": "c", "finalizers": ["etcd.operator.dev/finalizer-b"]}
    with caplog.at_level("INFO", logger="etcd_operator.handlers.sharding"):
        assert not in_shard(labels={"tier": "gold"}, meta=held, memo=memo)
        assert not in_shard(labels={"tier": "gold"}, meta=held, memo=memo)
    assert [r.getMessage() for r in caplog.records] == [
        "ns/c matches this shard's selector but is held by etcd.operator.dev/finalizer-b; "
        "waiting until that instance releases it"
    ]
    assert in_shard(labels={"tier": "gold"}, meta={**held, "finalizers": []}, memo=memo)
    assert not in_shard(labels={"tier": "silver"}, meta={**held, "finalizers": []}, memo=memo)


FA, FB = "etcd.operator.dev/finalizer-a", "etcd.operator.dev/finalizer-b"
ASKED_BY_B = {"etcd.operator.dev/shard-handover-to": "b"}


@pytest.mark.parametrize(
    "labels, finalizers, annotations, held",
    [
        ({"tier": "gold"}, [FA], {}, True),  # in the shard
        ({"tier": "gold"}, [], {}, True),  # in the shard, not claimed yet
        ({"tier": "silver"}, [FA], {}, True),  # left the shard: held until someone asks
        ({"tier": "silver"}, [FA], {"etcd.operator.dev/shard-handover-to": "a"}, True),  # asked for by itself
        ({"tier": "silver"}, [FA], ASKED_BY_B, False),  # shard b asked: let go
        ({"tier": "silver"}, [], {}, False),  # never ours
        ({"tier": "silver"}, [FA, FB], {}, False),  # another instance holds it too
        ({"tier": "gold"}, [FB], {}, False),
    ],
)
def test_a_shard_holds_a_cluster_that_left_it_until_another_shard_asks(labels, finalizers, annotations, held):
    assert shard_from_settings("a", "tier=gold").holds(labels, finalizers, annotations) is held


@pytest.mark.parametrize(
    "labels, finalizers, annotations, wants",
    [
        ({"tier": "silver"}, [FA], {}, True),
        ({"tier": "silver"}, [FA], {"etcd.operator.dev/shard-handover-to": "c"}, True),
        ({"tier": "silver"}, [FA], ASKED_BY_B, False),  # asked already: one write
        ({"tier": "silver"}, [], {}, False),  # nobody holds it: claim, do not ask
        ({"tier": "silver"}, [FB], {}, False),  # its own
        ({"tier": "gold"}, [FA], {}, False),  # not of its selector
    ],
)
def test_a_shard_asks_for_a_cluster_of_its_selector_that_another_instance_holds(labels, finalizers, annotations, wants):
    assert shard_from_settings("b", "tier=silver").wants_handover(labels, finalizers, annotations) is wants


def test_an_unnamed_instance_never_asks_for_a_cluster():
    assert not Shard().wants_handover({}, [FA], {})


def test_objects_held_elsewhere_are_remembered_up_to_a_bound(monkeypatch):
    import collections
    from types import SimpleNamespace

    from etcd_operator.handlers import sharding

    monkeypatch.setattr(sharding, "WAITING_REMEMBERED", 3)
    monkeypatch.setattr(sharding, "_waiting", collections.OrderedDict())
    memo = SimpleNamespace(config=SimpleNamespace(shard=shard_from_settings("a", "")))
    for i in range(10):  # e.g. deleted while shard b held them: never seen unclaimed
        assert not sharding.in_shard({}, {"uid": f"u{i}", "finalizers": ["etcd.operator.dev/finalizer-b"]}, memo)
    assert list(sharding._waiting) == ["u7", "u8", "u9"]
    assert sharding.in_shard({}, {"uid": "u8", "finalizers": []}, memo)
    assert list(sharding._waiting) == ["u7", "u9"]
