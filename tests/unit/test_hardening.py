"""Pod security, NetworkPolicy and S3 credential rules (pure parts; the API server's own
checks run in tests/nodes/host_operator/control_plane/test_hardening.py)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from etcd_operator.clients.storage import credentials
from etcd_operator.clients.storage.s3 import S3Location, S3Storage, StorageError, encryption_arguments, signs_payload
from etcd_operator.core import pod_security
from etcd_operator.core.backup import scratch_pod as verification_pod
from etcd_operator.core.backup.scratch_verdict import Expected
from etcd_operator.core.cluster import builders, naming, network_policy
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.restore import builders as restore_builders

ETCD_IMAGE = "gcr.io/etcd-development/etcd:v3.6.16"
OPERATOR_IMAGE = "ghcr.io/etcd-operator/etcd-operator:0.1.0"


def member(**fields) -> dict:
    return builders.member_pod(
        ClusterSpec.from_dict(fields), "c", "ns", "c-1", None, "c-1=http://x:2380", "new", "token"
    )


def restore_pod(**source) -> dict:
    return restore_builders.restore_pod(
        "r",
        "ns",
        "c",
        "c-1",
        ("c-0", "c-1", "c-2"),
        "restore-uid",
        ETCD_IMAGE,
        OPERATOR_IMAGE,
        {"bucket": "b", **source},
        "k.db",
        "ab" * 32,
        1 << 20,
    )


def restricted_violations(pod: dict) -> list[str]:
    """The `restricted` Pod Security rules that concern these pods, checked field by field."""
    spec = pod["spec"]
    pod_context = spec.get("securityContext") or {}
    found = []
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        found.append("host namespaces")
    for volume in spec.get("volumes") or []:
        if not (
            {"persistentVolumeClaim", "emptyDir", "secret", "configMap", "projected", "downwardAPI", "csi", "ephemeral"}
            & set(volume)
        ):
            found.append(f"volume type of {volume['name']}")
    if pod_context.get("runAsUser") == 0:
        found.append("pod runAsUser 0")
    for container in (spec.get("initContainers") or []) + spec["containers"]:
        context = container.get("securityContext") or {}
        name = container["name"]
        if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
            found.append(f"{name}: runAsNonRoot")
        if context.get("runAsUser", pod_context.get("runAsUser")) in (None, 0):
            found.append(f"{name}: runAsUser")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation")
        if "ALL" not in (context.get("capabilities") or {}).get("drop", []):
            found.append(f"{name}: capabilities")
        if set((context.get("capabilities") or {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: added capabilities")
        seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile")
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if any(p.get("hostPort") for p in container.get("ports") or []):
            found.append(f"{name}: hostPort")
    return found


@pytest.mark.parametrize(
    "pod",
    [
        member(),
        member(storage={"emptyDir": {}}),
        member(pod={"resources": {"limits": {"memory": "1Gi"}}}),
        restore_pod(),
        restore_pod(caBundleSecretRef={"name": "ca"}, credentialsSecretRef={"name": "creds"}),
        verification_pod.verification_pod(
            "b",
            "ns",
            "uid",
            ETCD_IMAGE,
            OPERATOR_IMAGE,
            {"bucket": "b", "caBundleSecretRef": {"name": "ca"}},
            "k.db",
            "ab" * 32,
            Expected(61, 60, 1234, 1),
        ),
    ],
    ids=["member", "member-emptydir", "member-resources", "restore", "restore-ca-creds", "verification"],
)
def test_every_pod_passes_the_restricted_level(pod):
    assert restricted_violations(pod) == []
    assert pod["spec"]["securityContext"]["fsGroup"] == pod_security.FS_GROUP


def test_the_checker_sees_a_pod_without_the_context():
    pod = member()
    del pod["spec"]["containers"][0]["securityContext"]
    pod["spec"]["securityContext"] = {}
    assert "etcd: allowPrivilegeEscalation" in restricted_violations(pod)
    assert "etcd: runAsNonRoot" in restricted_violations(pod)


def test_restricted_overrides_weaker_settings_and_keeps_others():
    pod = pod_security.restricted(
        {
            "securityContext": {"runAsUser": 0, "sysctls": []},
            "containers": [
                {
                    "name": "x",
                    "securityContext": {
                        "allowPrivilegeEscalation": True,
                        "capabilities": {"add": ["SYS_ADMIN"]},
                        "procMount": "Default",
                    },
                }
            ],
        }
    )
    assert pod["securityContext"]["runAsUser"] == pod_security.RUN_AS_USER and "sysctls" in pod["securityContext"]
    context = pod["containers"][0]["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
    assert context["procMount"] == "Default"


def test_members_have_requests_by_default_and_keep_the_users():
    assert member()["spec"]["containers"][0]["resources"] == {"requests": builders.DEFAULT_MEMBER_REQUESTS}
    mine = {"requests": {"cpu": "2"}, "limits": {"memory": "4Gi"}}
    assert member(pod={"resources": mine})["spec"]["containers"][0]["resources"] == mine


def rules_by_port(policy: dict) -> dict[int, list]:
    return {rule["ports"][0]["port"]: rule.get("from") for rule in policy["spec"]["ingress"]}


def test_network_policy_opens_peer_port_to_members_only():
    policy = network_policy.network_policy("c", "ns", None, "ops")
    members = {"podSelector": {"matchLabels": naming.selector_labels("c")}}
    by_port = rules_by_port(policy)
    assert policy["spec"]["podSelector"] == members["podSelector"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert by_port[naming.PEER_PORT] == [members]
    assert by_port[naming.CLIENT_PORT] == [
        members,
        {
            "podSelector": {"matchLabels": network_policy.OPERATOR_POD_LABELS},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
        },
    ]
    assert by_port[naming.METRICS_PORT] is None  # metrics and health: open


def test_network_policy_adds_the_chosen_clients_to_the_client_port_only():
    settings = {
        "clientSelector": {"matchLabels": {"etcd-client": "c"}},
        "clientNamespaceSelector": {"matchLabels": {"team": "a"}},
    }
    by_port = rules_by_port(network_policy.network_policy("c", "ns", settings, "ops"))
    assert by_port[naming.CLIENT_PORT][-1] == {
        "podSelector": {"matchLabels": {"etcd-client": "c"}},
        "namespaceSelector": {"matchLabels": {"team": "a"}},
    }
    assert len(by_port[naming.PEER_PORT]) == 1
    assert network_policy.enabled(None, serves_tls=True) and not network_policy.enabled({"enabled": False}, True)
    # A plaintext cluster (one that predates the policy, or opted out of TLS) keeps its clients
    # unless the policy is asked for.
    assert not network_policy.enabled(None, serves_tls=False) and network_policy.enabled({"enabled": True}, False)


@pytest.mark.parametrize("field,value", [("accessKeyIDKey", "token"), ("secretAccessKeyKey", "ca.crt")])
def test_credentials_name_only_the_fixed_keys(field, value):
    credentials.check_credential_keys({"name": "s", "accessKeyIDKey": "accessKeyID"})
    with pytest.raises(StorageError) as refused:
        credentials.check_credential_keys({"name": "s", field: value})
    assert refused.value.permanent and refused.value.code == "CredentialKeyRefused"


def test_restore_pod_reads_the_fixed_keys_whatever_the_spec_says():
    pod = restore_pod(credentialsSecretRef={"name": "creds", "accessKeyIDKey": "token"})
    env = {e["name"]: e for e in pod["spec"]["initContainers"][0]["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "creds", "key": "accessKeyID"}


def test_http_endpoints_need_insecure_and_sign_payloads():
    with pytest.raises(StorageError) as refused:
        S3Storage(S3Location(bucket="b", endpoint="http://s3:9000"))
    assert refused.value.code == "InsecureEndpoint" and refused.value.permanent
    over_http = S3Location(bucket="b", endpoint="HTTP://s3:9000", insecure=True)
    assert signs_payload(over_http)
    storage = S3Storage(over_http)
    try:
        assert storage._client.meta.config.s3["payload_signing_enabled"] is True
    finally:
        storage.close()
    assert not signs_payload(S3Location(bucket="b", endpoint="https://s3:9000"))
    assert not signs_payload(S3Location(bucket="b"))


def _sent_part_headers(location: S3Location, body: bytes) -> dict[str, str]:
    """The headers of an UploadPart as it leaves the client, signed; nothing is sent."""
    from botocore.awsrequest import AWSResponse

    class EmptyBody:
        def stream(self, **_):
            return iter(())

    storage = S3Storage(location)
    sent = {}

    def capture(request, **_):
        sent.update({k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()})
        return AWSResponse(request.url, 200, {"ETag": '"e"'}, EmptyBody())

    storage._client.meta.events.register_first("before-send.s3.UploadPart", capture)
    try:
        asyncio.run(storage.upload_part("k", "u", 1, body))
    finally:
        storage.close()
    return sent


def test_every_part_is_checked_by_the_store_with_one_hash_not_two():
    body = b"part" * 1000
    over_http = _sent_part_headers(
        S3Location(bucket="b", endpoint="http://s3:9000", insecure=True, access_key="a", secret_key="s"), body
    )
    assert over_http["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()
    assert not [h for h in over_http if h.startswith("x-amz-checksum-")]
    over_https = _sent_part_headers(
        S3Location(bucket="b", endpoint="https://s3:9000", access_key="a", secret_key="s"), body
    )
    assert over_https["x-amz-content-sha256"] in ("UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
    assert "x-amz-checksum-crc32" in (over_https.get("x-amz-trailer"), *over_https)  # a trailer or a header


def test_server_side_encryption_arguments():
    assert encryption_arguments(S3Location(bucket="b")) == {}
    assert encryption_arguments(S3Location(bucket="b", encryption="SSE-S3")) == {"ServerSideEncryption": "AES256"}
    assert encryption_arguments(S3Location(bucket="b", encryption="SSE-KMS", kms_key_id="k1")) == {
        "ServerSideEncryption": "aws:kms",
        "SSEKMSKeyId": "k1",
    }
    assert encryption_arguments(S3Location(bucket="b", encryption="SSE-KMS")) == {"ServerSideEncryption": "aws:kms"}
    with pytest.raises(StorageError):
        encryption_arguments(S3Location(bucket="b", encryption="rot13"))


def test_the_namespaced_role_grants_what_the_cluster_role_grants_minus_cluster_scope():
    import pathlib

    import yaml

    root = pathlib.Path(__file__).resolve().parents[2]

    def rules(path: str, kind: str) -> list[dict]:
        return next(d for d in yaml.safe_load_all((root / path).read_text()) if d["kind"] == kind)["rules"]

    discovery = {"customresourcedefinitions", "namespaces", "storageclasses"}
    # Not granted to the namespaced install: PVs name every namespace's claims (a member on a
    # deleted node waits there instead of being replaced).
    volume_nodes = {"persistentvolumes", "nodes"}
    wanted = [
        r for r in rules("deploy/rbac.yaml", "ClusterRole") if not (discovery | volume_nodes) & set(r["resources"])
    ]
    assert rules("deploy-namespaced/watched/role.yaml", "Role") == wanted
    assert {
        res for r in rules("deploy-namespaced/discovery.yaml", "ClusterRole") for res in r["resources"]
    } == discovery
