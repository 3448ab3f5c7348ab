"""The operator's own HTTP endpoints: /healthz (the process works, leader or standby),
/readyz (this replica leads and kopf is running) and /metrics."""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from etcd_operator.metrics import REGISTRY


class HealthServer:
    def __init__(self, port: int, ready: asyncio.Event):
        self.port = port
        self.ready = ready
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "0.0.0.0", self.port).start()

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok" if self.ready.is_set() else "standby", status=200 if self.ready.is_set() else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
