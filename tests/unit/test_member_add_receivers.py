"""A member add is offered to each healthy voter until etcd accepts it: each member checks
an add against its own connection clocks, and the leader's clock for the newest member
starts late (its first lookup of the new name failed and was cached)."""

from __future__ import annotations

import grpc
import pytest

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.controllers.cluster.executor import ClusterExecutor
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Member
from etcd_operator.core.cluster.planner import member_add_receivers
from tests.unit.cluster_scenarios import NOW, RECORDED, M, observed, spec

BODY = {
    "apiVersion": "etcd.operator.dev/v1alpha1",
    "kind": "EtcdCluster",
    "metadata": {"name": "c", "namespace": "ns", "uid": "uid"},
}
UNHEALTHY = "etcdserver: unhealthy cluster"  # etcd's ErrGRPCUnhealthy, code Unavailable


def test_the_leader_is_asked_first_then_the_newest_voters():
    o = observed([M(0), M(1), M(2), M(3, learner=True)], leader=1)
    assert member_add_receivers(o) == [0x101, 0x102, 0x100]


def test_learners_and_voters_that_do_not_answer_are_not_asked():
    o = observed([M(0), M(1, healthy=False), M(2, learner=True)])
    assert member_add_receivers(o) == [0x100]


class FakeMember:
    def __init__(self, endpoint: str, answer):
        self.endpoint, self.answer, self.calls = endpoint, answer, 0

    async def add_learner(self, peer_urls):
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class FakePool:
    def __init__(self, members: dict[str, FakeMember]):
        self.members = members

    def get(self, endpoint: str) -> FakeMember:
        return self.members[endpoint]


class FakeKube:
    def __init__(self):
        self.created = []

    async def create(self, resource, namespace, manifest):
        self.created.append(manifest)


def _run(answers: dict[int, object]):
    o = observed([M(0), M(1), M(2)])
    pool = FakePool(
        {f"10.0.0.{ordinal}:2379": FakeMember(f"10.0.0.{ordinal}:2379", answer) for ordinal, answer in answers.items()}
    )
    kube = FakeKube()
    executor = ClusterExecutor(kube, pool, BODY, lambda *_: None, status=RECORDED, now=NOW)
    action = a.AddLearner("scaling up", "c-3")

    async def go():
        return await executor.run(action, spec(5), o)

    return go, pool, kube


def _refusal(endpoint: str, detail: str = UNHEALTHY) -> EtcdError:
    return EtcdError(endpoint, "MemberAdd", grpc.StatusCode.UNAVAILABLE, detail)


def _added(ordinal: int):
    learner = Member(0x103, "", ("http://c-3.c-peer.ns.svc:2380",), (), True)
    voters = [Member(0x100 + i, f"c-{i}", (f"http://c-{i}.c-peer.ns.svc:2380",), (), False) for i in range(3)]
    return learner, [*voters, learner]


@pytest.mark.asyncio
async def test_a_refusal_by_the_leader_moves_on_to_the_next_voter():
    go, pool, kube = _run({0: _refusal("10.0.0.0:2379"), 1: _refusal("10.0.0.1:2379"), 2: _added(2)})
    outcome = await go()
    assert outcome.done
    assert [pool.members[f"10.0.0.{i}:2379"].calls for i in (0, 2, 1)] == [1, 1, 0]
    pod = next(m for m in kube.created if m["kind"] == "Pod")
    assert pod["metadata"]["name"] == "c-3"


@pytest.mark.asyncio
async def test_a_refusal_by_every_voter_is_not_yet():
    go, pool, kube = _run({i: _refusal(f"10.0.0.{i}:2379") for i in range(3)})
    outcome = await go()
    assert not outcome.done and "unhealthy cluster" in outcome.message
    assert not kube.created


@pytest.mark.asyncio
async def test_any_other_error_ends_the_step_without_asking_another_member():
    # The add may have been proposed (a timeout), or etcd refused it for good: never repeated elsewhere.
    timeout = EtcdError("10.0.0.0:2379", "MemberAdd", grpc.StatusCode.DEADLINE_EXCEEDED, "context deadline exceeded")
    go, pool, kube = _run({0: timeout, 1: _added(1), 2: _added(2)})
    outcome = await go()
    assert not outcome.done
    assert pool.members["10.0.0.1:2379"].calls == 0 and pool.members["10.0.0.2:2379"].calls == 0
    assert not kube.created
