"""Helpers for EtcdBackup and EtcdRestore scenario tests: create and read them (claimed for
the current test's shard, tests/support/claims.py), wait for a restore's phase, and fill a
cluster with keys to back up."""

from __future__ import annotations

import asyncio
import json
import os

from etcd_operator.clients.etcd.client import ClientTLS, EtcdMemberClient
from tests.support.claims import claimed
from tests.support.clusters import GROUP
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.waiting import wait_for


def fill(
    endpoints: list[str],
    count: int,
    value_size: int,
    prefix: str = "/data/",
    incompressible: bool = False,
    tls: ClientTLS | None = None,
    in_flight: int = 1,
) -> None:
    """`count` keys of `value_size` bytes, `in_flight` puts at a time (each is one raft entry:
    a test that needs a long log gets it in seconds). The values repeat their key's number,
    which zstd shrinks to almost nothing: `incompressible` values are random, for a test that
    needs the stored snapshot as large as the data (an upload that lasts, a memory budget filled)."""

    def value(i: int) -> bytes:
        return os.urandom(value_size) if incompressible else (f"{i:06}" * (value_size // 6 + 1))[:value_size].encode()

    async def write():
        async with EtcdMemberClient(endpoints[0], timeout=10, tls=tls) as client:
            numbers = iter(range(count))

            async def writer() -> None:
                for i in numbers:
                    await client.put(f"{prefix}{i:06}".encode(), value(i))

            await asyncio.gather(*(writer() for _ in range(in_flight)))

    asyncio.run(write())


def _apply(kind: str, namespace: str, name: str, spec: dict) -> None:
    manifest = {"apiVersion": GROUP, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    kubectl("apply", "-f", "-", input=json.dumps(claimed(manifest)))


def apply_backup(namespace: str, name: str, spec: dict) -> None:
    _apply("EtcdBackup", namespace, name, spec)


def get_backup(namespace: str, name: str) -> dict:
    return kubectl_json("get", "etcdbackup", name, "-n", namespace)


def apply_restore(namespace: str, name: str, spec: dict) -> None:
    _apply("EtcdRestore", namespace, name, spec)


def get_restore(namespace: str, name: str) -> dict:
    return kubectl_json("get", "etcdrestore", name, "-n", namespace)


def wait_phase(namespace: str, name: str, phase: str, timeout: float = 300) -> dict:
    """Waits for `phase`; a restore that ends in another phase fails the test at once."""

    def check():
        obj = get_restore(namespace, name)
        got = (obj.get("status") or {}).get("phase")
        return obj if got == phase or got in ("Completed", "Failed", "AlreadyApplied") else None

    obj = wait_for(check, timeout, what=f"restore {name} {phase}")
    assert obj["status"]["phase"] == phase, f"restore {name} ended {obj['status']['phase']}: {obj['status']}"
    return obj


def condition(obj: dict, type_: str) -> dict:
    """The condition of that type in an object's status, or {}."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})
