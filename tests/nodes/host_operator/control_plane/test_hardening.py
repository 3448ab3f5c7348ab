"""Hardening against the real API server, by server-side dry runs (the namespaced install
running create, scale, backup and restore in a restricted namespace is
tests/nodes/test_namespaced_release.py; signed and encrypted uploads are
tests/nodes/host_operator/test_backup.py):
- every pod the operator builds is admitted by a namespace that enforces the `restricted` Pod
  Security level, and the namespaced install (deploy-namespaced/) passes server-side dry run;
- the cluster's NetworkPolicy passes server-side dry-run;
- a backup or restore cannot name any key of a Secret, nor use http:// without `insecure: true`."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from etcd_operator.core.backup import scratch_pod as verification_pod
from etcd_operator.core.backup.scratch_verdict import Expected
from etcd_operator.core.cluster import builders, network_policy
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.restore import builders as restore_builders
from tests.support.clusters import GROUP
from tests.support.kubectl import kubectl
from tests.support.s3 import s3_storage_spec

pytestmark = [pytest.mark.needs_cluster, pytest.mark.lane4]
ROOT = pathlib.Path(__file__).resolve().parents[4]
NAMESPACED = ROOT / "deploy-namespaced"
OPERATOR_IMAGE = "ghcr.io/etcd-operator/etcd-operator:0.1.0"


@pytest.fixture
def restricted_namespace(namespace):
    kubectl(
        "label",
        "namespace",
        namespace,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )
    yield namespace
    kubectl("delete", "clusterrole,clusterrolebinding", f"discovery-{namespace}", "--ignore-not-found")


def test_every_pod_the_operator_builds_is_admitted_by_a_restricted_namespace(restricted_namespace):
    """Server-side dry-run goes through admission, PodSecurity included: fast, and it
    names the violated rule when one fails."""
    namespace = restricted_namespace
    spec = ClusterSpec.from_dict({"size": 3})
    source = {
        "bucket": "b",
        "endpoint": "https://s3.example",
        "credentialsSecretRef": {"name": "creds"},
        "caBundleSecretRef": {"name": "ca"},
    }
    pods = [
        builders.member_pod(spec, "c", namespace, "c-0", None, "c-0=http://c-0:2380", "new", "token"),
        builders.member_pod(
            ClusterSpec.from_dict({"size": 1, "storage": {"emptyDir": {}}}),
            "e",
            namespace,
            "e-0",
            None,
            "e-0=http://e-0:2380",
            "new",
            "token",
        ),
        restore_builders.restore_pod(
            "r",
            namespace,
            "c",
            "c-0",
            ("c-0", "c-1", "c-2"),
            "restore-uid",
            spec.image,
            OPERATOR_IMAGE,
            source,
            "k.db",
            "ab" * 32,
            1 << 20,
        ),
        verification_pod.verification_pod(
            "b",
            namespace,
            "00000000-0000-0000-0000-000000000000",
            spec.image,
            OPERATOR_IMAGE,
            source,
            "k.db",
            "ab" * 32,
            Expected(61, 60, 1234, 1),
        ),
    ]
    for pod in pods:
        result = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
        assert result.returncode == 0, f"{pod['metadata']['name']}: {result.stderr}"


def test_the_namespaced_install_passes_server_side_dry_run(namespace):
    """deploy-namespaced/ as kustomize renders it, with the operator's and the watched
    namespace both moved into this test's namespace."""
    docs = [d for d in yaml.safe_load_all(kubectl("kustomize", str(NAMESPACED)).stdout) if d]
    assert {d["kind"] for d in docs} >= {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"}
    assert "etcd-operator" not in {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"}
    for doc in docs:
        if doc["kind"] == "Namespace":
            doc["metadata"]["name"] = namespace
        if doc["metadata"].get("namespace") in ("etcd-operator", "etcd"):
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects") or []:
            subject["namespace"] = namespace
    result = kubectl("apply", "--dry-run=server", "-f", "-", check=False, input=yaml.safe_dump_all(docs))
    assert result.returncode == 0, result.stderr


def test_the_network_policy_passes_server_side_dry_run(namespace):
    settings = {
        "clientSelector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["app"]}]},
        "clientNamespaceSelector": {"matchLabels": {"team": "a"}},
    }
    manifest = network_policy.network_policy("np", namespace, settings, "etcd-operator")
    result = kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["spec"]["ingress"] == manifest["spec"]["ingress"]


def backup_manifest(namespace: str, s3: dict) -> str:
    return json.dumps(
        {
            "apiVersion": GROUP,
            "kind": "EtcdBackup",
            "metadata": {"name": "x", "namespace": namespace},
            "spec": {"clusterRef": {"name": "c"}, "storage": {"s3": s3}},
        }
    )


@pytest.mark.parametrize("field,key", [("accessKeyIDKey", "token"), ("secretAccessKeyKey", "ca.crt")])
def test_a_backup_cannot_name_another_secret_key(real_nodes, namespace, field, key):
    s3 = s3_storage_spec(real_nodes, "x")["s3"]
    s3["credentialsSecretRef"][field] = key
    result = kubectl("apply", "--dry-run=server", "-f", "-", input=backup_manifest(namespace, s3), check=False)
    assert result.returncode != 0 and f"credentialsSecretRef.{field}" in result.stderr, result.stderr
    restore = {
        "apiVersion": GROUP,
        "kind": "EtcdRestore",
        "metadata": {"name": "x", "namespace": namespace},
        "spec": {
            "source": {"s3": {**{k: v for k, v in s3.items() if k != "prefix"}, "key": "k"}},
            "target": {"inPlace": {"clusterName": "c", "confirm": True}},
        },
    }
    result = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(restore), check=False)
    assert result.returncode != 0 and f"credentialsSecretRef.{field}" in result.stderr, result.stderr


def test_an_http_endpoint_needs_insecure(real_nodes, namespace):
    s3 = {**s3_storage_spec(real_nodes, "x")["s3"], "endpoint": "http://s3.example:9000"}
    s3.pop("insecure")
    result = kubectl("apply", "--dry-run=server", "-f", "-", input=backup_manifest(namespace, s3), check=False)
    assert result.returncode != 0 and "needs insecure: true" in result.stderr, result.stderr
    allowed = kubectl(
        "apply", "--dry-run=server", "-f", "-", check=False, input=backup_manifest(namespace, {**s3, "insecure": True})
    )
    assert allowed.returncode == 0, allowed.stderr
