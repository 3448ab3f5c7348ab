"""Builds an S3Location from a spec's storage.s3 block and the Secrets it names.
Secret values stay inside S3Location (repr-hidden) and are never logged or reported."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.s3 import S3Location, StorageError
from etcd_operator.core.backup.object_lock import UploadLock
from etcd_operator.core.prerequisites import secret_names


async def _secret_value(kube_client: kube.KubeClient, namespace: str, name: str, key: str) -> bytes:
    secret = await kube_client.get(kube.SECRETS, namespace, name)
    if secret is None:
        # Not permanent: it may still be created (a backup or restore waits for it).
        raise StorageError(f"Secret {namespace}/{name} does not exist", "SecretNotFound")
    data = secret.get("data") or {}
    if key not in data:
        raise StorageError(f"Secret {namespace}/{name} has no key {key!r}", "SecretKeyNotFound", permanent=True)
    return base64.b64decode(data[key])


async def missing_secrets(kube_client: kube.KubeClient, namespace: str, s3: Mapping[str, Any]) -> tuple[str, ...]:
    """The Secrets a storage.s3 block names that do not exist (their data is not read here)."""
    names = secret_names(s3)
    found = await asyncio.gather(*(kube_client.get(kube.SECRETS, namespace, n) for n in names))
    return tuple(n for n, secret in zip(names, found, strict=True) if secret is None)


# The only keys read from a credentials Secret. A spec that could name any key of any
# Secret could send, say, a ServiceAccount token as the access key ID (SigV4 sends it in
# clear) to an endpoint its author controls.
ACCESS_KEY_ID_KEY = "accessKeyID"
SECRET_ACCESS_KEY_KEY = "secretAccessKey"
KEY_FIELDS = {"accessKeyIDKey": ACCESS_KEY_ID_KEY, "secretAccessKeyKey": SECRET_ACCESS_KEY_KEY}


def check_credential_keys(credentials: Mapping[str, Any]) -> None:
    """Objects stored before the CRD pinned the key names may still name others: refused."""
    for field, fixed in KEY_FIELDS.items():
        if credentials.get(field, fixed) != fixed:
            raise StorageError(
                f"credentialsSecretRef.{field} must be {fixed!r}: only the fixed key names "
                f"are read from a credentials Secret",
                "CredentialKeyRefused",
                permanent=True,
            )


async def s3_location(kube_client: kube.KubeClient, namespace: str, s3: Mapping[str, Any]) -> S3Location:
    access_key = secret_key = None
    credentials = s3.get("credentialsSecretRef")
    if credentials:
        check_credential_keys(credentials)
        access_key = (await _secret_value(kube_client, namespace, credentials["name"], ACCESS_KEY_ID_KEY)).decode()
        secret_key = (await _secret_value(kube_client, namespace, credentials["name"], SECRET_ACCESS_KEY_KEY)).decode()
    ca_bundle = None
    ca = s3.get("caBundleSecretRef")
    if ca:
        ca_bundle = await _secret_value(kube_client, namespace, ca["name"], ca.get("key", "ca.crt"))
    return S3Location(
        bucket=s3["bucket"],
        endpoint=s3.get("endpoint") or None,
        region=s3.get("region") or None,
        force_path_style=bool(s3.get("forcePathStyle", False)),
        access_key=access_key,
        secret_key=secret_key,
        ca_bundle=ca_bundle,
        insecure=bool(s3.get("insecure", False)),
        encryption=(s3.get("serverSideEncryption") or {}).get("mode"),
        kms_key_id=(s3.get("serverSideEncryption") or {}).get("kmsKeyID"),
        object_lock=_upload_lock(s3.get("objectLock")),
    )


def _upload_lock(spec: Mapping[str, Any] | None) -> UploadLock | None:
    try:
        return UploadLock.from_dict(spec)
    except ValueError as e:
        raise StorageError(f"spec.storage.s3.objectLock: {e}", "InvalidObjectLock", permanent=True) from None
