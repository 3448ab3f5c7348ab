"""Kubernetes Events about pods, like kubelet's (Scheduled, Started, Killing, BackOff...)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from urllib.parse import quote

from nodeagent import clock
from nodeagent.kube import Kube

log = logging.getLogger(__name__)

COMPONENT = "localkube-node-agent"


class Recorder:
    def __init__(self, kube: Kube):
        self.kube = kube
        self._pending: set[asyncio.Task] = set()

    def emit(
        self, pod: dict, kind: str, reason: str, message: str, component: str = COMPONENT, node: str | None = None
    ) -> None:
        task = asyncio.ensure_future(self._create(pod, kind, reason, message, component, node))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _create(self, pod, kind, reason, message, component, node) -> None:
        meta = pod["metadata"]
        now = clock.rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": component, **({"host": node} if node else {})},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.kube.create(f"/api/v1/namespaces/{quote(meta['namespace'])}/events", body)
        except Exception as e:  # events are best effort
            log.debug("event %s for %s/%s not recorded: %s", reason, meta["namespace"], meta["name"], e)
