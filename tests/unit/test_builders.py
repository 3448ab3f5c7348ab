"""Pure manifest builders: member pods, PVCs, Services, PDB, restore pods."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.core.cluster import builders, naming
from etcd_operator.core.cluster.spec import ClusterSpec, spec_problems, version_change_problem
from etcd_operator.core.restore import builders as restore_builders


def spec(**fields) -> ClusterSpec:
    return ClusterSpec.from_dict(fields)


def pod(s: ClusterSpec, member_id: int | None = 0x1234, state: str = "existing") -> dict:
    return builders.member_pod(s, "c", "ns", "c-1", member_id, "c-1=http://x:2380", state, "token")


def container(manifest: dict) -> dict:
    return manifest["spec"]["containers"][0]


def test_member_pod_identity_urls_and_annotations():
    manifest = pod(spec(size=3))
    args = container(manifest)["args"]
    assert "--name=c-1" in args
    assert f"--initial-advertise-peer-urls={naming.peer_url('c', 'ns', 'c-1')}" in args
    assert "--listen-client-urls=http://$(POD_IP):2379,http://127.0.0.1:2379" in args
    assert "--initial-cluster=$(INITIAL_CLUSTER)" in args and "--initial-cluster-state=$(INITIAL_CLUSTER_STATE)" in args
    annotations = manifest["metadata"]["annotations"]
    assert annotations[naming.ANNOTATION_MEMBER_ID] == "1234"
    assert annotations[naming.ANNOTATION_INITIAL_STATE] == "existing"
    env = {e["name"]: e for e in container(manifest)["env"]}
    assert (
        env["INITIAL_CLUSTER"]["valueFrom"]["fieldRef"]["fieldPath"]
        == f"metadata.annotations['{naming.ANNOTATION_INITIAL_CLUSTER}']"
    )
    assert manifest["spec"]["hostname"] == "c-1" and manifest["spec"]["subdomain"] == "c-peer"
    assert container(manifest)["image"] == "gcr.io/etcd-development/etcd:v3.6.16"


def test_first_member_has_no_member_id_yet():
    assert pod(spec(), member_id=None, state="new")["metadata"]["annotations"][naming.ANNOTATION_MEMBER_ID] == ""


def test_pvc_by_default_and_empty_dir_only_when_asked():
    assert pod(spec())["spec"]["volumes"][0] == {"name": "data", "persistentVolumeClaim": {"claimName": "data-c-1"}}
    volume = pod(spec(storage={"emptyDir": {"medium": "Memory"}}))["spec"]["volumes"][0]
    assert volume == {"name": "data", "emptyDir": {"medium": "Memory"}}


@pytest.mark.parametrize(
    "field,value,flag",
    [
        ("quotaBackendBytes", 1 << 30, "--quota-backend-bytes=1073741824"),
        ("heartbeatIntervalMillis", 100, "--heartbeat-interval=100"),
        ("electionTimeoutMillis", 1000, "--election-timeout=1000"),
        ("autoCompactionRetention", "30m", "--auto-compaction-retention=30m"),
    ],
)
def test_etcd_options_become_flags(field, value, flag):
    assert flag in container(pod(spec(etcd={field: value})))["args"]


def test_managed_flags_in_extra_args_are_dropped_and_reported():
    s = spec(etcd={"extraArgs": {"data-dir": "/elsewhere", "log-level": "debug"}})
    args = container(pod(s))["args"]
    assert "--log-level=debug" in args and "--data-dir=/elsewhere" not in args
    assert [p.reason for p in spec_problems(s)] == ["ManagedFlag"]
    assert builders.pod_spec_hash(s) == builders.pod_spec_hash(spec(etcd={"extraArgs": {"log-level": "debug"}}))


def test_spec_hash_changes_with_what_needs_a_restart_only():
    base = spec(size=3)
    assert builders.pod_spec_hash(base) == builders.pod_spec_hash(dataclasses.replace(base, size=5))
    assert builders.pod_spec_hash(base) != builders.pod_spec_hash(spec(size=3, version="3.6.15"))
    assert builders.pod_spec_hash(base) != builders.pod_spec_hash(spec(pod={"nodeSelector": {"a": "b"}}))


@pytest.mark.parametrize("size,min_available", [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4), (9, 5)])
def test_disruption_budget_keeps_quorum(size, min_available):
    assert builders.disruption_budget(spec(size=size), "c", "ns")["spec"]["minAvailable"] == min_available


def test_peer_service_is_headless_and_publishes_unready_members():
    service = builders.peer_service("c", "ns")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True


@pytest.mark.parametrize(
    "running,wanted,reason",
    [
        ("3.6.16", "3.5.35", "VersionDowngrade"),
        ("3.6.16", "3.6.15", "VersionDowngrade"),
        ("3.5.35", "3.6.16", None),
        ("3.5.35", "3.5.36", None),
        (None, "3.5.35", None),
    ],
)
def test_version_changes(running, wanted, reason):
    problem = version_change_problem(running, wanted)
    assert (problem.reason if problem else None) == reason


def test_restore_pod_takes_credentials_by_reference_only():
    source = {"bucket": "b", "endpoint": "http://s3:9000", "credentialsSecretRef": {"name": "creds"}}
    members = ("c-3", "c-4", "c-5")
    manifest = restore_builders.restore_pod(
        "r",
        "ns",
        "c",
        "c-4",
        members,
        "tok",
        "gcr.io/etcd-development/etcd:v3.6.16",
        "ghcr.io/etcd-operator/etcd-operator:0.1.0",
        source,
        "k.db",
        "ab" * 32,
        100 << 20,
    )
    [fetch] = manifest["spec"]["initContainers"]
    [restore] = manifest["spec"]["containers"]
    env = {e["name"]: e for e in fetch["env"]}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "creds", "key": "secretAccessKey"}
    assert "value" not in env["AWS_SECRET_ACCESS_KEY"]
    assert env["EXPECTED_SHA256"]["value"] == "ab" * 32
    assert restore["image"] == "gcr.io/etcd-development/etcd:v3.6.16" and restore["command"] == ["etcdutl"]
    full = ",".join(f"{m}={naming.peer_url('c', 'ns', m)}" for m in members)
    assert f"--initial-cluster={full}" in restore["args"] and "--name=c-4" in restore["args"]
    assert "--initial-cluster-token=tok" in restore["args"]
    assert manifest["spec"]["restartPolicy"] == "Never"
    assert manifest["metadata"]["name"] == "r-s4"


def test_restore_pod_stages_the_snapshot_on_scratch_space_sized_from_the_manifest():
    manifest = restore_builders.restore_pod(
        "r", "ns", "c", "c-0", ("c-0",), "tok", "etcd:v3.6.16", "op:1", {"bucket": "b"}, "k.db", "ab" * 32, 512 << 20
    )
    volumes = {v["name"]: v for v in manifest["spec"]["volumes"]}
    assert int(volumes["scratch"]["emptyDir"]["sizeLimit"]) >= 512 << 20
    [fetch], [restore] = manifest["spec"]["initContainers"], manifest["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in fetch["env"]}
    assert env["SNAPSHOT_FILE"].startswith(restore_builders.SCRATCH_MOUNT + "/")
    assert not env["SNAPSHOT_FILE"].startswith(env["DATA_DIR"].rsplit("/", 1)[0])  # not on the member's PVC
    assert env["SNAPSHOT_FILE"] in restore["args"]


def test_restore_pod_passes_the_restricted_pod_security_level():
    manifest = restore_builders.restore_pod(
        "r", "ns", "c", "c-0", ("c-0",), "tok", "etcd:v3.6.16", "op:1", {"bucket": "b"}, "k.db", "ab" * 32, None
    )
    pod = manifest["spec"]["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == pod["fsGroup"] == 65532
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in manifest["spec"]["initContainers"] + manifest["spec"]["containers"]:
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert all(set(v) <= {"name", "persistentVolumeClaim", "emptyDir", "secret"} for v in manifest["spec"]["volumes"])


PULL_SECRETS = [{"name": "registry-a"}, {"name": "registry-b"}]


def test_every_pod_made_for_a_cluster_pulls_with_its_secrets():
    """spec.pod.imagePullSecrets reach member pods (whose init container runs the operator's
    image), restore pods and backup verification pods alike."""
    from etcd_operator.core.backup.scratch_pod import verification_pod
    from etcd_operator.core.backup.scratch_verdict import Expected

    s = spec(tls={"enabled": True}, pod={"imagePullSecrets": PULL_SECRETS})
    member = builders.member_pod(
        s,
        "c",
        "ns",
        "c-1",
        None,
        "c-0=https://x:2380",
        "existing",
        "tok",
        joining_image="registry-a.example/etcd-operator:1",
    )
    assert member["spec"]["imagePullSecrets"] == PULL_SECRETS
    assert member["spec"]["initContainers"][0]["image"] == "registry-a.example/etcd-operator:1"
    restore = restore_builders.restore_pod(
        "r",
        "ns",
        "c",
        "c-0",
        ("c-0",),
        "tok",
        "etcd:v3.6.16",
        "op:1",
        {"bucket": "b"},
        "k.db",
        "ab" * 32,
        None,
        pull_secrets=builders.image_pull_secrets(s),
    )
    assert restore["spec"]["imagePullSecrets"] == PULL_SECRETS
    verification = verification_pod(
        "b",
        "ns",
        "uid",
        "etcd:v3.6.0",
        "op:1",
        {"bucket": "bk"},
        "p/x.db",
        "f" * 64,
        Expected(61, 60, 1234, None),
        pull_secrets=builders.image_pull_secrets(s),
    )
    assert verification["spec"]["imagePullSecrets"] == PULL_SECRETS


def test_without_pull_secrets_pods_have_no_such_key():
    assert "imagePullSecrets" not in pod(spec())["spec"]
    assert "imagePullSecrets" not in pod(spec(pod={"imagePullSecrets": []}))["spec"]


def test_changing_pull_secrets_rolls_no_member():
    """They matter to the next pull only: the spec hash, which decides rolls, ignores them."""
    plain = spec(pod={"priorityClassName": "high"})
    with_secrets = spec(pod={"priorityClassName": "high", "imagePullSecrets": PULL_SECRETS})
    assert builders.pod_spec_hash(plain) == builders.pod_spec_hash(with_secrets)
    assert builders.pod_spec_hash(plain) != builders.pod_spec_hash(spec(pod={"priorityClassName": "low"}))
