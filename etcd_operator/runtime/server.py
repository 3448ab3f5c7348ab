"""The operator's own HTTP endpoints: /healthz (the process works, leader or standby),
/readyz (this replica leads and kopf is running) and /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from etcd_operator.controllers.metrics import REGISTRY


class HealthServer:
    def __init__(
        self, port: int, ready: asyncio.Event, leading: Callable[[], bool] | None = None, address: str = "0.0.0.0"
    ):
        self.port = port
        self.address = address
        self.ready = ready
        self.leading = leading or (lambda: True)  # without leader election, kopf's readiness decides
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.address, self.port).start()

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        leads = self.ready.is_set() and self.leading()
        return web.Response(text="ok" if leads else "standby", status=200 if leads else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
