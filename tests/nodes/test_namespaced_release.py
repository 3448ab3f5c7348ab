"""The namespaced install on real nodes: the chart with `rbac.scope=namespaced` (a Role in the
watched namespace, CRD discovery cluster-wide, nothing else;
tests/nodes/host_operator/control_plane/test_helm_release.py checks it renders
deploy-namespaced/) runs create, scale, backup and restore into a new cluster
in a namespace that enforces the `restricted` Pod Security level, with runc confining every pod
it makes. Its objects carry its shard's label and finalizer, so the session's release leaves
them alone; the restore's new cluster is held by it from its creation."""

from __future__ import annotations

import json

import pytest

from etcd_operator.core.cluster import naming, network_policy
from tests.support import chart_release
from tests.support.clusters import PLAINTEXT, get_cluster, patch_spec, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.s3 import create_credentials_secret, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.needs_store,
    pytest.mark.usefixtures("kubectl_on_real_nodes", "operator_release"),
]

RELEASE = "namespaced-test"
GROUP = "etcd.operator.dev/v1alpha1"


def phase(kind: str, namespace: str, name: str) -> str | None:
    return (kubectl_json("get", kind, name, "-n", namespace).get("status") or {}).get("phase")


def ready(kind: str, namespace: str, name: str, timeout: int) -> None:
    """`kubectl wait --for=condition=Ready`, then the condition speaks of the latest generation."""
    kubectl("wait", "-n", namespace, f"{kind}/{name}", "--for=condition=Ready", f"--timeout={timeout}s")
    body = kubectl_json("get", kind, name, "-n", namespace)
    found = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
    assert found["observedGeneration"] == body["metadata"]["generation"] == body["status"]["observedGeneration"]


def test_the_namespaced_release_runs_everything_in_a_restricted_namespace(real_nodes, namespace):
    with chart_release.shard_release(
        real_nodes.kubeconfig, RELEASE, [namespace], {}, values={"rbac": {"scope": "namespaced"}}
    ) as operator:
        account = f"system:serviceaccount:{RELEASE}:{RELEASE}-etcd-operator"
        # The RBAC is really namespaced: no pod rights anywhere else.
        assert (
            kubectl("auth", "can-i", "list", "pods", "-n", "default", f"--as={account}", check=False).stdout.strip()
            == "no"
        )
        assert (
            kubectl("auth", "can-i", "create", "pods", "-n", namespace, f"--as={account}", check=False).stdout.strip()
            == "yes"
        )

        def apply(kind: str, name: str, spec: dict) -> None:
            manifest = {
                "apiVersion": GROUP,
                "kind": kind,
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            }
            kubectl("apply", "-f", "-", input=json.dumps(operator.claim(manifest)))

        apply(
            "EtcdCluster",
            "hd",
            {
                **PLAINTEXT,
                "size": 1,
                "storage": {"size": "1Gi"},
                "networkPolicy": {"enabled": True, "clientSelector": {"matchLabels": {"etcd-client": "hd"}}},
            },
        )
        wait_healthy(namespace, "hd", 1, timeout=300)
        patch_spec(namespace, "hd", {"size": 2})
        wait_healthy(namespace, "hd", 2, timeout=300)
        # What `kubectl wait` and kstatus (Flux, Argo CD) read: Ready, of the latest generation.
        ready("etcdcluster", namespace, "hd", 300)

        policy = kubectl_json("get", "networkpolicy", network_policy.policy_name("hd"), "-n", namespace)
        assert [o["uid"] for o in policy["metadata"]["ownerReferences"]] == [
            get_cluster(namespace, "hd")["metadata"]["uid"]
        ]
        rules = {r["ports"][0]["port"]: r.get("from") for r in policy["spec"]["ingress"]}
        assert rules[naming.PEER_PORT] == [{"podSelector": {"matchLabels": naming.selector_labels("hd")}}]

        create_credentials_secret(real_nodes, namespace)
        apply(
            "EtcdBackup",
            "b",
            {"clusterRef": {"name": "hd"}, "storage": s3_storage_spec(real_nodes, f"tests/{namespace}")},
        )
        wait_for(lambda: phase("etcdbackup", namespace, "b") == "Completed", 180, what="the backup")
        ready("etcdbackup", namespace, "b", 60)
        apply(
            "EtcdRestore",
            "r",
            {"source": {"backupRef": {"name": "b"}}, "target": {"newCluster": {"name": "hd2", "spec": {"size": 1}}}},
        )  # TLS on
        ready("etcdrestore", namespace, "r", 300)
        assert phase("etcdrestore", namespace, "r") == "Completed"
        wait_healthy(namespace, "hd2", 1, timeout=300)
        ready("etcdcluster", namespace, "hd2", 300)
        restored = get_cluster(namespace, "hd2")["metadata"]
        assert restored["finalizers"] == [f"etcd.operator.dev/finalizer-{RELEASE}"]

        log = operator.logs()
        assert "Forbidden" not in log and "violates PodSecurity" not in log, log[-4000:]
        shared = chart_release.release_logs()
        assert f"{namespace}/hd:" not in shared and f"{namespace}/hd2:" not in shared
