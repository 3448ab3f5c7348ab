"""Observers of a real etcd cluster for scenario tests: a writer that counts acknowledged
writes, a sampler of membership and health, and etcd's own record of every membership
change, read from a member's log."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Callable

from etcd_operator.clients.etcd.client import EtcdError, EtcdMemberClient
from etcd_operator.core.cluster import naming

Endpoints = Callable[[], list[str]]


class LoopThread:
    """Runs one coroutine in its own thread and event loop until stopped."""

    def __init__(self):
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> LoopThread:
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


class AckedWriter(LoopThread):
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


class MembershipRecorder(LoopThread):
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
                answered = [(c, s) for c, s in zip(clients, statuses, strict=True) if not isinstance(s, BaseException)]
                leader = next((c for c, s in answered if s.leader_id and s.leader_id == s.member_id), None)
                if leader is not None:
                    try:
                        _, members = await leader.member_list()
                    except EtcdError:
                        members = None
                    if members is not None:
                        healthy = {s.member_id for _, s in answered if s.leader_id and not s.errors}
                        self.samples.append(
                            Sample(
                                time.time(),
                                frozenset((m.id, m.is_learner) for m in members),
                                sum(1 for m in members if not m.is_learner and m.id in healthy),
                            )
                        )
                await asyncio.sleep(self.interval)
        finally:
            await _clients([], cache)

    def configurations(self) -> list[frozenset[tuple[int, bool]]]:
        distinct = []
        for sample in self.samples:
            if not distinct or distinct[-1] != sample.members:
                distinct.append(sample.members)
        return distinct


Configuration = frozenset[tuple[int, bool]]  # (member id, is learner)

# etcd's log lines for an applied membership change (membership/cluster.go, 3.5 and 3.6).
_CHANGE_MESSAGES = {"added member": "added", "promote member": "promoted", "removed member": "removed"}
_CHANGE_ID_FIELDS = {"added": "added-peer-id", "promoted": "promoted-member-id", "removed": "removed-remote-peer-id"}


@dataclasses.dataclass(frozen=True)
class MembershipChange:
    kind: str  # "added", "promoted" or "removed"
    member_id: int
    learner: bool = False  # for "added": joined as a learner


class MembershipLog:
    """etcd's own record of membership: every change a member applied, in raft order, read
    from its log. Unlike a sampler it cannot miss a configuration between two polls.

    `mark()` notes where each member's log ends; `configurations()` replays what one member
    applied since then onto the configuration at the mark. The witness is a member that was
    in the cluster, on one process, from the mark to the end: its replay must reproduce the
    live member list exactly."""

    def __init__(self, namespace: str, pods: list[str], read_log: Callable[[str, str, str], str]):
        self.namespace = namespace
        self.pods = list(pods)
        self._read_log = read_log
        self._offsets: dict[str, int] = {}

    def mark(self) -> MembershipLog:
        self._offsets = {pod: len(self._read_log(self.namespace, pod, "etcd")) for pod in self.pods}
        return self

    def changes(self, pod: str) -> list[MembershipChange]:
        """The changes `pod`'s etcd applied since the mark; a restart in between is refused,
        since a restarted member may log its replayed changes again."""
        text = self._read_log(self.namespace, pod, "etcd")[self._offsets[pod] :]
        changes, local_ids = [], set()
        for line in text.splitlines():
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("local-member-id"):
                local_ids.add(entry["local-member-id"])
            kind = _CHANGE_MESSAGES.get(entry.get("msg"))
            if kind is None:
                continue
            changes.append(
                MembershipChange(
                    kind, int(entry[_CHANGE_ID_FIELDS[kind]], 16), bool(entry.get("added-peer-is-learner"))
                )
            )
        if len(local_ids) > 1:
            raise ValueError(f"{pod} ran as more than one member since the mark: {sorted(local_ids)}")
        return changes

    def configurations(self, start: Configuration, final: Configuration) -> list[Configuration]:
        """Every configuration from `start` (the membership at the mark) to `final` (the live
        membership now), as the first witness whose replay ends exactly at `final` applied them."""
        refused = {}
        for pod in self.pods:
            try:
                replayed = replay(start, self.changes(pod))
            except ValueError as e:
                refused[pod] = str(e)
                continue
            if replayed[-1] == final:
                return replayed
            refused[pod] = f"its record ends at {sorted(replayed[-1])}"
        raise AssertionError(f"no member recorded every change from {sorted(start)} to {sorted(final)}: {refused}")


def replay(start: Configuration, changes: list[MembershipChange]) -> list[Configuration]:
    """The configurations `changes` lead through from `start`; a change that does not fit
    the configuration before it (adding a member twice, promoting a voter) is refused."""
    members = dict(start)
    configurations = [frozenset(members.items())]
    for change in changes:
        present = change.member_id in members
        if change.kind == "added" and not present:
            members[change.member_id] = change.learner
        elif change.kind == "promoted" and members.get(change.member_id):
            members[change.member_id] = False
        elif change.kind == "removed" and present:
            del members[change.member_id]
        else:
            raise ValueError(f"{change} does not fit {sorted(members.items())}")
        configurations.append(frozenset(members.items()))
    return configurations


def voter_counts(configurations: list[Configuration]) -> list[int]:
    """The number of voters through `configurations`, repeats collapsed: [3, 4, 5] for two
    members added and promoted one after the other."""
    counts: list[int] = []
    for configuration in configurations:
        voters = sum(1 for _, learner in configuration if not learner)
        if not counts or counts[-1] != voters:
            counts.append(voters)
    return counts
