"""`kubectl etcd etcdctl`: the local etcdctl against one cluster, through `kubectl port-forward`
to its client Service, as a client identity. The one command of the plugin that reads a Secret,
and exactly one: the cluster's client certificate (`<cluster>-client-tls`, CN `etcd-client`) or
a spec.auth user's (`<cluster>-user-<name>`, CN the user's name). Any other identity is refused,
the operator's and the members' above all, by name before the read and by what the Secret
holds after it. A plaintext cluster needs no Secret.

The certificate, key and CA live only in a private directory for as long as etcdctl runs; they
are never printed, and errors name the Secret, never its contents."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.certs import (
    CA_KEY,
    CERT_KEY,
    OPERATOR_COMMON_NAME,
    PEER_COMMON_NAME,
    PRIVATE_KEY_KEY,
    USER_COMMON_NAME,
    CertKind,
    secret_name,
    user_secret_name,
)
from etcd_operator.core.cluster.spec import ISSUER_MANAGED, ClusterSpec

# Identities a session never takes, by the CN etcd maps to its user: what they may do is the
# operator's or the members', not a person's.
RESERVED = {
    OPERATOR_COMMON_NAME: "the operator's own identity",
    "root": "etcd's root user, which the operator keeps for itself",
    PEER_COMMON_NAME: "the members' peer identity",
}
# A spec.auth user's name, as the CRD allows it.
USER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# What kubectl port-forward prints once it listens (then "Handling connection for N" for each).
FORWARDING = re.compile(r"^Forwarding from 127\.0\.0\.1:(?P<port>[0-9]+) -> [0-9]+$")
FORWARD_TIMEOUT = 90.0  # kubectl waits up to a minute for a running pod (--pod-running-timeout)
# etcdctl refuses a flag that an ETCDCTL_ variable also sets; the session's flags are the ones.
SHADOWED = (
    "ETCDCTL_ENDPOINTS",
    "ETCDCTL_CACERT",
    "ETCDCTL_CERT",
    "ETCDCTL_KEY",
    "ETCDCTL_INSECURE_SKIP_TLS_VERIFY",
    "ETCDCTL_INSECURE_TRANSPORT",
    "ETCDCTL_DISCOVERY_SRV",
)
FILES = {CA_KEY: "ca.crt", CERT_KEY: "tls.crt", PRIVATE_KEY_KEY: "tls.key"}


class Refused(Exception):
    """The session cannot start; the message names what, never a key or certificate."""


@dataclasses.dataclass(frozen=True)
class Identity:
    """A client identity: the Secret holding its certificate and the CN etcd maps to its user."""

    cluster: str
    secret: str
    common_name: str
    user: str | None = None  # a spec.auth user's name; None: the cluster's client Secret


def identity(spec: ClusterSpec, cluster: str, user: str | None) -> Identity:
    """Which Secret to read, decided from names alone, before anything is read."""
    if user in RESERVED:
        raise Refused(f"--user {user} is {RESERVED[user]}: kubectl etcd runs only as client identities")
    if user is not None and not USER_NAME.match(user):
        raise Refused(f"--user {user!r} is no spec.auth user name (lower-case letters, digits and dashes)")
    if spec.tls.issuer != ISSUER_MANAGED:
        raise Refused(
            f"EtcdCluster {cluster} has certificates of your own (spec.tls.issuer: {spec.tls.issuer}): the operator "
            "issues it no client certificate; run etcdctl with one you issued"
        )
    if user is None:
        return Identity(cluster, secret_name(spec, cluster, CertKind.CLIENT), USER_COMMON_NAME)
    return Identity(cluster, user_secret_name(cluster, user), user, user)


def serves_tls(cluster: Mapping[str, Any]) -> bool:
    """The transport the operator recorded (status.tls.transport), else what the spec asks for."""
    recorded = ((cluster.get("status") or {}).get("tls") or {}).get("transport")
    if recorded:
        return recorded == "https"
    return ClusterSpec.from_dict(cluster.get("spec") or {}).tls.enabled


def credentials(who: Identity, secret: Mapping[str, Any]) -> dict[str, bytes]:
    """The Secret's certificate, key and CA, once they are shown to be `who`'s client identity."""
    why = refusal(who, secret)
    if why:
        raise Refused(f"Secret {who.secret}: {why}; kubectl etcd etcdctl uses client identities only")
    data = secret.get("data") or {}
    return {key: base64.b64decode(data[key]) for key in FILES}


def refusal(who: Identity, secret: Mapping[str, Any]) -> str | None:
    """Why the Secret is not `who`'s client certificate as the operator issues it, or None."""
    labels = (secret.get("metadata") or {}).get("labels") or {}
    if labels.get(naming.LABEL_CLUSTER) != who.cluster:
        return f"not labelled {naming.LABEL_CLUSTER}={who.cluster}, so not one the operator issued for it"
    if labels.get(naming.LABEL_AUTH_USER) != who.user:
        owner = labels.get(naming.LABEL_AUTH_USER)
        return f"the certificate of {f'user {owner}' if owner else 'no spec.auth user'}, not of {who.common_name}"
    data = secret.get("data") or {}
    if missing := [key for key in FILES if not data.get(key)]:
        return f"holds no {', '.join(missing)}"
    try:
        cert = x509.load_pem_x509_certificate(base64.b64decode(data[CERT_KEY]))
    except ValueError:
        return f"its {CERT_KEY} is not a PEM certificate"
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    common_name = str(names[0].value) if names else ""
    if common_name in RESERVED:
        return f"holds {RESERVED[common_name]} (CN {common_name})"
    usages = _extended_usages(cert)
    if _is_ca(cert) or ExtendedKeyUsageOID.SERVER_AUTH in usages:
        return f"holds a server or CA certificate (CN {common_name}), not a client's"
    if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
        return f"its certificate (CN {common_name}) is not for client authentication"
    if common_name != who.common_name:
        return f"holds CN {common_name}, not {who.common_name}"
    return None


def _extended_usages(cert: x509.Certificate) -> list[x509.ObjectIdentifier]:
    try:
        return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return []


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def find_binary(given: str | None, name: str) -> str:
    found = shutil.which(given or name)
    if not found:
        raise Refused(f"{given or name} not found{'' if given else ' on PATH'}")
    return found


def port_forward_argv(
    kubectl: str,
    kubeconfig: str | None,
    context: str | None,
    namespace: str,
    cluster: str,
    local_port: int | None,
) -> list[str]:
    """kubectl port-forward to the client Service on the loopback address only: kubectl picks
    one of its pods (a running one) and, without a local port, a free port it prints."""
    flags = [*(["--kubeconfig", kubeconfig] if kubeconfig else []), *(["--context", context] if context else [])]
    target = f"service/{naming.client_service(cluster)}"
    local = str(local_port) if local_port else ""
    return [
        kubectl,
        *flags,
        "port-forward",
        "-n",
        namespace,
        "--address",
        "127.0.0.1",
        target,
        f"{local}:{naming.CLIENT_PORT}",
    ]


def etcdctl_argv(etcdctl: str, port: int, files: Mapping[str, str] | None, passed: list[str]) -> list[str]:
    """The member certificate names 127.0.0.1 (certs.MEMBER_IP_ADDRESSES), so etcdctl verifies
    it on the forwarded port as on a member's own host; no verification is skipped."""
    if files is None:
        return [etcdctl, f"--endpoints=http://127.0.0.1:{port}", *passed]
    return [
        etcdctl,
        f"--endpoints=https://127.0.0.1:{port}",
        f"--cacert={files[CA_KEY]}",
        f"--cert={files[CERT_KEY]}",
        f"--key={files[PRIVATE_KEY_KEY]}",
        *passed,
    ]


def etcdctl_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in SHADOWED}


@contextlib.contextmanager
def private_files(data: Mapping[str, bytes] | None) -> Iterator[dict[str, str] | None]:
    """The identity's files in a directory of mode 0700 (files 0600), removed on leaving, also
    on an exception or a cancellation. None for a plaintext cluster: nothing is written."""
    if data is None:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="kubectl-etcd-")  # 0700, whatever the umask
    try:
        files = {}
        for key, name in FILES.items():
            path = os.path.join(folder, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data[key])
            files[key] = path
        yield files
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@dataclasses.dataclass(frozen=True)
class Session:
    forward: list[str]  # port_forward_argv
    etcdctl: str
    passed: list[str]  # the user's etcdctl arguments
    data: Mapping[str, bytes] | None = dataclasses.field(default=None, repr=False)  # None: plaintext


async def run_session(session: Session) -> int:
    """etcdctl's exit code. The port-forward is stopped and the files removed whatever happens:
    on Ctrl-C (asyncio.run cancels the task) and on SIGTERM (here too) as well."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await _session(session)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _session(session: Session) -> int:
    async with port_forward(session.forward) as forward:
        with private_files(session.data) as files:
            process = await asyncio.create_subprocess_exec(
                *etcdctl_argv(session.etcdctl, forward.port, files, session.passed), env=etcdctl_env(os.environ)
            )
            try:
                code = await process.wait()
            finally:
                await _stop(process)
        if code and forward.process.returncode is not None:
            print(f"error: kubectl port-forward ended: {await forward.errors()}", file=sys.stderr)
        return code


@dataclasses.dataclass(frozen=True)
class Forward:
    port: int
    process: asyncio.subprocess.Process
    stderr: asyncio.Future[bytes]

    async def errors(self) -> str:
        return (await self.stderr).decode(errors="replace").strip()


@contextlib.asynccontextmanager
async def port_forward(argv: list[str]) -> AsyncIterator[Forward]:
    """kubectl port-forward, once its port accepts connections. Its output stays off the
    terminal (its stderr is shown when it fails); it is stopped on leaving, whatever happens."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    forward = Forward(0, process, asyncio.ensure_future(process.stderr.read()))
    drain: asyncio.Future[None] | None = None
    try:
        try:
            port = await asyncio.wait_for(_listening_port(process.stdout), FORWARD_TIMEOUT)
        except TimeoutError:
            raise Refused(f"kubectl port-forward did not listen within {FORWARD_TIMEOUT:.0f}s") from None
        if port is None:
            await process.wait()
            raise Refused(f"kubectl port-forward failed: {await forward.errors()}")
        drain = asyncio.ensure_future(_discard(process.stdout))
        await _accepting(port)
        yield dataclasses.replace(forward, port=port)
    finally:
        await _stop(process)
        for task in (forward.stderr, drain):
            if task is not None:
                task.cancel()


async def _listening_port(stdout: asyncio.StreamReader) -> int | None:
    while line := await stdout.readline():
        if match := FORWARDING.match(line.decode(errors="replace").strip()):
            return int(match.group("port"))
    return None  # kubectl exited


async def _discard(stdout: asyncio.StreamReader) -> None:
    while await stdout.read(1 << 16):
        pass


async def _accepting(port: int) -> None:
    """kubectl prints its line once it listens; one connection proves it."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        raise Refused(f"kubectl port-forward printed port {port}, which refuses connections ({e})") from None
    writer.close()
    await writer.wait_closed()


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        await asyncio.wait_for(asyncio.shield(process.wait()), 10)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
