"""The shipped RBAC is enough, and no verb in it is spare: the operator runs create,
scale, backup and restore with only a ServiceAccount bound to deploy/rbac.yaml's rules,
and fails when one needed verb is taken away. On the real nodes, with the operator as a
process on the host authenticating with the ServiceAccount's token."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest
import yaml

from localkube.layout import REPO_ROOT
from tests.support import service_accounts
from tests.support.backups import apply_backup, apply_restore, get_backup, get_restore
from tests.support.clusters import apply_cluster, get_cluster, patch_spec, wait_healthy
from tests.support.kubectl import kubectl
from tests.support.s3 import create_credentials_secret, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane2]


def shipped_rules() -> list[dict]:
    docs = yaml.safe_load_all((REPO_ROOT / "deploy" / "rbac.yaml").read_text())
    return next(d for d in docs if d["kind"] == "ClusterRole")["rules"]


def without(rules: list[dict], resource: str, verb: str) -> list[dict]:
    trimmed = copy.deepcopy(rules)
    for rule in trimmed:
        if resource in rule["resources"] and verb in rule["verbs"]:
            rule["verbs"].remove(verb)
    return [r for r in trimmed if r["verbs"]]


def service_account_kubeconfig(real_nodes, namespace: str, rules: list[dict], tmp_path: pathlib.Path) -> pathlib.Path:
    role = f"rbac-test-{namespace}"
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator", "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}],
        },
    ]
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return service_accounts.token_kubeconfig(real_nodes, namespace, "operator", tmp_path / "operator.kubeconfig")


@pytest.fixture
def cleanup_cluster_roles(namespace):
    yield
    kubectl("delete", "clusterrole,clusterrolebinding", f"rbac-test-{namespace}", "--ignore-not-found")


def test_the_shipped_rules_are_enough_for_create_scale_backup_and_restore(
    real_nodes, operator_process, namespace, tmp_path, cleanup_cluster_roles
):
    kubeconfig = service_account_kubeconfig(real_nodes, namespace, shipped_rules(), tmp_path)
    operator = operator_process(namespace, kubeconfig=kubeconfig).start()
    try:
        apply_cluster(namespace, "rb", {"size": 1, "storage": {"size": "1Gi"}})
        wait_healthy(namespace, "rb", 1)
        patch_spec(namespace, "rb", {"size": 2})
        wait_healthy(namespace, "rb", 2)
        create_credentials_secret(real_nodes, namespace)
        apply_backup(
            namespace, "b", {"clusterRef": {"name": "rb"}, "storage": s3_storage_spec(real_nodes, f"tests/{namespace}")}
        )
        wait_for(lambda: get_backup(namespace, "b")["status"].get("phase") == "Completed", 120, what="backup")
        apply_restore(
            namespace,
            "r",
            {"source": {"backupRef": {"name": "b"}}, "target": {"newCluster": {"name": "rb2", "spec": {"size": 1}}}},
        )
        wait_for(lambda: get_restore(namespace, "r")["status"].get("phase") == "Completed", 300, what="restore")
        assert "Forbidden" not in operator.log_text()
    finally:
        operator.stop()


@pytest.mark.parametrize(
    "resource,verb",
    [
        ("pods", "create"),
        ("persistentvolumeclaims", "create"),
        ("etcdclusters/status", "patch"),
        ("poddisruptionbudgets", "create"),
    ],
)
def test_taking_one_needed_verb_away_makes_the_operator_fail(
    real_nodes, operator_process, namespace, tmp_path, cleanup_cluster_roles, resource, verb
):
    kubeconfig = service_account_kubeconfig(real_nodes, namespace, without(shipped_rules(), resource, verb), tmp_path)
    operator = operator_process(namespace, kubeconfig=kubeconfig).start()
    try:
        apply_cluster(namespace, "rb", {"size": 1, "storage": {"size": "1Gi"}})
        wait_for(
            lambda: "Forbidden" in operator.log_text() or "403" in operator.log_text(),
            60,
            what="the API server refusing the operator",
        )
        status = get_cluster(namespace, "rb").get("status") or {}
        assert not (status.get("phase") == "Running" and status.get("readyMembers") == 1)
    finally:
        operator.stop()
