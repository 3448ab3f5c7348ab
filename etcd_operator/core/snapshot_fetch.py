"""The fetch step shared by restore and verification pods: the environment and the optional
CA bundle volume that `python -m etcd_operator.programs.seed fetch` needs to download one snapshot
from S3 and re-check its sha256. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CA_VOLUME = "s3-ca"
CA_MOUNT = "/etc/s3-ca"
# Fixed key names only, as the operator reads them (storage.credentials).
CREDENTIAL_KEYS = (("AWS_ACCESS_KEY_ID", "accessKeyID"), ("AWS_SECRET_ACCESS_KEY", "secretAccessKey"))


def fetch_env(
    source: Mapping[str, Any], key: str, sha256: str, snapshot_file: str, data_dir: str, home: str
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
    return env


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
