"""Watch-driven reconciliation, its pure parts: the informer's cache and wake-ups, and the
data-safety rule that no step is taken on cached data (a step decided on the caches is
decided again on a live listing)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from etcd_operator.clients.etcd.pool import EtcdClientPool
from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.kube.informer import Informer, ScopeCache, Wakeups
from etcd_operator.controllers.cluster.metrics_watcher import MemberMetricsWatcher
from etcd_operator.controllers.cluster.reconciler import ClusterReconciler
from etcd_operator.core.cluster import builders, naming, pacing
from etcd_operator.core.cluster import steps as a
from tests.unit.cluster_scenarios import CLUSTER, NAMESPACE, M
from tests.unit.cluster_scenarios import observed as scenario


def pod(name: str, cluster: str | None, namespace: str = "ns", version: str = "1", instance: str | None = None) -> dict:
    labels = {} if cluster is None else naming.member_labels(cluster, name)
    if instance is not None:
        labels["app.kubernetes.io/instance"] = instance
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": version,
            "labels": labels,
            "managedFields": [{"manager": "x"}],
        }
    }


class Woken(list):
    def __call__(self, namespace: str, cluster: str) -> None:
        self.append((namespace, cluster))


# --- the cache ------------------------------------------------------------------------


def test_a_cache_without_its_first_listing_never_answers_no_pods():
    cache = ScopeCache(Woken())
    assert cache.children("ns", "a") is None
    cache.replace([], "10")
    assert cache.children("ns", "a") == []


def test_a_listing_fills_the_cache_by_cluster_and_wakes_the_clusters_it_changed():
    woken = Woken()
    cache = ScopeCache(woken)
    cache.replace([pod("a-0", "a"), pod("a-1", "a"), pod("b-0", "b"), pod("x", None)], "10")
    assert sorted(p["metadata"]["name"] for p in cache.children("ns", "a")) == ["a-0", "a-1"]
    assert [p["metadata"]["name"] for p in cache.children("ns", "b")] == ["b-0"]
    assert cache.children("other", "a") == []
    assert "managedFields" not in cache.children("ns", "b")[0]["metadata"]
    assert sorted(woken) == [("ns", "a"), ("ns", "b")]
    woken.clear()
    cache.replace([pod("a-0", "a"), pod("a-1", "a", version="11")], "11")  # b-0 went, a-1 changed
    assert sorted(woken) == [("ns", "a"), ("ns", "b")] and cache.children("ns", "b") == []


def test_watch_events_update_the_cache_and_wake_only_the_owning_cluster():
    woken = Woken()
    cache = ScopeCache(woken)
    cache.replace([pod("a-0", "a"), pod("b-0", "b")], "10")
    woken.clear()
    cache.apply({"type": "DELETED", "object": pod("a-0", "a", version="12")})
    assert woken == [("ns", "a")] and cache.children("ns", "a") == []
    cache.apply({"type": "ADDED", "object": pod("a-0", "a", version="13")})
    cache.apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}})
    assert woken == [("ns", "a"), ("ns", "a")]
    assert cache.resource_version == "20"
    assert [p["metadata"]["resourceVersion"] for p in cache.children("ns", "a")] == ["13"]


def test_a_relabelled_object_moves_and_wakes_both_clusters():
    woken = Woken()
    cache = ScopeCache(woken)
    cache.replace([pod("data-a-0", "a")], "10")
    woken.clear()
    cache.apply({"type": "MODIFIED", "object": pod("data-a-0", "b", version="11")})
    assert sorted(woken) == [("ns", "a"), ("ns", "b")]
    assert cache.children("ns", "a") == [] and len(cache.children("ns", "b")) == 1


def test_the_cache_answers_what_a_live_list_by_the_full_selector_would():
    cache = ScopeCache(Woken())
    cache.replace([pod("a-0", "a"), pod("a-9", "a", instance="someone-else")], "10")
    assert [p["metadata"]["name"] for p in cache.children("ns", "a")] == ["a-0"]


def test_a_lost_watch_makes_the_cache_unknown_until_the_next_listing():
    cache = ScopeCache(Woken())
    cache.replace([pod("a-0", "a")], "10")
    cache.lost()
    assert cache.children("ns", "a") is None


def test_wakeups_reach_the_registered_daemon_only_and_a_newer_daemon_keeps_its_own():
    wakeups = Wakeups()
    old = wakeups.register("ns", "a")
    new = wakeups.register("ns", "a")  # the object was recreated under the same name
    wakeups.forget("ns", "a", old)
    wakeups.wake("ns", "a")
    wakeups.wake("ns", "unknown")
    assert new.is_set() and not old.is_set()


# --- the informer against a scripted API server -----------------------------------------


class ScriptedApi:
    """Answers LISTs and WATCHes from a script; each watch round is a list of events or an exception."""

    def __init__(self, lists: list, watches: list):
        self.lists, self.watches = lists, watches
        self.calls: list[tuple] = []
        self.done = asyncio.Event()

    async def list_with_version(self, resource, namespace, selector):
        self.calls.append(("list", namespace, selector))
        return self.lists.pop(0)

    async def watch(self, resource, namespace, selector, version):
        self.calls.append(("watch", namespace, version))
        if not self.watches:
            self.done.set()
            await asyncio.Event().wait()
        round_ = self.watches.pop(0)
        if isinstance(round_, Exception):
            raise round_
        for event in round_:
            yield event


def test_the_informer_lists_watches_from_the_list_version_resumes_and_lists_again_after_gone():
    async def scenario():
        woken = Woken()
        api = ScriptedApi(
            lists=[([pod("a-0", "a")], "10"), ([pod("a-0", "a", version="30")], "30")],
            watches=[
                [{"type": "MODIFIED", "object": pod("a-0", "a", version="11")}],  # then the server ends it
                [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}],
                kube.ApiError(410, "Expired", "too old"),
            ],
        )
        informer = Informer(api, kube.PODS, ["ns"], woken)
        informer.start()
        await asyncio.wait_for(api.done.wait(), 5)
        await informer.stop()
        return api.calls, woken, informer

    calls, woken, informer = asyncio.run(scenario())
    selector = "app.kubernetes.io/name=etcd,etcd.operator.dev/cluster"
    assert calls == [
        ("list", "ns", selector),
        ("watch", "ns", "10"),
        ("watch", "ns", "11"),
        ("watch", "ns", "15"),
        ("list", "ns", selector),
        ("watch", "ns", "30"),
    ]
    assert woken == [("ns", "a"), ("ns", "a"), ("ns", "a")]  # first list, the change, the relist
    assert informer.children("ns", "a")[0]["metadata"]["resourceVersion"] == "30"


def test_the_informer_watches_each_listed_namespace_or_the_whole_cluster():
    assert set(Informer(None, kube.PODS, ["x", "y"], Woken()).scopes) == {"x", "y"}
    assert set(Informer(None, kube.PODS, [], Woken()).scopes) == {None}
    assert set(Informer(None, kube.PODS, ["team-*"], Woken()).scopes) == {None}


# --- no step on cached data ---------------------------------------------------------------

SPEC = {"size": 3, "recovery": {"memberUnhealthyTimeout": "60s", "quorumLossTimeout": "30s"}}
BODY = {
    "metadata": {"name": CLUSTER, "namespace": NAMESPACE, "uid": "uid-c", "generation": 1},
    "spec": SPEC,
    "status": {"clusterID": "1"},
}


class RecordingKube:
    """Records every write, and keeps what was created or applied so that a read finds it."""

    def __init__(self):
        self.writes: list[tuple] = []
        self.objects: dict[tuple[str, str], dict] = {}

    async def get(self, resource, namespace, name):
        return self.objects.get((resource.plural, name))

    async def apply(self, resource, namespace, body):
        self.writes.append(("apply", resource.plural, body["metadata"]["name"]))
        return self._keep(resource, body)

    async def create(self, resource, namespace, body, dry_run=False):
        self.writes.append(("create", resource.plural, body["metadata"]["name"]))
        return self._keep(resource, body)

    def _keep(self, resource, body):
        stored = {**body, "metadata": {**body["metadata"], "uid": f"uid-{body['metadata']['name']}"}}
        stored["metadata"]["resourceVersion"] = str(len(self.writes))
        self.objects[(resource.plural, body["metadata"]["name"])] = stored
        return stored

    async def delete(self, resource, namespace, name, uid=None, grace_period=None):
        self.writes.append(("delete", resource.plural, name))
        return self.objects.pop((resource.plural, name), None) is not None

    async def merge_patch(self, resource, namespace, name, patch, subresource=None):
        self.writes.append(("patch", resource.plural, name))


def current(obs):
    """Pods that run the pod spec this cluster's spec asks for (the scenarios use a stand-in hash)."""
    from etcd_operator.core.cluster.spec import ClusterSpec

    desired = builders.pod_spec_hash(ClusterSpec.from_dict(SPEC))
    return dataclasses.replace(obs, pods={n: dataclasses.replace(p, spec_hash=desired) for n, p in obs.pods.items()})


class TwoViews:
    """The observer: the caches say a member lost its pod; a live listing shows it running
    (the cache is behind: the pod was recreated and its ADDED event has not arrived)."""

    def __init__(self):
        self.calls: list[str] = []

    async def observe(self, body, status, children=None, live_secrets=True):
        self.calls.append("cached" if children is not None else "live")
        members = [M(0), M(1), M(2, pod=children is None)]
        return current(scenario(members))


def run_pass(reconciler: ClusterReconciler, last: a.Step | None) -> float:
    reconciler.last_action = last
    reconciler.next_resync = float("inf")
    return asyncio.run(reconciler.reconcile(BODY))


def reconciler_with_two_views(kube_client: RecordingKube) -> tuple[ClusterReconciler, TwoViews]:
    views = TwoViews()
    reconciler = ClusterReconciler(kube_client, None, lambda *_: None, cached_children=lambda ns, name: ([], []))
    reconciler.observer = views
    reconciler.member_metrics = MemberMetricsWatcher(fetch=lambda url, timeout: asyncio.sleep(0, ""))
    return reconciler, views


def test_the_stand_in_views_decide_differently():
    from etcd_operator.core.cluster.decision import plan
    from etcd_operator.core.cluster.spec import ClusterSpec
    from tests.unit.cluster_scenarios import NOW, RECORDED

    spec = ClusterSpec.from_dict(SPEC)
    lost_pod = current(scenario([M(0), M(1), M(2, pod=False)]))
    assert isinstance(plan(spec, RECORDED, lost_pod, NOW).action, a.CreateMemberPod)
    assert isinstance(plan(spec, RECORDED, current(scenario([M(0), M(1), M(2)])), NOW).action, a.Steady)


def test_a_step_decided_on_cached_data_is_decided_again_on_a_live_listing():
    kube_client = RecordingKube()
    reconciler, views = reconciler_with_two_views(kube_client)
    run_pass(reconciler, last=a.Steady())
    assert not [w for w in kube_client.writes if w[:2] == ("create", "pods")], "a pod was created on cached data"
    assert views.calls == ["cached", "live"]
    assert reconciler.redecided == 1 and reconciler.live_passes == 1


def test_a_pass_after_a_step_lists_live_and_a_steady_one_reads_the_caches():
    kube_client = RecordingKube()
    reconciler, views = reconciler_with_two_views(kube_client)
    run_pass(reconciler, last=a.PromoteLearner())
    assert views.calls == ["live"]
    views.calls.clear()
    run_pass(reconciler, last=None)  # the previous pass failed: live
    assert views.calls == ["live"]


def test_child_services_are_applied_once_then_only_when_they_change_or_at_resync():
    kube_client = RecordingKube()
    reconciler, views = reconciler_with_two_views(kube_client)
    reconciler.observer = type(
        "Live", (), {"observe": lambda self, *args, **kw: asyncio.sleep(0, current(scenario([M(0), M(1), M(2)])))}
    )()
    children = ["services", "services", "poddisruptionbudgets"]
    asyncio.run(reconciler.reconcile(BODY))  # the first pass is a resync: created (no NetworkPolicy to delete)
    assert [w[1] for w in kube_client.writes if w[0] in ("create", "apply", "delete")] == children
    kube_client.writes.clear()
    asyncio.run(reconciler.reconcile(BODY))
    assert not [w for w in kube_client.writes if w[0] in ("create", "apply", "delete")]
    reconciler.next_resync = 0.0
    asyncio.run(reconciler.reconcile(BODY))
    assert [w[1] for w in kube_client.writes if w[0] in ("apply", "delete")] == children


def test_a_child_name_held_by_a_foreign_object_is_left_alone_and_reported():
    """cluster/ownership.py: the operator's Services are created, never applied over a
    Service it did not create; the collision is reported from the next pass on."""
    kube_client = RecordingKube()
    theirs = {"metadata": {"name": f"{CLUSTER}-client", "uid": "theirs", "resourceVersion": "7"}, "spec": {"x": 1}}
    kube_client.objects[("services", f"{CLUSTER}-client")] = theirs
    reconciler, _ = reconciler_with_two_views(kube_client)
    events: list[tuple[str, str, str]] = []
    reconciler.post_event = lambda *event: events.append(event)
    reconciler.observer = ClusterObserverStandIn()
    asyncio.run(reconciler.reconcile(BODY))
    assert ("services", f"{CLUSTER}-client") not in [w[1:] for w in kube_client.writes]
    assert kube_client.objects[("services", f"{CLUSTER}-client")] is theirs
    assert reconciler.services_applied is None  # tried again at the next pass
    assert reconciler.observer.collisions == {
        f"Service {CLUSTER}-client": f"it lacks the label etcd.operator.dev/cluster={CLUSTER} and a controller "
        "owner reference to this EtcdCluster"
    }
    asyncio.run(reconciler.reconcile(BODY))  # the next pass reports it
    assert kube_client.objects[("services", f"{CLUSTER}-client")] is theirs
    warnings = [e for e in events if e[0] == "Warning"]
    assert [(kind, reason) for kind, reason, _ in warnings] == [("Warning", "NameCollision")]
    assert f"Service {CLUSTER}-client exists and is not this cluster's" in warnings[0][2]


class ClusterObserverStandIn:
    def __init__(self):
        self.collisions: dict[str, str] = {}

    async def observe(self, *args, **kw):
        return dataclasses.replace(current(scenario([M(0), M(1), M(2)])), collisions=dict(self.collisions))


# --- the watch stream's framing -------------------------------------------------------------


class StreamedResponse:
    status, reason = 200, "OK"

    def __init__(self, data: bytes, chunk: int):
        self.data, self.chunk, self.closed = data, chunk, False

    @property
    def content(self):
        outer = self

        class Content:
            async def iter_any(self):
                for i in range(0, len(outer.data), outer.chunk):
                    yield outer.data[i : i + outer.chunk]

        return Content()

    def close(self):
        self.closed = True


def test_a_watch_stream_is_split_into_events_across_reads_and_gone_is_an_error():
    events = [{"type": "ADDED", "object": pod(f"a-{i}", "a")} for i in range(3)]
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    data = b"".join(json.dumps(e).encode() + b"\n" for e in [*events, gone])
    response = StreamedResponse(data, chunk=7)

    class Transport:
        async def call_api(self, *args, **kwargs):
            return response

    async def consume():
        seen = []
        with pytest.raises(kube.ApiError) as raised:
            async for event in kube.KubeClient(Transport()).watch(kube.PODS, "ns", "", "1"):
                seen.append(event["object"]["metadata"]["name"])
        return seen, raised.value.status

    assert asyncio.run(consume()) == (["a-0", "a-1", "a-2"], 410)
    assert response.closed


def test_only_a_pass_that_took_no_step_may_be_woken_early():
    reconciler = ClusterReconciler(RecordingKube(), None, lambda *_: None)
    assert not reconciler.wakeable  # no pass yet
    for action, wakeable in ((a.Steady(), True), (a.Wait(), True), (a.RemoveMember(), False), (None, False)):
        reconciler.last_action = action
        assert reconciler.wakeable is wakeable


def test_no_first_member_is_created_while_a_child_name_is_someone_elses():
    from etcd_operator.core.cluster.decision import plan
    from tests.unit.cluster_scenarios import NOW
    from tests.unit.test_tls_plan import NEW, PLAIN_SPEC, new_cluster

    fresh = new_cluster("http")
    assert isinstance(plan(PLAIN_SPEC, NEW, fresh, NOW).action, a.BootstrapMembers)
    held = dataclasses.replace(fresh, collisions={"Service c-client": "it lacks the label"})
    decision = plan(PLAIN_SPEC, NEW, held, NOW)
    assert isinstance(decision.action, a.Wait) and "Service c-client" in decision.action.reason
    owned = next(c for c in decision.conditions if c.type == "ChildrenOwned")
    assert (owned.status, owned.reason) == (False, "NameCollision")


class StatusKeepingKube(RecordingKube):
    """Writes the status patches into `body`, as the API server and kopf's live body would."""

    def __init__(self, body: dict):
        super().__init__()
        self.body = body

    async def merge_patch(self, resource, namespace, name, patch, subresource=None):
        await super().merge_patch(resource, namespace, name, patch, subresource)
        self.body["status"] = json.loads(json.dumps(patch["status"]))


def test_a_quiet_steady_cluster_is_polled_less_and_a_status_change_brings_the_poll_back():
    body = json.loads(json.dumps(BODY))
    kube_client = StatusKeepingKube(body)
    db_size = {"bytes": 1000}

    class Steady:
        collisions: dict[str, str] = {}

        async def observe(self, *args, **kw):
            return current(scenario([M(0, db_size=db_size["bytes"]), M(1), M(2)]))

    class CountingPool(EtcdClientPool):
        closed = 0

        async def close(self) -> None:
            self.closed += 1
            await super().close()

    pool = CountingPool()
    reconciler = ClusterReconciler(kube_client, pool, lambda *_: None, steady_poll=15.0, steady_poll_max=60.0)
    reconciler.observer = Steady()
    reconciler.member_metrics = MemberMetricsWatcher(fetch=lambda url, timeout: asyncio.sleep(0, ""))

    def delays(passes: int) -> list[float]:
        return [asyncio.run(reconciler.reconcile(json.loads(json.dumps(body)))) for _ in range(passes)]

    assert delays(5) == [15.0, 30.0, 60.0, 60.0, 60.0]  # the first steady pass wrote status
    assert [w[0] for w in kube_client.writes].count("patch") == 1
    assert pool.closed == 4  # the members' channels close after each quiet pass
    db_size["bytes"] = 2000  # a member's figures moved: status changes
    assert delays(3) == [15.0, 30.0, 60.0]
    assert [w[0] for w in kube_client.writes].count("patch") == 2


def test_the_steady_interval_doubles_from_the_poll_up_to_its_ceiling():
    assert [pacing.steady_interval(15.0, 60.0, quiet) for quiet in range(5)] == [15.0, 30.0, 60.0, 60.0, 60.0]
    assert pacing.steady_interval(15.0, 60.0, 10_000) == 60.0
    assert pacing.steady_interval(600.0, 60.0, 3) == 600.0  # a ceiling below the poll leaves the poll
