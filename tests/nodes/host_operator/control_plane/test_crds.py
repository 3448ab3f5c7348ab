"""The hand-written CRDs on the real API server: each kind can be created, read and
listed, and clearly invalid objects are refused with a readable message."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from etcd_operator.core import denied_flags
from etcd_operator.core import schema_limits as limits
from etcd_operator.core.backup import schedule
from tests.support import claims
from tests.support.kubectl import kubectl, kubectl_json

pytestmark = [pytest.mark.needs_cluster, pytest.mark.lane4]

CRDS = pathlib.Path(__file__).resolve().parents[4] / "crds"
GROUP = "etcd.operator.dev/v1alpha1"

VALID = {
    "EtcdCluster": {"size": 3, "version": "3.6.16"},
    "EtcdBackup": {"clusterRef": {"name": "demo"}, "storage": {"s3": {"bucket": "etcd-backups"}}},
    "EtcdRestore": {
        "source": {"backupRef": {"name": "demo"}},
        "target": {"newCluster": {"name": "restored"}},
    },
}


@pytest.fixture(scope="module")
def crds(kubectl_on_real_nodes):
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(CRDS))
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")


def manifest(kind: str, name: str, namespace: str, spec: dict) -> str:
    """Claimed for the host's shard: no operator runs for these, the chart's release leaves them."""
    return json.dumps(
        claims.claimed(
            {"apiVersion": GROUP, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        )
    )


def test_every_crd_is_structural_with_status_printer_columns_and_short_names():
    for path in sorted(p for p in CRDS.glob("*.yaml") if p.name != "kustomization.yaml"):
        crd = yaml.safe_load(path.read_text())
        version = crd["spec"]["versions"][0]
        assert version["subresources"]["status"] == {}, path.name
        assert version["additionalPrinterColumns"], path.name
        assert crd["spec"]["names"]["shortNames"], path.name
        assert version["schema"]["openAPIV3Schema"]["type"] == "object", path.name


@pytest.mark.parametrize("kind", sorted(VALID))
def test_create_get_and_list(crds, namespace, kind):
    kubectl("apply", "-f", "-", input=manifest(kind, "demo", namespace, VALID[kind]))
    got = kubectl_json("get", kind.lower(), "demo", "-n", namespace)
    assert got["kind"] == kind and got["metadata"]["name"] == "demo"
    listed = kubectl_json("get", kind.lower(), "-n", namespace)
    assert [item["metadata"]["name"] for item in listed["items"]] == ["demo"]
    table = kubectl("get", kind.lower(), "-n", namespace).stdout
    assert "AGE" in table.splitlines()[0]


INVALID = [
    ("EtcdCluster", {"size": -1}, "should be greater than or equal to 1"),
    ("EtcdCluster", {"size": "three"}, "must be of type integer"),
    ("EtcdCluster", {"size": 10}, "should be less than or equal to 9"),
    ("EtcdCluster", {"version": "3.4.27"}, "supported etcd release: 3.5.x or 3.6.x"),
    ("EtcdCluster", {"storage": {"emptyDir": {}, "size": "1Gi"}}, "use either emptyDir or a PVC"),
    ("EtcdBackup", {"clusterRef": {"name": "x"}, "storage": {"s3": {"bucket": "b"}}}, "at least 3 chars"),
    (
        "EtcdBackup",
        {"clusterRef": {"name": "x"}, "schedule": "* * *", "storage": {"s3": {"bucket": "bkt"}}},
        "cron expression with 5 fields",
    ),
    ("EtcdRestore", {"source": {}, "target": {"newCluster": {"name": "n"}}}, "exactly one of backupRef or s3"),
    (
        "EtcdRestore",
        {"source": {"backupRef": {"name": "b"}}, "target": {"inPlace": {"clusterName": "c", "confirm": False}}},
        "confirm must be true",
    ),
]


@pytest.mark.parametrize("kind,spec,message", INVALID, ids=[m for _, _, m in INVALID])
def test_invalid_objects_are_refused_with_a_readable_message(crds, namespace, kind, spec, message):
    refused = kubectl("apply", "-f", "-", input=manifest(kind, "bad", namespace, spec), check=False)
    assert refused.returncode != 0
    assert message in refused.stderr
    assert kubectl("get", kind.lower(), "bad", "-n", namespace, check=False).returncode != 0


def test_restore_spec_cannot_change(crds, namespace):
    kubectl("apply", "-f", "-", input=manifest("EtcdRestore", "once", namespace, VALID["EtcdRestore"]))
    changed = {**VALID["EtcdRestore"], "target": {"newCluster": {"name": "other"}}}
    refused = kubectl("apply", "-f", "-", input=manifest("EtcdRestore", "once", namespace, changed), check=False)
    assert refused.returncode != 0 and "runs once" in refused.stderr


def dry_run(kind: str, name: str, namespace: str, spec: dict):
    """A server-side dry-run create: full validation, nothing stored."""
    return kubectl("apply", "--dry-run=server", "-f", "-", input=manifest(kind, name, namespace, spec), check=False)


MAXIMA = {
    "EtcdCluster": limits.CLUSTER_NAME_MAX,
    "EtcdBackup": limits.BACKUP_NAME_MAX,
    "EtcdRestore": limits.RESTORE_NAME_MAX,
}


@pytest.mark.parametrize("kind", sorted(MAXIMA))
def test_names_up_to_the_maximum_are_accepted_and_longer_ones_refused(crds, namespace, kind):
    longest = "a" * MAXIMA[kind]
    accepted = dry_run(kind, longest, namespace, VALID[kind])
    assert accepted.returncode == 0, accepted.stderr
    refused = dry_run(kind, longest + "a", namespace, VALID[kind])
    assert refused.returncode != 0
    assert f"an {kind} name has at most {MAXIMA[kind]} characters" in refused.stderr, refused.stderr


@pytest.mark.parametrize("name", ["1cluster", "my.cluster"])
def test_cluster_names_must_be_usable_as_service_names(crds, namespace, name):
    refused = dry_run("EtcdCluster", name, namespace, VALID["EtcdCluster"])
    assert refused.returncode != 0
    assert "an EtcdCluster name must start with a letter" in refused.stderr, refused.stderr


def restore_into(name: str) -> dict:
    return {**VALID["EtcdRestore"], "target": {"newCluster": {"name": name}}}


def backup_with_schedule(schedule: str) -> dict:
    return {**VALID["EtcdBackup"], "schedule": schedule}


DEFRAG_MESSAGE = "spec.maintenance.defragmentation.{} must be above 0"
EXTRA_ARGS = {  # one key per denied group, written in the ways people write flags
    "--initial-cluster-state": "existing",
    "listen-client-urls": "http://0.0.0.0:2379",
    "--peer-cert-file": "/tls/peer.crt",
    "-unsafe-no-fsync": "true",
    "quota-backend-bytes": "1",
    "enable-v2": "true",
    "version": "true",
}
assert len(EXTRA_ARGS) == len(denied_flags.GROUPS)

ADOPTION_TRANSPORT = "spec.adoption needs a transport the running members speak"
PLAIN_ADOPTION = {"tls": {"enabled": False}, "adoption": {"endpoints": ["http://10.0.0.5:2379"], "clusterID": "c1"}}

MORE_INVALID = [
    ("EtcdRestore", restore_into("c" * (limits.CLUSTER_NAME_MAX + 1)), "Too long: may not be more than 53"),
    ("EtcdRestore", restore_into("9lives"), "spec.target.newCluster.name must start with a letter"),
    (
        "EtcdCluster",
        {"maintenance": {"defragmentation": {"minFragmentedRatio": 0}}},
        DEFRAG_MESSAGE.format("minFragmentedRatio"),
    ),
    ("EtcdCluster", {"maintenance": {"defragmentation": {"minFragmentedRatio": 1.5}}}, "less than or equal to 1"),
    (
        "EtcdCluster",
        {"maintenance": {"defragmentation": {"minFragmentedBytes": 0}}},
        DEFRAG_MESSAGE.format("minFragmentedBytes"),
    ),
    ("EtcdCluster", {"etcd": {"extraArgs": {"log-level=debug": ""}}}, "keys must be etcd flag names"),
    *[
        ("EtcdCluster", {"etcd": {"extraArgs": {flag: value}}}, group.message)
        for (flag, value), group in zip(EXTRA_ARGS.items(), denied_flags.GROUPS, strict=True)
    ],
    (
        "EtcdCluster",
        {"recovery": {"quorumLossTimeout": f"{limits.QUORUM_LOSS_TIMEOUT_MIN_SECONDS - 1}s"}},
        f"quorumLossTimeout must be at least {limits.QUORUM_LOSS_TIMEOUT_MIN_SECONDS}s",
    ),
    (
        "EtcdCluster",
        {"recovery": {"memberUnhealthyTimeout": "0.4m"}},
        f"memberUnhealthyTimeout must be at least {limits.MEMBER_UNHEALTHY_TIMEOUT_MIN_SECONDS}s",
    ),
    ("EtcdBackup", backup_with_schedule("0 0 * * * * *"), "cron expression with 5 fields"),
    ("EtcdBackup", backup_with_schedule("60 * * * *"), "the minute field (field 1) takes values 0-59"),
    ("EtcdBackup", backup_with_schedule("0 7,24 * * *"), "the hour field (field 2) takes values 0-23"),
    ("EtcdBackup", backup_with_schedule("0 0 0 * *"), "the day-of-month field (field 3) takes values 1-31"),
    ("EtcdBackup", backup_with_schedule("0 0 1 1-13 *"), "the month field (field 4) takes values 1-12"),
    ("EtcdBackup", backup_with_schedule("0 0 * *  8"), "the weekday field (field 5) takes values 0-7"),
    ("EtcdBackup", backup_with_schedule("0 0 * * * 75"), "the seconds field (field 6) takes values 0-59"),
    ("EtcdCluster", {"pod": {"imagePullSecrets": [{}]}}, "spec.pod.imagePullSecrets[0].name: Required value"),
    ("EtcdCluster", {"pod": {"imagePullSecrets": [{"name": ""}]}}, "should be at least 1 chars long"),
    (
        "EtcdCluster",
        {"storage": {"emptyDir": {}}, "hibernation": {"enabled": True}},
        "spec.hibernation cannot be enabled on emptyDir storage",
    ),
    ("EtcdCluster", {"hibernation": {"enabled": True, "snapshotTimeout": "soon"}}, "spec.hibernation.snapshotTimeout"),
    ("EtcdCluster", {"adoption": {"endpoints": ["http://10.0.0.5:2379"], "clusterID": "c1"}}, ADOPTION_TRANSPORT),
    (
        "EtcdCluster",
        {
            "tls": {"enabled": False},
            "adoption": {"endpoints": ["http://10.0.0.5:2379", "https://10.0.0.6:2379"], "clusterID": "c1"},
        },
        ADOPTION_TRANSPORT,
    ),
    ("EtcdCluster", {"adoption": {"endpoints": ["https://10.0.0.5:2379"], "clusterID": "c1"}}, ADOPTION_TRANSPORT),
    (
        "EtcdCluster",
        {"tls": {"enabled": False}, "adoption": {"endpoints": ["10.0.0.5:2379"], "clusterID": "c1"}},
        "should match",
    ),
    (
        "EtcdCluster",
        {**PLAIN_ADOPTION, "adoption": {"endpoints": ["http://10.0.0.5:2379"]}},
        "spec.adoption.clusterID: Required value",
    ),
    (
        "EtcdCluster",
        {**PLAIN_ADOPTION, "adoption": {"endpoints": ["http://10.0.0.5:2379"], "clusterID": "0xc1"}},
        "spec.adoption.clusterID in body should match",
    ),
    ("EtcdCluster", {"tls": {"enabled": False}, "auth": {"enabled": True}}, "spec.auth.enabled needs spec.tls.enabled"),
    ("EtcdCluster", {"auth": {"users": [{"name": "root"}]}}, "the operator's own identity in etcd"),
    ("EtcdCluster", {"auth": {"users": [{"name": "etcd-operator"}]}}, "the operator's own identity in etcd"),
    ("EtcdCluster", {"auth": {"roles": [{"name": "root"}]}}, "root is etcd's own administrator role"),
    (
        "EtcdCluster",
        {"auth": {"users": [{"name": "u", "roles": ["nowhere"]}]}},
        "only name roles declared in spec.auth.roles",
    ),
]


@pytest.mark.parametrize("kind,spec,message", MORE_INVALID, ids=[m[:60] for _, _, m in MORE_INVALID])
def test_specs_that_defeat_the_operator_are_refused_with_a_readable_message(crds, namespace, kind, spec, message):
    refused = dry_run(kind, "bad", namespace, spec)
    assert refused.returncode != 0
    assert message in refused.stderr, refused.stderr


AT_THE_LIMITS = [
    {"maintenance": {"defragmentation": {"minFragmentedRatio": 1, "minFragmentedBytes": 1}}},
    {"maintenance": {"defragmentation": {"minFragmentedRatio": 0.01}}},
    {
        "recovery": {
            "quorumLossTimeout": f"{limits.QUORUM_LOSS_TIMEOUT_MIN_SECONDS}s",
            "memberUnhealthyTimeout": f"{limits.MEMBER_UNHEALTHY_TIMEOUT_MIN_SECONDS}s",
        }
    },
    {"recovery": {"quorumLossTimeout": "1h0m0.5s", "memberUnhealthyTimeout": "0.5m"}},
    {
        "etcd": {
            "extraArgs": {
                "--log-level": "debug",
                "max-request-bytes": "2097152",
                "-experimental-initial-corrupt-check": "true",
                "feature-gates": "InitialCorruptCheck=true",
            }
        }
    },
    {"pod": {"imagePullSecrets": [{"name": "registry-a"}, {"name": "registry-b"}]}},
    {"storage": {"emptyDir": {}}, "hibernation": {"enabled": False}},
    {"hibernation": {"enabled": True, "snapshotTimeout": "1h30m"}},
    PLAIN_ADOPTION,
    {
        "tls": {"issuer": "Secrets", "memberSecretName": "m", "operatorSecretName": "o"},
        "adoption": {
            "endpoints": ["https://10.0.0.5:2379"],
            "clusterID": "CDF818194E3A8C32",
            "removeForeignMembers": True,
        },
    },
]


@pytest.mark.parametrize("spec", AT_THE_LIMITS, ids=lambda s: json.dumps(s)[:60])
def test_cluster_specs_at_the_limits_are_accepted(crds, namespace, spec):
    accepted = dry_run("EtcdCluster", "ok", namespace, spec)
    assert accepted.returncode == 0, accepted.stderr


# Schedules croniter accepts (the operator's parser): the schema must not refuse any of them.
CRONITER_VALID = [
    "*/5 * * * *",
    "0 0-23/2 * * *",
    "59 23 31 12 7",
    "0 0 1-31/2 * *",
    "0 0 * JAN-MAR MON-FRI",
    "0 0 L * *",
    "0 0 15W * *",
    "0 0 ? * 5#2",
    "0 0 * * sun,7",
    "00 09 01 01 00",
    "5-1 * * * *",
    "*/5,7 * * * *",
    "5/10 * * * *",
    "0 * * * * */15",
    "0 * * * * 59",
    "R 3 * * *",
    "0  0 * * *",
    "@hourly",
    "0 0 1-0 * *",
    "0 0 0-0 1 *",  # croniter takes 0 as a range end in day and month
]


def test_schedules_croniter_accepts_pass_the_schema(crds, namespace):
    assert all(schedule.parses(s) for s in CRONITER_VALID)
    out_of_range = [spec["schedule"] for _, spec, message in MORE_INVALID if "takes values" in message]
    assert out_of_range and not any(schedule.parses(s) for s in out_of_range)
    docs = [
        json.loads(manifest("EtcdBackup", f"ok-{i}", namespace, backup_with_schedule(s)))
        for i, s in enumerate(CRONITER_VALID)
    ]
    result = kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_objects_stored_before_the_name_rules_can_still_be_updated_and_deleted(crds, namespace):
    """Name rules run on create only: a too-long EtcdCluster stored under an older CRD keeps
    taking status writes and can lose its finalizer, so it never hangs in deletion."""
    name = "a" * (limits.CLUSTER_NAME_MAX + 7)
    older = yaml.safe_load((CRDS / "etcdclusters.yaml").read_text())
    schema = older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["x-kubernetes-validations"] = [
        r for r in schema["x-kubernetes-validations"] if "metadata.name" not in r["rule"]
    ]
    try:
        kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(older))
        created = json.loads(manifest("EtcdCluster", name, namespace, VALID["EtcdCluster"]))
        created["metadata"]["finalizers"] = [*created["metadata"]["finalizers"], "etcd.operator.dev/test"]
        kubectl("apply", "-f", "-", input=json.dumps(created))
    finally:
        kubectl("apply", "--server-side", "--force-conflicts", "-k", str(CRDS))
    no_finalizers = json.dumps({"metadata": {"finalizers": None}})
    try:
        # The rule is in force for new objects ...
        assert (
            f"at most {limits.CLUSTER_NAME_MAX} characters"
            in dry_run("EtcdCluster", name + "b", namespace, VALID["EtcdCluster"]).stderr
        )
        # ... and the stored one still takes a status write, a delete and the finalizer's removal.
        kubectl(
            "patch",
            "etcdcluster",
            name,
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"phase": "Running"}}),
        )
        kubectl("delete", "etcdcluster", name, "-n", namespace, "--wait=false")
        kubectl("patch", "etcdcluster", name, "-n", namespace, "--type=merge", "-p", no_finalizers)
        assert kubectl("get", "etcdcluster", name, "-n", namespace, check=False).returncode != 0
    finally:  # never leave a finalizer behind to block the namespace's deletion
        kubectl("patch", "etcdcluster", name, "-n", namespace, "--type=merge", "-p", no_finalizers, check=False)


def backup_with_parts(part_size: int, concurrency: int) -> dict:
    s3 = {"bucket": "etcd-backups", "partSizeBytes": part_size, "uploadConcurrency": concurrency}
    return {**VALID["EtcdBackup"], "storage": {"s3": s3}}


def test_part_buffers_of_one_backup_are_capped(crds, namespace):
    """partSizeBytes × (uploadConcurrency + 1) is what one backup holds in memory."""
    refused = dry_run("EtcdBackup", "bad", namespace, backup_with_parts(32 << 20, 2))
    assert refused.returncode != 0
    assert "partSizeBytes × (uploadConcurrency + 1)" in refused.stderr and "64 MiB" in refused.stderr, refused.stderr
    assert dry_run("EtcdBackup", "ok", namespace, backup_with_parts(32 << 20, 1)).returncode == 0
    assert dry_run("EtcdBackup", "ok", namespace, backup_with_parts(8 << 20, 7)).returncode == 0
    assert dry_run("EtcdBackup", "ok", namespace, {**VALID["EtcdBackup"]}).returncode == 0  # the defaults


def test_adoption_is_set_at_creation_only_with_fixed_endpoints(crds, namespace):
    plain = {"tls": {"enabled": False}}
    kubectl("apply", "-f", "-", input=manifest("EtcdCluster", "plain", namespace, plain))
    added = kubectl("apply", "-f", "-", input=manifest("EtcdCluster", "plain", namespace, PLAIN_ADOPTION), check=False)
    assert added.returncode != 0 and "spec.adoption can only be set when the EtcdCluster is created" in added.stderr

    kubectl("apply", "-f", "-", input=manifest("EtcdCluster", "adopter", namespace, PLAIN_ADOPTION))
    moved = {**PLAIN_ADOPTION, "adoption": {**PLAIN_ADOPTION["adoption"], "endpoints": ["http://10.0.0.9:2379"]}}
    refused = kubectl("apply", "-f", "-", input=manifest("EtcdCluster", "adopter", namespace, moved), check=False)
    assert refused.returncode != 0 and "spec.adoption.endpoints cannot change" in refused.stderr
    repinned = {**PLAIN_ADOPTION, "adoption": {**PLAIN_ADOPTION["adoption"], "clusterID": "c2"}}
    refused = kubectl("apply", "-f", "-", input=manifest("EtcdCluster", "adopter", namespace, repinned), check=False)
    assert refused.returncode != 0 and "spec.adoption.clusterID cannot change" in refused.stderr
    flipped = {**PLAIN_ADOPTION, "adoption": {**PLAIN_ADOPTION["adoption"], "removeForeignMembers": True}}
    kubectl("apply", "-f", "-", input=manifest("EtcdCluster", "adopter", namespace, flipped))
