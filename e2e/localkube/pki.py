"""Certificates and keys for the local control plane: one CA, a serving certificate for
kube-apiserver, client certificates, and the service-account signing key pair."""

from __future__ import annotations

import datetime
import ipaddress
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
APISERVER_DNS_NAMES = [
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
]
APISERVER_IPS = ["127.0.0.1", "10.0.0.1"]


def _write_key(path: pathlib.Path, key) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: pathlib.Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _load_ca(pki: pathlib.Path):
    key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    return key, cert


def _create_ca(pki: pathlib.Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = _name("localkube-ca")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write_key(pki / "ca.key", key)
    _write_cert(pki / "ca.crt", cert)


def _issue(
    pki: pathlib.Path,
    stem: str,
    subject: x509.Name,
    usage: ExtendedKeyUsageOID,
    dns_names: list[str] = (),
    ips: list[str] = (),
) -> None:
    ca_key, ca_cert = _load_ca(pki)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if dns_names or ips:
        alt_names = [x509.DNSName(n) for n in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    _write_key(pki / f"{stem}.key", key)
    _write_cert(pki / f"{stem}.crt", builder.sign(ca_key, hashes.SHA256()))


def ensure(pki: pathlib.Path) -> None:
    """Create whatever is missing; existing material is kept so restarts stay trusted."""
    pki.mkdir(parents=True, exist_ok=True)
    if not (pki / "ca.crt").exists():
        _create_ca(pki)
    if not (pki / "apiserver.crt").exists():
        _issue(
            pki,
            "apiserver",
            _name("kube-apiserver"),
            ExtendedKeyUsageOID.SERVER_AUTH,
            APISERVER_DNS_NAMES,
            APISERVER_IPS,
        )
    clients = {
        "admin": _name("localkube-admin", "system:masters"),
        "controller-manager": _name("system:kube-controller-manager"),
    }
    for stem, subject in clients.items():
        if not (pki / f"{stem}.crt").exists():
            _issue(pki, stem, subject, ExtendedKeyUsageOID.CLIENT_AUTH)
    if not (pki / "sa.key").exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(pki / "sa.key", key)
        (pki / "sa.pub").write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )


def _serving_ips(path: pathlib.Path) -> set[str]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}


def ensure_real_nodes(pki: pathlib.Path, apiserver_ips: list[str], node_names: list[str]) -> None:
    """Real nodes: the apiserver certificate also names the bridge and Service addresses
    (reissued under the same CA when it does not), and each node component gets a client
    certificate in the identity the Node authorizer and the default RBAC bindings expect."""
    wanted = [*APISERVER_IPS, *apiserver_ips]
    if not set(wanted) <= _serving_ips(pki / "apiserver.crt"):
        _issue(pki, "apiserver", _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, APISERVER_DNS_NAMES, wanted)
    clients = {
        "kube-proxy": _name("system:kube-proxy"),
        "kube-scheduler": _name("system:kube-scheduler"),
        "coredns": _name("localkube-coredns", "system:masters"),
        **{f"kubelet-{node}": _name(f"system:node:{node}", "system:nodes") for node in node_names},
    }
    for stem, subject in clients.items():
        if not (pki / f"{stem}.crt").exists():
            _issue(pki, stem, subject, ExtendedKeyUsageOID.CLIENT_AUTH)
