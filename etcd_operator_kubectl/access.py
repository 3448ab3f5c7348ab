"""What the plugin reads and writes, all through the API server (kubeconfig rules as
kubectl's): the operator's custom resources, their events, the operator's pod logs, and the
Jobs `kubectl etcd benchmark` creates.
It reads no object store: what it shows of backups is what the operator wrote in their
status. One Secret is read, by `kubectl etcd etcdctl` only: the client identity it runs as
(client_secret), checked in etcdctl.py before any of it is used."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from kubernetes_asyncio import client, config

GROUP, VERSION = "etcd.operator.dev", "v1alpha1"


class Kube:
    def __init__(self, api: client.ApiClient):
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)

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
        return await self.patch(namespace, plural, name, {"metadata": {"annotations": annotations}})

    async def patch(self, namespace: str, plural: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name, body, _content_type="application/merge-patch+json"
        )  # type: ignore[call-arg]  # the stubs omit it

    async def client_secret(self, namespace: str, name: str) -> dict[str, Any]:
        """One Secret by name, as the API server returns it (data in base64)."""
        return self.api.sanitize_for_serialization(await self.core.read_namespaced_secret(name, namespace))

    async def create_job(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        created = await self.batch.create_namespaced_job(namespace, body)  # type: ignore[arg-type]  # a dict serializes as the model would
        return self.api.sanitize_for_serialization(created)

    async def job(self, namespace: str, name: str) -> dict[str, Any]:
        return self.api.sanitize_for_serialization(await self.batch.read_namespaced_job(name, namespace))

    async def list_objects(self, namespace: str, plural: str) -> list[dict[str, Any]]:
        return (await self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural))["items"]

    async def events(self, namespace: str) -> list[dict[str, Any]]:
        found = await self.core.list_namespaced_event(namespace)
        return [self.api.sanitize_for_serialization(e) for e in found.items]

    async def pod_logs(self, namespace: str, selector: str, tail: int | None) -> dict[str, str]:
        """The log of every pod `selector` picks (the operator's replicas), by pod name."""
        pods = await self.core.list_namespaced_pod(namespace, label_selector=selector)
        logs = {}
        for pod in pods.items:
            name = pod.metadata.name
            read = self.core.read_namespaced_pod_log
            logs[name] = await (read(name, namespace, tail_lines=tail) if tail else read(name, namespace))
        return logs


def _incluster_namespace() -> str | None:
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    return open(path).read().strip() if os.path.exists(path) else None
