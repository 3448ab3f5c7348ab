"""Several etcd clients in one event loop, each a sequence of puts and linearizable gets on
a few keys, recording every call and return for the linearizability checker
(tests/support/history.py).

Each operation goes to one member, the next one in turn, with no retry: a get that fails
is left out of the history (it observed nothing), a put that fails is recorded with an
unknown outcome (it may have been applied anyway). Every put writes a value of its own.
When the workload stops, each key is read once more, so a lost acknowledged write shows
up as a stale read even if nothing else read that key again."""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Callable

from etcd_operator.clients.etcd.client import ClientTLS, EtcdError, EtcdMemberClient
from tests.support.etcd_probes import Endpoints, LoopThread
from tests.support.history import Operation

Credentials = Callable[[], ClientTLS | None]


class KeyValueWorkload(LoopThread):
    REFRESH_SECONDS = 1.0
    FINAL_READ_SECONDS = 30.0  # within LoopThread.stop()'s join

    def __init__(
        self,
        endpoints: Endpoints,
        credentials: Credentials,
        clients: int = 4,
        keys: int = 4,
        pause: float = 0.025,
        timeout: float = 2.0,
    ):
        super().__init__()
        self._endpoints_source = endpoints
        self._credentials_source = credentials
        self.clients = clients
        self.keys = [f"/linearizability/{n}" for n in range(keys)]
        self.pause = pause
        self.timeout = timeout
        self.operations: list[Operation] = []
        self.errors: collections.Counter[str] = collections.Counter()  # gRPC code -> failed calls
        self.unread: list[str] = []  # keys whose final read failed
        self.loop_lag = 0.0  # the longest this event loop was late for a timer, in seconds
        self._endpoints: list[str] = []
        self._credentials: ClientTLS | None = None

    def successes(self) -> int:
        return sum(1 for o in self.operations if o.returned is not None)

    def rate(self, start: int, end: int) -> float:
        """Successful operations a second that returned within [start, end] (time.monotonic_ns):
        the load the cluster actually served, not what the clients tried."""
        served = sum(1 for o in self.operations if o.returned is not None and start <= o.returned <= end)
        return served / max((end - start) / 1e9, 1e-9)

    async def _refresh(self) -> None:
        endpoints = await asyncio.to_thread(self._endpoints_source)
        self._credentials = await asyncio.to_thread(self._credentials_source)
        self._endpoints = endpoints or self._endpoints

    async def _refresher(self) -> None:
        while not self.stopping:
            try:
                await self._refresh()
            except Exception:  # the API server may be slow; the last known members still serve
                pass
            await asyncio.sleep(self.REFRESH_SECONDS)

    async def _watch_loop(self) -> None:
        """A stalled loop would time calls out for the test's own sake, not the cluster's."""
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.1)
            self.loop_lag = max(self.loop_lag, time.monotonic() - before - 0.1)

    async def main(self) -> None:
        await self._refresh()
        helpers = [asyncio.create_task(self._refresher()), asyncio.create_task(self._watch_loop())]
        try:
            await asyncio.gather(*(self._client(n) for n in range(self.clients)))
            await self._final_reads()
        finally:
            for helper in helpers:
                helper.cancel()

    async def _client(self, n: int) -> None:
        rng = random.Random(n)
        members = _Members(self.timeout)
        sequence = 0
        try:
            while not self.stopping:
                endpoint = self._endpoints[(n + sequence) % len(self._endpoints)]
                client = await members.client(endpoint, self._credentials)
                key = rng.choice(self.keys)
                if rng.random() < 0.5:
                    await self._put(n, client, key, f"{n}.{sequence}")
                else:
                    await self._get(n, client, key)
                sequence += 1
                await asyncio.sleep(self.pause)
        finally:
            await members.close()

    async def _put(self, n: int, client: EtcdMemberClient, key: str, value: str) -> None:
        call = time.monotonic_ns()
        try:
            await client.put(key.encode(), value.encode())
        except EtcdError as e:
            self.errors[str(e.code)] += 1
            self.operations.append(Operation(n, "put", key, value, call, None))
            return
        self.operations.append(Operation(n, "put", key, value, call, time.monotonic_ns()))

    async def _get(self, n: int, client: EtcdMemberClient, key: str) -> bool:
        call = time.monotonic_ns()
        try:
            value = await client.get(key.encode())
        except EtcdError as e:
            self.errors[str(e.code)] += 1
            return False
        returned = time.monotonic_ns()
        self.operations.append(Operation(n, "get", key, None if value is None else value.decode(), call, returned))
        return True

    async def _final_reads(self) -> None:
        members = _Members(self.timeout)
        deadline = time.monotonic() + self.FINAL_READ_SECONDS
        try:
            for key in self.keys:
                attempt = 0
                while not await self._get(
                    self.clients,
                    await members.client(self._endpoints[attempt % len(self._endpoints)], self._credentials),
                    key,
                ):
                    if time.monotonic() > deadline:
                        self.unread.append(key)
                        break
                    attempt += 1
                    await asyncio.sleep(0.2)
        finally:
            await members.close()


class _Members:
    """One client's connections, one per member, dropped when the credentials change."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.credentials: ClientTLS | None = None
        self.connections: dict[str, EtcdMemberClient] = {}

    async def client(self, endpoint: str, credentials: ClientTLS | None) -> EtcdMemberClient:
        if credentials != self.credentials:
            await self.close()
            self.credentials = credentials
        if endpoint not in self.connections:
            self.connections[endpoint] = EtcdMemberClient(endpoint, timeout=self.timeout, tls=credentials)
        return self.connections[endpoint]

    async def close(self) -> None:
        for connection in self.connections.values():
            await connection.close()
        self.connections.clear()
