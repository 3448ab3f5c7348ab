"""The CRDs carry the limits of etcd_operator.core.schema_limits and the flag groups of
etcd_operator.core.denied_flags, and those limits keep every derived name valid."""

from __future__ import annotations

import functools
import pathlib
import re

import pytest
import yaml
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from etcd_operator.core import denied_flags
from etcd_operator.core import schema_limits as limits
from etcd_operator.core.backup import manifest
from etcd_operator.core.cluster import builders, naming
from etcd_operator.core.cluster.spec import MANAGED_FLAGS, ClusterSpec, spec_problems
from etcd_operator.core.restore import builders as restore_builders
from etcd_operator.core.restore.builders import LABEL_PRESERVED_BY

CRDS = pathlib.Path(__file__).resolve().parents[2] / "crds"


def schema(kind: str) -> dict:
    crd = yaml.safe_load((CRDS / f"{kind}.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def at(node: dict, *path: str) -> dict:
    for name in path:
        node = node["properties"][name]
    return node


def name_maximum(kind: str) -> int:
    # Checked on create only (names cannot change): objects stored earlier stay updatable.
    sizes = [
        re.fullmatch(r"oldSelf\.hasValue\(\) \|\| self\.metadata\.name\.size\(\) <= ([0-9]+)", r["rule"])
        for r in schema(kind)["x-kubernetes-validations"]
        if r.get("optionalOldSelf")
    ]
    found = [int(m.group(1)) for m in sizes if m]
    assert len(found) == 1, kind
    return found[0]


def test_the_crds_carry_the_name_maxima():
    assert name_maximum("etcdclusters") == limits.CLUSTER_NAME_MAX
    assert name_maximum("etcdrestores") == limits.RESTORE_NAME_MAX
    assert name_maximum("etcdbackups") == limits.BACKUP_NAME_MAX
    cluster_rules = [r["rule"] for r in schema("etcdclusters")["x-kubernetes-validations"] if r.get("optionalOldSelf")]
    assert f"oldSelf.hasValue() || self.metadata.name.matches('{limits.CLUSTER_NAME_PATTERN}')" in cluster_rules


def test_references_to_clusters_and_backups_use_the_same_maxima():
    restore = at(schema("etcdrestores"), "spec")
    new_cluster = at(restore, "target", "newCluster", "name")
    assert new_cluster["maxLength"] == limits.CLUSTER_NAME_MAX
    assert new_cluster["x-kubernetes-validations"][0]["rule"] == f"self.matches('{limits.CLUSTER_NAME_PATTERN}')"
    assert at(restore, "target", "inPlace", "clusterName")["maxLength"] == limits.CLUSTER_NAME_MAX
    assert at(restore, "source", "backupRef", "name")["maxLength"] == limits.BACKUP_NAME_MAX
    assert at(schema("etcdbackups"), "spec", "clusterRef", "name")["maxLength"] == limits.CLUSTER_NAME_MAX


def cluster_names(cluster: str, namespace: str = "n" * 63) -> dict[str, str]:
    """Every name and label value the operator derives from an EtcdCluster name."""
    member = naming.member_name(cluster, 10**limits.MEMBER_ORDINAL_DIGITS - 1)
    spec = ClusterSpec.from_dict({})
    pod = builders.member_pod(spec, cluster, namespace, member, None, "", builders.STATE_NEW, "token")
    pvc = builders.member_pvc(spec, cluster, namespace, member, None)
    names = {"pod hostname": pod["spec"]["hostname"], "pod subdomain": pod["spec"]["subdomain"]}
    for made in (
        pod,
        pvc,
        builders.peer_service(cluster, namespace),
        builders.client_service(cluster, namespace),
        builders.disruption_budget(spec, cluster, namespace),
    ):
        names[made["kind"] + " " + made["metadata"]["name"]] = made["metadata"]["name"]
        names.update({f"{made['kind']} label {k}": v for k, v in made["metadata"]["labels"].items()})
    return names


def test_a_maximal_cluster_name_keeps_every_derived_name_within_63():
    names = cluster_names("c" * limits.CLUSTER_NAME_MAX)
    too_long = {what: len(name) for what, name in names.items() if len(name) > limits.DNS_LABEL_MAX}
    assert not too_long
    # Each DNS-side name the host of a peer URL is made of is a valid label too.
    host = naming.member_host("c" * limits.CLUSTER_NAME_MAX, "n" * 63, names["pod hostname"])
    assert all(len(part) <= limits.DNS_LABEL_MAX for part in host.split("."))


def test_one_character_more_overflows_a_derived_name():
    names = cluster_names("c" * (limits.CLUSTER_NAME_MAX + 1))
    assert max(len(name) for name in names.values()) > limits.DNS_LABEL_MAX


def restore_names(restore: str) -> dict[str, str]:
    pod = restore_builders.restore_pod(
        restore,
        "ns",
        "c",
        "c-999",
        ("c-999",),
        "token",
        "etcd:v3.6.16",
        "operator:1",
        {"bucket": "b"},
        "key",
        "0" * 64,
        None,
    )
    return {
        "pod": pod["metadata"]["name"],
        **{f"label {k}": v for k, v in pod["metadata"]["labels"].items()},
        f"label {LABEL_PRESERVED_BY}": restore,
    }


def test_a_maximal_restore_name_keeps_its_pod_name_and_labels_within_63():
    assert max(len(n) for n in restore_names("r" * limits.RESTORE_NAME_MAX).values()) <= limits.DNS_LABEL_MAX
    assert max(len(n) for n in restore_names("r" * (limits.RESTORE_NAME_MAX + 1)).values()) > limits.DNS_LABEL_MAX


def test_a_maximal_backup_name_is_a_label_value_and_its_keys_fit_in_s3():
    backup = "b" * limits.BACKUP_NAME_MAX
    assert len(backup) <= limits.LABEL_VALUE_MAX
    prefix_max = at(schema("etcdbackups"), "spec", "storage", "s3", "prefix")["maxLength"]
    key = manifest.snapshot_key("p" * prefix_max, "n" * 63, backup, "20261121T143539Z")
    assert len(manifest.manifest_key(key).encode()) <= 1024  # S3's key limit


def rules(node: dict) -> list[tuple[str, str]]:
    return [(r["rule"], r["message"]) for r in node.get("x-kubernetes-validations", [])]


def test_the_crd_refuses_exactly_the_denied_flag_groups():
    extra_args = at(schema("etcdclusters"), "spec", "etcd", "extraArgs")
    expected = [(f"self.all(k, k.matches('{denied_flags.FLAG_KEY_PATTERN}'))", denied_flags.FLAG_KEY_MESSAGE)]
    expected += [(g.cel_rule, g.message) for g in denied_flags.GROUPS]
    assert rules(extra_args) == expected


def test_the_crd_carries_the_recovery_floors():
    recovery = at(schema("etcdclusters"), "spec", "recovery")
    quorum, member = at(recovery, "quorumLossTimeout"), at(recovery, "memberUnhealthyTimeout")
    # Durations the pattern refuses get the pattern's message only, not a CEL conversion error.
    guard = "!self.matches('^([0-9]+([.][0-9]+)?(s|m|h))+$') || "
    assert quorum["pattern"] == member["pattern"] == "^([0-9]+(\\.[0-9]+)?(s|m|h))+$"
    assert rules(quorum)[0][0] == f"{guard}duration(self) >= duration('{limits.QUORUM_LOSS_TIMEOUT_MIN_SECONDS}s')"
    assert rules(member)[0][0] == f"{guard}duration(self) >= duration('{limits.MEMBER_UNHEALTHY_TIMEOUT_MIN_SECONDS}s')"
    # The defaults themselves are above the floors.
    spec = ClusterSpec.from_dict(
        {"recovery": {"quorumLossTimeout": quorum["default"], "memberUnhealthyTimeout": member["default"]}}
    )
    assert spec.recovery.quorum_loss_timeout >= limits.QUORUM_LOSS_TIMEOUT_MIN_SECONDS
    assert spec.recovery.member_unhealthy_timeout >= limits.MEMBER_UNHEALTHY_TIMEOUT_MIN_SECONDS


# etcd 3.5 and 3.6 flags (server/etcdmain/help.go), decided one by one.
DENIED = [
    "name",
    "data-dir",
    "wal-dir",
    "config-file",
    "force-new-cluster",
    "initial-cluster",
    "initial-cluster-state",
    "initial-cluster-token",
    "discovery",
    "discovery-srv",
    "discovery-endpoints",
    "discovery-token",
    "listen-client-urls",
    "listen-client-http-urls",
    "listen-peer-urls",
    "listen-metrics-urls",
    "advertise-client-urls",
    "initial-advertise-peer-urls",
    "auto-tls",
    "peer-auto-tls",
    "cert-file",
    "key-file",
    "trusted-ca-file",
    "client-cert-auth",
    "client-crl-file",
    "client-cert-file",
    "client-key-file",
    "client-cert-allowed-hostname",
    "peer-cert-file",
    "peer-key-file",
    "peer-trusted-ca-file",
    "peer-client-cert-auth",
    "peer-client-cert-file",
    "peer-client-key-file",
    "peer-crl-file",
    "peer-cert-allowed-cn",
    "peer-cert-allowed-hostname",
    "peer-skip-client-san-verification",
    "experimental-peer-skip-client-san-verification",
    "self-signed-cert-validity",
    "cipher-suites",
    "tls-min-version",
    "tls-max-version",
    "unsafe-no-fsync",
    "strict-reconfig-check",
    "max-learners",
    "quota-backend-bytes",
    "auto-compaction-mode",
    "auto-compaction-retention",
    "heartbeat-interval",
    "election-timeout",
    "snapshot-count",
    "enable-v2",
    "experimental-enable-v2v3",
    "proxy",
    "proxy-dial-timeout",
    "version",
    "help",
    "h",
    "--name",
    "-data-dir",
    "--unsafe-no-fsync",  # with dashes
    "Name",
    "log-level=debug",
    "--",
    "",  # not flag names at all
]
ALLOWED = [
    "log-level",
    "--log-level",
    "logger",
    "log-outputs",
    "max-request-bytes",
    "max-txn-ops",
    "max-snapshots",
    "max-wals",
    "grpc-keepalive-interval",
    "metrics",
    "enable-pprof",
    "auth-token",
    "pre-vote",
    "experimental-initial-corrupt-check",
    "feature-gates",
    "experimental-compact-hash-check-enabled",
    "backend-batch-interval",
    "experimental-watch-progress-notify-interval",
    "v2-deprecation",
    "cors",
]


@pytest.mark.parametrize("flag", DENIED)
def test_denied_flags_are_refused_and_dropped_at_runtime(flag):
    assert flag in MANAGED_FLAGS
    spec = ClusterSpec.from_dict({"etcd": {"extraArgs": {flag: "x", "log-level": "debug"}}})
    if flag.lstrip("-") in MANAGED_FLAGS:
        assert [p.reason for p in spec_problems(spec)] == ["ManagedFlag"]
        assert builders.allowed_extra_args(spec) == [("log-level", "debug")]


@pytest.mark.parametrize("flag", ALLOWED)
def test_other_flags_pass(flag):
    assert flag not in MANAGED_FLAGS
    spec = ClusterSpec.from_dict({"etcd": {"extraArgs": {flag: "x"}}})
    assert spec_problems(spec) == []
    assert builders.allowed_extra_args(spec) == [(flag.lstrip("-"), "x")]


def test_the_runtime_message_names_the_key_and_why():
    spec = ClusterSpec.from_dict({"etcd": {"extraArgs": {"--unsafe-no-fsync": "true"}}})
    message = spec_problems(spec)[0].message
    assert "--unsafe-no-fsync" in message and "safety checks" in message


@functools.cache
def schedule_range_rules() -> list[tuple[re.Pattern, str]]:
    found = []
    for rule in at(schema("etcdbackups"), "spec", "schedule")["x-kubernetes-validations"]:
        match = re.fullmatch(r"!self\.matches\('(.*)'\)", rule["rule"])
        if match:
            found.append((re.compile(match.group(1)), rule["message"]))
    return found


_number = st.integers(0, 99).map(str) | st.integers(0, 9).map(lambda n: f"0{n}")
_value = _number | st.sampled_from(["*", "?", "L", "R", "JAN", "mon", "sun"])
_item = st.builds(
    lambda a, b, step: a + (f"-{b}" if b else "") + (f"/{step}" if step else ""),
    _value,
    st.none() | _number,
    st.none() | st.integers(1, 70).map(str),
)
_field = st.lists(_item, min_size=1, max_size=3).map(",".join)


def test_there_is_one_range_rule_per_cron_field():
    assert [m.split(" field ")[0].removeprefix("spec.schedule: the ") for _, m in schedule_range_rules()] == [
        "minute",
        "hour",
        "day-of-month",
        "month",
        "weekday",
        "seconds",
    ]


@settings(max_examples=400, deadline=None)
@given(st.lists(_field, min_size=5, max_size=6))
def test_the_schedule_range_rules_never_refuse_what_croniter_accepts(fields):
    expression = " ".join(fields)
    refused_by = [message for pattern, message in schedule_range_rules() if pattern.search(expression)]
    if refused_by:
        assert not croniter.is_valid(expression), (expression, refused_by)


SCHEMA_KEYWORDS = {
    "type",
    "format",
    "description",
    "properties",
    "items",
    "required",
    "enum",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "pattern",
    "nullable",
    "additionalProperties",
    "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "uniqueItems",
    "example",
    "title",
}


def _unknown_keywords(node: dict, path: str):
    for key in node:
        if key not in SCHEMA_KEYWORDS:
            yield f"{path}: {key!r}"
    for name, child in (node.get("properties") or {}).items():
        yield from _unknown_keywords(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _unknown_keywords(node[key], f"{path}[{key}]")
    for key in ("anyOf", "oneOf", "allOf"):
        for i, child in enumerate(node.get(key) or []):
            yield from _unknown_keywords(child, f"{path}.{key}[{i}]")


@pytest.mark.parametrize("kind", ["etcdclusters", "etcdbackups", "etcdrestores"])
def test_every_schema_key_is_a_keyword(kind):
    """An unquoted comma in a YAML flow mapping's description makes a key of its tail, which
    the API server then refuses when the CRD is applied."""
    assert not list(_unknown_keywords(schema(kind), kind))
