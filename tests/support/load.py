"""A bounded put/get load against all of a cluster's endpoints, as a client with every
endpoint configured sees it: a request (put a key, then read it back) may try each endpoint
in turn until its deadline; it fails only when no endpoint served it by then."""

from __future__ import annotations

import asyncio
import time

from etcd_operator.clients.etcd.client import EtcdError
from tests.support.etcd_probes import Endpoints, LoopThread, _clients


class BoundedLoad(LoopThread):
    def __init__(
        self,
        endpoints: Endpoints,
        prefix: str = "/load/",
        max_requests: int = 5000,
        interval: float = 0.05,
        request_deadline: float = 10.0,
    ):
        super().__init__()
        self.endpoints = endpoints
        self.prefix = prefix
        self.max_requests = max_requests
        self.interval = interval
        self.request_deadline = request_deadline
        self.written: list[str] = []  # keys whose put and read-back succeeded
        self.failed: list[tuple[str, str]] = []  # (key, last error)

    async def _request(self, key: str, cache) -> str | None:
        """None when served, else the last error."""
        value = key.encode()
        deadline = time.monotonic() + self.request_deadline
        error = "no endpoint"
        put_done = False
        while time.monotonic() < deadline:
            for client in await _clients(await asyncio.to_thread(self.endpoints), cache):
                try:
                    if not put_done:
                        await client.put(key.encode(), value)
                        put_done = True
                    if await client.get(key.encode()) == value:
                        return None
                    error = f"read back a different value from {client.endpoint}"
                except EtcdError as e:
                    error = str(e)
            await asyncio.sleep(0.2)
        return error

    async def main(self) -> None:
        cache: dict = {}
        try:
            for n in range(self.max_requests):
                if self.stopping:
                    break
                key = f"{self.prefix}{n:08}"
                error = await self._request(key, cache)
                if error is None:
                    self.written.append(key)
                else:
                    self.failed.append((key, error))
                await asyncio.sleep(self.interval)
        finally:
            await _clients([], cache)
