"""The scratch members' throwaway TLS (core/scratch_tls.py): the certificates made inside the
verification and replay pods, and how those pods wire them (an init container writes them on
the emptyDir, etcd serves TLS on its unix socket and asks for a client certificate, the
check and the replay read the client's). The real etcd side: tests/etcd_processes/test_scratch_auth.py."""

from __future__ import annotations

import pathlib
import stat
import time

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from etcd_operator.core import scratch_tls, seed_containers
from etcd_operator.core.backup import scratch_pod
from etcd_operator.core.backup.scratch_verdict import CHECK_EXIT_CODES, Expected, init_failure_verdict
from etcd_operator.core.restore import replay_pod
from etcd_operator.core.restore.point_in_time import ReplayRecord
from etcd_operator.programs import scratch_check
from etcd_operator.programs import scratch_tls as program

NOW = 1_800_000_000.0


def cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def common_name(certificate: x509.Certificate) -> str:
    return certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def usages(certificate: x509.Certificate) -> list[x509.ObjectIdentifier]:
    return list(certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def signed_by(leaf: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        leaf.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError):  # a signature or issuer of another CA
        return False
    return True


def public_numbers_of_key(pem: bytes) -> ec.EllipticCurvePublicNumbers:
    key = serialization.load_pem_private_key(pem, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key.public_key().public_numbers()


def test_the_client_certificate_is_roots_and_the_server_certificate_names_the_socket_s_server_name():
    files = scratch_tls.throwaway_pki(NOW)
    ca, server, client = cert(files["ca.crt"]), cert(files["server.crt"]), cert(files["client.crt"])
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert signed_by(server, ca) and signed_by(client, ca)
    assert common_name(client) == "root"  # etcd's superuser: HashKV and Snapshot need the root role
    assert usages(client) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert usages(server) == [ExtendedKeyUsageOID.SERVER_AUTH]
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [scratch_tls.SERVER_NAME]
    assert public_numbers_of_key(files["client.key"]) == client.public_key().public_numbers()
    assert public_numbers_of_key(files["server.key"]) == server.public_key().public_numbers()
    for leaf in (server, client):
        assert leaf.not_valid_before_utc.timestamp() <= NOW < leaf.not_valid_after_utc.timestamp()


def test_the_ca_key_is_not_among_the_files_and_each_pod_gets_a_ca_of_its_own():
    files = scratch_tls.throwaway_pki(NOW)
    assert set(files) == {"ca.crt", "server.crt", "server.key", "client.crt", "client.key"}
    ca_numbers = cert(files["ca.crt"]).public_key().public_numbers()
    assert all(public_numbers_of_key(pem) != ca_numbers for name, pem in files.items() if name.endswith(".key"))
    other = scratch_tls.throwaway_pki(NOW)
    assert not signed_by(cert(files["client.crt"]), cert(other["ca.crt"]))


def test_the_program_writes_the_files_for_the_pods_user_only_and_a_rerun_replaces_them(tmp_path):
    folder = tmp_path / "tls"
    program.write(folder, time.time())
    first = (folder / "client.crt").read_bytes()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {
        name: 0o600 for name in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")
    }
    program.write(folder, time.time())  # a restarted init container
    assert (folder / "client.crt").read_bytes() != first
    tls = program.read_client_tls(str(folder))
    assert tls.server_name == scratch_tls.SERVER_NAME
    assert signed_by(cert(tls.cert), cert(tls.ca)) and common_name(cert(tls.cert)) == "root"
    assert public_numbers_of_key(tls.key) == cert(tls.cert).public_key().public_numbers()


def verification() -> dict:
    return scratch_pod.verification_pod(
        "b", "ns", "uid", "etcd:v3.6.0", "op:1", {"bucket": "bk"}, "p/x.db", "f" * 64, Expected(61, 60, 1234, None)
    )


def replay() -> dict:
    record = ReplayRecord("revision 33", "p/base.db", 25, "3.6.0", "a" * 64, "c1", 2, 3, 2, 33, "p/out.db")
    return replay_pod.replay_pod("r1", "ns", "etcd:v3.6.0", "op:1", {"bucket": "b"}, "p/ns/nightly/", record, None)


@pytest.mark.parametrize(
    ("pod", "scratch", "client"),
    [
        (verification, scratch_pod.SCRATCH, scratch_pod.CHECK_CONTAINER),
        (replay, replay_pod.SCRATCH, replay_pod.REPLAY_CONTAINER),
    ],
)
def test_the_scratch_member_serves_tls_of_the_pods_own_ca_to_client_certificates_only(pod, scratch, client):
    spec = pod()["spec"]
    tls = next(c for c in spec["initContainers"] if c["name"] == "scratch-tls")  # its files exist before etcd starts
    folder = f"{scratch}/tls"
    assert (tls["name"], tls["image"], tls["command"]) == (
        "scratch-tls",
        "op:1",
        ["python", "-m", "etcd_operator.programs.scratch_tls"],
    )
    assert tls["env"] == [{"name": "SCRATCH_TLS_DIR", "value": folder}]
    assert tls["volumeMounts"] == [{"name": "scratch", "mountPath": scratch}]  # the emptyDir only
    assert {"name": "scratch", "emptyDir": {}} in spec["volumes"]
    etcd = next(c for c in spec["containers"] if c["name"] == "etcd")
    args = dict(a.split("=", 1) for a in etcd["args"] if "=" in a)
    assert args["--listen-client-urls"].startswith("unixs://")
    assert (args["--cert-file"], args["--key-file"], args["--trusted-ca-file"]) == (
        f"{folder}/server.crt",
        f"{folder}/server.key",
        f"{folder}/ca.crt",
    )
    assert args["--client-cert-auth"] == "true"
    assert args["--enable-grpc-gateway"] == "false"  # no JSON API beside gRPC
    reader = next(c for c in spec["containers"] if c["name"] == client)
    assert {"name": "SCRATCH_TLS_DIR", "value": folder} in reader["env"]
    assert {"name": "scratch", "mountPath": scratch} in reader["volumeMounts"]


def test_a_verification_whose_certificates_were_not_made_is_retried_not_failed():
    verdict = init_failure_verdict(seed_containers.SCRATCH_TLS_CONTAINER, 1, "")
    assert (verdict.verified, verdict.reason, verdict.complete) == (None, "ScratchMemberUnavailable", False)


def test_the_tls_folder_is_in_the_scratch_members_working_directory():
    member = seed_containers.scratch_member("etcd:v3.6.0", "/w", "m", "/w/data", [])
    assert member["workingDir"] == "/w"
    flags = scratch_tls.member_flags("/w/tls")
    assert [a for a in member["args"] if a in flags] == list(flags)
    assert pathlib.PurePosixPath(seed_containers.scratch_tls_dir("/w")).parent == pathlib.PurePosixPath("/w")


def test_a_check_without_its_client_certificate_is_retried_not_failed(tmp_path):
    env = {
        "ETCD_SOCKET": str(tmp_path / "etcd-client:0"),
        "SCRATCH_TLS_DIR": str(tmp_path / "tls"),  # never written
        "VERDICT_FILE": str(tmp_path / "verdict"),
        "EXPECTED_REVISION": "61",
    }
    assert scratch_check.main(env) == CHECK_EXIT_CODES["ScratchMemberUnavailable"]
    assert (tmp_path / "verdict").read_text().startswith("no client certificate")


@pytest.mark.parametrize(
    ("image", "separate"),
    [
        ("registry.example:5000/etcd:v3.6.0", True),
        ("etcd:v3.5.8", True),  # the first with --listen-client-http-urls
        ("etcd:v3.5.7", False),  # etcd would refuse the flag: gRPC and HTTP share the TLS listener
        ("etcd:latest", False),  # no version known: the flags every supported etcd takes
        ("registry.example:5000/etcd", False),
    ],
)
def test_http_gets_a_tls_socket_of_its_own_where_the_images_etcd_takes_the_flag(image, separate):
    args = seed_containers.scratch_member(image, "/w", "m", "/w/data", [])["args"]
    http = [a for a in args if a.startswith("--listen-client-http-urls=")]
    assert http == (["--listen-client-http-urls=unixs://etcd-http:0"] if separate else [])
    assert "--listen-client-urls=unixs://etcd-client:0" in args and "--client-cert-auth=true" in args
