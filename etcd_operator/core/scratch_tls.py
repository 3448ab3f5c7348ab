"""The throwaway TLS of a scratch member (a verification's, a replay's): a CA made inside
the pod at its start, a server certificate for the member and a client certificate whose CN
is `root`. A snapshot of a cluster with authentication on carries its users and roles, and
etcd requires a `root` user with the root role while authentication is on; with
--client-cert-auth, etcd takes a client certificate's CN as its user, without a password.
So the pod's own client reads the restored store as root, with no secret given to the pod.
With authentication off, etcd only checks that the certificate is the CA's.

The CA's key is never written: once the two certificates are signed nothing else can be
issued, and the files never leave the pod's emptyDir. Pure (CPU-bound: run in a thread)."""

from __future__ import annotations

from etcd_operator.core.cluster import pki
from etcd_operator.core.cluster.certs import CA_KEY, CERT_KEY, PRIVATE_KEY_KEY, CertKind, CertRequest

# The name the member's certificate carries and the client checks (a unix socket has no host).
SERVER_NAME = "scratch-member.invalid"
CLIENT_USER = "root"  # etcd's superuser: HashKV and Snapshot need the root role
LIFETIME_SECONDS = 30 * 24 * 3600.0  # longer than any pod that uses it lives

# The files in the TLS folder of the pod's emptyDir.
CA_FILE = "ca.crt"
SERVER_CERT_FILE = "server.crt"
SERVER_KEY_FILE = "server.key"
CLIENT_CERT_FILE = "client.crt"
CLIENT_KEY_FILE = "client.key"


def throwaway_pki(now: float) -> dict[str, bytes]:
    """The files to write: file name -> PEM. No CA key among them."""
    ca = pki.new_ca(CertRequest(CertKind.CA, "etcd-operator scratch CA", lifetime=LIFETIME_SECONDS), now)
    server = pki.issue_leaf(
        CertRequest(
            CertKind.MEMBER, "scratch-member", dns_names=(SERVER_NAME,), server_auth=True, lifetime=LIFETIME_SECONDS
        ),
        ca,
        None,
        now,
    )
    client = pki.issue_leaf(
        CertRequest(CertKind.CLIENT, CLIENT_USER, client_auth=True, lifetime=LIFETIME_SECONDS), ca, None, now
    )
    return {
        CA_FILE: ca[CA_KEY],
        SERVER_CERT_FILE: server[CERT_KEY],
        SERVER_KEY_FILE: server[PRIVATE_KEY_KEY],
        CLIENT_CERT_FILE: client[CERT_KEY],
        CLIENT_KEY_FILE: client[PRIVATE_KEY_KEY],
    }


def member_flags(folder: str) -> tuple[str, ...]:
    """etcd's flags for serving clients with the certificates in `folder`, asking each client
    for a certificate of that CA (the listener's URL scheme must be unixs). No JSON gateway:
    nothing uses it, and it would dial the member with the server certificate, which is no
    client's."""
    return (
        f"--cert-file={folder}/{SERVER_CERT_FILE}",
        f"--key-file={folder}/{SERVER_KEY_FILE}",
        f"--trusted-ca-file={folder}/{CA_FILE}",
        "--client-cert-auth=true",
        "--enable-grpc-gateway=false",
    )
