"""Background observers of a real etcd cluster for scenario tests: a writer that counts
acknowledged writes, and a recorder of every membership configuration seen."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from typing import Callable

from etcd_operator.cluster import naming
from etcd_operator.etcd.client import EtcdError, EtcdMemberClient

Endpoints = Callable[[], list[str]]


class _LoopThread:
    """Runs one coroutine in its own thread and event loop until stopped."""

    def __init__(self):
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> "_LoopThread":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self.main())
        except BaseException as e:  # surfaced by stop()
            self.error = e

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        if self.error:
            raise self.error

    async def main(self) -> None:
        raise NotImplementedError


async def _clients(endpoints: list[str], cache: dict[str, EtcdMemberClient]) -> list[EtcdMemberClient]:
    for endpoint in list(cache):
        if endpoint not in endpoints:
            await cache.pop(endpoint).close()
    return [cache.setdefault(e, EtcdMemberClient(e, timeout=2.0)) for e in endpoints]


class AckedWriter(_LoopThread):
    """Writes /acked/<n> = n in sequence; remembers exactly the writes etcd acknowledged."""

    def __init__(self, endpoints: Endpoints, prefix: str = "/acked/"):
        super().__init__()
        self.endpoints = endpoints
        self.prefix = prefix
        self.acked: list[int] = []
        self.failures = 0

    async def main(self) -> None:
        cache: dict[str, EtcdMemberClient] = {}
        sequence = 0
        try:
            while not self.stopping:
                clients = await _clients(await asyncio.to_thread(self.endpoints), cache)
                wrote = False
                for client in clients:
                    try:
                        await client.put(f"{self.prefix}{sequence:08}".encode(), str(sequence).encode())
                    except EtcdError:
                        continue
                    self.acked.append(sequence)
                    sequence += 1
                    wrote = True
                    break
                if not wrote:
                    self.failures += 1
                    await asyncio.sleep(0.2)
                else:
                    await asyncio.sleep(0.02)
        finally:
            await _clients([], cache)


@dataclasses.dataclass(frozen=True)
class Sample:
    at: float
    members: frozenset[tuple[int, bool]]  # (id, is_learner)
    healthy_voters: int

    @property
    def voters(self) -> int:
        return sum(1 for _, learner in self.members if not learner)

    @property
    def has_quorum(self) -> bool:
        return self.healthy_voters >= naming.quorum(self.voters)


class MembershipRecorder(_LoopThread):
    """Samples the leader's member list and every member's health a few times a second."""

    def __init__(self, endpoints: Endpoints, interval: float = 0.25):
        super().__init__()
        self.endpoints = endpoints
        self.interval = interval
        self.samples: list[Sample] = []

    async def main(self) -> None:
        cache: dict[str, EtcdMemberClient] = {}
        try:
            while not self.stopping:
                clients = await _clients(await asyncio.to_thread(self.endpoints), cache)
                statuses = await asyncio.gather(*(c.status() for c in clients), return_exceptions=True)
                answered = [(c, s) for c, s in zip(clients, statuses) if not isinstance(s, BaseException)]
                leader = next((c for c, s in answered if s.leader_id and s.leader_id == s.member_id), None)
                if leader is not None:
                    try:
                        _, members = await leader.member_list()
                    except EtcdError:
                        members = None
                    if members is not None:
                        healthy = {s.member_id for _, s in answered if s.leader_id and not s.errors}
                        self.samples.append(Sample(
                            time.time(),
                            frozenset((m.id, m.is_learner) for m in members),
                            sum(1 for m in members if not m.is_learner and m.id in healthy),
                        ))
                await asyncio.sleep(self.interval)
        finally:
            await _clients([], cache)

    def configurations(self) -> list[frozenset[tuple[int, bool]]]:
        distinct = []
        for sample in self.samples:
            if not distinct or distinct[-1] != sample.members:
                distinct.append(sample.members)
        return distinct


def single_step(before: frozenset[tuple[int, bool]], after: frozenset[tuple[int, bool]]) -> bool:
    """One member added, removed or promoted; nothing more."""
    ids_before = {i for i, _ in before}
    ids_after = {i for i, _ in after}
    if ids_before == ids_after:
        return len(before ^ after) == 2  # one (id, learner) flipped
    return len(ids_before ^ ids_after) == 1 and before & after == (before if len(before) < len(after) else after)
