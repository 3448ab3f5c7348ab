"""What the plugin reads and writes: the operator's custom resources through the API
server (kubeconfig rules as kubectl's), and backup manifests in S3 with the credentials
the EtcdBackup names."""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any

from kubernetes_asyncio import client, config

from etcd_operator.core.backup.manifest import backup_prefix
from etcd_operator_kubectl import views

GROUP, VERSION = "etcd.operator.dev", "v1alpha1"


class Kube:
    def __init__(self, api: client.ApiClient):
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    @classmethod
    async def connect(cls, kubeconfig: str | None, context: str | None) -> tuple[Kube, str]:
        """The client and the namespace the context names (kubectl's default)."""
        path = kubeconfig or os.environ.get("KUBECONFIG") or None
        if path and ":" in path:
            path = path.split(":")[0]  # kubectl merges a list; the first file holds the context here
        cfg = client.Configuration()
        namespace = "default"
        has_default_file: bool = await asyncio.to_thread(
            lambda: os.path.exists(os.path.expanduser(config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION))
        )
        if path or has_default_file:
            await config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
            contexts, active = config.list_kube_config_contexts(config_file=path)
            chosen = next((c for c in contexts if c["name"] == context), active) if context else active
            namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
        else:
            config.load_incluster_config(client_configuration=cfg)
            namespace = _incluster_namespace() or namespace
        return cls(client.ApiClient(configuration=cfg)), namespace

    async def close(self) -> None:
        await self.api.close()

    async def get(self, namespace: str, plural: str, name: str) -> dict[str, Any]:
        return await self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)

    async def create(self, namespace: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)

    async def annotate(self, namespace: str, plural: str, name: str, annotations: dict[str, str]) -> dict[str, Any]:
        return await self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            plural,
            name,
            {"metadata": {"annotations": annotations}},
            _content_type="application/merge-patch+json",
        )  # type: ignore[call-arg]  # the stubs omit it

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        secret = await self.core.read_namespaced_secret(name, namespace)
        return base64.b64decode((secret.data or {})[key]).decode()


async def read_catalogue(kube: Kube, namespace: str, backup: dict[str, Any]) -> list[views.CatalogueEntry]:
    """Every manifest under the EtcdBackup's own prefix, read from S3."""
    import boto3
    from botocore.config import Config

    s3 = backup["spec"]["storage"]["s3"]
    creds = s3.get("credentialsSecretRef")
    keys: dict[str, Any] = {}
    if creds:
        keys["aws_access_key_id"] = await kube.secret_value(
            namespace, creds["name"], creds.get("accessKeyIDKey", "accessKeyID")
        )
        keys["aws_secret_access_key"] = await kube.secret_value(
            namespace, creds["name"], creds.get("secretAccessKeyKey", "secretAccessKey")
        )
    bucket = boto3.client(
        "s3",
        endpoint_url=s3.get("endpoint"),
        region_name=s3.get("region") or "us-east-1",
        config=Config(
            s3={"addressing_style": "path" if s3.get("forcePathStyle") else "auto"},
            retries={"max_attempts": 2},
            connect_timeout=5,
            read_timeout=20,
        ),
        **keys,
    )
    prefix = backup_prefix(s3.get("prefix", ""), namespace, backup["metadata"]["name"])
    entries = []
    for page in bucket.get_paginator("list_objects_v2").paginate(Bucket=s3["bucket"], Prefix=prefix):
        for obj in page.get("Contents", []):
            if views.is_manifest_key(obj["Key"]):
                body = bucket.get_object(Bucket=s3["bucket"], Key=obj["Key"])["Body"].read()
                if (entry := views.parse_manifest(body)) is not None:
                    entries.append(entry)
    return views.catalogue(entries)


def _incluster_namespace() -> str | None:
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    return open(path).read().strip() if os.path.exists(path) else None
