"""Key generation, signing and parsing of certificates (ECDSA P-256), in the cert-manager
Secret layout. CPU-bound: callers run these in a thread (asyncio.to_thread). What to issue
and when is decided in cluster.certs and cluster.tls_plan."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
from collections.abc import Mapping

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from etcd_operator.core.cluster.certs import (
    CA_KEY,
    CERT_KEY,
    NEXT_CERT_KEY,
    NEXT_PRIVATE_KEY_KEY,
    PEER_COMMON_NAME,
    PRIVATE_KEY_KEY,
    CertKind,
    CertRequest,
    CertView,
)

BACKDATE = datetime.timedelta(minutes=5)  # tolerates clocks a little behind ours

CAN_SIGN_CERTIFICATES = (
    ec.EllipticCurvePrivateKey,
    rsa.RSAPrivateKey,
    dsa.DSAPrivateKey,
    ed25519.Ed25519PrivateKey,
    ed448.Ed448PrivateKey,
)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def fingerprint(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def _builder(
    request: CertRequest, public_key: CertificatePublicKeyTypes, issuer: x509.Name, now: float
) -> x509.CertificateBuilder:
    start = datetime.datetime.fromtimestamp(now, datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, request.common_name)]))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start - BACKDATE)
        .not_valid_after(start + datetime.timedelta(seconds=request.lifetime))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def new_ca(request: CertRequest, now: float) -> dict[str, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, request.common_name)])
    cert = (
        _builder(request, key.public_key(), name, now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
    return {CERT_KEY: _pem_cert(cert), PRIVATE_KEY_KEY: _pem_key(key), CA_KEY: _pem_cert(cert)}


def change_ca(current: Mapping[str, bytes], change: str, request: CertRequest, now: float) -> dict[str, bytes]:
    """One step of a CA rotation on the CA Secret's data (see UpdateCASecret)."""
    data = dict(current)
    if change == "add-next":
        fresh = new_ca(request, now)
        data[NEXT_CERT_KEY], data[NEXT_PRIVATE_KEY_KEY] = fresh[CERT_KEY], fresh[PRIVATE_KEY_KEY]
        data[CA_KEY] = current[CERT_KEY] + fresh[CERT_KEY]
    elif change == "promote-next":
        if NEXT_CERT_KEY not in data:
            raise ValueError("no next CA to promote")
        data[CERT_KEY], data[PRIVATE_KEY_KEY] = data.pop(NEXT_CERT_KEY), data.pop(NEXT_PRIVATE_KEY_KEY)
        data[CA_KEY] = current[CA_KEY]
    elif change == "drop-old":
        data[CA_KEY] = current[CERT_KEY]
    else:
        raise ValueError(f"unknown CA change {change!r}")
    return data


def describe_next_ca(data: Mapping[str, bytes]) -> CertView | None:
    if NEXT_CERT_KEY not in data:
        return None
    return describe(
        {
            CERT_KEY: data[NEXT_CERT_KEY],
            PRIVATE_KEY_KEY: data.get(NEXT_PRIVATE_KEY_KEY, b""),
            CA_KEY: data.get(CA_KEY, b""),
        }
    )


def issue_leaf(
    request: CertRequest, ca: Mapping[str, bytes], previous: Mapping[str, bytes] | None, now: float
) -> dict[str, bytes]:
    """A leaf signed by the CA Secret's key, with ca.crt set to the CA Secret's trust bundle.
    A renewal keeps the leaf's key, so that a reader of the two files never pairs a new
    certificate with an old key (the key changes when the leaf is reissued)."""
    if request.common_name == PEER_COMMON_NAME and request.kind != CertKind.MEMBER:
        raise ValueError(f"{PEER_COMMON_NAME} is the members' peer identity; only the member certificate carries it")
    ca_cert = x509.load_pem_x509_certificate(ca[CERT_KEY])
    ca_key = serialization.load_pem_private_key(ca[PRIVATE_KEY_KEY], None)
    if not isinstance(ca_key, CAN_SIGN_CERTIFICATES):
        raise TypeError(f"the CA key ({type(ca_key).__name__}) cannot sign certificates")
    key = _reusable_key(previous)
    if key is None:
        key = ec.generate_private_key(ec.SECP256R1())
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if request.server_auth else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if request.client_auth else []
    )
    builder = (
        _builder(request, key.public_key(), ca_cert.subject, now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                key_cert_sign=False,
                crl_sign=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    names = [x509.DNSName(n) for n in request.dns_names] + [
        x509.IPAddress(ipaddress.ip_address(ip)) for ip in request.ip_addresses
    ]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return {CERT_KEY: _pem_cert(cert), PRIVATE_KEY_KEY: _pem_key(key), CA_KEY: ca.get(CA_KEY) or ca[CERT_KEY]}


def _reusable_key(previous: Mapping[str, bytes] | None) -> ec.EllipticCurvePrivateKey | None:
    if not previous or PRIVATE_KEY_KEY not in previous:
        return None
    try:
        key = serialization.load_pem_private_key(previous[PRIVATE_KEY_KEY], None)
    except (ValueError, TypeError):
        return None
    return key if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1" else None


def _public_numbers(public_key: object) -> object:
    """Keys without public numbers (Ed25519, X25519, ...) are not keys this PKI uses."""
    if not isinstance(public_key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey, dsa.DSAPublicKey)):
        raise TypeError(f"unusable key type {type(public_key).__name__}")
    return public_key.public_numbers()


def describe(data: Mapping[str, bytes]) -> CertView:
    """What a certificate Secret holds, without its key: problems are reported, not raised."""
    try:
        cert = x509.load_pem_x509_certificate(data[CERT_KEY])
    except KeyError:
        return _broken(f"no {CERT_KEY}")
    except ValueError:
        return _broken(f"{CERT_KEY} is not a PEM certificate")
    try:
        bundle = x509.load_pem_x509_certificates(data.get(CA_KEY) or b"")
    except ValueError:
        bundle = []
    problem = None
    try:
        key = serialization.load_pem_private_key(data[PRIVATE_KEY_KEY], None)
        if _public_numbers(key.public_key()) != _public_numbers(cert.public_key()):
            problem = f"{PRIVATE_KEY_KEY} does not match {CERT_KEY}"
    except KeyError:
        problem = f"no {PRIVATE_KEY_KEY}"
    except (ValueError, TypeError, AttributeError):
        problem = f"{PRIVATE_KEY_KEY} is not a usable private key"
    if not bundle:
        problem = problem or f"no {CA_KEY}"
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns_names = tuple(sans.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        dns_names = ()
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    return CertView(
        fingerprint=fingerprint(cert),
        not_before=cert.not_valid_before_utc.timestamp(),
        not_after=cert.not_valid_after_utc.timestamp(),
        dns_names=dns_names,
        issuer_fingerprint=_signer(cert, bundle),
        trusted=tuple(fingerprint(c) for c in bundle),
        is_ca=is_ca,
        problem=problem,
        common_name=_common_name(cert),
    )


def _common_name(cert: x509.Certificate) -> str:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def _signer(cert: x509.Certificate, bundle: list[x509.Certificate]) -> str | None:
    for ca in bundle:
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return fingerprint(ca)
    return None


def _broken(problem: str) -> CertView:
    return CertView(fingerprint="", not_before=0.0, not_after=0.0, problem=problem)
