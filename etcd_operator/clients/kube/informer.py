"""One list+watch per kind for the whole operator: a cache of the member pods (or PVCs) of
every cluster, and a wake-up for the cluster whose child changed.

A cache that has not finished its first listing (or lost its watch and is listing again)
answers None, never "no objects": the caller then lists live."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.core.cluster import naming
from etcd_operator.runtime.config import is_pattern

logger = logging.getLogger(__name__)

# Every member pod and PVC carries these; the cluster's own name is in LABEL_CLUSTER.
MEMBER_SELECTOR = f"app.kubernetes.io/name=etcd,{naming.LABEL_CLUSTER}"
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0

ClusterKey = tuple[str, str]  # (namespace, cluster name)
ObjectKey = tuple[str, str]  # (namespace, object name)


class Wakeups:
    """One event per running cluster daemon; a change to any of its children sets it."""

    def __init__(self) -> None:
        self._events: dict[ClusterKey, asyncio.Event] = {}

    def register(self, namespace: str, cluster: str) -> asyncio.Event:
        event = asyncio.Event()
        self._events[(namespace, cluster)] = event
        return event

    def forget(self, namespace: str, cluster: str, event: asyncio.Event) -> None:
        if self._events.get((namespace, cluster)) is event:  # a newer daemon of the same name keeps its own
            del self._events[(namespace, cluster)]

    def wake(self, namespace: str, cluster: str) -> None:
        event = self._events.get((namespace, cluster))
        if event is not None:
            event.set()


def cluster_of(obj: Mapping[str, Any]) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(naming.LABEL_CLUSTER)


def matches(obj: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """What a live LIST with the same label selector would return."""
    have = obj["metadata"].get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


class ScopeCache:
    """The objects of one watch (one namespace, or every namespace), by cluster. Pure state:
    the informer feeds it; `on_change` hears of every cluster whose children changed."""

    def __init__(self, on_change: Callable[[str, str], None]):
        self.on_change = on_change
        self.synced = False
        self.resource_version = ""
        self._objects: dict[ObjectKey, dict] = {}
        self._by_cluster: dict[ClusterKey, dict[str, dict]] = {}

    def replace(self, items: Iterable[dict], resource_version: str) -> None:
        """A full listing: the cache becomes exactly these items; every cluster that gained,
        lost or changed a child is woken."""
        fresh = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in map(_trimmed, items)}
        touched = set()
        for key in set(self._objects) | set(fresh):
            before, after = self._objects.get(key), fresh.get(key)
            if _version(before) != _version(after):
                touched |= {k for k in (_cluster_key(before), _cluster_key(after)) if k}
        self._objects, self._by_cluster = {}, {}
        for key, obj in fresh.items():
            self._store(key, obj)
        self.resource_version = resource_version
        self.synced = True
        for namespace, cluster in sorted(touched):
            self.on_change(namespace, cluster)

    def apply(self, event: Mapping[str, Any]) -> None:
        """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK."""
        kind, obj = event.get("type"), event.get("object") or {}
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        obj = _trimmed(obj)
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        before = self._remove(key)
        if kind != "DELETED":
            self._store(key, obj)
        for cluster_key in sorted({k for k in (_cluster_key(before), _cluster_key(obj)) if k}):
            self.on_change(*cluster_key)

    def lost(self) -> None:
        """The watch broke: nothing is answered until the next full listing."""
        self.synced = False

    def children(self, namespace: str, cluster: str) -> list[dict] | None:
        if not self.synced:
            return None
        labels = naming.selector_labels(cluster)
        return [o for o in self._by_cluster.get((namespace, cluster), {}).values() if matches(o, labels)]

    def _store(self, key: ObjectKey, obj: dict) -> None:
        self._objects[key] = obj
        cluster_key = _cluster_key(obj)
        if cluster_key:
            self._by_cluster.setdefault(cluster_key, {})[key[1]] = obj

    def _remove(self, key: ObjectKey) -> dict | None:
        obj = self._objects.pop(key, None)
        cluster_key = _cluster_key(obj)
        if cluster_key and cluster_key in self._by_cluster:
            self._by_cluster[cluster_key].pop(key[1], None)
            if not self._by_cluster[cluster_key]:
                del self._by_cluster[cluster_key]
        return obj


def _cluster_key(obj: Mapping[str, Any] | None) -> ClusterKey | None:
    if obj is None:
        return None
    cluster = cluster_of(obj)
    return (obj["metadata"]["namespace"], cluster) if cluster else None


def _version(obj: Mapping[str, Any] | None) -> str | None:
    return None if obj is None else obj["metadata"].get("resourceVersion")


def _trimmed(obj: dict) -> dict:
    """managedFields are the largest part of a pod and nothing here reads them."""
    obj["metadata"].pop("managedFields", None)
    return obj


class Informer:
    """Lists, then watches from the list's version, with bookmarks; resumes a watch the server
    ended; lists again (with backoff) after 410 Gone or a broken stream. One scope per
    watched namespace, or one for the whole cluster (`namespaces` empty, or patterns)."""

    def __init__(
        self,
        kube_client: kube.KubeClient,
        resource: kube.Resource,
        namespaces: Iterable[str],
        on_change: Callable[[str, str], None],
        selector: str = MEMBER_SELECTOR,
    ):
        self.kube = kube_client
        self.resource = resource
        self.selector = selector
        names = tuple(namespaces)
        plain = names and not any(is_pattern(n) for n in names)
        self.scopes: dict[str | None, ScopeCache] = (
            {n: ScopeCache(on_change) for n in names} if plain else {None: ScopeCache(on_change)}
        )
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._run(namespace, scope), name=f"informer {self.resource.plural}")
            for namespace, scope in self.scopes.items()
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def children(self, namespace: str, cluster: str) -> list[dict] | None:
        """The cluster's children as a live LIST by its selector would return them; None
        when this cache cannot say (not listed yet, or listing again)."""
        scope = self.scopes.get(namespace) or self.scopes.get(None)
        return None if scope is None else scope.children(namespace, cluster)

    async def _run(self, namespace: str | None, scope: ScopeCache) -> None:
        backoff = BACKOFF_FIRST
        while True:
            try:
                items, version = await self.kube.list_with_version(self.resource, namespace, self.selector)
                scope.replace(items, version)
                backoff = BACKOFF_FIRST
                while True:  # each round ends when the server closes the stream; resume from the last version
                    async for event in self.kube.watch(self.resource, namespace, self.selector, scope.resource_version):
                        scope.apply(event)
            except asyncio.CancelledError:
                raise
            except kube.ApiError as e:
                if e.status == 410:
                    logger.info(
                        "%s watch (%s): version expired; listing again",
                        self.resource.plural,
                        namespace or "all namespaces",
                    )
                    scope.lost()
                    continue
                logger.warning("%s watch (%s) failed: %s", self.resource.plural, namespace or "all namespaces", e)
            except Exception as e:  # a broken stream, a timeout, a refused connection
                logger.warning("%s watch (%s) broke: %r", self.resource.plural, namespace or "all namespaces", e)
            scope.lost()
            await asyncio.sleep(backoff * random.uniform(0.5, 1.0))
            backoff = min(backoff * 2, BACKOFF_MAX)


class ChildCaches:
    """The pod and PVC informers of the operator, and the daemons' wake-ups."""

    def __init__(self, kube_client: kube.KubeClient, namespaces: Iterable[str]):
        self.wakeups = Wakeups()
        namespaces = tuple(namespaces)
        self.pods = Informer(kube_client, kube.PODS, namespaces, self.wakeups.wake)
        self.pvcs = Informer(kube_client, kube.PVCS, namespaces, self.wakeups.wake)

    def start(self) -> None:
        self.pods.start()
        self.pvcs.start()

    async def stop(self) -> None:
        await asyncio.gather(self.pods.stop(), self.pvcs.stop())

    def children(self, namespace: str, cluster: str) -> tuple[list[dict], list[dict]] | None:
        """(pods, PVCs) from the caches, or None unless both have a full listing."""
        pods, pvcs = self.pods.children(namespace, cluster), self.pvcs.children(namespace, cluster)
        return None if pods is None or pvcs is None else (pods, pvcs)
