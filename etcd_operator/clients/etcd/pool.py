"""Reuses one gRPC channel per member endpoint across reconcile passes."""

from __future__ import annotations

from etcd_operator.clients.etcd.client import ClientTLS, EtcdMemberClient
from etcd_operator.core.leadership_fence import WriteGuard


class EtcdClientPool:
    def __init__(self, timeout: float = 3.0, guard: WriteGuard | None = None):
        self._clients: dict[str, EtcdMemberClient] = {}
        self._timeout = timeout
        self._guard = guard  # None: the process's write guard (leader election)
        self._tls: ClientTLS | None = None

    async def use_tls(self, tls: ClientTLS | None) -> None:
        """Dial with these credentials (None: plaintext); open channels that use others close."""
        if tls != self._tls:
            self._tls = tls
            await self.close()

    def get(self, endpoint: str) -> EtcdMemberClient:
        client = self._clients.get(endpoint)
        if client is None:
            client = self._clients[endpoint] = EtcdMemberClient(
                endpoint, timeout=self._timeout, guard=self._guard, tls=self._tls
            )
        return client

    async def retain_only(self, endpoints: set[str]) -> None:
        """Closes channels to endpoints that no longer belong to a pod."""
        for endpoint in list(self._clients):
            if endpoint not in endpoints:
                await self._clients.pop(endpoint).close()

    async def close(self) -> None:
        await self.retain_only(set())
