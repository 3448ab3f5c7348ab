"""List+watch caches with periodic resync, reporting every change to a callback."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from nodeagent.kube import ApiError, Kube

log = logging.getLogger(__name__)

# on_change(old, new): old is None for additions, new is None for deletions; a resync
# reports every object again with old == new's previous state.
ChangeHandler = Callable[[dict | None, dict | None], None]


def object_key(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


class Informer:
    def __init__(
        self,
        kube: Kube,
        path: str,
        on_change: ChangeHandler,
        *,
        resync: float = 120.0,
        watch_timeout: int = 60,
        **query,
    ):
        self.kube = kube
        self.path = path
        self.on_change = on_change
        self.resync = resync
        self.watch_timeout = watch_timeout
        self.query = query
        self.cache: dict[str, dict] = {}
        self.synced = asyncio.Event()

    def items(self) -> list[dict]:
        return list(self.cache.values())

    def get(self, namespace: str, name: str) -> dict | None:
        return self.cache.get(f"{namespace}/{name}")

    async def run(self) -> None:
        while True:
            try:
                version = await self._relist()
                deadline = time.monotonic() + self.resync
                while time.monotonic() < deadline:
                    version = await self._watch(version)
                    if version is None:
                        break
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the API server may restart; keep trying
                log.warning("informer %s: %s", self.path, e)
                await asyncio.sleep(1)

    async def _relist(self) -> str:
        listing = await self.kube.get(self.path, **self.query)
        fresh = {object_key(obj): obj for obj in listing.get("items") or []}
        for key in list(self.cache):
            if key not in fresh:
                self._emit(self.cache.pop(key), None)
        for key, obj in fresh.items():
            old = self.cache.get(key)
            self.cache[key] = obj
            self._emit(old, obj)
        self.synced.set()
        return listing["metadata"]["resourceVersion"]

    async def _watch(self, version: str) -> str | None:
        """Watches from `version`; returns where to continue, or None to relist."""
        try:
            async for kind, obj in self.kube.watch(self.path, version, self.watch_timeout, **self.query):
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                version = obj["metadata"].get("resourceVersion", version)
                if kind == "BOOKMARK":
                    continue
                key = object_key(obj)
                old = self.cache.get(key)
                if kind == "DELETED":
                    self.cache.pop(key, None)
                    self._emit(old or obj, None)
                else:
                    self.cache[key] = obj
                    self._emit(old, obj)
        except ApiError as e:
            if e.status == 410:
                return None
            raise
        return version

    def _emit(self, old: dict | None, new: dict | None) -> None:
        try:
            self.on_change(old, new)
        except Exception:
            log.exception("informer %s: change handler failed", self.path)
