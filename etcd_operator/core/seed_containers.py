"""What restore and verification pods share: their one-shot pod spec, and two containers:
the fetch (`python -m etcd_operator.programs.seed fetch` downloads one snapshot from S3, with
the store's optional CA bundle, and checks its sha256 again) and etcdutl's restore of it into
a data dir. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etcd_operator.core import pod_security, scratch_tls, versions
from etcd_operator.core.cluster.builders import with_pull_secrets

CA_VOLUME = "s3-ca"
CA_MOUNT = "/etc/s3-ca"
# The encryption keys, mounted from their Secret (one file per key ID): never in env or args.
KEYS_VOLUME = "snapshot-keys"
KEYS_MOUNT = "/etc/snapshot-keys"
# Fixed key names only, as the operator reads them (storage.credentials).
CREDENTIAL_KEYS = (("AWS_ACCESS_KEY_ID", "accessKeyID"), ("AWS_SECRET_ACCESS_KEY", "secretAccessKey"))


SEED_FETCH = ["python", "-m", "etcd_operator.programs.seed", "fetch"]
SCRATCH_TLS = ["python", "-m", "etcd_operator.programs.scratch_tls"]
SCRATCH_TLS_CONTAINER = "scratch-tls"
# A scratch member (a verification's, a replay's) listens on unix sockets only; etcd names a
# unix listener's socket file "host:port" in its working directory. Its clients come with a
# certificate of the pod's throwaway CA (core/scratch_tls.py): unixs is TLS on that socket.
SCRATCH_CLIENT_URL = "unixs://etcd-client:0"
SCRATCH_PEER_URL = "unix://etcd-peer:0"
SCRATCH_CLIENT_SOCKET = "etcd-client:0"
SCRATCH_TLS_FOLDER = "tls"  # in the scratch member's working directory
# With TLS, etcd serves gRPC through its HTTP server on a listener that serves both, which
# costs a replay about a third of its speed; from 3.5.8 on (etcd-io/etcd CHANGELOG-3.5.md,
# "v3.5.8", PR #15589) --listen-client-http-urls moves HTTP to a listener of its own (here a
# second TLS socket with the same client certificate check) and gRPC is served natively.
SCRATCH_HTTP_URL = "unixs://etcd-http:0"
SEPARATE_HTTP_LISTENER_SINCE: versions.Version = (3, 5, 8)
# Recorded in the restored member list only; nothing listens there.
PLACEHOLDER_PEER_URL = "http://localhost:2380"


def fetch_container(
    operator_image: str,
    source: Mapping[str, Any],
    key: str,
    sha256: str,
    snapshot_file: str,
    data_dir: str,
    home: str,
    mounts: list[dict[str, Any]],
    keys_secret: str | None = None,
) -> dict[str, Any]:
    """The init container that downloads the snapshot, checks it and (when it is sealed)
    decrypts and decompresses it before etcdutl reads it. With `keys_secret`, the caller
    mounts keys_bundle(keys_secret) into it."""
    return {
        "name": "fetch",
        "image": operator_image,
        "command": list(SEED_FETCH),
        "env": fetch_env(source, key, sha256, snapshot_file, data_dir, home=home, keys=bool(keys_secret)),
        "volumeMounts": mounts,
    }


def fetch_env(
    source: Mapping[str, Any], key: str, sha256: str, snapshot_file: str, data_dir: str, home: str, keys: bool = False
) -> list[dict[str, Any]]:
    """`home`: a writable folder (the root filesystem is read-only)."""
    env = [
        {"name": "S3_BUCKET", "value": source["bucket"]},
        {"name": "S3_KEY", "value": key},
        {"name": "S3_ENDPOINT", "value": source.get("endpoint") or ""},
        {"name": "S3_REGION", "value": source.get("region") or ""},
        {"name": "S3_FORCE_PATH_STYLE", "value": "true" if source.get("forcePathStyle") else "false"},
        {"name": "S3_INSECURE", "value": "true" if source.get("insecure") else "false"},
        {"name": "EXPECTED_SHA256", "value": sha256},
        {"name": "SNAPSHOT_FILE", "value": snapshot_file},
        {"name": "DATA_DIR", "value": data_dir},
        {"name": "HOME", "value": home},
    ]
    credentials = source.get("credentialsSecretRef")
    if credentials:
        for var, secret_key in CREDENTIAL_KEYS:
            env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": credentials["name"], "key": secret_key}}})
    if source.get("caBundleSecretRef"):
        env.append({"name": "S3_CA_FILE", "value": f"{CA_MOUNT}/ca.crt"})
    if keys:
        env.append({"name": "SNAPSHOT_KEYS_DIR", "value": KEYS_MOUNT})
    return env


def keys_bundle(keys_secret: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) for the encryption keys' Secret, when there is one."""
    if not keys_secret:
        return [], []
    volume = {"name": KEYS_VOLUME, "secret": {"secretName": keys_secret, "defaultMode": 0o440}}
    return [volume], [{"name": KEYS_VOLUME, "mountPath": KEYS_MOUNT, "readOnly": True}]


def ca_bundle(source: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) for the store's CA bundle, when the source names one."""
    ca = source.get("caBundleSecretRef")
    if not ca:
        return [], []
    volume = {
        "name": CA_VOLUME,
        "secret": {"secretName": ca["name"], "items": [{"key": ca.get("key", "ca.crt"), "path": "ca.crt"}]},
    }
    return [volume], [{"name": CA_VOLUME, "mountPath": CA_MOUNT, "readOnly": True}]


def etcdutl_restore(
    etcd_image: str,
    snapshot_file: str,
    member: str,
    data_dir: str,
    initial_cluster: str,
    peer_url: str,
    token: str,
    mounts: list[dict[str, Any]],
    name: str = "restore",
    revision_bump: int = 0,
) -> dict[str, Any]:
    """The container that turns the fetched snapshot into `member`'s data dir. With
    `revision_bump` > 0 the store starts that many revisions above the snapshot's, the
    revisions below marked compacted (etcdutl requires --mark-compacted with a bump and
    refuses it without one), so a watch from an earlier revision is told so rather than
    served other data. 0 (the verification pod's): the snapshot's revisions, unchanged."""
    bump = [f"--bump-revision={revision_bump}", "--mark-compacted"] if revision_bump > 0 else []
    return {
        "name": name,
        "image": etcd_image,
        "command": ["etcdutl"],
        "args": [
            "snapshot",
            "restore",
            snapshot_file,
            f"--name={member}",
            f"--data-dir={data_dir}",
            f"--initial-cluster={initial_cluster}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster-token={token}",
            *bump,
        ],
        "volumeMounts": mounts,
    }


def one_shot_pod_spec(
    volumes: list[dict[str, Any]],
    init_containers: list[dict[str, Any]],
    containers: list[dict[str, Any]],
    pull_secrets: list[dict[str, str]],
) -> dict[str, Any]:
    """A pod that runs once (never restarted), holds no service account token and gets no
    service links, under the restricted security context."""
    spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "volumes": volumes,
        "initContainers": init_containers,
        "containers": containers,
    }
    return pod_security.restricted(with_pull_secrets(spec, pull_secrets))


def scratch_tls_dir(workdir: str) -> str:
    return f"{workdir}/{SCRATCH_TLS_FOLDER}"


def scratch_tls_container(operator_image: str, workdir: str, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The init container that makes the scratch member's throwaway CA and certificates in
    `workdir` (programs/scratch_tls.py) before the member starts; no Secret is involved."""
    return {
        "name": SCRATCH_TLS_CONTAINER,
        "image": operator_image,
        "command": list(SCRATCH_TLS),
        "env": [{"name": "SCRATCH_TLS_DIR", "value": scratch_tls_dir(workdir)}],
        "volumeMounts": mounts,
    }


def http_listener_flags(etcd_image: str) -> tuple[str, ...]:
    """HTTP on a socket of its own where the image's etcd can (an untagged image: never)."""
    version = versions.of_image(etcd_image)
    return (
        (f"--listen-client-http-urls={SCRATCH_HTTP_URL}",)
        if version and version >= SEPARATE_HTTP_LISTENER_SINCE
        else ()
    )


def scratch_member(
    etcd_image: str, workdir: str, member: str, data_dir: str, mounts: list[dict[str, Any]], *extra_args: str
) -> dict[str, Any]:
    """The container of a single scratch member on its restored data, reachable only through
    the unix sockets in `workdir` (so only from its own pod), never compacting on its own.
    Its clients authenticate with the throwaway client certificate (CN root), so a store
    restored with etcd authentication on answers them too (scratch_tls_container makes it)."""
    return {
        "name": "etcd",
        "image": etcd_image,
        "command": ["etcd"],
        "workingDir": workdir,
        "args": [
            f"--name={member}",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={SCRATCH_CLIENT_URL}",
            f"--advertise-client-urls={SCRATCH_CLIENT_URL}",
            f"--listen-peer-urls={SCRATCH_PEER_URL}",
            "--auto-compaction-retention=0",
            *scratch_tls.member_flags(scratch_tls_dir(workdir)),
            *http_listener_flags(etcd_image),
            *extra_args,
        ],
        "volumeMounts": mounts,
    }
