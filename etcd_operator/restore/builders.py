"""The restore pod: fetch the verified snapshot onto the seed member's PVC (operator
image), restore the data directory with the target version's own etcdutl (etcd image),
then remove the snapshot file. Pure."""

from __future__ import annotations

from typing import Any, Mapping

from etcd_operator import API_GROUP
from etcd_operator.cluster import builders as cluster_builders
from etcd_operator.cluster import naming

SNAPSHOT_FILE = f"{cluster_builders.DATA_MOUNT}/restore-snapshot.db"
LABEL_RESTORE = f"{API_GROUP}/restore"


def restore_pod_name(restore: str) -> str:
    return f"{restore}-seed"


def _s3_env(source: Mapping[str, Any], key: str, sha256: str) -> list[dict[str, Any]]:
    env = [
        {"name": "S3_BUCKET", "value": source["bucket"]},
        {"name": "S3_KEY", "value": key},
        {"name": "S3_ENDPOINT", "value": source.get("endpoint") or ""},
        {"name": "S3_REGION", "value": source.get("region") or ""},
        {"name": "S3_FORCE_PATH_STYLE", "value": "true" if source.get("forcePathStyle") else "false"},
        {"name": "EXPECTED_SHA256", "value": sha256},
        {"name": "SNAPSHOT_FILE", "value": SNAPSHOT_FILE},
        {"name": "DATA_DIR", "value": cluster_builders.DATA_DIR},
    ]
    credentials = source.get("credentialsSecretRef")
    if credentials:
        for var, key_field, default in (("AWS_ACCESS_KEY_ID", "accessKeyIDKey", "accessKeyID"),
                                        ("AWS_SECRET_ACCESS_KEY", "secretAccessKeyKey", "secretAccessKey")):
            env.append({"name": var, "valueFrom": {"secretKeyRef": {
                "name": credentials["name"], "key": credentials.get(key_field, default)}}})
    if source.get("caBundleSecretRef"):
        env.append({"name": "S3_CA_FILE", "value": "/etc/s3-ca/ca.crt"})
    return env


def restore_pod(
    restore: str,
    namespace: str,
    cluster: str,
    member: str,
    token: str,
    etcd_image: str,
    operator_image: str,
    source: Mapping[str, Any],
    key: str,
    sha256: str,
) -> dict[str, Any]:
    peer = naming.peer_url(cluster, namespace, member)
    volumes: list[dict[str, Any]] = [{"name": "data", "persistentVolumeClaim": {"claimName": naming.pvc_name(member)}}]
    mounts: list[dict[str, Any]] = [{"name": "data", "mountPath": cluster_builders.DATA_MOUNT}]
    fetch_mounts = list(mounts)
    if source.get("caBundleSecretRef"):
        ca = source["caBundleSecretRef"]
        volumes.append({"name": "s3-ca", "secret": {"secretName": ca["name"],
                                                     "items": [{"key": ca.get("key", "ca.crt"), "path": "ca.crt"}]}})
        fetch_mounts.append({"name": "s3-ca", "mountPath": "/etc/s3-ca", "readOnly": True})
    hardened = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": restore_pod_name(restore),
            "namespace": namespace,
            "labels": {LABEL_RESTORE: restore},
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "volumes": volumes,
            "initContainers": [
                {
                    "name": "fetch",
                    "image": operator_image,
                    "command": ["python", "-m", "etcd_operator.seed", "fetch"],
                    "env": _s3_env(source, key, sha256),
                    "volumeMounts": fetch_mounts,
                    "securityContext": hardened,
                },
                {
                    "name": "restore",
                    "image": etcd_image,
                    "command": ["etcdutl"],
                    "args": [
                        "snapshot", "restore", SNAPSHOT_FILE,
                        f"--name={member}",
                        f"--data-dir={cluster_builders.DATA_DIR}",
                        f"--initial-cluster={member}={peer}",
                        f"--initial-advertise-peer-urls={peer}",
                        f"--initial-cluster-token={token}",
                    ],
                    "volumeMounts": mounts,
                    "securityContext": hardened,
                },
            ],
            "containers": [{
                "name": "cleanup",
                "image": operator_image,
                "command": ["python", "-m", "etcd_operator.seed", "cleanup"],
                "env": [{"name": "SNAPSHOT_FILE", "value": SNAPSHOT_FILE}],
                "volumeMounts": mounts,
                "securityContext": hardened,
            }],
        },
    }
