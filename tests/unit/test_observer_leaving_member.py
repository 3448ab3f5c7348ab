"""A member whose pod is being deleted: the pass stops waiting for its answer once its pod
changes (on the real nodes a gone pod's address leads nowhere, and the status call would
wait out its whole timeout while the operator could already start the replacement pod)."""

from __future__ import annotations

import asyncio

from etcd_operator.controllers.cluster import observer as observer_module
from etcd_operator.core.cluster.observed import PodView
from tests.unit.fake_members import CLUSTER_ID, FakeCluster, FakeMember, endpoint, member_id

# Long enough that a pass which waited it out would fail the test's own bound below.
NEVER = 3600.0
BOUND = 30.0


class SilentMember(FakeMember):
    """Its address leads nowhere: a call never answers."""

    async def status(self):
        await asyncio.Event().wait()


class LateMember(FakeMember):
    """Answers once `released` is set."""

    def __init__(self, ordinal, cluster, released: asyncio.Event):
        super().__init__(ordinal, cluster)
        self.released = released

    async def status(self):
        await self.released.wait()
        return await super().status()


def pods(deleting: set[str]) -> dict[str, PodView]:
    """The fake cluster's member pods as the API server holds them, those in `deleting` with a
    deletionTimestamp, read by the observer's own parser."""
    raw, _ = FakeCluster().children()
    for pod in raw:
        if pod["metadata"]["name"] in deleting:
            pod["metadata"]["deletionTimestamp"] = "2026-12-04T10:00:00Z"
    return {pod["metadata"]["name"]: observer_module.pod_view(pod) for pod in raw}


def observer(etcd: FakeCluster, changed: asyncio.Event, monkeypatch):
    monkeypatch.setattr(observer_module, "STATUS_TIMEOUT", NEVER)
    return observer_module.ClusterObserver(None, etcd, child_changed=changed)


def test_a_deleting_members_silence_ends_when_its_pod_changes(monkeypatch):
    etcd = FakeCluster()
    etcd.members[endpoint(2)] = SilentMember(2, etcd)

    async def run():
        changed = asyncio.Event()
        watcher = observer(etcd, changed, monkeypatch)
        observing = asyncio.ensure_future(watcher.observe_etcd(pods({"c-2"}), CLUSTER_ID))
        await asyncio.sleep(0)
        changed.set()  # the kubelet deleted the pod object
        return await asyncio.wait_for(observing, BOUND)

    view = asyncio.run(run())
    assert set(view.statuses) == {member_id(0), member_id(1)}
    assert "being deleted" in view.errors["c-2"]


def test_a_change_cuts_short_only_the_members_whose_pods_are_being_deleted(monkeypatch):
    etcd = FakeCluster()

    async def run():
        changed, released = asyncio.Event(), asyncio.Event()
        etcd.members[endpoint(1)] = LateMember(1, etcd, released)
        watcher = observer(etcd, changed, monkeypatch)
        observing = asyncio.ensure_future(watcher.observe_etcd(pods({"c-2"}), CLUSTER_ID))
        await asyncio.sleep(0)
        changed.set()
        await asyncio.sleep(0.05)
        assert not observing.done(), "a member whose pod stays was not waited for"
        released.set()
        return await asyncio.wait_for(observing, BOUND)

    view = asyncio.run(run())
    assert set(view.statuses) == {member_id(0), member_id(1), member_id(2)}  # c-2 answered at once
    assert view.errors == {}


def test_without_a_change_a_deleting_member_is_waited_for_as_any_other(monkeypatch):
    etcd = FakeCluster()
    etcd.members[endpoint(2)] = SilentMember(2, etcd)
    monkeypatch.setattr(observer_module, "STATUS_TIMEOUT", 0.2)

    async def run():
        watcher = observer_module.ClusterObserver(None, etcd, child_changed=asyncio.Event())
        return await watcher.observe_etcd(pods({"c-2"}), CLUSTER_ID)

    view = asyncio.run(run())
    assert set(view.statuses) == {member_id(0), member_id(1)} and "c-2" in view.errors
