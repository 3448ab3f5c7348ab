"""etcd authentication on the real nodes (spec.auth), with the operator as a process on the
host, sharing one 3-member TLS cluster with two tenants: each tenant's issued certificate
reads and writes its own prefix and nothing else; a kube-apiserver per tenant
(--etcd-prefix) stores its objects there and cannot see the other's; with auth on, members
stay ready and the operator's certificate keeps its maintenance calls (snapshot,
defragmentation) while a tenant's is refused them; spec.auth.enabled: false turns it off,
with a condition. The schema refuses what would lock the operator out."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess

import pytest

from etcd_operator.clients.etcd.client import ClientTLS, EtcdError
from etcd_operator.clients.etcd.snapshot import SnapshotStream
from etcd_operator.core.cluster import certs, naming
from etcd_operator.core.cluster.spec import ClusterSpec
from localkube import controlplane
from tests.nodes.host_operator.test_tls import (
    assert_the_peer_port_accepts_members_only,
    etcdctl,
    member_urls,
    secret_files,
)
from tests.support import nodes_resolver
from tests.support.clusters import (
    GROUP,
    apply_cluster,
    condition,
    get_cluster,
    member_endpoints,
    member_pods,
    patch_spec,
    wait_condition,
)
from tests.support.etcd_process import free_port
from tests.support.kubectl import kubectl, secret_bytes
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process]

CLUSTER = "secure"  # test_tls's helpers name members of this cluster
TENANTS = ("tenant-a", "tenant-b")
AUTH = {
    "enabled": True,
    "roles": [{"name": t, "permissions": [{"key": f"/{t}/", "prefix": True, "access": "ReadWrite"}]} for t in TENANTS],
    "users": [{"name": t, "roles": [t], "certificate": True} for t in TENANTS],
}


@pytest.fixture(scope="module")
def auth_namespace(real_nodes_use, module_namespace):
    with real_nodes_use.nodes_kept(), module_namespace("h-auth") as name:
        yield name


@pytest.fixture(scope="module")
def auth_cluster(auth_namespace):
    """Created with auth on: the operator enables it once its identity and the tenants are in place."""
    apply_cluster(auth_namespace, CLUSTER, {"size": 3, "storage": {"size": "1Gi"}, "tls": {}, "auth": AUTH})
    wait_condition(auth_namespace, CLUSTER, "AuthEnabled", "True", timeout=360)
    return auth_namespace


@pytest.fixture(scope="module")
def on_nodes_dns(real_nodes):
    resolv_conf = real_nodes.run_dir / "auth-tests-resolv.conf"
    return lambda argv: nodes_resolver.command(resolv_conf, real_nodes.node_network.dns_address, argv)


def refused_message(namespace: str, spec: dict) -> str:
    manifest = {"apiVersion": GROUP, "kind": "EtcdCluster", "metadata": {"name": "refused", "namespace": namespace}}
    result = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps({**manifest, "spec": spec}), check=False)
    assert result.returncode != 0, "accepted"
    return result.stderr


def test_the_schema_refuses_what_would_lock_the_operator_out(auth_cluster):
    namespace = auth_cluster
    plain = {"size": 1, "tls": {"enabled": False}, "auth": {"enabled": True}}
    assert "spec.auth.enabled needs spec.tls.enabled" in refused_message(namespace, plain)
    for reserved in ("root", "etcd-operator"):
        spec = {"size": 1, "auth": {"users": [{"name": reserved}]}}
        assert "operator's own identity" in refused_message(namespace, spec)
    peer = {"size": 1, "auth": {"users": [{"name": certs.PEER_COMMON_NAME}]}}
    assert "the members' peer identity" in refused_message(namespace, peer)
    dangling = {"size": 1, "auth": {"users": [{"name": "u", "roles": ["nowhere"]}]}}
    assert "only name roles declared in spec.auth.roles" in refused_message(namespace, dangling)
    removed = kubectl(
        "patch", "etcdcluster", CLUSTER, "-n", namespace, "--type=merge", "--dry-run=server",
        "-p", json.dumps({"spec": {"auth": None}}), check=False,
    )  # fmt: skip
    assert "set spec.auth.enabled to false to turn authentication off" in removed.stderr
    root_role = {"size": 1, "auth": {"roles": [{"name": "root"}]}}
    assert "root is etcd's own administrator role" in refused_message(namespace, root_role)


def test_a_tenants_certificate_does_not_open_the_peer_port(auth_cluster, on_nodes_dns, tmp_path):
    """Members, the operator, the client Secret and the tenants' certificates share the
    cluster's CA; the peer port (raft, GET /members) accepts the members' CN only. Members
    still talk: the cluster is Available and takes a write a tenant reads back."""
    namespace = auth_cluster
    tenants = tuple(certs.user_secret_name(CLUSTER, t) for t in TENANTS)
    assert_the_peer_port_accepts_members_only(namespace, (*tenants, f"{CLUSTER}-client-tls"))
    assert condition(get_cluster(namespace, CLUSTER), "Available")["status"] == "True"
    tenant_a = secret_files(namespace, certs.user_secret_name(CLUSTER, "tenant-a"), tmp_path)
    urls = member_urls(namespace)
    put = etcdctl(on_nodes_dns, urls, tenant_a, "put", "/tenant-a/over-raft", "replicated")
    assert put.returncode == 0, put.stderr
    got = etcdctl(on_nodes_dns, urls, tenant_a, "get", "/tenant-a/over-raft", "--print-value-only")
    assert got.stdout.strip() == "replicated", got.stderr


@contextlib.contextmanager
def tenant_apiserver(real_nodes, on_nodes_dns, namespace: str, tenant: str, tmp_path):
    """A kube-apiserver storing under /<tenant>/ with the tenant's certificate; yields kubectl for it."""
    files = secret_files(namespace, certs.user_secret_name(CLUSTER, tenant), tmp_path)
    port = free_port()
    argv = [
        a for a in controlplane._apiserver_argv(real_nodes) if not a.startswith(("--etcd-servers=", "--secure-port="))
    ]
    argv += [
        f"--etcd-servers={','.join(member_urls(namespace))}",
        f"--etcd-prefix=/{tenant}",
        "--etcd-compaction-interval=0",  # compaction writes a key outside the prefix
        f"--secure-port={port}",
        f"--etcd-cafile={files[certs.CA_KEY]}",
        f"--etcd-certfile={files[certs.CERT_KEY]}",
        f"--etcd-keyfile={files[certs.PRIVATE_KEY_KEY]}",
        f"--cert-dir={tmp_path / f'certs-{tenant}'}",
    ]
    log_path = real_nodes.logs_dir / f"apiserver-{tenant}-on-{namespace}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(on_nodes_dns(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            url = f"https://{controlplane.apiserver_host(real_nodes)}:{port}"
            context = controlplane.admin_ssl_context(real_nodes)
            wait_for(
                lambda: process.poll() is not None or controlplane._http_ok(f"{url}/readyz", context, b"ok"),
                120,
                what=f"{tenant}'s kube-apiserver to be ready",
            )
            assert process.poll() is None, log_path.read_text()[-3000:]
            config = json.loads(kubectl("config", "view", "--raw", "-o", "json").stdout)
            for c in config["clusters"]:
                c["cluster"]["server"] = url
            kubeconfig = tmp_path / f"kubeconfig-{tenant}"
            kubeconfig.write_text(json.dumps(config))
            env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
            yield lambda *args: subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=30)
        finally:
            os.killpg(process.pid, 15)
            process.wait(30)


def test_each_tenant_reads_and_writes_its_prefix_only(auth_cluster, real_nodes, on_nodes_dns, tmp_path):
    namespace = auth_cluster
    status = get_cluster(namespace, CLUSTER)["status"]
    assert status["auth"]["managedUsers"] == list(TENANTS) and status["auth"]["managedRoles"] == list(TENANTS)
    assert condition(get_cluster(namespace, CLUSTER), "AuthInSync")["status"] == "True"
    restarts = {p["metadata"]["name"]: _restarts(p) for p in member_pods(namespace, CLUSTER)}
    urls = member_urls(namespace)
    tenant_a = secret_files(namespace, certs.user_secret_name(CLUSTER, "tenant-a"), tmp_path)

    put = etcdctl(on_nodes_dns, urls, tenant_a, "put", "/tenant-a/hello", "world")
    assert put.returncode == 0, put.stderr
    got = etcdctl(on_nodes_dns, urls, tenant_a, "get", "/tenant-a/hello", "--print-value-only")
    assert got.stdout.strip() == "world", got.stderr
    for refused in (
        ("put", "/tenant-b/x", "y"),
        ("get", "/tenant-b/", "--prefix"),
        ("get", "/", "--prefix"),
        ("put", "/elsewhere", "y"),
    ):
        answer = etcdctl(on_nodes_dns, urls, tenant_a, *refused)
        assert answer.returncode != 0 and "permission denied" in answer.stderr, (refused, answer.stdout, answer.stderr)

    with tenant_apiserver(real_nodes, on_nodes_dns, namespace, "tenant-b", tmp_path) as tenant_b_kubectl:
        created = tenant_b_kubectl("create", "configmap", "of-tenant-b", "-n", "default", "--from-literal=k=b")
        assert created.returncode == 0, created.stderr
    with tenant_apiserver(real_nodes, on_nodes_dns, namespace, "tenant-a", tmp_path) as tenant_a_kubectl:
        created = tenant_a_kubectl("create", "configmap", "of-tenant-a", "-n", "default", "--from-literal=k=a")
        assert created.returncode == 0, created.stderr
        listed = tenant_a_kubectl("get", "configmaps", "-n", "default", "-o", "name")
        assert listed.returncode == 0, listed.stderr
        assert "configmap/of-tenant-a" in listed.stdout.split() and "of-tenant-b" not in listed.stdout
    keys = etcdctl(on_nodes_dns, urls, tenant_a, "get", "/tenant-a/configmaps/default/", "--prefix", "--keys-only")
    assert "/tenant-a/configmaps/default/of-tenant-a" in keys.stdout, keys.stderr

    # The operator's own certificate (user etcd-operator, role root) still streams a snapshot;
    # a tenant's is refused it, so the root role is what lets it.
    endpoint = member_endpoints(namespace, CLUSTER)[0]
    assert next(iter(SnapshotStream(endpoint, client_tls(namespace, certs.CertKind.OPERATOR))))
    with pytest.raises(EtcdError) as refused_snapshot:
        next(iter(SnapshotStream(endpoint, client_tls(namespace, "tenant-a"))))
    assert "permission denied" in refused_snapshot.value.detail
    # ...and the operator defragments every member on request, with auth on.
    kubectl("annotate", "etcdcluster", CLUSTER, "-n", namespace, f"{naming.ANNOTATION_DEFRAGMENT}=with-auth")
    wait_for(
        lambda: (
            ((get_cluster(namespace, CLUSTER)["status"].get("defragmentation") or {}).get("lastToken")) == "with-auth"
        ),
        120,
        what="the requested defragmentation done with auth on",
    )

    # The probes (/readyz, /livez on the metrics port, no certificate) pass with auth on.
    pods = member_pods(namespace, CLUSTER)
    assert all(_ready(p) for p in pods), [p["status"].get("conditions") for p in pods]
    assert {p["metadata"]["name"]: _restarts(p) for p in pods} == restarts


def test_a_removed_password_and_a_removed_users_certificate_are_refused(auth_cluster, on_nodes_dns, tmp_path):
    """Revocation: passwordSecretRef removed -> the old password is refused; the user removed ->
    its certificate is refused while another tenant's still works; the name declared again
    while that certificate is valid -> not created (NameRetired)."""
    namespace = auth_cluster
    urls = member_urls(namespace)
    password = "revoked-" + os.urandom(8).hex()
    kubectl("create", "secret", "generic", "reporting-password", "-n", namespace, f"--from-literal=password={password}")
    tenants = AUTH["users"]
    reporting = {"name": "reporting", "roles": ["tenant-a"], "certificate": True}
    with_password = {**reporting, "passwordSecretRef": {"name": "reporting-password"}}
    patch_spec(namespace, CLUSTER, {"auth": {"users": [*tenants, with_password]}})
    wait_for(lambda: _auth_status(namespace).get("passwordVersions", {}).get("reporting"), 180, what="password set")
    wait_condition(namespace, CLUSTER, "AuthInSync", "True", timeout=180)
    # The client Secret's certificate (CN etcd-client, no such user) only carries the TLS; the password decides.
    anonymous = secret_files(namespace, f"{CLUSTER}-client-tls", tmp_path)
    by_password = ("--user", f"reporting:{password}", "put", "/tenant-a/by-password", "1")
    allowed = etcdctl(on_nodes_dns, urls, anonymous, *by_password)
    assert allowed.returncode == 0, allowed.stderr

    patch_spec(namespace, CLUSTER, {"auth": {"users": [*tenants, reporting]}})
    wait_for(lambda: "reporting" not in _auth_status(namespace).get("passwordVersions", {}), 180, what="cleared")
    refused = etcdctl(on_nodes_dns, urls, anonymous, *by_password)
    assert refused.returncode != 0 and "authentication failed" in refused.stderr, (refused.stdout, refused.stderr)
    its_certificate = secret_files(namespace, certs.user_secret_name(CLUSTER, "reporting"), tmp_path)
    still = etcdctl(on_nodes_dns, urls, its_certificate, "put", "/tenant-a/by-certificate", "1")
    assert still.returncode == 0, still.stderr

    patch_spec(namespace, CLUSTER, {"auth": {"users": tenants}})
    wait_for(
        lambda: "reporting" in _retired(namespace) and "reporting" not in _auth_status(namespace)["managedUsers"],
        180,
        what="user reporting deleted from etcd and its name retired",
    )
    gone = etcdctl(on_nodes_dns, urls, its_certificate, "get", "/tenant-a/", "--prefix")
    assert gone.returncode != 0, gone.stdout
    tenant_a = secret_files(namespace, certs.user_secret_name(CLUSTER, "tenant-a"), tmp_path)
    other = etcdctl(on_nodes_dns, urls, tenant_a, "get", "/tenant-a/by-certificate", "--print-value-only")
    assert other.returncode == 0 and other.stdout.strip() == "1", other.stderr

    patch_spec(namespace, CLUSTER, {"auth": {"users": [*tenants, reporting]}})
    wait_for(
        lambda: (condition(get_cluster(namespace, CLUSTER), "AuthInSync") or {}).get("reason") == "NameRetired",
        120,
        what="AuthInSync=False, reason NameRetired",
    )
    assert "reporting" not in _auth_status(namespace)["managedUsers"]
    again = etcdctl(on_nodes_dns, urls, its_certificate, "get", "/tenant-a/", "--prefix")
    assert again.returncode != 0, again.stdout
    patch_spec(namespace, CLUSTER, {"auth": {"users": tenants}})
    wait_condition(namespace, CLUSTER, "AuthInSync", "True", timeout=120)


def _auth_status(namespace: str) -> dict:
    return (get_cluster(namespace, CLUSTER).get("status") or {}).get("auth") or {}


def _retired(namespace: str) -> list[str]:
    return [r["name"] for r in _auth_status(namespace).get("retiredUsers") or []]


def test_enabled_false_turns_auth_off_with_a_condition(auth_cluster, on_nodes_dns, tmp_path):
    namespace = auth_cluster
    patch_spec(namespace, CLUSTER, {"auth": {"enabled": False}})
    off = wait_condition(namespace, CLUSTER, "AuthEnabled", "False", timeout=120)
    assert condition(off, "AuthEnabled")["reason"] == "AuthDisabled"
    tenant_a = secret_files(namespace, certs.user_secret_name(CLUSTER, "tenant-a"), tmp_path)
    anywhere = etcdctl(on_nodes_dns, member_urls(namespace), tenant_a, "put", "/tenant-b/now", "open")
    assert anywhere.returncode == 0, anywhere.stderr


def client_tls(namespace: str, whose: str | certs.CertKind) -> ClientTLS:
    """The credentials of the operator (a CertKind) or of a spec.auth user (by name)."""
    name = (
        certs.secret_name(ClusterSpec.from_dict({"tls": {}}), CLUSTER, whose)
        if isinstance(whose, certs.CertKind)
        else certs.user_secret_name(CLUSTER, whose)
    )
    data = secret_bytes(namespace, name)
    return ClientTLS(data["ca.crt"], data["tls.crt"], data["tls.key"], naming.client_service_host(CLUSTER, namespace))


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _restarts(pod: dict) -> int:
    return sum(s.get("restartCount", 0) for s in pod["status"].get("containerStatuses") or [])
