"""The short-lived pod that verifies one backup: fetch the snapshot onto an emptyDir
(re-checking its sha256), restore it with the source version's own etcdutl, start a scratch
single-member etcd on it that listens only on unix sockets inside that emptyDir (no TCP
port, so nothing outside the pod can read the restored data; its client authenticates with a
certificate of a CA made inside the pod, as etcd's root user when the snapshot has
authentication on: core/scratch_tls.py), and compare its answers with
the manifest in a check container of the same pod (backup/scratch_check.py), whose exit
code is the verdict. It touches no cluster data and is deleted when the verification
ends. Pure."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from etcd_operator import API_GROUP, API_VERSION
from etcd_operator.core import seed_containers
from etcd_operator.core.backup.scratch_verdict import Expected

LABEL_VERIFIES = f"{API_GROUP}/verifies-backup"
ANNOTATION_KEY = f"{API_GROUP}/verified-key"
SCRATCH = "/var/lib/etcd-verify"
SNAPSHOT_FILE = f"{SCRATCH}/snapshot.db"
DATA_DIR = f"{SCRATCH}/data"
VERDICT_FILE = f"{SCRATCH}/verdict"
MEMBER = "verify"
CHECK_CONTAINER = "check"
CLIENT_SOCKET = f"{SCRATCH}/{seed_containers.SCRATCH_CLIENT_SOCKET}"
TLS_DIR = seed_containers.scratch_tls_dir(SCRATCH)  # the throwaway CA's certificates (core/scratch_tls.py)
PLACEHOLDER_PEER_URL = seed_containers.PLACEHOLDER_PEER_URL


def pod_name(backup: str) -> str:
    return f"{backup[:52]}-verify"


def verification_pod(
    backup: str,
    namespace: str,
    backup_uid: str,
    etcd_image: str,
    operator_image: str,
    source: Mapping[str, Any],
    key: str,
    sha256: str,
    expected: Expected,
    pull_secrets: list[dict[str, str]] | None = None,
    keys_secret: str | None = None,
) -> dict[str, Any]:
    """`pull_secrets`: the cluster's (spec.pod.imagePullSecrets), for its etcd image and ours.
    `keys_secret`: the backup's encryption Secret, mounted into the fetch container only."""
    scratch = [{"name": "scratch", "mountPath": SCRATCH}]
    volumes: list[dict[str, Any]] = [{"name": "scratch", "emptyDir": {}}]
    ca_volumes, ca_mounts = seed_containers.ca_bundle(source)
    key_volumes, key_mounts = seed_containers.keys_bundle(keys_secret)
    volumes += ca_volumes + key_volumes
    fetch_mounts = scratch + ca_mounts + key_mounts
    expected_env = {
        "EXPECTED_REVISION": expected.revision,
        "EXPECTED_KEY_COUNT": expected.key_count,
        "EXPECTED_HASH_KV": expected.hash_kv,
        "EXPECTED_COMPACT_REVISION": expected.compact_revision,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(backup),
            "namespace": namespace,
            "labels": {LABEL_VERIFIES: backup[:63]},
            # Which backup this pod checks; a pod for another key is replaced, never reused.
            "annotations": {ANNOTATION_KEY: key},
            "ownerReferences": [
                {
                    "apiVersion": f"{API_GROUP}/{API_VERSION}",
                    "kind": "EtcdBackup",
                    "name": backup,
                    "uid": backup_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": seed_containers.one_shot_pod_spec(
            volumes,
            init_containers=[
                seed_containers.fetch_container(
                    operator_image,
                    source,
                    key,
                    sha256,
                    SNAPSHOT_FILE,
                    DATA_DIR,
                    SCRATCH,
                    fetch_mounts,
                    keys_secret=keys_secret,
                ),
                seed_containers.etcdutl_restore(
                    etcd_image,
                    SNAPSHOT_FILE,
                    MEMBER,
                    DATA_DIR,
                    f"{MEMBER}={PLACEHOLDER_PEER_URL}",
                    PLACEHOLDER_PEER_URL,
                    f"verify-{hashlib.sha256(key.encode()).hexdigest()[:12]}",
                    scratch,
                    # never bumped: the store is compared with the source at the snapshot's revision
                    revision_bump=0,
                ),
                seed_containers.scratch_tls_container(operator_image, SCRATCH, scratch),
            ],
            containers=[
                # Nothing may change the restored store while it is compared (no compaction).
                seed_containers.scratch_member(etcd_image, SCRATCH, MEMBER, DATA_DIR, scratch),
                {
                    "name": CHECK_CONTAINER,
                    "image": operator_image,
                    "command": ["python", "-m", "etcd_operator.programs.scratch_check"],
                    "env": [
                        {"name": "ETCD_SOCKET", "value": CLIENT_SOCKET},
                        {"name": "SCRATCH_TLS_DIR", "value": TLS_DIR},
                        {"name": "VERDICT_FILE", "value": VERDICT_FILE},
                        *(
                            {"name": name, "value": "" if value is None else str(value)}
                            for name, value in expected_env.items()
                        ),
                    ],
                    "terminationMessagePath": VERDICT_FILE,
                    "volumeMounts": scratch,
                },
            ],
            pull_secrets=pull_secrets or [],
        ),
    }
