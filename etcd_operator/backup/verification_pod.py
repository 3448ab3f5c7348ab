"""The short-lived pod that verifies one backup: fetch the snapshot onto an emptyDir
(re-checking its sha256), restore it with the source version's own etcdutl, and serve it
from a scratch single-member etcd that the operator then queries. It touches no cluster
data and is deleted when the verification ends. Pure."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

from etcd_operator import API_GROUP, API_VERSION
from etcd_operator.cluster import naming

LABEL_VERIFIES = f"{API_GROUP}/verifies-backup"
ANNOTATION_KEY = f"{API_GROUP}/verified-key"
SCRATCH = "/var/lib/etcd-verify"
SNAPSHOT_FILE = f"{SCRATCH}/snapshot.db"
DATA_DIR = f"{SCRATCH}/data"
MEMBER = "verify"
NONROOT_ID = 65532


def pod_name(backup: str) -> str:
    return f"{backup[:52]}-verify"


def restricted_pod_security() -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod securityContext, container securityContext) passing the `restricted` Pod
    Security level. One function, so a shared builder can replace it."""
    pod = {"runAsNonRoot": True, "runAsUser": NONROOT_ID, "runAsGroup": NONROOT_ID, "fsGroup": NONROOT_ID,
           "seccompProfile": {"type": "RuntimeDefault"}}
    container = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                 "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    return pod, container


def _s3_env(source: Mapping[str, Any], key: str, sha256: str) -> list[dict[str, Any]]:
    env = [
        {"name": "S3_BUCKET", "value": source["bucket"]},
        {"name": "S3_KEY", "value": key},
        {"name": "S3_ENDPOINT", "value": source.get("endpoint") or ""},
        {"name": "S3_REGION", "value": source.get("region") or ""},
        {"name": "S3_FORCE_PATH_STYLE", "value": "true" if source.get("forcePathStyle") else "false"},
        {"name": "EXPECTED_SHA256", "value": sha256},
        {"name": "SNAPSHOT_FILE", "value": SNAPSHOT_FILE},
        {"name": "DATA_DIR", "value": DATA_DIR},
    ]
    credentials = source.get("credentialsSecretRef")
    if credentials:
        for var, field, default in (("AWS_ACCESS_KEY_ID", "accessKeyIDKey", "accessKeyID"),
                                    ("AWS_SECRET_ACCESS_KEY", "secretAccessKeyKey", "secretAccessKey")):
            env.append({"name": var, "valueFrom": {"secretKeyRef": {
                "name": credentials["name"], "key": credentials.get(field, default)}}})
    if source.get("caBundleSecretRef"):
        env.append({"name": "S3_CA_FILE", "value": "/etc/s3-ca/ca.crt"})
    return env


def verification_pod(backup: str, namespace: str, backup_uid: str, etcd_image: str, operator_image: str,
                     source: Mapping[str, Any], key: str, sha256: str) -> dict[str, Any]:
    pod_security, hardened = restricted_pod_security()
    peer = f"http://$(POD_IP):{naming.PEER_PORT}"
    pod_ip = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    scratch = [{"name": "scratch", "mountPath": SCRATCH}]
    volumes: list[dict[str, Any]] = [{"name": "scratch", "emptyDir": {}}]
    fetch_mounts = list(scratch)
    if source.get("caBundleSecretRef"):
        ca = source["caBundleSecretRef"]
        volumes.append({"name": "s3-ca", "secret": {"secretName": ca["name"],
                                                     "items": [{"key": ca.get("key", "ca.crt"), "path": "ca.crt"}]}})
        fetch_mounts.append({"name": "s3-ca", "mountPath": "/etc/s3-ca", "readOnly": True})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(backup),
            "namespace": namespace,
            "labels": {LABEL_VERIFIES: backup[:63]},
            # Which backup this pod serves; a pod for another key is replaced, never reused.
            "annotations": {ANNOTATION_KEY: key},
            "ownerReferences": [{"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "EtcdBackup",
                                 "name": backup, "uid": backup_uid, "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": pod_security,
            "volumes": volumes,
            "initContainers": [
                {"name": "fetch", "image": operator_image,
                 "command": ["python", "-m", "etcd_operator.seed", "fetch"],
                 "env": _s3_env(source, key, sha256), "volumeMounts": fetch_mounts, "securityContext": hardened},
                {"name": "restore", "image": etcd_image, "command": ["etcdutl"],
                 "args": ["snapshot", "restore", SNAPSHOT_FILE, f"--name={MEMBER}", f"--data-dir={DATA_DIR}",
                          f"--initial-cluster={MEMBER}={peer}", f"--initial-advertise-peer-urls={peer}",
                          f"--initial-cluster-token=verify-{hashlib.sha256(key.encode()).hexdigest()[:12]}"],
                 "env": [pod_ip], "volumeMounts": scratch, "securityContext": hardened},
            ],
            "containers": [{
                "name": "etcd", "image": etcd_image, "command": ["etcd"],
                "args": [f"--name={MEMBER}", f"--data-dir={DATA_DIR}",
                         f"--listen-client-urls=http://$(POD_IP):{naming.CLIENT_PORT}",
                         f"--advertise-client-urls=http://$(POD_IP):{naming.CLIENT_PORT}",
                         f"--listen-peer-urls=http://$(POD_IP):{naming.PEER_PORT}",
                         f"--initial-advertise-peer-urls={peer}",
                         f"--listen-metrics-urls=http://$(POD_IP):{naming.METRICS_PORT}",
                         # Nothing may change the restored store while it is compared.
                         "--auto-compaction-retention=0"],
                "env": [pod_ip],
                "ports": [{"name": "client", "containerPort": naming.CLIENT_PORT}],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": naming.METRICS_PORT},
                                   "periodSeconds": 1, "failureThreshold": 3},
                "volumeMounts": scratch, "securityContext": hardened,
            }],
        },
    }
