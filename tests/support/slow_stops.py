"""Member pods slow to stop, for real: a mutating admission webhook, served from the test's
process, gives the etcd container of every pod created in one namespace a preStop sleep.
When such a pod is deleted, its kubelet runs the sleep before it sends SIGTERM, so the
member's etcd keeps running and answering for that long, as on a node slow to stop pods.

    with slow_stops(namespace, seconds=3):
        ...  # pods created here stop `seconds` late

The kube-apiserver runs on the host and calls the webhook at 127.0.0.1 over TLS with a CA made
here. The configuration selects only `namespace`, so the other tests on the shared nodes are
left alone; it is deleted on leaving."""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.server
import ipaddress
import json
import ssl
import tempfile
import threading
from collections.abc import Iterator

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.etcd_process import free_port
from tests.support.kubectl import kubectl
from tests.support.waiting import wait_for

CONTAINER = "etcd"


def _serving_pair() -> tuple[bytes, bytes, bytes]:
    """A CA, and a certificate for 127.0.0.1 it signed with its key: (ca, cert, key) as PEM."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "slow-stops-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem


def pre_stop_patch(pod: dict, seconds: int) -> list[dict]:
    """The JSON patch that gives the pod's etcd container a preStop sleep (none for other pods)."""
    for index, container in enumerate((pod.get("spec") or {}).get("containers") or []):
        if container.get("name") == CONTAINER:
            hook = {"preStop": {"sleep": {"seconds": seconds}}}
            return [{"op": "add", "path": f"/spec/containers/{index}/lifecycle", "value": hook}]
    return []


def _handler(seconds: int) -> type[http.server.BaseHTTPRequestHandler]:
    class Mutate(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request = review["request"]
            patch = pre_stop_patch(request.get("object") or {}, seconds)
            response: dict = {"uid": request["uid"], "allowed": True}
            if patch:
                response |= {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(patch).encode()).decode()}
            body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args) -> None:
            pass

    return Mutate


def _configuration(name: str, namespace: str, port: int, ca: bytes) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "slow-stops.test.etcd.operator.dev",
                "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate", "caBundle": base64.b64encode(ca).decode()},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
            }
        ],
    }


def _probe_pod(namespace: str) -> dict:
    """A pod with an etcd container, created by dry run only: the webhook's answer shows in it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "slow-stops-probe", "namespace": namespace},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": CONTAINER,
                    "image": "probe.invalid/none:1",
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }


def _in_force(namespace: str, seconds: int) -> bool:
    result = kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(_probe_pod(namespace)), check=False
    )
    if result.returncode != 0:
        return False
    hook = (json.loads(result.stdout)["spec"]["containers"][0].get("lifecycle") or {}).get("preStop") or {}
    return hook == {"sleep": {"seconds": seconds}}


@contextlib.contextmanager
def serving(seconds: int) -> Iterator[tuple[int, bytes]]:
    """The webhook over TLS at 127.0.0.1, while the block runs: (its port, its CA as PEM)."""
    ca, cert, key = _serving_pair()
    with tempfile.TemporaryDirectory(prefix="slow-stops-") as folder:
        with open(f"{folder}/tls.crt", "wb") as file:
            file.write(cert)
        with open(f"{folder}/tls.key", "wb") as file:
            file.write(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(f"{folder}/tls.crt", f"{folder}/tls.key")
    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _handler(seconds))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield port, ca
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def slow_stops(namespace: str, seconds: int) -> Iterator[None]:
    """While the block runs, every pod created in `namespace` stops `seconds` late."""
    name = f"slow-stops-{namespace}"
    with serving(seconds) as (port, ca):
        try:
            kubectl("apply", "-f", "-", input=json.dumps(_configuration(name, namespace, port, ca)))
            wait_for(lambda: _in_force(namespace, seconds), 30, interval=0.5, what="the preStop webhook in force")
            yield
        finally:
            kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found")


def pre_stop_seconds(pod: dict) -> int | None:
    """The preStop sleep of the pod's etcd container, if any."""
    for container in pod["spec"]["containers"]:
        if container["name"] == CONTAINER:
            return (((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds")
    return None
