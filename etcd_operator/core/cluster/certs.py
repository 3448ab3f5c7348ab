"""Certificates of a TLS cluster: which Secrets hold them, which names and usages each
carries, and what the operator observed of them (never key material). Pure."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.spec import ISSUER_MANAGED, ClusterSpec

# cert-manager's Secret layout, used for every certificate the operator issues or reads.
CERT_KEY = "tls.crt"
PRIVATE_KEY_KEY = "tls.key"
CA_KEY = "ca.crt"
# The Managed CA Secret also holds, during a CA rotation, the CA that takes over.
NEXT_CERT_KEY = "next.crt"
NEXT_PRIVATE_KEY_KEY = "next.key"

# Where member pods mount their certificate.
MOUNT_DIR = "/etc/etcd/tls"
OPERATOR_COMMON_NAME = "etcd-operator"
USER_COMMON_NAME = "etcd-client"
# The members' peer identity: the CN of the member certificate, the only CN the peer port
# accepts (--peer-cert-allowed-cn). A spec.auth user's name cannot carry a ':' (the CRD's
# pattern, and CEL names it), and pki.issue_leaf signs it into the member certificate only.
PEER_COMMON_NAME = "etcd-member:peer"


class CertKind(enum.StrEnum):
    CA = "ca"  # the Managed issuer's CA (tls.crt, tls.key) and trust bundle (ca.crt)
    MEMBER = "member"  # members' server and peer certificate
    OPERATOR = "operator"  # the operator's client certificate
    CLIENT = "client"  # the client certificate for users, <cluster>-client-tls


LEAVES = (CertKind.MEMBER, CertKind.OPERATOR, CertKind.CLIENT)


def secret_name(spec: ClusterSpec, cluster: str, kind: CertKind) -> str:
    if spec.tls.issuer != ISSUER_MANAGED:
        if kind == CertKind.MEMBER and spec.tls.member_secret:
            return spec.tls.member_secret
        if kind == CertKind.OPERATOR and spec.tls.operator_secret:
            return spec.tls.operator_secret
    return {
        CertKind.CA: f"{cluster}-ca",
        CertKind.MEMBER: f"{cluster}-member-tls",
        CertKind.OPERATOR: f"{cluster}-operator-tls",
        CertKind.CLIENT: f"{cluster}-client-tls",
    }[kind]


def kinds_to_observe(spec: ClusterSpec) -> tuple[CertKind, ...]:
    if spec.tls.issuer == ISSUER_MANAGED:
        return (CertKind.CA, *LEAVES)
    return (CertKind.MEMBER, CertKind.OPERATOR)


def member_dns_names(cluster: str, namespace: str, domain: str = naming.DEFAULT_CLUSTER_DOMAIN) -> tuple[str, ...]:
    """Every name a client or peer may use for a member: the member's own DNS name (by
    wildcard, so members added later are covered), the client Service with and without
    namespace, svc and cluster-domain suffixes, and localhost for clients on the member's
    host. Clients that dial a pod IP verify one of these names instead (the operator does).
    Peers are checked by the name their address resolves back to, which ends in `domain`."""
    peer, client = naming.peer_service(cluster), naming.client_service(cluster)
    names = []
    for service, wildcard in ((peer, True), (client, False)):
        for suffix in ("", f".{namespace}", f".{namespace}.svc", f".{namespace}.svc.{domain}"):
            names.append(f"*.{service}{suffix}" if wildcard else f"{service}{suffix}")
    names.append("localhost")
    return tuple(names)


MEMBER_IP_ADDRESSES = ("127.0.0.1", "::1")


@dataclasses.dataclass(frozen=True)
class CertRequest:
    """What to sign: the subject, names, usages and lifetime of one certificate."""

    kind: CertKind
    common_name: str
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    server_auth: bool = False
    client_auth: bool = False
    lifetime: float = 0.0


def request_for(
    spec: ClusterSpec, cluster: str, namespace: str, kind: CertKind, domain: str = naming.DEFAULT_CLUSTER_DOMAIN
) -> CertRequest:
    lifetime = spec.tls.certificate_lifetime
    if kind == CertKind.CA:
        return CertRequest(kind, f"etcd-ca {namespace}/{cluster}", lifetime=spec.tls.ca_lifetime)
    if kind == CertKind.MEMBER:
        return CertRequest(
            kind,
            PEER_COMMON_NAME,
            member_dns_names(cluster, namespace, domain),
            MEMBER_IP_ADDRESSES,
            server_auth=True,
            client_auth=True,
            lifetime=lifetime,
        )
    common = OPERATOR_COMMON_NAME if kind == CertKind.OPERATOR else USER_COMMON_NAME
    return CertRequest(kind, common, client_auth=True, lifetime=lifetime)


def user_secret_name(cluster: str, user: str) -> str:
    """The Secret of a spec.auth user's client certificate (CN = the user's name)."""
    return f"{cluster}-user-{user}"


def created_secret_names(spec: ClusterSpec, cluster: str) -> tuple[str, ...]:
    """The Secrets the operator creates for a cluster of this spec: the Managed issuer's
    certificates, and the client certificate of each spec.auth user that asks for one
    (a restore into a new cluster checks that none exists, core/restore/planner.py)."""
    if not spec.tls.enabled or spec.tls.issuer != ISSUER_MANAGED:
        return ()
    users = [u.name for u in spec.auth.users if u.certificate] if spec.auth.declared else []
    return (
        *(secret_name(spec, cluster, k) for k in (CertKind.CA, *LEAVES)),
        *(user_secret_name(cluster, u) for u in users),
    )


def user_request(spec: ClusterSpec, user: str) -> CertRequest:
    """A user's certificate: short-lived (spec.auth.certificateLifetime), renewed at
    spec.tls.renewAtFraction of it, so that its lifetime bounds how long it outlives its user."""
    return CertRequest(CertKind.CLIENT, user, client_auth=True, lifetime=spec.auth.certificate_lifetime)


@dataclasses.dataclass(frozen=True)
class CertView:
    """One certificate Secret as observed: the leaf's fingerprint, validity, names and
    signer, and the fingerprints of the CAs its ca.crt trusts. No key material."""

    fingerprint: str
    not_before: float
    not_after: float
    dns_names: tuple[str, ...] = ()
    issuer_fingerprint: str | None = None  # the CA in this cluster's bundle that signed it
    trusted: tuple[str, ...] = ()  # fingerprints of the CAs in ca.crt
    is_ca: bool = False
    problem: str | None = None  # unreadable, key does not match, ...
    common_name: str = ""  # the subject's CN: etcd's user name for a client certificate

    def renewal_due(self, fraction: float, now: float) -> bool:
        return now >= self.not_before + fraction * (self.not_after - self.not_before)


ROTATE_LEAVES = "Leaves"
ROTATE_CA = "CA"
# CA rotation phases, in order; each is rolled through every member before the next.
PHASE_TRUST = "TrustNewCA"  # the trust bundle holds the old and the new CA
PHASE_ISSUE = "IssueLeaves"  # the new CA signs; every leaf is reissued by it
PHASE_DROP = "DropOldCA"  # the trust bundle holds the new CA only
PHASE_RENEW = "RenewLeaves"  # a leaf rotation's only phase


@dataclasses.dataclass(frozen=True)
class Rotation:
    """A rotation in flight, recorded in status.tls.rotation before its first step so that a
    restarted operator resumes it. `replaced`: fingerprints of the leaves (Leaves) or the
    CA (CA) being replaced."""

    kind: str
    request: str
    phase: str
    replaced: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "request": self.request, "phase": self.phase, "replaced": list(self.replaced)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Rotation | None:
        if not data or not data.get("kind"):
            return None
        return cls(data["kind"], str(data.get("request", "")), data.get("phase", ""), tuple(data.get("replaced") or ()))


@dataclasses.dataclass(frozen=True)
class TLSView:
    """What the operator knows of a cluster's TLS: the transport recorded in status (None
    before anything was recorded) and each certificate Secret (None: absent)."""

    transport: str | None = "http"  # built by hand (tests, simulator): plaintext; the observer reads status
    certs: dict[CertKind, CertView | None] = dataclasses.field(default_factory=dict)
    next_ca: CertView | None = None  # the CA taking over during a CA rotation
    rotation: Rotation | None = None
    requested: dict[str, str] = dataclasses.field(default_factory=dict)  # kind -> annotation value
    rotated: dict[str, str] = dataclasses.field(default_factory=dict)  # kind -> last request completed
    served: dict[str, str] | None = None  # member -> fingerprint it serves (observed during rotations)
    # status.tls.peerIdentity: the CN the members' peer port accepts once recorded (None: any
    # certificate of the cluster's CA, as members ran before the peer identity).
    peer_identity: str | None = None
    # Certificate Secrets the operator would write that exist and are not its own (Secret
    # name -> why; cluster/ownership.py): read, never written over.
    foreign: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def awaits_peer_identity(self) -> bool:
        """A Managed TLS cluster whose peer port is not yet restricted to the members."""
        return self.transport == "https" and self.peer_identity is None and CertKind.CA in self.certs

    def cert(self, kind: CertKind) -> CertView | None:
        return self.certs.get(kind)

    def pending_request(self, kind: str) -> str | None:
        request = self.requested.get(kind)
        return request if request and request != self.rotated.get(kind) else None
