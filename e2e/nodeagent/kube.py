"""A thin JSON-over-REST layer on kubernetes_asyncio's client: plain dicts in and out,
which keeps field names exactly as the API spells them."""

from __future__ import annotations

import json
import pathlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client, config

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}
REQUEST_TIMEOUT = 30


class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str, path: str):
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{method} {path}: {status} {message}")

    @property
    def reason(self) -> str:
        return self.body.get("reason", "") if isinstance(self.body, dict) else ""


def is_status(error: BaseException, *codes: int) -> bool:
    return isinstance(error, ApiError) and error.status in codes


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
    return f"{path}/{sub}" if sub else path


class Kube:
    def __init__(self, api: client.ApiClient):
        self.api = api
        self.host = api.configuration.host

    @classmethod
    async def from_kubeconfig(cls, path: pathlib.Path) -> Kube:
        configuration = client.Configuration()
        await config.load_kube_config(config_file=str(path), client_configuration=configuration)
        return cls(client.ApiClient(configuration))

    async def close(self) -> None:
        await self.api.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = REQUEST_TIMEOUT,
    ) -> Any:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        response = await self.api.request(
            method,
            self.host + path,
            query_params=_query(query),
            headers=headers,
            body=body,
            _preload_content=False,
            _request_timeout=timeout,
        )
        async with response:
            raw = await response.read()
            status = response.status
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = raw.decode(errors="replace")
        if status >= 400:
            raise ApiError(status, data, method, path)
        return data

    async def get(self, path: str, **query: Any) -> Any:
        return await self.request("GET", path, query=query)

    async def get_or_none(self, path: str) -> Any:
        try:
            return await self.get(path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def create(self, path: str, body: Any) -> Any:
        return await self.request("POST", path, body=body)

    async def patch(self, path: str, body: Any, kind: str = "merge") -> Any:
        return await self.request("PATCH", path, body=body, content_type=PATCH_TYPES[kind])

    async def delete(self, path: str, body: Any = None) -> Any:
        return await self.request("DELETE", path, body=body)

    async def watch(
        self, path: str, resource_version: str, timeout_seconds: int, **query: Any
    ) -> AsyncIterator[tuple[str, dict]]:
        """Yields (type, object) until the server ends the watch."""
        params = {
            **query,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_seconds,
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=timeout_seconds + 30)
        response = await self.api.request(
            "GET",
            self.host + path,
            query_params=_query(params),
            headers={"Accept": "application/json"},
            _preload_content=False,
            _request_timeout=timeout,
        )
        async with response:
            if response.status >= 400:
                raw = await response.read()
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                raise ApiError(response.status, body, "WATCH", path)
            while True:
                line = await response.content.readline()
                if not line:
                    return
                if line.strip():
                    event = json.loads(line)
                    yield event["type"], event["object"]


def _query(query: dict[str, Any] | None) -> list[tuple[str, str]]:
    out = []
    for key, value in (query or {}).items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out.append((key, str(value)))
    return out
