"""The short-lived pod that verifies one backup: fetch the snapshot onto an emptyDir
(re-checking its sha256), restore it with the source version's own etcdutl, and serve it
from a scratch single-member etcd that the operator then queries. It touches no cluster
data and is deleted when the verification ends. Pure."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

from etcd_operator import API_GROUP, API_VERSION, pod_security, snapshot_fetch
from etcd_operator.cluster import naming

LABEL_VERIFIES = f"{API_GROUP}/verifies-backup"
ANNOTATION_KEY = f"{API_GROUP}/verified-key"
SCRATCH = "/var/lib/etcd-verify"
SNAPSHOT_FILE = f"{SCRATCH}/snapshot.db"
DATA_DIR = f"{SCRATCH}/data"
MEMBER = "verify"


def pod_name(backup: str) -> str:
    return f"{backup[:52]}-verify"




def verification_pod(backup: str, namespace: str, backup_uid: str, etcd_image: str, operator_image: str,
                     source: Mapping[str, Any], key: str, sha256: str) -> dict[str, Any]:
    peer = f"http://$(POD_IP):{naming.PEER_PORT}"
    pod_ip = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    scratch = [{"name": "scratch", "mountPath": SCRATCH}]
    volumes: list[dict[str, Any]] = [{"name": "scratch", "emptyDir": {}}]
    ca_volumes, ca_mounts = snapshot_fetch.ca_bundle(source)
    volumes += ca_volumes
    fetch_mounts = scratch + ca_mounts
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
        "spec": pod_security.restricted({
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "volumes": volumes,
            "initContainers": [
                {"name": "fetch", "image": operator_image,
                 "command": ["python", "-m", "etcd_operator.seed", "fetch"],
                 "env": snapshot_fetch.fetch_env(source, key, sha256, SNAPSHOT_FILE, DATA_DIR, home=SCRATCH),
                 "volumeMounts": fetch_mounts},
                {"name": "restore", "image": etcd_image, "command": ["etcdutl"],
                 "args": ["snapshot", "restore", SNAPSHOT_FILE, f"--name={MEMBER}", f"--data-dir={DATA_DIR}",
                          f"--initial-cluster={MEMBER}={peer}", f"--initial-advertise-peer-urls={peer}",
                          f"--initial-cluster-token=verify-{hashlib.sha256(key.encode()).hexdigest()[:12]}"],
                 "env": [pod_ip], "volumeMounts": scratch},
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
                "volumeMounts": scratch,
            }],
        }),
    }
