"""The write fence at its hook points (every mutating Kubernetes and etcd call asks the
lease clock first, and sends nothing when refused), and the Lease elector's decisions
against an in-memory Lease store with compare-and-swap semantics."""

from __future__ import annotations

import asyncio
import copy

import pytest

from etcd_operator.clients.etcd.client import EtcdMemberClient
from etcd_operator.clients.etcd.pool import EtcdClientPool
from etcd_operator.clients.kube import client as kube
from etcd_operator.core.leadership_fence import AlwaysActs, LeadershipLost, LeaseClock, LeaseTiming
from etcd_operator.runtime.lease_elector import LeaseElector, LeaseTakenOver

TIMING = LeaseTiming(lease_seconds=15, renew_every=2, stop_acting_seconds=12, attempt_timeout=5)


class FakeClock:
    def __init__(self, start: float = 500.0):
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def deposed_clock() -> LeaseClock:
    clock = FakeClock()
    lease = LeaseClock(TIMING, clock)
    lease.renewed(clock())
    clock.advance(40)  # frozen past the lease, then resumed
    return lease


# --- Kubernetes writes -------------------------------------------------------------------


class RecordingApi:
    """Stands in for kubernetes_asyncio's ApiClient: records what would have been sent."""

    def __init__(self):
        self.sent: list[tuple[str, str, float]] = []

    async def call_api(self, path, method, _request_timeout=None, **_):
        self.sent.append((method, path, _request_timeout))
        return _Response()


class _Response:
    status = 200
    reason = "OK"

    async def read(self) -> bytes:
        return b"{}"


POD = {"metadata": {"name": "p"}}


async def each_kube_write(client: kube.KubeClient) -> list[str]:
    refused = []
    for name, call in [
        ("create", lambda: client.create(kube.PODS, "ns", POD)),
        ("merge_patch", lambda: client.merge_patch(kube.PODS, "ns", "p", {"metadata": {}})),
        ("status", lambda: client.merge_patch(kube.ETCDCLUSTERS, "ns", "c", {"status": {}}, subresource="status")),
        ("apply", lambda: client.apply(kube.SERVICES, "ns", POD)),
        ("delete", lambda: client.delete(kube.PODS, "ns", "p")),
    ]:
        try:
            await call()
        except LeadershipLost:
            refused.append(name)
    return refused


async def test_a_deposed_replica_sends_no_kubernetes_write():
    api = RecordingApi()
    client = kube.KubeClient(api, guard=deposed_clock())
    assert await each_kube_write(client) == ["create", "merge_patch", "status", "apply", "delete"]
    assert await client.get(kube.PODS, "ns", "p") == {}  # reads still work
    assert [method for method, _, _ in api.sent] == ["GET"]


async def test_a_leader_writes_with_a_timeout_that_ends_with_its_right_to_act():
    clock = FakeClock()
    lease = LeaseClock(TIMING, clock)
    lease.renewed(clock())
    clock.advance(9)
    api = RecordingApi()
    assert await each_kube_write(kube.KubeClient(api, guard=lease)) == []
    assert all(timeout == pytest.approx(3) for _, _, timeout in api.sent)
    api.sent.clear()
    assert await each_kube_write(kube.KubeClient(api, guard=AlwaysActs())) == []  # LEADER_ELECTION=false
    assert all(timeout == kube.REQUEST_TIMEOUT for _, _, timeout in api.sent)


# --- etcd writes -------------------------------------------------------------------------


class RecordingStub:
    """Stands in for a generated gRPC stub: any method records its request and deadline."""

    def __init__(self, sent: list):
        self.sent = sent

    def __getattr__(self, name):
        async def method(request, timeout=None):
            self.sent.append((name, timeout))
            return _EtcdResponse()

        return method


class _EtcdMember:
    ID = 7
    name = "x"
    peerURLs = ("http://x:2380",)
    clientURLs = ()
    isLearner = True


class _EtcdResponse:
    members = ()
    member = _EtcdMember()
    alarms = ()

    class header:
        revision = 1
        cluster_id = 1


def recording_etcd_client(guard) -> tuple[EtcdMemberClient, list]:
    client = EtcdMemberClient("127.0.0.1:1", guard=guard)  # nothing listens there
    sent: list = []
    client._cluster = client._maintenance = client._kv = RecordingStub(sent)
    return client, sent


async def each_etcd_write(client: EtcdMemberClient) -> list[str]:
    refused = []
    for name, call in [
        ("add_learner", lambda: client.add_learner(["http://x:2380"])),
        ("promote", lambda: client.promote(7)),
        ("remove", lambda: client.remove(7)),
        ("move_leader", lambda: client.move_leader(7)),
        ("defragment", lambda: client.defragment()),
        ("put", lambda: client.put(b"k", b"v")),
    ]:
        try:
            await call()
        except LeadershipLost:
            refused.append(name)
    return refused


async def test_a_deposed_replica_sends_no_etcd_write():
    client, sent = recording_etcd_client(deposed_clock())
    try:
        assert await each_etcd_write(client) == [
            "add_learner",
            "promote",
            "remove",
            "move_leader",
            "defragment",
            "put",
        ]
        await client.alarms()  # reads still work
        assert [name for name, _ in sent] == ["Alarm"]
    finally:
        await client.close()


async def test_etcd_writes_carry_a_deadline_that_ends_with_the_right_to_act():
    clock = FakeClock()
    lease = LeaseClock(TIMING, clock)
    lease.renewed(clock())
    clock.advance(10)
    client, sent = recording_etcd_client(lease)
    try:
        assert await each_etcd_write(client) == []
        deadlines = dict(sent)
        assert deadlines["MemberAdd"] == deadlines["MemberPromote"] == deadlines["MoveLeader"] == pytest.approx(2)
        assert deadlines["Defragment"] == 120.0  # may outlast the lease; refused when deposed all the same
    finally:
        await client.close()


async def test_the_client_pool_passes_its_guard_on():
    pool = EtcdClientPool(guard=deposed_clock())
    try:
        with pytest.raises(LeadershipLost):
            await pool.get("127.0.0.1:1").promote(1)
    finally:
        await pool.close()


# --- the elector -------------------------------------------------------------------------


class LeaseStore:
    """One Lease object with the API server's compare-and-swap on resourceVersion."""

    def __init__(self):
        self.lease: dict | None = None
        self.version = 0

    def client(self) -> LeaseStoreClient:
        return LeaseStoreClient(self)


class LeaseStoreClient:
    def __init__(self, store: LeaseStore):
        self.store = store

    def _bump(self) -> None:
        self.store.version += 1
        self.store.lease["metadata"]["resourceVersion"] = str(self.store.version)

    async def get(self, resource, namespace, name):
        return copy.deepcopy(self.store.lease)

    async def create(self, resource, namespace, body):
        if self.store.lease is not None:
            raise kube.Conflict("exists")
        self.store.lease = copy.deepcopy(body)
        self._bump()
        return body

    async def merge_patch(self, resource, namespace, name, patch, subresource=None):
        if patch["metadata"]["resourceVersion"] != self.store.lease["metadata"]["resourceVersion"]:
            raise kube.Conflict("changed")
        spec = self.store.lease.setdefault("spec", {})
        for key, value in patch["spec"].items():
            if value is None:
                spec.pop(key, None)
            else:
                spec[key] = value
        self._bump()
        return self.store.lease


def elector(store: LeaseStore, identity: str, clock: FakeClock) -> LeaseElector:
    return LeaseElector(store.client(), "ns", "lease", identity, LeaseClock(TIMING, clock))


async def test_a_standby_takes_over_only_after_the_leader_stopped_acting():
    store, clock_a, clock_b = LeaseStore(), FakeClock(100), FakeClock(7000)  # unrelated clocks
    a, b = elector(store, "a", clock_a), elector(store, "b", clock_b)
    assert await a.try_acquire() == 0 and a.clock.renewed(clock_a())
    assert await b.try_acquire() == pytest.approx(15)

    for _ in range(10):  # a renews every 2 s: b never gets it
        for c in (clock_a, clock_b):
            c.advance(2)
        sent = clock_a()
        assert await a.try_renew()
        a.clock.renewed(sent)
        assert await b.try_acquire() > 13

    frozen_at = clock_a()  # a is frozen right after its last renewal was sent
    waited = 0.0
    while (left := await b.try_acquire()) > 0:
        clock_a.advance(left)
        clock_b.advance(left)
        waited += left
        assert not b.clock.may_act()
    assert b.clock.renewed(clock_b())
    assert waited >= TIMING.lease_seconds
    assert clock_a() - frozen_at >= TIMING.lease_seconds > TIMING.stop_acting_seconds
    assert not a.clock.may_act()  # a stopped acting 3 s before b could start
    with pytest.raises(LeaseTakenOver, match="held by b"):
        await a.try_renew()
    assert store.lease["spec"]["holderIdentity"] == "b" and store.lease["spec"]["leaseTransitions"] == 1


async def test_two_candidates_racing_for_an_expired_lease_cannot_both_win():
    store, clock = LeaseStore(), FakeClock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    store.lease, store.version = {"metadata": {"resourceVersion": "1"}, "spec": {"holderIdentity": "old"}}, 1
    assert await a.try_acquire() > 0 and await b.try_acquire() > 0
    clock.advance(15)
    results = [await a.try_acquire(), await b.try_acquire()]
    assert sorted(r == 0 for r in results) == [False, True]


async def test_a_released_lease_is_taken_at_once_and_the_releaser_stops_acting():
    store, clock = LeaseStore(), FakeClock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert await a.try_acquire() == 0 and a.clock.renewed(clock())
    assert await b.try_acquire() > 0
    await a.release()
    assert not a.clock.may_act()
    assert "holderIdentity" not in store.lease["spec"]
    assert await b.try_acquire() == 0


async def test_a_deleted_lease_ends_the_right_to_act():
    store, clock = LeaseStore(), FakeClock()
    a = elector(store, "a", clock)
    assert await a.try_acquire() == 0
    store.lease = None
    with pytest.raises(LeaseTakenOver, match="deleted"):
        await a.try_renew()


async def test_the_lease_records_whole_seconds_and_the_holder():
    store, clock = LeaseStore(), FakeClock()
    timing = LeaseTiming(lease_seconds=15.5, renew_every=2, stop_acting_seconds=12)
    a = LeaseElector(store.client(), "ns", "lease", "a_1234", LeaseClock(timing, clock))
    assert await a.try_acquire() == 0
    spec = store.lease["spec"]
    assert spec["leaseDurationSeconds"] == 16 and spec["holderIdentity"] == "a_1234"
    assert spec["leaseTransitions"] == 0 and spec["acquireTime"] == spec["renewTime"]


class HangingLeaseStoreClient(LeaseStoreClient):
    """An API server that takes writes in, then stops answering them."""

    def __init__(self, store: LeaseStore):
        super().__init__(store)
        self.hang = False
        self.cancelled = 0

    async def merge_patch(self, resource, namespace, name, patch, subresource=None):
        if not self.hang:
            return await super().merge_patch(resource, namespace, name, patch, subresource)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


async def test_a_renewal_that_hangs_is_cut_off_and_the_keeper_returns_at_the_deadline():
    timing = LeaseTiming(lease_seconds=1.5, renew_every=0.1, stop_acting_seconds=0.6, attempt_timeout=60)
    client = HangingLeaseStoreClient(LeaseStore())
    lease = LeaseClock(timing)
    keeper = LeaseElector(client, "ns", "lease", "a", lease)
    assert await keeper.acquire()
    client.hang = True
    reason = await asyncio.wait_for(keeper.hold(), 20)  # an attempt alone may take 60 s
    assert "stop-acting deadline" in reason and not lease.may_act()
    assert client.cancelled >= 1  # the hanging renewal did not outlive the right to act
