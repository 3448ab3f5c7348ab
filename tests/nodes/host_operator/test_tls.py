"""TLS clusters on the real nodes, sharing one 3-member cluster, with the operator as a process
on the host: only clients with a certificate from the cluster's CA get in; etcdctl on the host
works with <cluster>-client-tls by the members' names (the nodes' DNS); a second
kube-apiserver stores its data in the cluster over TLS; a plaintext cluster is left alone
when spec.tls is turned on; another application's Secret of a certificate's name is reported
and left as it was."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import pathlib
import ssl
import subprocess
import tempfile
import time

import pytest

from etcd_operator.clients.etcd.client import ClientTLS, EtcdError, EtcdMemberClient
from etcd_operator.core.cluster import certs, learners, naming, pki
from etcd_operator.core.cluster.spec import ClusterSpec
from localkube import controlplane
from localkube import layout as localkube_layout
from tests.support import nodes_resolver
from tests.support.backups import apply_backup, apply_restore, fill, get_backup, wait_phase
from tests.support.clusters import (
    FAST_RECOVERY,
    apply_cluster,
    condition,
    get_cluster,
    member_endpoints,
    member_pods,
    patch_spec,
    wait_condition,
    wait_healthy,
)
from tests.support.etcd_probes import LoopThread
from tests.support.etcd_process import free_port
from tests.support.history import check, unknown_outcomes
from tests.support.kubectl import kubectl, kubectl_json, secret_bytes
from tests.support.kv_workload import KeyValueWorkload
from tests.support.s3 import create_credentials_secret, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane4]

CLUSTER = "secure"


@pytest.fixture(scope="module")
def nodes_kept_for_the_module(real_nodes_use):
    """The shared cluster lives through the module: no node fault of the other run meanwhile."""
    with real_nodes_use.nodes_kept():
        yield


@pytest.fixture(scope="module")
def tls_namespace(nodes_kept_for_the_module, module_namespace):
    with module_namespace("h-tls") as name:
        yield name


@pytest.fixture(scope="module")
def tls_cluster(tls_namespace):
    """A 3-member cluster with TLS as the CRD defaults it: on, Managed issuer."""
    # etcd's own raft timing: the rotations under load are measured by the requests that fail.
    apply_cluster(tls_namespace, CLUSTER, {"size": 3, "storage": {"size": "1Gi"}, "tls": {}}, raft=None)
    wait_healthy(tls_namespace, CLUSTER, 3, timeout=300)
    return tls_namespace


@pytest.fixture(scope="module")
def on_nodes_dns(real_nodes):
    """Runs a host command with the nodes' DNS, so that members' names resolve."""
    resolv_conf = real_nodes.run_dir / "tls-tests-resolv.conf"
    return lambda argv: nodes_resolver.command(resolv_conf, real_nodes.node_network.dns_address, argv)


def secret_files(namespace: str, name: str, directory) -> dict[str, str]:
    data = kubectl_json("get", "secret", name, "-n", namespace)["data"]
    paths = {}
    for key in (certs.CERT_KEY, certs.PRIVATE_KEY_KEY, certs.CA_KEY):
        path = directory / f"{name}-{key}"
        path.write_bytes(base64.b64decode(data[key]))
        path.chmod(0o600)
        paths[key] = str(path)
    return paths


def member_urls(namespace: str) -> list[str]:
    return sorted(
        naming.client_url(CLUSTER, namespace, p["metadata"]["name"], tls=True) for p in member_pods(namespace, CLUSTER)
    )


def etcdctl(on_nodes_dns, urls: list[str], files: dict[str, str] | None, *args: str) -> subprocess.CompletedProcess:
    binary = localkube_layout.testbin_dir() / "etcd-3.6" / "etcdctl"
    tls = (
        [f"--cacert={files[certs.CA_KEY]}", f"--cert={files[certs.CERT_KEY]}", f"--key={files[certs.PRIVATE_KEY_KEY]}"]
        if files
        else []
    )
    return subprocess.run(
        on_nodes_dns(
            [str(binary), f"--endpoints={','.join(urls)}", "--command-timeout=5s", "--dial-timeout=3s", *tls, *args]
        ),
        capture_output=True,
        text=True,
        timeout=30,
    )


def status_with(endpoint: str, tls: ClientTLS | None):
    async def call():
        async with EtcdMemberClient(endpoint, timeout=3, tls=tls) as client:
            return await client.status()

    return asyncio.run(call())


def test_tls_cluster_accepts_only_its_own_client_certificates(tls_cluster, on_nodes_dns, tmp_path):
    namespace = tls_cluster
    status = get_cluster(namespace, CLUSTER)["status"]
    assert status["tls"]["transport"] == "https"
    assert status["clientURL"].startswith("https://")
    assert all(m["peerURL"].startswith("https://") and m["clientURL"].startswith("https://") for m in status["members"])
    endpoint = member_endpoints(namespace, CLUSTER)[0]
    own = secret_bytes(
        namespace, certs.secret_name(ClusterSpec.from_dict({"tls": {}}), CLUSTER, certs.CertKind.OPERATOR)
    )
    server_name = naming.client_service_host(CLUSTER, namespace)
    # The operator's own certificate gets in (the control case for the two refusals below).
    assert status_with(endpoint, ClientTLS(own["ca.crt"], own["tls.crt"], own["tls.key"], server_name)).version

    with pytest.raises(EtcdError) as plaintext:
        status_with(endpoint, None)
    assert plaintext.value.unavailable

    spec = ClusterSpec.from_dict({"tls": {}})
    now = time.time()
    other_ca = pki.new_ca(certs.request_for(spec, "other", namespace, certs.CertKind.CA), now)
    foreign = pki.issue_leaf(certs.request_for(spec, "other", namespace, certs.CertKind.OPERATOR), other_ca, None, now)
    with pytest.raises(EtcdError) as wrong_ca:
        status_with(endpoint, ClientTLS(own["ca.crt"], foreign["tls.crt"], foreign["tls.key"], server_name))
    assert wrong_ca.value.unavailable

    user = secret_files(namespace, f"{CLUSTER}-client-tls", tmp_path)
    urls = member_urls(namespace)
    put = etcdctl(on_nodes_dns, urls, user, "put", "/tls/hello", "world")
    assert put.returncode == 0, put.stderr
    got = etcdctl(on_nodes_dns, urls, user, "get", "/tls/hello", "--print-value-only")
    assert got.stdout.strip() == "world", got.stderr
    refused = etcdctl(on_nodes_dns, [u.replace("https://", "http://") for u in urls], None, "get", "/tls/hello")
    assert refused.returncode != 0


def test_kube_apiserver_stores_in_the_tls_cluster(tls_cluster, real_nodes, on_nodes_dns, tmp_path):
    """The second kube-apiserver runs on the host as the substrate's does, with the nodes' DNS,
    and reaches the members by the names their certificates carry."""
    namespace = tls_cluster
    spec = ClusterSpec.from_dict({"tls": {}})
    files = secret_files(namespace, certs.secret_name(spec, CLUSTER, certs.CertKind.OPERATOR), tmp_path)
    port = free_port()
    argv = [
        a for a in controlplane._apiserver_argv(real_nodes) if not a.startswith(("--etcd-servers=", "--secure-port="))
    ]
    argv += [
        f"--etcd-servers={','.join(member_urls(namespace))}",
        f"--secure-port={port}",
        f"--etcd-cafile={files[certs.CA_KEY]}",
        f"--etcd-certfile={files[certs.CERT_KEY]}",
        f"--etcd-keyfile={files[certs.PRIVATE_KEY_KEY]}",
        f"--cert-dir={tmp_path / 'certs'}",
    ]
    log_path = real_nodes.logs_dir / f"apiserver-on-{namespace}.log"
    log = open(log_path, "wb")
    process = subprocess.Popen(on_nodes_dns(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"https://{controlplane.apiserver_host(real_nodes)}:{port}"
        context = controlplane.admin_ssl_context(real_nodes)
        wait_for(
            lambda: process.poll() is not None or controlplane._http_ok(f"{url}/readyz", context, b"ok"),
            120,
            what="the second kube-apiserver to be ready",
        )
        assert process.poll() is None, log_path.read_text()[-2000:]
        config = json.loads(kubectl("config", "view", "--raw", "-o", "json").stdout)
        for c in config["clusters"]:
            c["cluster"]["server"] = url
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps(config))
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

        def run(*args):
            return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=30)

        created = run("create", "configmap", "stored-over-tls", "-n", "default", "--from-literal=k=v")
        assert created.returncode == 0, created.stderr
        read = run("get", "configmap", "stored-over-tls", "-n", "default", "-o", "jsonpath={.data.k}")
        assert read.stdout == "v", read.stderr
    finally:
        os.killpg(process.pid, 15)
        process.wait(30)
        log.close()
    user = secret_files(namespace, f"{CLUSTER}-client-tls", tmp_path)
    keys = etcdctl(
        on_nodes_dns, member_urls(namespace), user, "get", "/registry/configmaps/default/stored-over-tls", "--keys-only"
    )
    assert "stored-over-tls" in keys.stdout, keys.stderr


def test_plaintext_cluster_is_left_alone_when_tls_is_turned_on(tls_namespace):
    namespace, name = tls_namespace, "plain"
    apply_cluster(namespace, name, {"size": 1, "storage": {"emptyDir": {}}})  # plaintext, see PLAINTEXT
    before = wait_healthy(namespace, name, 1)
    assert before["status"]["tls"]["transport"] == "http"
    pod_uids = {p["metadata"]["uid"] for p in member_pods(namespace, name)}

    patch_spec(namespace, name, {"tls": {"enabled": True}})
    refused = wait_condition(namespace, name, "SpecAccepted", "False")
    assert condition(refused, "SpecAccepted")["reason"] == "TLSMigrationUnsupported"
    after = wait_for(
        lambda: (
            (obj := get_cluster(namespace, name))["status"].get("observedGeneration") == obj["metadata"]["generation"]
            and obj
        ),
        60,
        what="the refused generation observed",
    )
    assert after["status"]["tls"]["transport"] == "http"
    assert {p["metadata"]["uid"] for p in member_pods(namespace, name)} == pod_uids
    assert status_with(member_endpoints(namespace, name)[0], None).version


def test_backup_and_restore_of_a_tls_cluster(tls_cluster, real_nodes, on_nodes_dns):
    """The snapshot streams over TLS with the operator's certificate; the restored cluster is
    a TLS cluster whose seeded member advertises https peer URLs."""
    namespace = tls_cluster
    client = secret_bytes(namespace, f"{CLUSTER}-client-tls")
    user = ClientTLS(
        ca=client["ca.crt"],
        cert=client["tls.crt"],
        key=client["tls.key"],
        server_name=naming.client_service_host(CLUSTER, namespace),
    )

    async def write():
        async with EtcdMemberClient(member_endpoints(namespace, CLUSTER)[0], tls=user) as client:
            await client.put(b"/backed-up/key", b"over-tls")

    asyncio.run(write())
    create_credentials_secret(real_nodes, namespace)
    apply_backup(
        namespace,
        "tls-backup",
        {"clusterRef": {"name": CLUSTER}, "storage": s3_storage_spec(real_nodes, f"tests/{namespace}")},
    )
    wait_for(
        lambda: get_backup(namespace, "tls-backup")["status"].get("phase") == "Completed",
        120,
        what="the backup of the TLS cluster",
    )
    apply_restore(
        namespace,
        "tls-restore",
        {
            "source": {"backupRef": {"name": "tls-backup"}},
            "target": {"newCluster": {"name": "secure-copy", "spec": {"size": 1, "storage": {"size": "1Gi"}}}},
        },
    )
    restore = wait_phase(namespace, "tls-restore", "Completed", timeout=240)
    copy = wait_healthy(namespace, "secure-copy", 1)
    assert copy["status"]["tls"]["transport"] == "https"
    assert copy["status"]["members"][0]["peerURL"].startswith("https://")
    assert restore["status"]["restoredRevision"] >= 1
    with tempfile.TemporaryDirectory() as directory:
        files = secret_files(namespace, "secure-copy-client-tls", pathlib.Path(directory))
        urls = [
            naming.client_url("secure-copy", namespace, p["metadata"]["name"], tls=True)
            for p in member_pods(namespace, "secure-copy")
        ]
        got = etcdctl(on_nodes_dns, urls, files, "get", "/backed-up/key", "--print-value-only")
    assert got.stdout.strip() == "over-tls", got.stderr


class TLSLoad(LoopThread):
    """Puts and gets against every member, as a client with the user certificate would:
    credentials re-read when their Secret changes, and a request that a member cannot
    serve (it is restarting, lost leadership, or is a learner) retried on the next member, within a
    deadline. A request counts as failed when no member served it in time, and any TLS
    handshake error counts as failed whether or not a retry succeeded, except a connection
    reset mid-handshake by a member the test itself is killing (listed in `down`): that is
    its process dying, not a certificate refused."""

    DEADLINE = 15.0

    def __init__(self, namespace: str):
        super().__init__()
        self.namespace = namespace
        self.ok = self.failed = self.retried = 0
        self.failures: list[str] = []
        self.down: set[str] = set()

    def _credentials(self) -> ClientTLS:
        data = secret_bytes(self.namespace, f"{CLUSTER}-client-tls")
        return ClientTLS(
            data["ca.crt"], data["tls.crt"], data["tls.key"], naming.client_service_host(CLUSTER, self.namespace)
        )

    async def main(self) -> None:
        clients: dict[str, EtcdMemberClient] = {}
        credentials, endpoints, refreshed, n = None, [], 0.0, 0
        try:
            while not self.stopping:
                if time.monotonic() - refreshed > 1.0:
                    fresh = await asyncio.to_thread(self._credentials)
                    endpoints = await asyncio.to_thread(member_endpoints, self.namespace, CLUSTER) or endpoints
                    refreshed = time.monotonic()
                    if fresh != credentials:
                        credentials = fresh
                        for client in clients.values():
                            await client.close()
                        clients.clear()
                n += 1
                await self._request(clients, endpoints, credentials, n)
                await asyncio.sleep(0.02)
        finally:
            for client in clients.values():
                await client.close()

    async def _request(self, clients, endpoints, credentials, n: int) -> None:
        key, value = f"/load/{n % 64}".encode(), str(n).encode()
        started, attempt = time.monotonic(), 0
        while True:
            endpoint = endpoints[(n + attempt) % len(endpoints)]
            client = clients.get(endpoint) or clients.setdefault(
                endpoint, EtcdMemberClient(endpoint, timeout=3.0, tls=credentials)
            )
            try:
                await client.put(key, value)
                if await client.get(key) != value:
                    raise AssertionError(f"read back a different value for {key!r}")
                self.ok += 1
                return
            except EtcdError as e:
                detail = e.detail.lower()
                killed = (
                    endpoint in self.down
                    and "connection reset" in detail
                    and not any(word in detail for word in ("certificate", "alert", "verify"))
                )
                if not killed and any(word in detail for word in ("ssl", "handshake", "certificate", "tls")):
                    self.failed += 1
                    self.failures.append(f"TLS: {e}")
                # A learner refuses client requests, and a proposal that raft dropped (during a
                # leader transfer) was never applied: a client with every endpoint tries the next.
                learner = "not supported for learner" in e.detail
                dropped = "raft proposal dropped" in e.detail
                if not (e.unavailable or learner or dropped) or time.monotonic() - started > self.DEADLINE:
                    self.failed += 1
                    self.failures.append(str(e))
                    return
                self.retried += 1
                attempt += 1
                await asyncio.sleep(0.1)


def served_fingerprint(host: str, port: int, tls: ClientTLS) -> str:
    import hashlib
    import socket
    import ssl

    context = ssl.create_default_context(cadata=tls.ca.decode())
    directory = __import__("tempfile").mkdtemp()
    cert, key = f"{directory}/c", f"{directory}/k"
    open(cert, "wb").write(tls.cert)
    open(key, "wb").write(tls.key)
    context.load_cert_chain(cert, key)
    with socket.create_connection((host, port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=tls.server_name) as conn:
            return hashlib.sha256(conn.getpeercert(binary_form=True)).hexdigest()


def peer_port_answer(host: str, tls: ClientTLS) -> str:
    """GET /members on a member's peer port with these credentials: the HTTP status, or how
    the member refused the connection."""
    context = ssl.create_default_context(cadata=tls.ca.decode())
    context.check_hostname = False  # what is tested is whom the member accepts, not its name
    with tempfile.TemporaryDirectory() as directory:  # ssl loads a client key from files only
        cert, key = pathlib.Path(directory) / "tls.crt", pathlib.Path(directory) / "tls.key"
        cert.write_bytes(tls.cert)
        key.write_bytes(tls.key)
        context.load_cert_chain(str(cert), str(key))
    connection = http.client.HTTPSConnection(host, naming.PEER_PORT, context=context, timeout=5)
    try:
        connection.request("GET", "/members")
        return str(connection.getresponse().status)
    except (OSError, http.client.HTTPException) as e:  # ssl.SSLError is an OSError
        return f"refused: {e!r}"
    finally:
        connection.close()


def credentials(namespace: str, secret: str) -> ClientTLS:
    data = secret_bytes(namespace, secret)
    return ClientTLS(data["ca.crt"], data["tls.crt"], data["tls.key"], naming.client_service_host(CLUSTER, namespace))


def with_the_peer_cn(namespace: str) -> ClientTLS:
    """A certificate of the cluster's CA with the members' CN and, like a user's, no names:
    the member certificate itself is refused from the host, since etcd also checks that a
    peer certificate's names resolve to the address it connects from."""
    ca = secret_bytes(namespace, f"{CLUSTER}-ca")
    request = certs.CertRequest(certs.CertKind.MEMBER, certs.PEER_COMMON_NAME, client_auth=True, lifetime=3600.0)
    leaf = pki.issue_leaf(request, ca, None, time.time())
    return ClientTLS(leaf["ca.crt"], leaf["tls.crt"], leaf["tls.key"], naming.client_service_host(CLUSTER, namespace))


def assert_the_peer_port_accepts_members_only(namespace: str, others: tuple[str, ...]) -> None:
    """Every member's peer port answers a certificate with the members' CN (the control case)
    and refuses each Secret in `others`, though all are signed by the cluster's CA."""
    assert get_cluster(namespace, CLUSTER)["status"]["tls"]["peerIdentity"] == certs.PEER_COMMON_NAME
    peer_cn = with_the_peer_cn(namespace)
    for pod in member_pods(namespace, CLUSTER):
        args = pod["spec"]["containers"][0]["args"]
        assert f"--peer-cert-allowed-cn={certs.PEER_COMMON_NAME}" in args, args
        ip = pod["status"]["podIP"]
        assert peer_port_answer(ip, peer_cn) == "200", pod["metadata"]["name"]
        for secret in others:
            answer = peer_port_answer(ip, credentials(namespace, secret))
            print(f"GET /members on {pod['metadata']['name']}:{naming.PEER_PORT} with {secret}: {answer}")
            assert answer.startswith("refused"), (pod["metadata"]["name"], secret, answer)


def operator_tls(namespace: str) -> ClientTLS:
    data = secret_bytes(namespace, f"{CLUSTER}-operator-tls")
    return ClientTLS(data["ca.crt"], data["tls.crt"], data["tls.key"], naming.client_service_host(CLUSTER, namespace))


def rotated(namespace: str, kind: str, request: str) -> dict | None:
    obj = get_cluster(namespace, CLUSTER)
    return obj if ((obj.get("status") or {}).get("tls") or {}).get("rotated", {}).get(kind) == request else None


def ca_rotated_once(namespace: str) -> bool:
    tls_status = (get_cluster(namespace, CLUSTER).get("status") or {}).get("tls") or {}
    return bool((tls_status.get("rotated") or {}).get("CA"))


def test_leaf_then_ca_rotation_under_load_fails_no_request(tls_cluster):
    namespace = tls_cluster
    wait_healthy(namespace, CLUSTER, 3)
    pods_before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in member_pods(namespace, CLUSTER)}
    old_member = pki.describe(secret_bytes(namespace, f"{CLUSTER}-member-tls"))
    old_ca = pki.describe(secret_bytes(namespace, f"{CLUSTER}-ca"))
    load = TLSLoad(namespace).start()
    try:
        wait_for(lambda: load.ok >= 20, 60, what="the load to get going")

        # Leaves: renewed in place; etcd serves the new certificate on new client and peer
        # connections without a restart.
        kubectl(
            "annotate", "etcdcluster", CLUSTER, "-n", namespace, f"{naming.ANNOTATION_ROTATE_CERTIFICATES}=leaves-1"
        )
        wait_for(lambda: rotated(namespace, "Leaves", "leaves-1"), 120, what="the leaf rotation to finish")
        new_member = pki.describe(secret_bytes(namespace, f"{CLUSTER}-member-tls"))
        assert new_member.fingerprint != old_member.fingerprint
        tls = operator_tls(namespace)
        for pod in member_pods(namespace, CLUSTER):
            for port in (naming.CLIENT_PORT, naming.PEER_PORT):
                assert served_fingerprint(pod["status"]["podIP"], port, tls) == new_member.fingerprint, (pod, port)
        assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in member_pods(namespace, CLUSTER)} == pods_before
        leaf_phase = (load.ok, load.failed, load.retried)

        # CA: trust both, issue from the new, drop the old; members restarted one at a time.
        kubectl("annotate", "etcdcluster", CLUSTER, "-n", namespace, f"{naming.ANNOTATION_ROTATE_CA}=ca-1")
        wait_for(lambda: rotated(namespace, "CA", "ca-1"), 300, interval=2.0, what="the CA rotation to finish")
        wait_healthy(namespace, CLUSTER, 3)
        wait_for(lambda: load.ok >= leaf_phase[0] + 20, 60, what="the load to go on after the rotation")
    finally:
        load.stop()
    print(
        f"load: {load.ok} requests served, {load.failed} failed, {load.retried} retried on another member; "
        f"after the leaf rotation: {leaf_phase}"
    )
    assert load.failed == 0, load.failures[:5]
    ca = pki.describe(secret_bytes(namespace, f"{CLUSTER}-ca"))
    assert ca.fingerprint != old_ca.fingerprint and ca.trusted == (ca.fingerprint,)
    for kind in ("member", "operator", "client"):
        leaf = pki.describe(secret_bytes(namespace, f"{CLUSTER}-{kind}-tls"))
        assert leaf.issuer_fingerprint == ca.fingerprint and leaf.trusted == (ca.fingerprint,), kind
    assert {p["metadata"]["uid"] for p in member_pods(namespace, CLUSTER)}.isdisjoint(pods_before.values())
    # The members, restarted onto the new CA, still accept each other on the peer port and
    # nothing else the CA signed.
    assert_the_peer_port_accepts_members_only(namespace, (f"{CLUSTER}-client-tls", f"{CLUSTER}-operator-tls"))


def test_after_a_ca_rotation_the_cluster_grows_and_replaces_a_member_under_load(tls_cluster, container_faults):
    """After a CA rotation, scale up, then replace a member whose data is lost, under a client
    load that follows the client Secret: every new member must join with certificates from the
    new CA and be trusted by members that started before it. In the module's order the test
    before rotated the CA under load (and checked that no request failed); run alone, this one
    rotates it first, under its load."""
    namespace = tls_cluster
    wait_healthy(namespace, CLUSTER, 3)
    load = TLSLoad(namespace).start()
    try:
        wait_for(lambda: load.ok >= 20, 60, what="the load to get going")
        if not ca_rotated_once(namespace):
            kubectl(
                "annotate",
                "etcdcluster",
                CLUSTER,
                "-n",
                namespace,
                "--overwrite",
                f"{naming.ANNOTATION_ROTATE_CA}=ca-grow",
            )
            wait_for(lambda: rotated(namespace, "CA", "ca-grow"), 300, interval=2.0, what="the CA rotation to finish")
            wait_healthy(namespace, CLUSTER, 3)
        assert ca_rotated_once(namespace), "no CA rotation recorded before the grow"

        patch_spec(namespace, CLUSTER, {"size": 5, "recovery": FAST_RECOVERY})
        wait_healthy(namespace, CLUSTER, 5, timeout=300)

        victim = sorted(p["metadata"]["name"] for p in member_pods(namespace, CLUSTER))[-1]
        victim_ids = {m["id"] for m in get_cluster(namespace, CLUSTER)["status"]["members"] if m["name"] == victim}
        load.down = {
            f"{p['status']['podIP']}:{naming.CLIENT_PORT}"
            for p in member_pods(namespace, CLUSTER)
            if p["metadata"]["name"] == victim
        }
        container_faults.lose_member_disk(namespace, victim, "etcd")
        # The replacement may take the freed name: it is a new member by its id.
        wait_for(
            lambda: (
                (o := wait_healthy(namespace, CLUSTER, 5, timeout=300))
                and victim_ids.isdisjoint(m["id"] for m in o["status"]["members"])
                and o
            ),
            300,
            what=f"{victim} replaced after the CA rotation",
        )
        load.down = set()
        served = load.ok
        wait_for(lambda: load.ok >= served + 20, 60, what="the load to go on")
    finally:
        load.stop()
        patch_spec(namespace, CLUSTER, {"size": 3})
    print(f"load: {load.ok} requests served, {load.failed} failed, {load.retried} retried on another member")
    assert load.failed == 0, load.failures[:5]
    ca = pki.describe(secret_bytes(namespace, f"{CLUSTER}-ca"))
    obj = get_cluster(namespace, CLUSTER)
    assert condition(obj, "LearnerJoining")["reason"] in ("NoLearner", "CatchingUp")
    assert not (obj["status"].get("learnerJoins") or {}).get("failures"), obj["status"]["learnerJoins"]
    assert pki.describe(secret_bytes(namespace, f"{CLUSTER}-member-tls")).issuer_fingerprint == ca.fingerprint
    wait_healthy(namespace, CLUSTER, 3, timeout=300)


def leader_applied_index(namespace: str) -> int:
    async def call():
        tls = operator_tls(namespace)
        for endpoint in member_endpoints(namespace, CLUSTER):
            async with EtcdMemberClient(endpoint, timeout=3, tls=tls) as client:
                status = await client.status()
            if status.leader_id == status.member_id:
                return status.raft_applied_index
        return 0

    return asyncio.run(call())


def timed_grow(namespace: str) -> float:
    started = time.monotonic()
    patch_spec(namespace, CLUSTER, {"size": 5})
    wait_healthy(namespace, CLUSTER, 5, timeout=300)
    return time.monotonic() - started


def test_a_grow_after_a_ca_rotation_settles_while_clients_that_kept_the_old_ca_stop_writing(tls_cluster, tmp_path):
    """The reported hang: four clients (puts and linearizable gets) that read the client
    Secret once, 3 -> 5 with no rotation, then the CA rotated and 3 -> 5 again. After the
    rotation the members refuse those clients, so nobody writes; a learner joining from a
    snapshot above etcd's apply gap then publishes only once an entry follows its snapshot
    (cluster/learners.py), which the operator appends. Both grows must settle, and the
    clients' history stay linearizable."""
    namespace = tls_cluster
    wait_healthy(namespace, CLUSTER, 3)
    pinned = credentials(namespace, f"{CLUSTER}-client-tls")  # read once, never again
    workload = KeyValueWorkload(lambda: member_endpoints(namespace, CLUSTER), lambda: pinned).start()
    began = time.monotonic()
    try:
        wait_for(lambda: workload.successes() >= 50, 60, what="the workload to get going")
        # A snapshot above the gap is what can hold a learner: write the log past it.
        past_the_gap = learners.MAX_APPLY_GAP + 1000
        fill(member_endpoints(namespace, CLUSTER), past_the_gap, 64, prefix="/entries/", tls=pinned, in_flight=32)
        wait_for(
            lambda: leader_applied_index(namespace) > past_the_gap,
            60,
            interval=2.0,
            what=f"the leader to apply {past_the_gap} entries",
        )
        plain_grow = timed_grow(namespace)
        patch_spec(namespace, CLUSTER, {"size": 3})
        wait_healthy(namespace, CLUSTER, 3, timeout=300)
        before_rotation = workload.successes()
        annotated = time.monotonic_ns()
        kubectl(
            "annotate", "etcdcluster", CLUSTER, "-n", namespace, "--overwrite", f"{naming.ANNOTATION_ROTATE_CA}=ca-idle"
        )
        phases: dict[str, float] = {}  # phase -> seconds from the annotation to its first sighting

        def rotation_done():
            obj = rotated(namespace, "CA", "ca-idle")
            phase = ((get_cluster(namespace, CLUSTER).get("status") or {}).get("tls") or {}).get("rotation") or {}
            if phase.get("phase"):
                phases.setdefault(phase["phase"], (time.monotonic_ns() - annotated) / 1e9)
            return obj

        wait_for(rotation_done, 300, interval=1.0, what="the CA rotation to finish")
        rotation_took = (time.monotonic_ns() - annotated) / 1e9
        wait_healthy(namespace, CLUSTER, 3)
        refused_from = workload.successes()
        rotated_grow = timed_grow(namespace)
        after_rotation = workload.successes() - refused_from
    finally:
        workload.stop()
        patch_spec(namespace, CLUSTER, {"size": 3})
    ran = time.monotonic() - began
    operations = workload.operations
    verdict = check(operations, visualize=str(tmp_path / "history"))
    last = max((o.returned for o in operations if o.returned is not None and o.call >= annotated), default=annotated)
    print(
        f"\n{len(operations)} operations in {ran:.0f}s ({len(operations) / ran:.0f}/s), "
        f"{before_rotation} succeeded before the rotation, {after_rotation} during the rotated grow, "
        f"{unknown_outcomes(operations)} puts of unknown outcome, failed calls by code: {dict(workload.errors)}\n"
        f"3 -> 5 without a rotation: {plain_grow:.1f}s; after the CA rotation: {rotated_grow:.1f}s "
        f"({rotated_grow / plain_grow:.2f}x)\nthe rotation took {rotation_took:.0f}s, phases first seen at "
        f"{ {k: round(v) for k, v in phases.items()} }s; the clients' last success with the old CA "
        f"{(last - annotated) / 1e9:.0f}s after the annotation\n{verdict.report}"
    )
    assert verdict.linearizable, f"{verdict.report}\nthe history and porcupine's view: {tmp_path}"
    # The case under test: the rotated grow ran with no client writing.
    assert after_rotation == 0, after_rotation
    obj = get_cluster(namespace, CLUSTER)
    assert not (obj["status"].get("learnerJoins") or {}).get("failures"), obj["status"]["learnerJoins"]
    wait_healthy(namespace, CLUSTER, 3, timeout=300)


def test_a_foreign_secret_of_a_certificate_name_is_reported_and_left_as_it_was(tls_namespace):
    """docs/security.md, "Objects the operator writes": another application's Secret named
    <cluster>-client-tls stops the new cluster's certificates with ChildrenOwned=False
    (ForeignSecret) and a Warning event, and stays byte for byte as it was: no data, label or
    owner reference added. Once it is gone the cluster creates its own and starts."""
    namespace, name = tls_namespace, "squatted"
    secret = f"{name}-client-tls"
    kubectl("create", "secret", "generic", secret, "-n", namespace, "--from-literal=token=another-application")
    before = kubectl_json("get", "secret", secret, "-n", namespace)
    apply_cluster(namespace, name, {"size": 1, "storage": {"emptyDir": {}}, "tls": {}})

    refused = wait_condition(namespace, name, "ChildrenOwned", "False", timeout=120)
    owned = condition(refused, "ChildrenOwned")
    assert owned["reason"] == "ForeignSecret" and f"Secret {secret} exists" in owned["message"], owned
    assert "another-application" not in json.dumps(refused["status"])
    wait_for(
        lambda: [
            e
            for e in kubectl_json("get", "events", "-n", namespace)["items"]
            if e["reason"] == "ForeignSecret" and e["type"] == "Warning" and e["involvedObject"]["name"] == name
        ],
        60,
        what="a Warning event ForeignSecret",
    )
    assert kubectl_json("get", "secret", secret, "-n", namespace) == before
    assert kubectl("get", "secret", f"{name}-ca", "-n", namespace, check=False).returncode != 0  # nothing issued
    assert member_pods(namespace, name) == []

    kubectl("delete", "secret", secret, "-n", namespace)
    wait_condition(namespace, name, "ChildrenOwned", "True", timeout=120)
    wait_healthy(namespace, name, 1, timeout=240)
    issued = kubectl_json("get", "secret", secret, "-n", namespace)["metadata"]
    assert issued["labels"][naming.LABEL_CLUSTER] == name
    assert [o["uid"] for o in issued["ownerReferences"] if o.get("controller")] == [refused["metadata"]["uid"]]
