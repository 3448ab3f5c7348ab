"""Reads ConfigMaps and Secrets of one namespace (cached for one use)."""

from __future__ import annotations

import base64
from urllib.parse import quote

from nodeagent.kube import Kube


class ConfigData:
    def __init__(self, kube: Kube, namespace: str):
        self.kube = kube
        self.namespace = namespace
        self._cache: dict[tuple[str, str], dict[str, bytes] | None] = {}

    async def configmap(self, name: str) -> dict[str, bytes] | None:
        return await self._load("configmaps", name)

    async def secret(self, name: str) -> dict[str, bytes] | None:
        return await self._load("secrets", name)

    async def _load(self, kind: str, name: str) -> dict[str, bytes] | None:
        key = (kind, name)
        if key not in self._cache:
            obj = await self.kube.get_or_none(f"/api/v1/namespaces/{quote(self.namespace)}/{kind}/{quote(name)}")
            self._cache[key] = None if obj is None else _decode(kind, obj)
        return self._cache[key]


def _decode(kind: str, obj: dict) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    if kind == "secrets":
        for key, value in (obj.get("data") or {}).items():
            out[key] = base64.b64decode(value)
        for key, value in (obj.get("stringData") or {}).items():
            out[key] = value.encode()
    else:
        for key, value in (obj.get("data") or {}).items():
            out[key] = value.encode()
        for key, value in (obj.get("binaryData") or {}).items():
            out[key] = base64.b64decode(value)
    return out
