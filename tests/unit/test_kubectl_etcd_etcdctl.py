"""`kubectl etcd etcdctl`'s pure parts and its session: which Secret it reads, that it takes
client identities only (never the operator's nor the members'), the files it writes and that
they and the port-forward are gone afterwards, also on Ctrl-C and SIGTERM. The Secrets are
those the operator writes: certificates signed by its own PKI code for the requests it makes,
labelled as execute_certificates.write_secret and execute_auth label them."""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from etcd_operator.core.cluster import certs, naming, pki
from etcd_operator.core.cluster.certs import CertKind
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator_kubectl import cli, etcdctl
from tests.support.waiting import wait_for

NAMESPACE = "ns"
NOW = time.time()
SPEC = ClusterSpec.from_dict({"tls": {"enabled": True}})


def operator_secret(cluster: str, name: str, data: dict[str, bytes], user: str | None = None) -> dict:
    """A certificate Secret as the operator writes it (write_secret), as the API server returns it."""
    labels = {**naming.selector_labels(cluster), **({naming.LABEL_AUTH_USER: user} if user else {})}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def issued(cluster: str) -> dict[str, dict]:
    """The Secrets the operator issues for `cluster` with a spec.auth user tenant-a, by name."""
    ca = pki.new_ca(certs.request_for(SPEC, cluster, NAMESPACE, CertKind.CA), NOW)
    secrets = {}
    for kind in certs.LEAVES:
        data = pki.issue_leaf(certs.request_for(SPEC, cluster, NAMESPACE, kind), ca, None, NOW)
        name = certs.secret_name(SPEC, cluster, kind)
        secrets[name] = operator_secret(cluster, name, data)
    user = certs.user_secret_name(cluster, "tenant-a")
    data = pki.issue_leaf(certs.user_request(SPEC, "tenant-a"), ca, None, NOW)
    secrets[user] = operator_secret(cluster, user, data, "tenant-a")
    return secrets


DEMO = issued("demo")


def test_the_default_identity_is_the_clusters_client_secret_and_a_user_is_its_own():
    assert etcdctl.identity(SPEC, "demo", None) == etcdctl.Identity("demo", "demo-client-tls", "etcd-client")
    assert etcdctl.identity(SPEC, "demo", "tenant-a") == etcdctl.Identity(
        "demo", "demo-user-tenant-a", "tenant-a", "tenant-a"
    )


@pytest.mark.parametrize(
    "user, why",
    [
        ("etcd-operator", "is the operator's own identity"),
        ("root", "is etcd's root user"),
        ("etcd-member:peer", "is the members' peer identity"),
        ("Tenant_A", "is no spec.auth user name"),
        ("../demo-operator-tls", "is no spec.auth user name"),
    ],
)
def test_a_user_that_is_no_client_identity_is_refused_before_any_secret_is_named(user, why):
    with pytest.raises(etcdctl.Refused, match=why):
        etcdctl.identity(SPEC, "demo", user)


def test_certificates_of_your_own_have_no_client_secret_to_read():
    own = ClusterSpec.from_dict(
        {"tls": {"enabled": True, "issuer": "Secrets", "memberSecretName": "m", "operatorSecretName": "o"}}
    )
    for user in (None, "tenant-a"):
        with pytest.raises(etcdctl.Refused, match="spec.tls.issuer: Secrets"):
            etcdctl.identity(own, "demo", user)


@pytest.mark.parametrize("user", [None, "tenant-a"])
def test_the_identitys_own_secret_gives_its_files(user):
    who = etcdctl.identity(SPEC, "demo", user)
    data = etcdctl.credentials(who, DEMO[who.secret])
    assert data == {k: base64.b64decode(v) for k, v in DEMO[who.secret]["data"].items()}
    assert pki.describe(data).common_name == who.common_name and pki.describe(data).problem is None


@pytest.mark.parametrize(
    "user, holder, why",
    [
        # The operator's certificate, or the members', under the name of a client Secret.
        (None, "demo-operator-tls", "holds the operator's own identity (CN etcd-operator)"),
        ("tenant-a", "demo-operator-tls", "the certificate of no spec.auth user, not of tenant-a"),
        (None, "demo-member-tls", "holds the members' peer identity (CN etcd-member:peer)"),
        # Another identity the operator issued for the cluster.
        (None, "demo-user-tenant-a", "the certificate of user tenant-a, not of etcd-client"),
        ("tenant-a", "demo-client-tls", "the certificate of no spec.auth user, not of tenant-a"),
    ],
)
def test_a_secret_holding_another_identity_is_refused_naming_the_secret_only(user, holder, why):
    who = etcdctl.identity(SPEC, "demo", user)
    secret = DEMO[holder]
    with pytest.raises(etcdctl.Refused) as refused:
        etcdctl.credentials(who, secret)
    message = str(refused.value)
    assert message.startswith(f"Secret {who.secret}: {why}; "), message
    assert "BEGIN" not in message and not any(v[:40] in message for v in secret["data"].values())


def test_the_operators_identity_is_refused_even_where_the_labels_say_client():
    """The client Secret's name and labels with the operator's certificate in it: the CN decides."""
    secret = {**DEMO["demo-client-tls"], "data": DEMO["demo-operator-tls"]["data"]}
    with pytest.raises(etcdctl.Refused, match=r"holds the operator's own identity \(CN etcd-operator\)"):
        etcdctl.credentials(etcdctl.identity(SPEC, "demo", None), secret)
    secret = {**DEMO["demo-client-tls"], "data": DEMO["demo-member-tls"]["data"]}
    with pytest.raises(etcdctl.Refused, match="the members' peer identity"):
        etcdctl.credentials(etcdctl.identity(SPEC, "demo", None), secret)


def test_a_user_name_that_spells_another_clusters_operator_secret_is_refused():
    """Cluster `a`'s user `x-operator-tls` names the Secret a-user-x-operator-tls: the operator
    Secret of a cluster `a-user-x` in the same namespace. Its labels name that cluster."""
    other = issued("a-user-x")["a-user-x-operator-tls"]
    who = etcdctl.identity(SPEC, "a", "x-operator-tls")
    assert who.secret == other["metadata"]["name"]
    with pytest.raises(etcdctl.Refused, match="not labelled etcd.operator.dev/cluster=a, so not one the operator"):
        etcdctl.credentials(who, other)


def test_a_secret_without_the_files_is_refused_by_what_it_lacks():
    secret = DEMO["demo-client-tls"]
    lacking = {**secret, "data": {k: v for k, v in secret["data"].items() if k != "tls.key"}}
    with pytest.raises(etcdctl.Refused, match="holds no tls.key"):
        etcdctl.credentials(etcdctl.identity(SPEC, "demo", None), lacking)


def test_the_transport_is_the_recorded_one_then_the_specs():
    assert etcdctl.serves_tls({"spec": {"tls": {"enabled": True}}, "status": {"tls": {"transport": "https"}}})
    # A cluster that predates TLS: the CRD default reads enabled, the record says plaintext.
    assert not etcdctl.serves_tls({"spec": {"tls": {"enabled": True}}, "status": {"tls": {"transport": "http"}}})
    assert etcdctl.serves_tls({"spec": {"tls": {"enabled": True}}, "status": {}})
    assert not etcdctl.serves_tls({"spec": {"tls": {"enabled": False}}})


def test_the_port_forward_and_etcdctl_command_lines():
    assert etcdctl.port_forward_argv("kubectl", "/k", "ctx", "ns", "demo", None) == [
        "kubectl",
        "--kubeconfig",
        "/k",
        "--context",
        "ctx",
        "port-forward",
        "-n",
        "ns",
        "--address",
        "127.0.0.1",
        "service/demo-client",
        ":2379",
    ]
    assert etcdctl.port_forward_argv("kubectl", None, None, "ns", "demo", 12379)[1:] == [
        "port-forward",
        "-n",
        "ns",
        "--address",
        "127.0.0.1",
        "service/demo-client",
        "12379:2379",
    ]
    files = {"ca.crt": "/d/ca.crt", "tls.crt": "/d/tls.crt", "tls.key": "/d/tls.key"}
    assert etcdctl.etcdctl_argv("etcdctl", 4000, files, ["get", "/k", "--prefix"]) == [
        "etcdctl",
        "--endpoints=https://127.0.0.1:4000",
        "--cacert=/d/ca.crt",
        "--cert=/d/tls.crt",
        "--key=/d/tls.key",
        "get",
        "/k",
        "--prefix",
    ]
    assert etcdctl.etcdctl_argv("etcdctl", 4000, None, ["get", "/k"]) == [
        "etcdctl",
        "--endpoints=http://127.0.0.1:4000",
        "get",
        "/k",
    ]
    env = etcdctl.etcdctl_env({"ETCDCTL_ENDPOINTS": "x", "ETCDCTL_KEY": "y", "ETCDCTL_API": "3", "HOME": "/h"})
    assert env == {"ETCDCTL_API": "3", "HOME": "/h"}


def test_the_member_certificate_names_the_forwarded_address():
    """etcdctl verifies the server's name against the endpoint's host, 127.0.0.1."""
    member = certs.request_for(SPEC, "demo", NAMESPACE, CertKind.MEMBER)
    assert "127.0.0.1" in member.ip_addresses


def test_what_kubectl_port_forward_prints_gives_the_port():
    assert etcdctl.FORWARDING.match("Forwarding from 127.0.0.1:40123 -> 2379").group("port") == "40123"
    assert not etcdctl.FORWARDING.match("Handling connection for 40123")
    assert not etcdctl.FORWARDING.match("Forwarding from [::1]:40123 -> 2379")


def test_the_files_are_private_and_gone_afterwards_also_after_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    data = etcdctl.credentials(etcdctl.identity(SPEC, "demo", None), DEMO["demo-client-tls"])
    with etcdctl.private_files(data) as files:
        assert files is not None
        folder = os.path.dirname(files["tls.key"])
        assert os.path.dirname(folder) == str(tmp_path)
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        for key, path in files.items():
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and open(path, "rb").read() == data[key]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError), etcdctl.private_files(data):
        raise RuntimeError("etcdctl could not start")
    assert list(tmp_path.iterdir()) == []
    with etcdctl.private_files(None) as nothing:
        assert nothing is None and list(tmp_path.iterdir()) == []


def test_etcdctls_arguments_are_what_follows_the_double_dash(monkeypatch):
    seen = []

    async def run(args):
        seen.append(args)
        return 7

    monkeypatch.setattr(cli, "run", run)
    argv = ["etcdctl", "demo", "--user", "tenant-a", "-n", "ns", "--", "get", "/k", "--user", "other", "--", "x"]
    assert cli.main(argv) == 7
    args = seen[0]
    assert (args.command, args.cluster, args.user, args.namespace) == ("etcdctl", "demo", "tenant-a", "ns")
    assert args.etcdctl_args == ["get", "/k", "--user", "other", "--", "x"]
    assert args.local_port is None and args.etcdctl is None
    with pytest.raises(SystemExit):
        cli.main(["etcdctl", "demo"])  # nothing for etcdctl to do
    with pytest.raises(SystemExit):
        cli.main(["etcdctl", "demo", "--"])


# kubectl port-forward as it behaves: listens on the loopback address, prints its line, then
# serves until stopped. Records its pid.
FAKE_KUBECTL = """
import os, socket, sys
record = sys.argv[1]
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
open(record, "w").write(str(os.getpid()))
print(f"Forwarding from 127.0.0.1:{listener.getsockname()[1]} -> 2379", flush=True)
while True:
    connection, _ = listener.accept()
    print(f"Handling connection for {listener.getsockname()[1]}", flush=True)
    connection.close()
"""
# etcdctl: records its pid, arguments and its files' modes, then exits with the code it is
# given, or waits to be stopped.
FAKE_ETCDCTL = """
import json, os, signal, stat, sys
args = sys.argv[1:]
files = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.startswith(("--cacert=", "--cert=", "--key="))}
modes = {flag: oct(stat.S_IMODE(os.stat(path).st_mode)) for flag, path in files.items()}
folder = os.path.dirname(files["--key"])
folder_mode = oct(stat.S_IMODE(os.stat(folder).st_mode))
record = {"pid": os.getpid(), "args": args, "modes": modes, "folder": folder, "folder_mode": folder_mode}
json.dump(record, open(os.environ["FAKE_RECORD"] + ".partial", "w"))
os.rename(os.environ["FAKE_RECORD"] + ".partial", os.environ["FAKE_RECORD"])
if args[-1] == "block":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopped by the session, not by the signal
    signal.pause()
sys.exit(int(args[-1]))
"""
# The plugin as a terminal runs it: Ctrl-C interrupts it. (A background job of a
# non-interactive shell, such as make test's lanes, starts with SIGINT ignored, and so would
# this process without the first line.)
RUNNER = """
import signal; signal.signal(signal.SIGINT, signal.default_int_handler)
import asyncio, base64, json, sys
from etcd_operator_kubectl import etcdctl
kubectl, etcd, pid_file, data_file, last = sys.argv[1:6]
data = {k: base64.b64decode(v) for k, v in json.load(open(data_file)).items()}
session = etcdctl.Session([sys.executable, kubectl, pid_file], etcd, ["get", "/k", last], data)
try:
    sys.exit(asyncio.run(etcdctl.run_session(session)))
except KeyboardInterrupt:
    sys.exit(130)
except asyncio.CancelledError:
    sys.exit(143)
"""


def start_session(tmp_path, last: str) -> tuple[subprocess.Popen, dict]:
    (tmp_path / "kubectl.py").write_text(FAKE_KUBECTL)
    fake = tmp_path / "etcdctl"
    fake.write_text(f"#!{sys.executable}\n{FAKE_ETCDCTL}")
    fake.chmod(0o755)
    (tmp_path / "data.json").write_text(json.dumps(DEMO["demo-client-tls"]["data"]))
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "FAKE_RECORD": str(tmp_path / "record.json")}
    argv = [sys.executable, "-c", textwrap.dedent(RUNNER), str(tmp_path / "kubectl.py"), str(fake)]
    argv += [str(tmp_path / "kubectl.pid"), str(tmp_path / "data.json"), last]
    runner = subprocess.Popen(argv, env=env, cwd=os.getcwd(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return runner, env


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A child of the runner that exited but was not reaped yet would still answer.
    return open(f"/proc/{pid}/stat").read().split(") ", 1)[1].startswith("Z")


def test_a_session_returns_etcdctls_exit_code_and_leaves_nothing(tmp_path):
    runner, _ = start_session(tmp_path, "3")
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 3, err
    record = json.loads((tmp_path / "record.json").read_text())
    port = record["args"][0].removeprefix("--endpoints=https://127.0.0.1:")
    assert port.isdigit() and record["args"][-3:] == ["get", "/k", "3"]
    assert record["modes"] == {"--cacert": "0o600", "--cert": "0o600", "--key": "0o600"}
    assert record["folder_mode"] == "0o700" and os.path.dirname(record["folder"]) == str(tmp_path / "tmp")
    assert list((tmp_path / "tmp").iterdir()) == []
    assert gone(int((tmp_path / "kubectl.pid").read_text()))
    assert b"Forwarding from" not in out and b"BEGIN" not in out + err


@pytest.mark.parametrize("stop, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_stops_etcdctl_and_the_port_forward_and_removes_the_files(tmp_path, stop, code):
    runner, _ = start_session(tmp_path, "block")
    try:
        record = wait_for(
            lambda: (tmp_path / "record.json").exists() and json.loads((tmp_path / "record.json").read_text()),
            60,
            interval=0.05,
            what="the fake etcdctl running",
        )
        assert sorted(os.listdir(record["folder"])) == ["ca.crt", "tls.crt", "tls.key"]
        runner.send_signal(stop)  # to the plugin only: the session must stop etcdctl itself
        runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == code
    assert not os.path.exists(record["folder"]) and list((tmp_path / "tmp").iterdir()) == []
    assert gone(record["pid"]) and gone(int((tmp_path / "kubectl.pid").read_text()))
