"""A small async Kubernetes client that speaks plain dicts, on kubernetes_asyncio's
transport (auth, TLS, kubeconfig and in-cluster config)."""

from __future__ import annotations

import builtins
import dataclasses
import importlib.metadata
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.rest import ApiException

from etcd_operator.core.leadership_fence import WriteGuard, permit_write

FIELD_MANAGER = "etcd-operator"


def _user_agent() -> str:
    try:
        return f"etcd-operator/{importlib.metadata.version('etcd-operator')}"
    except importlib.metadata.PackageNotFoundError:
        return "etcd-operator/unknown"


USER_AGENT = _user_agent()
REQUEST_TIMEOUT = 30
WATCH_TIMEOUT = 300  # the server ends a watch after this long; it is resumed from its last version
WATCH_READ_GRACE = 30  # seconds of silence past the server's own timeout before the stream counts as dead


class Conflict(Exception):
    """The object changed or already exists (HTTP 409)."""


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str, fields: tuple[str, ...] = ()):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.fields = fields  # the refused fields the server named (details.causes[].field)


class NamespaceTerminating(ApiError):
    """A create refused because the namespace is being deleted (403, cause NamespaceTerminating)."""


def _terminating(status: int, details: dict) -> bool:
    causes = (details.get("details") or {}).get("causes") or []
    return status == 403 and (
        any(c.get("reason") == "NamespaceTerminating" for c in causes)
        or "because it is being terminated" in details.get("message", "")
    )


@dataclasses.dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str

    def path(self, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods")
PVCS = Resource("", "v1", "persistentvolumeclaims")
SERVICES = Resource("", "v1", "services")
SECRETS = Resource("", "v1", "secrets")
NODES = Resource("", "v1", "nodes")
PVS = Resource("", "v1", "persistentvolumes")
NAMESPACES = Resource("", "v1", "namespaces")
PDBS = Resource("policy", "v1", "poddisruptionbudgets")
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies")
LEASES = Resource("coordination.k8s.io", "v1", "leases")
STORAGECLASSES = Resource("storage.k8s.io", "v1", "storageclasses")


def _raise_for(status: int, body: bytes | str | None, reason: str | None) -> None:
    """404 is an answer (None); 409 is Conflict; anything else is an ApiError."""
    if status == 404:
        return None
    try:
        details = json.loads(body or "")
        message, api_reason = details.get("message", ""), details.get("reason", "")
    except (TypeError, ValueError):
        details, message, api_reason = {}, str(body), reason or ""
    if status == 409:
        raise Conflict(message)
    if _terminating(status, details):
        raise NamespaceTerminating(status, api_reason, message)
    causes = (details.get("details") or {}).get("causes") or [] if isinstance(details, dict) else []
    fields = tuple(dict.fromkeys(c["field"] for c in causes if isinstance(c, dict) and c.get("field")))
    raise ApiError(status, api_reason, message, fields)


class KubeClient:
    def __init__(self, api_client: k8s.ApiClient, guard: WriteGuard | None = None):
        self.api = api_client
        self.guard = guard  # None: the process's write guard (leader election)

    @classmethod
    async def from_environment(cls, guard: WriteGuard | None = None) -> KubeClient:
        """In-cluster config, else the kubeconfig. Requests carry USER_AGENT, so the API
        server's audit log can tell the operator's own requests (kopf's say "kopf/...")."""
        configuration = k8s.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except k8s_config.ConfigException:
            await k8s_config.load_kube_config(client_configuration=configuration)
        api = k8s.ApiClient(configuration)
        api.user_agent = USER_AGENT
        return cls(api, guard)

    async def close(self) -> None:
        await self.api.close()

    async def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict | None = None,
        content_type: str = "application/json",
    ) -> dict | None:
        timeout: float = REQUEST_TIMEOUT
        if method != "GET":  # a write: refused (LeadershipLost) when deposed, abandoned at the deadline
            timeout = min(timeout, permit_write(f"{method} {path}", self.guard))
        try:
            response = await self.api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except ApiException as e:
            _raise_for(e.status, e.body, e.reason)
            return None
        data = await response.read()
        if not 200 <= response.status <= 299:
            _raise_for(response.status, data, response.reason)
            return None
        return json.loads(data) if data else {}

    async def get(self, resource: Resource, namespace: str | None, name: str) -> dict | None:
        return await self._request("GET", resource.path(namespace, name))

    async def list(self, resource: Resource, namespace: str | None, label_selector: str = "") -> list[dict]:
        items, _ = await self.list_with_version(resource, namespace, label_selector)
        return items

    async def list_with_version(
        self, resource: Resource, namespace: str | None, label_selector: str = ""
    ) -> tuple[builtins.list[dict], str]:
        """The items and the list's resourceVersion, where a watch picks up."""
        query = {"labelSelector": label_selector} if label_selector else {}
        result = await self._request("GET", resource.path(namespace), query=query) or {}
        return result.get("items", []), (result.get("metadata") or {}).get("resourceVersion", "")

    async def watch(
        self,
        resource: Resource,
        namespace: str | None,
        label_selector: str,
        resource_version: str,
        timeout_seconds: int = WATCH_TIMEOUT,
    ) -> AsyncIterator[dict]:
        """The watch events ({"type", "object"}) after `resource_version`, with bookmarks, until the
        server ends the stream. An expired version (410 Gone) raises ApiError with status 410,
        whether the server refuses the request or sends it as an ERROR event."""
        query = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        if label_selector:
            query["labelSelector"] = label_selector
        try:
            response = await self.api.call_api(
                resource.path(namespace),
                "GET",
                query_params=list(query.items()),
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(
                    connect=REQUEST_TIMEOUT, sock_connect=REQUEST_TIMEOUT, sock_read=timeout_seconds + WATCH_READ_GRACE
                ),
            )
        except ApiException as e:
            _raise_for(e.status, e.body, e.reason)
            raise ApiError(e.status, e.reason or "", "watch refused") from e
        try:
            if not 200 <= response.status <= 299:
                _raise_for(response.status, await response.read(), response.reason)
                raise ApiError(response.status, response.reason or "", "watch refused")
            pending = b""  # one event per line; a line may be longer than any read buffer
            async for chunk in response.content.iter_any():
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiError(
                            int(status.get("code") or 500), status.get("reason", ""), status.get("message", "")
                        )
                    yield event
        finally:
            response.close()

    async def create(self, resource: Resource, namespace: str | None, body: dict, dry_run: bool = False) -> dict | None:
        """Raises Conflict when the object already exists. `dry_run` only validates."""
        return await self._request(
            "POST", resource.path(namespace), body=body, query={"dryRun": "All"} if dry_run else None
        )

    async def merge_patch(
        self, resource: Resource, namespace: str | None, name: str, patch: dict, subresource: str | None = None
    ) -> dict | None:
        return await self._request(
            "PATCH",
            resource.path(namespace, name, subresource),
            body=patch,
            content_type="application/merge-patch+json",
        )

    async def apply(self, resource: Resource, namespace: str | None, body: dict) -> dict | None:
        """Server-side apply: creates or converges the fields this operator owns."""
        name = body["metadata"]["name"]
        return await self._request(
            "PATCH",
            resource.path(namespace, name),
            body=body,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    async def delete(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        uid: str | None = None,
        grace_period: int | None = None,
    ) -> bool:
        """Deletes if present (and, with `uid`, only that incarnation); False when already gone."""
        options: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_period is not None:
            options["gracePeriodSeconds"] = grace_period
        try:
            result = await self._request("DELETE", resource.path(namespace, name), body=options)
        except Conflict:
            return False  # a newer incarnation; not ours to delete
        return result is not None


def _custom(plural: str) -> Resource:
    from etcd_operator import API_GROUP, API_VERSION

    return Resource(API_GROUP, API_VERSION, plural)


ETCDCLUSTERS = _custom("etcdclusters")
ETCDBACKUPS = _custom("etcdbackups")
ETCDRESTORES = _custom("etcdrestores")
