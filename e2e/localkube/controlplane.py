"""Starts and stops the local substrate: etcd for the API server, kube-apiserver,
kube-controller-manager, MinIO and the real nodes of localkube.realnodes."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pathlib
import secrets
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from localkube import pki, processes
from localkube.layout import Layout

# `up` records here that the instance has its real nodes, until `down` (e2e/demo.sh reads it).
NODES_MODE_FILE = "nodes-mode"
S3_BUCKET = "etcd-backups"
S3_REGION = "us-east-1"
READY_TIMEOUT = 120.0
# Opt-in: LOCALKUBE_AUDIT=1 starts kube-apiserver with a Metadata-level audit log (who,
# verb, resource, user agent, timestamps per request), for the scale benchmark. Off by
# default, so tests pay nothing; a running kube-apiserver without it is restarted by `up`.
AUDIT_ENV = "LOCALKUBE_AUDIT"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    # One event per request (ResponseComplete); watches also log ResponseStarted when opened.
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}
AUDIT_LOG_MAX_MIB = 2048  # rotation would lose events under a reader: keep it far away


@dataclasses.dataclass(frozen=True)
class Component:
    name: str
    ports: Callable[[Layout], dict[str, int]]
    argv: Callable[[Layout], list[str]]
    ready: Callable[[Layout], bool]
    env: Callable[[Layout], dict[str, str]] = lambda layout: {}
    # True when a running process must be restarted to get the argv now wanted.
    outdated: Callable[[Layout, int], bool] = lambda layout, pid: False


# --- readiness probes -----------------------------------------------------------------


def _http_ok(url: str, context: ssl.SSLContext | None = None, expect: bytes | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            body = resp.read()
            return resp.status == 200 and (expect is None or body.strip() == expect)
    except (urllib.error.URLError, OSError):
        return False


def admin_ssl_context(layout: Layout) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(layout.pki_dir / "ca.crt"))
    context.load_cert_chain(layout.pki_dir / "admin.crt", layout.pki_dir / "admin.key")
    return context


def _insecure_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def real_nodes(layout: Layout) -> bool:
    try:
        return (layout.state_dir / NODES_MODE_FILE).read_text().strip() == "real"
    except FileNotFoundError:
        return False


def apiserver_host(layout: Layout) -> str:
    """Real nodes' pods reach the apiserver on the host side of their bridge."""
    return layout.node_network.bridge_address


def service_cidr(layout: Layout) -> str:
    return layout.node_network.service_cidr


def apiserver_url(layout: Layout) -> str:
    return f"https://{apiserver_host(layout)}:{layout.ports.apiserver}"


def apiserver_ready(layout: Layout) -> bool:
    if not (layout.pki_dir / "admin.crt").exists():
        return False
    return _http_ok(f"{apiserver_url(layout)}/readyz", admin_ssl_context(layout), b"ok")


def audit_wanted() -> bool:
    return os.environ.get(AUDIT_ENV, "").lower() in ("1", "true", "yes")


def audit_log_path(layout: Layout) -> pathlib.Path:
    return layout.logs_dir / "kube-apiserver-audit.log"


def _audit_policy_path(layout: Layout) -> pathlib.Path:
    return layout.state_dir / "audit-policy.json"


def _audit_args(layout: Layout) -> list[str]:
    if not audit_wanted():
        return []
    _audit_policy_path(layout).write_text(json.dumps(AUDIT_POLICY, indent=2))
    return [
        f"--audit-policy-file={_audit_policy_path(layout)}",
        f"--audit-log-path={audit_log_path(layout)}",
        "--audit-log-format=json",
        f"--audit-log-maxsize={AUDIT_LOG_MAX_MIB}",
        "--audit-log-maxbackup=1",
    ]


def _lacks_wanted_audit(layout: Layout, pid: int) -> bool:
    """A running kube-apiserver started without the audit log that is now wanted."""
    if not audit_wanted():
        return False
    try:
        argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"--audit-log-path={audit_log_path(layout)}".encode() not in argv


def s3_endpoint(layout: Layout) -> str:
    """Real nodes' pods reach MinIO on the host side of their bridge, as they reach the apiserver."""
    return f"http://{apiserver_host(layout)}:{layout.ports.minio}"


# --- kubeconfigs ----------------------------------------------------------------------


def write_kubeconfig(layout: Layout, path: pathlib.Path, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "localkube",
                "cluster": {
                    "server": apiserver_url(layout),
                    "certificate-authority": str(layout.pki_dir / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(layout.pki_dir / f"{user}.crt"),
                    "client-key": str(layout.pki_dir / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "localkube", "context": {"cluster": "localkube", "user": user}}],
        "current-context": "localkube",
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)


def component_kubeconfig(layout: Layout, user: str) -> pathlib.Path:
    return layout.state_dir / f"{user}.kubeconfig"


# --- MinIO credentials ----------------------------------------------------------------


def minio_credentials(layout: Layout) -> dict[str, str]:
    path = layout.state_dir / "minio-credentials.json"
    if not path.exists():
        creds = {"access_key": "localkube-" + secrets.token_hex(4), "secret_key": secrets.token_urlsafe(24)}
        path.write_text(json.dumps(creds))
        path.chmod(0o600)
    return json.loads(path.read_text())


MINIO_KMS_KEY_ID = "localkube-kms"  # MinIO's built-in KMS key: SSE-S3 and SSE-KMS work against it


def minio_kms_secret(layout: Layout) -> str:
    path = layout.state_dir / "minio-kms-key"
    if not path.exists():
        path.write_text(base64.b64encode(secrets.token_bytes(32)).decode())
        path.chmod(0o600)
    return f"{MINIO_KMS_KEY_ID}:{path.read_text().strip()}"


def s3_environment(layout: Layout) -> dict[str, str]:
    creds = minio_credentials(layout)
    return {
        "S3_ENDPOINT": s3_endpoint(layout),
        "S3_BUCKET": S3_BUCKET,
        "S3_REGION": S3_REGION,
        "AWS_ACCESS_KEY_ID": creds["access_key"],
        "AWS_SECRET_ACCESS_KEY": creds["secret_key"],
    }


def ensure_bucket(layout: Layout) -> None:
    import boto3
    from botocore.config import Config

    env = s3_environment(layout)
    s3 = boto3.client(
        "s3",
        endpoint_url=env["S3_ENDPOINT"],
        region_name=env["S3_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 10, "mode": "standard"}),
    )
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if S3_BUCKET not in existing:
        s3.create_bucket(Bucket=S3_BUCKET)


# --- the components -------------------------------------------------------------------


def _etcd_argv(layout: Layout) -> list[str]:
    p = layout.ports
    return [
        str(layout.binary("etcd-3.6", "etcd")),
        "--name=localkube",
        f"--data-dir={layout.data_dir / 'apiserver-etcd'}",
        f"--listen-client-urls=http://127.0.0.1:{p.etcd_client}",
        f"--advertise-client-urls=http://127.0.0.1:{p.etcd_client}",
        f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
        f"--initial-cluster=localkube=http://127.0.0.1:{p.etcd_peer}",
        "--unsafe-no-fsync",
        "--quota-backend-bytes=4294967296",
        "--log-level=warn",
    ]


def _serves_other_mode(layout: Layout, pid: int) -> bool:
    """A running apiserver or controller-manager started for another service range (by a
    checkout from before the node agent was retired)."""
    try:
        argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"--service-cluster-ip-range={service_cidr(layout)}".encode() not in argv


def _apiserver_mode_args(layout: Layout) -> list[str]:
    k = layout.pki_dir
    address = layout.node_network.bridge_address
    return [
        f"--bind-address={address}",
        f"--advertise-address={address}",
        "--authorization-mode=Node,RBAC",
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={k / 'admin.crt'}",
        f"--kubelet-client-key={k / 'admin.key'}",
    ]


def _apiserver_argv(layout: Layout) -> list[str]:
    k = layout.pki_dir
    return [
        str(layout.binary("kube", "kube-apiserver")),
        f"--etcd-servers=http://127.0.0.1:{layout.ports.etcd_client}",
        *_apiserver_mode_args(layout),
        f"--secure-port={layout.ports.apiserver}",
        f"--cert-dir={k}",
        f"--tls-cert-file={k / 'apiserver.crt'}",
        f"--tls-private-key-file={k / 'apiserver.key'}",
        f"--client-ca-file={k / 'ca.crt'}",
        f"--requestheader-client-ca-file={k / 'ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        f"--service-account-key-file={k / 'sa.pub'}",
        f"--service-account-signing-key-file={k / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={service_cidr(layout)}",
        "--allow-privileged=true",
        "--enable-priority-and-fairness=false",
        "--profiling=false",
        "--v=1",
        *_audit_args(layout),
    ]


def _controller_manager_argv(layout: Layout) -> list[str]:
    k = layout.pki_dir
    kubeconfig = component_kubeconfig(layout, "controller-manager")
    return [
        str(layout.binary("kube", "kube-controller-manager")),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={layout.ports.controller_manager}",
        f"--cert-dir={layout.state_dir / 'controller-manager-certs'}",
        *_controller_selection(layout),
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={k / 'sa.key'}",
        f"--root-ca-file={k / 'ca.crt'}",
        f"--cluster-signing-cert-file={k / 'ca.crt'}",
        f"--cluster-signing-key-file={k / 'ca.key'}",
        f"--service-cluster-ip-range={service_cidr(layout)}",
        "--node-monitor-grace-period=20s",
        "--concurrent-gc-syncs=5",
        "--v=1",
    ]


def _controller_selection(layout: Layout) -> list[str]:
    return []


def _minio_argv(layout: Layout) -> list[str]:
    p = layout.ports
    return [
        str(layout.binary("minio", "minio")),
        "server",
        str(layout.data_dir / "minio"),
        f"--address={apiserver_host(layout)}:{p.minio}",
        f"--console-address={apiserver_host(layout)}:{p.minio_console}",
        "--quiet",
    ]


def minio_environment(layout: Layout) -> dict[str, str]:
    creds = minio_credentials(layout)
    return {
        "MINIO_ROOT_USER": creds["access_key"],
        "MINIO_ROOT_PASSWORD": creds["secret_key"],
        "MINIO_BROWSER": "off",
        "MINIO_UPDATE": "off",
        "MINIO_API_REQUESTS_DEADLINE": "60s",
        "MINIO_KMS_SECRET_KEY": minio_kms_secret(layout),
    }


def components() -> list[Component]:
    return [
        Component(
            "etcd",
            lambda where: {"client": where.ports.etcd_client, "peer": where.ports.etcd_peer},
            _etcd_argv,
            lambda where: _http_ok(f"http://127.0.0.1:{where.ports.etcd_client}/health"),
        ),
        Component(
            "kube-apiserver",
            lambda where: {"https": where.ports.apiserver},
            _apiserver_argv,
            apiserver_ready,
            outdated=lambda where, pid: _lacks_wanted_audit(where, pid) or _serves_other_mode(where, pid),
        ),
        Component(
            "kube-controller-manager",
            lambda where: {"https": where.ports.controller_manager},
            _controller_manager_argv,
            lambda where: _http_ok(f"https://127.0.0.1:{where.ports.controller_manager}/healthz", _insecure_context()),
            outdated=_serves_other_mode,
        ),
        Component(
            "minio",
            lambda where: {"s3": where.ports.minio, "console": where.ports.minio_console},
            _minio_argv,
            lambda where: _http_ok(f"{s3_endpoint(where)}/minio/health/live"),
            minio_environment,
        ),
    ]


def _wait_ready(layout: Layout, component: Component, pid: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if component.ready(layout):
            return
        if not processes.alive(pid):
            break
        time.sleep(0.25)
    log = layout.logs_dir / f"{component.name}.log"
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise RuntimeError(f"{component.name} did not become ready; last log lines of {log}:\n{tail}")


def write_env_file(layout: Layout) -> None:
    values = {
        "KUBECONFIG": str(layout.kubeconfig),
        "ETCD_OPERATOR_TESTBIN": str(layout.testbin),
        "LOCALKUBE_POD_CIDR": layout.node_network.pods_cidr,
        "LOCALKUBE_STATE_DIR": str(layout.state_dir),
        "PATH": f"{layout.testbin / 'kube'}:{layout.testbin / 'etcd-3.6'}:$PATH",
        **s3_environment(layout),
    }
    lines = [f'export {key}="{value}"' for key, value in values.items()]
    layout.env_file.write_text("\n".join(lines) + "\n")
    layout.env_file.chmod(0o600)


def up(layout: Layout, only: set[str] | None = None) -> None:
    from localkube import realnodes

    for d in (layout.state_dir, layout.logs_dir, layout.run_dir, layout.data_dir):
        d.mkdir(parents=True, exist_ok=True)
    (layout.state_dir / NODES_MODE_FILE).write_text("real\n")
    realnodes.prepare_host(layout)
    pki.ensure(layout.pki_dir)
    write_kubeconfig(layout, layout.kubeconfig, "admin")
    write_kubeconfig(layout, component_kubeconfig(layout, "controller-manager"), "controller-manager")
    for component in components():
        if only is not None and component.name not in only:
            continue
        pid = processes.running(layout.run_dir, component.name)
        if pid and component.outdated(layout, pid):
            processes.stop(layout.run_dir, component.name)
            pid = None
        if pid and component.ready(layout):
            continue
        if pid:
            _wait_ready(layout, component, pid)
            continue
        processes.require_free_ports(component.name, component.ports(layout))
        pid = processes.start(
            layout.run_dir,
            layout.logs_dir,
            component.name,
            component.argv(layout),
            component.env(layout),
            cwd=layout.state_dir,
        )
        _wait_ready(layout, component, pid)
        if component.name == "minio":
            ensure_bucket(layout)
    if only is None:
        realnodes.up(layout)
    write_env_file(layout)


def _mount_points() -> list[str]:
    with open("/proc/self/mounts") as mounts:
        return [line.split()[1] for line in mounts]


def down(layout: Layout, purge: bool = False) -> list[str]:
    """Stops everything; returns a list of problems (ports still bound), empty when clean."""
    from localkube import realnodes

    problems = realnodes.down(layout)
    (layout.state_dir / NODES_MODE_FILE).unlink(missing_ok=True)
    for component in reversed(components()):
        processes.stop(layout.run_dir, component.name)
    # Anything else started against this substrate (the demo's operator) goes too.
    for pid_path in layout.run_dir.glob("*.pid"):
        processes.stop(layout.run_dir, pid_path.stem)
    for component in components():
        for purpose, port in component.ports(layout).items():
            if processes.port_in_use(port):
                problems.append(f"port {port} ({component.name} {purpose}) is still bound")
    if purge:
        shutil.rmtree(layout.data_dir, ignore_errors=True)
        shutil.rmtree(layout.logs_dir, ignore_errors=True)
        nodes_dir = realnodes.nodes_dir(layout)  # the real nodes' volumes, once nothing is mounted there
        if not any(mount.startswith(str(nodes_dir)) for mount in _mount_points()):
            shutil.rmtree(nodes_dir, ignore_errors=True)
        else:
            problems.append(f"{nodes_dir} still has mounts: kept")
    return problems


def status(layout: Layout) -> dict[str, str]:
    result = {}
    for component in components():
        pid = processes.running(layout.run_dir, component.name)
        if not pid:
            result[component.name] = "stopped"
        else:
            result[component.name] = f"ready (pid {pid})" if component.ready(layout) else f"not ready (pid {pid})"
    return result
