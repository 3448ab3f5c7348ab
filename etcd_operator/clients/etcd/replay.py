"""The calls a point-in-time replay makes on its scratch member (programs/replay.py) once it
serves the replayed backend: its revision, leases and contents read back, its leases kept
alive until its snapshot is taken. The writes (a transaction of key changes, a lease granted
under a given ID or revoked) are what a source's clients make, in the tests and the bench."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence

import grpc
from aetcd import rpc

from etcd_operator.clients.etcd.client import ClientTLS, EtcdError, EtcdMemberClient
from etcd_operator.core.backup.segments import KeyChange

LEASE_EXISTS = "lease already exists"


class ReplayMember(EtcdMemberClient):
    """The scratch member a replay snapshots (it has no other client), or a source written
    as the backup's segments record it."""

    def __init__(self, endpoint: str, timeout: float = 60.0, tls: ClientTLS | None = None):
        super().__init__(endpoint, timeout, tls=tls)
        self.tls = tls  # for the snapshot stream, on a channel of its own (clients/etcd/snapshot.py)

    async def __aenter__(self) -> ReplayMember:
        return self

    async def txn(self, changes: Sequence[KeyChange]) -> int:
        """All `changes` in one transaction; the store's revision after it."""
        ops = [
            rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=c.key))
            if c.deleted
            else rpc.RequestOp(request_put=rpc.PutRequest(key=c.key, value=c.value, lease=c.lease))
            for c in changes
        ]
        response = await self._call("Txn", self._kv.Txn, rpc.TxnRequest(success=ops), mutating=True)
        return response.header.revision

    async def grant_lease(self, lease: int, ttl: int) -> bool:
        """Grants `lease` with its recorded ID and TTL; False when the store has it already."""
        try:
            await self._call(
                "LeaseGrant", self._lease.LeaseGrant, rpc.LeaseGrantRequest(ID=lease, TTL=ttl), mutating=True
            )
        except EtcdError as e:
            if LEASE_EXISTS in e.detail:
                return False
            raise
        return True

    async def revoke_lease(self, lease: int) -> int:
        """Revokes `lease` (etcd deletes its keys in one revision); the store's revision after it."""
        response = await self._call(
            "LeaseRevoke", self._lease.LeaseRevoke, rpc.LeaseRevokeRequest(ID=lease), mutating=True
        )
        return response.header.revision

    async def leases(self) -> list[tuple[int, int]]:
        """Every lease in the store: (ID, granted TTL)."""
        listed = await self._call("LeaseLeases", self._lease.LeaseLeases, rpc.LeaseLeasesRequest())
        found = []
        for lease in listed.leases:
            ttl = await self._call(
                "LeaseTimeToLive", self._lease.LeaseTimeToLive, rpc.LeaseTimeToLiveRequest(ID=lease.ID)
            )
            found.append((lease.ID, ttl.grantedTTL))
        return found

    async def keep_alive_once(self, leases: Iterable[int]) -> None:
        """One renewal of each of `leases` over one keep-alive stream (they do not change revisions)."""
        wanted = list(leases)
        if not wanted:
            return
        call = self._lease.LeaseKeepAlive(timeout=self.timeout)
        try:
            for lease in wanted:
                await call.write(rpc.LeaseKeepAliveRequest(ID=lease))
                await call.read()
            await call.done_writing()
        except grpc.aio.AioRpcError as e:
            raise EtcdError(self.endpoint, "LeaseKeepAlive", e.code(), e.details() or str(e.code())) from None
        finally:
            call.cancel()

    async def revision(self) -> int:
        return (await self.status()).revision

    async def key_values(self, revision: int = 0) -> list[tuple[bytes, bytes, int]]:
        """Every key at `revision` (0: now) with its value and lease, in key order."""
        response = await self._call(
            "Range", self._kv.Range, rpc.RangeRequest(key=b"\0", range_end=b"\0", revision=revision)
        )
        return [(kv.key, kv.value, kv.lease) for kv in response.kvs]


@contextlib.asynccontextmanager
async def leases_kept_alive(
    member: ReplayMember, leases: set[int], every: float, on_error: list[BaseException]
) -> AsyncIterator[None]:
    """Renews every lease in `leases` (the set may grow) every `every` seconds while the
    block runs, so that none expires during the replay: an expiry would delete its keys
    under a revision of its own, and the replayed revisions would no longer line up. An
    error is kept in `on_error` for the replay to report."""

    async def renew() -> None:
        while True:
            try:
                await member.keep_alive_once(sorted(leases))
            except EtcdError as e:
                on_error.append(e)
                return
            await asyncio.sleep(every)

    task = asyncio.create_task(renew())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
