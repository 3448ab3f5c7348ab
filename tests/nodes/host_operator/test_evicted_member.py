"""A member pod that ended (evicted by its node, never restarted) is re-created on its data,
never replaced. The eviction is the kubelet's own: the member's container has an
ephemeral-storage limit and its log folder grows past it (`flood_log`), so the kubelet's
eviction manager ends the pod, as it does a container that floods its log. The real kubelets
here run without hard eviction thresholds, so only a limit evicts there.

The kubelet writes an `Evicted` event, but the pod's phase is a race (kubernetes/kubernetes#118310):
Failed with reason Evicted, or Succeeded when etcd exits 0 on the kubelet's SIGTERM before the
Failed status reached the API server (the 1.35 kubelets here wrote Succeeded each of the 4
times it was seen). Either way the kubelet never starts it again, and the operator must."""

from __future__ import annotations

import pytest
from kubernetes import watch

from etcd_operator.core.cluster import naming
from tests.support.cluster_view import DESTRUCTIVE_EVENTS, ClusterView, hex_ids
from tests.support.clusters import apply_cluster, is_healthy, wait_healthy
from tests.support.etcd_data import put_markers, read_keys
from tests.support.waiting import wait_for, wait_for_holding

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process]

# Small, so that a modest flood passes it; etcd's own log stays far below it meanwhile.
EPHEMERAL_LIMIT_MIB = 32
FLOOD_MIB = 48
# What the kubelet writes for an evicted pod whose container exited 0 or not; it never restarts either.
ENDED_PHASES = ("Failed", "Succeeded")


def test_failed_member_pod_restarts_on_its_data(kube_api, namespace, operator, container_faults):
    name = "ev"
    victim = naming.member_name(name, 1)
    resources = {
        "requests": {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "0"},
        "limits": {"ephemeral-storage": f"{EPHEMERAL_LIMIT_MIB}Mi"},
    }
    # A member unhealthy for 60 s is replaced; one that only lost its pod must be back before, on its data.
    apply_cluster(
        namespace,
        name,
        {
            "size": 3,
            "storage": {"size": "1Gi"},
            "recovery": {"memberUnhealthyTimeout": "60s"},
            "pod": {"resources": resources},
        },
    )
    wait_healthy(namespace, name, 3)
    view = ClusterView(kube_api, namespace, name)
    before = view.identity()
    assert len(before.members) == 3 and victim in before.pods, before
    markers = put_markers(view.serving_endpoints(), "/marker/", 5)

    since = view.core.read_namespaced_pod(victim, namespace).metadata.resource_version
    container_faults.flood_log(namespace, victim, "etcd", FLOOD_MIB << 20)
    # Watched, not polled: the operator deletes an ended pod within a moment of the event.
    # The kubelet's eviction manager looks every 10 s.
    ended = next(
        (
            e["object"]
            for e in watch.Watch().stream(
                view.core.list_namespaced_pod,
                namespace,
                field_selector=f"metadata.name={victim}",
                resource_version=since,
                timeout_seconds=90,
            )
            if e["object"].metadata.uid == before.pods[victim] and e["object"].status.phase in ENDED_PHASES
        ),
        None,
    )
    assert ended is not None, f"{victim} never ended"
    print(f"\n{victim} ended: phase {ended.status.phase}, reason {ended.status.reason}")
    if ended.status.phase == "Failed":
        assert ended.status.reason == "Evicted", ended.status

    def evicted_event():
        events = view.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.uid={before.pods[victim]},reason=Evicted"
        ).items
        return next((e for e in events if "kubelet" in (e.source.component, e.reporting_component)), None)

    event = wait_for(evicted_event, 30, what=f"the kubelet's Evicted event for {victim}")
    assert "ephemeral" in (event.message or ""), event.message

    def same_members_and_data() -> None:
        now = view.identity()
        if now.members is not None:
            assert now.members == before.members, (
                f"member list changed: {hex_ids(before.members)} -> {hex_ids(now.members)}"
            )
        assert now.pvcs == before.pvcs, f"member PVCs changed: {before.pvcs} -> {now.pvcs}"
        destructive = view.event_reasons() & DESTRUCTIVE_EVENTS
        assert not destructive, f"destructive events for an evicted member: {sorted(destructive)}"

    def back_on_its_data():
        pods = {p.metadata.name: p for p in view.pods()}
        pod = pods.get(victim)
        if pod is None or pod.metadata.uid == before.pods[victim] or pod.status.phase != "Running":
            return None
        obj = view.cluster()
        return obj if is_healthy(obj, 3) else None

    obj = wait_for_holding(
        back_on_its_data,
        same_members_and_data,
        240,
        interval=2.0,
        what=f"{victim} recreated and the cluster healthy with 3 members",
    )

    after = view.identity()
    assert after.members == before.members
    assert after.pvcs == before.pvcs
    assert after.pods[victim] != before.pods[victim]
    assert {m["name"] for m in obj["status"]["members"]} == set(before.pods)
    assert read_keys(view.serving_endpoints(), list(markers)) == markers
