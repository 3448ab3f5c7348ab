"""Direct etcd calls for scenario tests: marker keys, the member list, and filling the
backend up to its quota. Each call tries the given endpoints in order and uses the first
member that answers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from etcd_operator.clients.etcd.client import EtcdError, EtcdMemberClient

T = TypeVar("T")
NOSPACE = "database space exceeded"  # etcd's ErrNoSpace: "etcdserver: mvcc: database space exceeded"
ALARM_NOSPACE = 1  # etcdserverpb.AlarmType.NOSPACE


def _first_answer(endpoints: list[str], call: Callable[[EtcdMemberClient], Awaitable[T]], timeout: float = 5.0) -> T:
    async def run() -> T:
        errors = []
        for endpoint in endpoints:
            async with EtcdMemberClient(endpoint, timeout=timeout) as client:
                try:
                    return await call(client)
                except EtcdError as e:
                    errors.append(str(e))
        raise EtcdError(",".join(endpoints), "any", None, "; ".join(errors) or "no endpoints")

    return asyncio.run(run())


def member_ids(endpoints: list[str]) -> frozenset[int]:
    """IDs in the member list of the first member that answers."""

    async def call(client: EtcdMemberClient) -> frozenset[int]:
        _, members = await client.member_list()
        return frozenset(m.id for m in members)

    return _first_answer(endpoints, call, timeout=2.0)


def put_markers(endpoints: list[str], prefix: str, count: int) -> dict[str, str]:
    markers = {f"{prefix}{i:03}": f"marker-{i}" for i in range(count)}

    async def call(client: EtcdMemberClient) -> None:
        for key, value in markers.items():
            await client.put(key.encode(), value.encode())

    _first_answer(endpoints, call)
    return markers


def read_keys(endpoints: list[str], keys: list[str]) -> dict[str, str | None]:
    """Linearizable reads: the answer needs a quorum."""

    async def call(client: EtcdMemberClient) -> dict[str, str | None]:
        values = {}
        for key in keys:
            value = await client.get(key.encode())
            values[key] = value.decode() if value is not None else None
        return values

    return _first_answer(endpoints, call)


def alarms(endpoints: list[str]) -> list[tuple[int, int]]:
    """(member id, alarm type) of every raised alarm."""
    return _first_answer(endpoints, lambda client: client.alarms())


def fill_history_until_nospace(endpoint: str, value_bytes: int = 256 * 1024, max_writes: int = 400) -> int:
    """Rewrites one key with values of value_bytes until etcd refuses with `mvcc: database
    space exceeded`, so that the space is taken by the key's history (compaction can free
    it). Returns the number of accepted writes; fails if the quota is not reached within
    max_writes or another error comes back."""

    async def run() -> int:
        value = b"y" * value_bytes
        async with EtcdMemberClient(endpoint, timeout=15.0) as client:
            for n in range(max_writes):
                try:
                    await client.put(b"/fill/history", value)
                except EtcdError as e:
                    if NOSPACE in e.detail:
                        return n
                    raise
        raise AssertionError(f"no NOSPACE after {max_writes} writes of {value_bytes} bytes")

    return asyncio.run(run())


def put_key(endpoints: list[str], key: str, value: str) -> int:
    """One write; returns its revision."""
    return _first_answer(endpoints, lambda client: client.put(key.encode(), value.encode()))
