"""The operator must not destroy healthy data: states that look bad but leave every member
and its data intact (a full database, a member pod that ended) are repaired in place,
never by quorum recovery or member replacement."""

from __future__ import annotations

import dataclasses
import time

import pytest
from kubernetes import client, watch

from etcd_operator.cluster import naming
from nodeagent import faults
from etcd_operator.etcd.client import EtcdError
from tests.support.clusters import apply_cluster, condition, is_healthy, patch_spec, wait_healthy
from tests.support.etcd_data import (ALARM_NOSPACE, alarms, fill_history_until_nospace, member_ids, put_key,
                                     put_markers, read_keys)
from tests.support.kubectl import kubectl
from tests.support.waiting import holds_throughout, wait_for, wait_for_holding

pytestmark = pytest.mark.substrate

GROUP, VERSION = "etcd.operator.dev", "v1alpha1"
QUOTA = 16 * 1024 * 1024
QUORUM_LOSS_TIMEOUT = 30
OBSERVATION_MARGIN = 30
DESTRUCTIVE_EVENTS = {"QuorumRecoveryStarted", "MemberRemoved", "MemberReplaced", "MemberRolling"}
SPACE_RECOVERY_EVENTS = ["NoSpaceAlarmDetected", "RevisionsCompacted", "MemberDefragmented", "NoSpaceAlarmDisarmed"]


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who the cluster's members are: etcd member IDs, pod and PVC UIDs by name."""

    members: frozenset[int] | None  # None: no member answered
    pods: dict[str, str]
    pvcs: dict[str, str]


class ClusterView:
    """Reads one EtcdCluster, its pods, PVCs, events and etcd member list."""

    def __init__(self, kube_api, namespace: str, name: str):
        self.core = client.CoreV1Api(kube_api)
        self.custom = client.CustomObjectsApi(kube_api)
        self.namespace, self.name = namespace, name
        self.selector = naming.label_selector(naming.selector_labels(name))

    def cluster(self) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "etcdclusters", self.name)

    def pods(self) -> list:
        return self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items

    def pvcs(self) -> dict[str, str]:
        items = self.core.list_namespaced_persistent_volume_claim(self.namespace, label_selector=self.selector).items
        return {p.metadata.name: p.metadata.uid for p in items}

    def serving_endpoints(self) -> list[str]:
        """Client endpoints of the member pods that run (not ended, not being deleted)."""
        return sorted(f"{p.status.pod_ip}:{naming.CLIENT_PORT}" for p in self.pods()
                      if p.status.phase == "Running" and p.status.pod_ip and not p.metadata.deletion_timestamp)

    def identity(self) -> Identity:
        pods = {p.metadata.name: p.metadata.uid for p in self.pods()}
        try:
            members = member_ids(self.serving_endpoints())
        except EtcdError:
            members = None
        return Identity(members, pods, self.pvcs())

    def event_reasons(self, kind: str | None = None) -> set[str]:
        events = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={self.name}")
        return {e.reason for e in events.items if kind is None or e.type == kind}


def hex_ids(ids: frozenset[int] | None) -> list[str] | None:
    return None if ids is None else sorted(f"{i:x}" for i in ids)


def test_nospace_alarm_is_remediated_in_place(kube_api, namespace, operator):
    """A full database is neither quorum loss nor a reason to replace anyone: the operator
    compacts, defragments one member at a time, disarms the alarm, and every member, pod,
    PVC and key stays."""
    name = "full"
    apply_cluster(namespace, name, {
        "size": 3, "storage": {"size": "1Gi"}, "etcd": {"quotaBackendBytes": QUOTA},
        "recovery": {"automaticQuorumRecovery": True, "quorumLossTimeout": f"{QUORUM_LOSS_TIMEOUT}s"},
        "maintenance": {"spaceRecovery": {"retainRevisions": 5}},
    })
    wait_healthy(namespace, name, 3)
    view = ClusterView(kube_api, namespace, name)
    before = view.identity()
    assert len(before.members) == 3 and len(before.pods) == 3 and len(before.pvcs) == 3, before
    endpoints = view.serving_endpoints()
    markers = put_markers(endpoints, "/marker/", 5)

    accepted = fill_history_until_nospace(endpoints[0])
    alarm_raised = time.monotonic()
    assert accepted > 0

    def nothing_destroyed() -> None:
        obj = view.cluster()
        quorum_lost = condition(obj, "QuorumLost") or {}
        assert quorum_lost.get("status") != "True", f"a full database was read as quorum loss: {quorum_lost}"
        assert not (obj.get("status") or {}).get("operation"), f"operation started: {obj['status']['operation']}"
        destructive = view.event_reasons() & DESTRUCTIVE_EVENTS
        assert not destructive, f"destructive events for a full database: {sorted(destructive)}"
        now = view.identity()
        assert now.pods == before.pods, f"member pods changed: {before.pods} -> {now.pods}"
        assert now.pvcs == before.pvcs, f"member PVCs changed: {before.pvcs} -> {now.pvcs}"
        if now.members is not None:  # checked for certain after the window
            assert now.members == before.members, f"member IDs {hex_ids(before.members)} -> {hex_ids(now.members)}"

    # Watched until the quorum-loss timeout and a margin have passed since the alarm.
    window_end = alarm_raised + QUORUM_LOSS_TIMEOUT + OBSERVATION_MARGIN

    def remediated():
        reasons = view.event_reasons("Normal")
        if not set(SPACE_RECOVERY_EVENTS) <= reasons:
            return None
        if any(kind == ALARM_NOSPACE for _, kind in alarms(view.serving_endpoints())):
            return None
        fits = condition(view.cluster(), "DatabaseFits") or {}
        return reasons if fits.get("status") == "True" else None
    wait_for_holding(remediated, nothing_destroyed, max(60.0, window_end - time.monotonic()), interval=1.0,
                     what="NOSPACE compacted, defragmented and disarmed")
    assert "NoSpace" in view.event_reasons("Warning"), "the alarm was never reported"
    defragmented = [e for e in view.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}").items if e.reason == "MemberDefragmented"]
    assert len(defragmented) >= 3, [e.message for e in defragmented]

    put_key(view.serving_endpoints(), "/after/nospace", "written")
    holds_throughout(nothing_destroyed, max(0.0, window_end - time.monotonic()), interval=1.0,
                     what="a NOSPACE cluster left intact")

    assert view.identity().members == before.members
    assert read_keys(view.serving_endpoints(), list(markers)) == markers
    assert read_keys(view.serving_endpoints(), ["/after/nospace"]) == {"/after/nospace": "written"}


def test_failed_member_pod_restarts_on_its_data(kube_api, namespace, operator):
    name = "ev"
    victim = naming.member_name(name, 1)
    # A member unhealthy for 60 s is replaced; one that only lost its pod must be back before, on its data.
    apply_cluster(namespace, name, {"size": 3, "storage": {"size": "1Gi"},
                                    "recovery": {"memberUnhealthyTimeout": "60s"}})
    wait_healthy(namespace, name, 3)
    view = ClusterView(kube_api, namespace, name)
    before = view.identity()
    assert len(before.members) == 3 and victim in before.pods, before
    markers = put_markers(view.serving_endpoints(), "/marker/", 5)

    since = view.core.read_namespaced_pod(victim, namespace).metadata.resource_version
    faults.evict(namespace, victim)
    # Watched, not polled: the operator restarts a Failed pod within a moment of the event.
    evicted = next((e["object"] for e in watch.Watch().stream(
        view.core.list_namespaced_pod, namespace, field_selector=f"metadata.name={victim}",
        resource_version=since, timeout_seconds=60)
        if e["object"].metadata.uid == before.pods[victim] and e["object"].status.phase == "Failed"), None)
    assert evicted is not None, f"{victim} never went Failed"
    assert evicted.status.reason == "Evicted" and evicted.metadata.uid == before.pods[victim]

    def same_members_and_data() -> None:
        now = view.identity()
        if now.members is not None:
            assert now.members == before.members, \
                f"member list changed: {hex_ids(before.members)} -> {hex_ids(now.members)}"
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
    obj = wait_for_holding(back_on_its_data, same_members_and_data, 240, interval=2.0,
                           what=f"{victim} recreated and the cluster healthy with 3 members")

    after = view.identity()
    assert after.members == before.members
    assert after.pvcs == before.pvcs
    assert after.pods[victim] != before.pods[victim]
    assert {m["name"] for m in obj["status"]["members"]} == set(before.pods)
    assert read_keys(view.serving_endpoints(), list(markers)) == markers


MISSING_PRIORITY_CLASS = "no-such-class"


def test_a_pod_spec_the_api_server_refuses_costs_no_member(kube_api, namespace, operator):
    """spec.pod.priorityClassName naming a class that does not exist: the CRD accepts it, the
    API server refuses every pod built from it. The roll must not delete a member's pod for
    it, nor a scale-up add a member; PodSpecAccepted=False names the field and the server's
    message. Once the spec names a class that exists, the roll proceeds."""
    name = "pa"
    apply_cluster(namespace, name, {"size": 3, "storage": {"size": "1Gi"}})
    wait_healthy(namespace, name, 3)
    view = ClusterView(kube_api, namespace, name)
    before = view.identity()
    assert len(before.members) == 3 and len(before.pods) == 3, before

    def same_members_and_pods() -> None:
        pods = view.pods()
        uids = {p.metadata.name: p.metadata.uid for p in pods}
        assert uids == before.pods, f"member pods changed: {before.pods} -> {uids}"
        stopping = sorted(p.metadata.name for p in pods if p.metadata.deletion_timestamp)
        assert not stopping, f"member pods being deleted: {stopping}"
        members = member_ids(view.serving_endpoints())
        assert members == before.members, f"member list changed: {hex_ids(before.members)} -> {hex_ids(members)}"

    def refused_condition(step: str):
        def check():
            obj = view.cluster()
            accepted = condition(obj, "PodSpecAccepted") or {}
            progressing = (condition(obj, "Progressing") or {}).get("message", "")
            if accepted.get("status") == "False" and step in progressing:
                return obj
            return None
        return check

    patch_spec(namespace, name, {"pod": {"priorityClassName": MISSING_PRIORITY_CLASS}})
    obj = wait_for_holding(refused_condition("RollMember"), same_members_and_pods, 120, interval=1.0,
                           what="PodSpecAccepted=False while the roll waits")
    accepted = condition(obj, "PodSpecAccepted")
    assert accepted["reason"] == "RejectedByAPIServer", accepted
    assert "spec.pod.priorityClassName" in accepted["message"], accepted
    assert f"no PriorityClass with name {MISSING_PRIORITY_CLASS} was found" in accepted["message"], accepted
    assert accepted["observedGeneration"] == obj["metadata"]["generation"]
    wait_for(lambda: "RejectedByAPIServer" in view.event_reasons("Warning"), 30, what="a Warning event")
    holds_throughout(same_members_and_pods, 15, what="no member pod taken away while the pod spec is refused")

    # A scale-up meets the same refusal before any member is added.
    patch_spec(namespace, name, {"size": 4})
    wait_for_holding(refused_condition("AddLearner"), same_members_and_pods, 120, interval=1.0,
                     what="the scale-up waits on the refused pod spec")
    holds_throughout(same_members_and_pods, 15, what="no member added while its pod would be refused")
    assert "MemberRolling" not in view.event_reasons()

    # A pod lost by other means cannot be re-created either: the refused create is no error of
    # the pass; status says what is refused and the member keeps its place and its data.
    lost = naming.member_name(name, 1)
    view.core.delete_namespaced_pod(lost, namespace, grace_period_seconds=0)
    before_loss = dataclasses.replace(before, pods={n: u for n, u in before.pods.items() if n != lost})

    def members_kept() -> None:
        uids = {p.metadata.name: p.metadata.uid for p in view.pods() if not p.metadata.deletion_timestamp}
        assert uids.items() <= before.pods.items(), f"member pods changed: {before.pods} -> {uids}"
        members = member_ids(view.serving_endpoints())
        assert members == before.members, f"member list changed: {hex_ids(before.members)} -> {hex_ids(members)}"
        assert view.pvcs() == before.pvcs

    def create_refused():
        obj = view.cluster()
        accepted = condition(obj, "PodSpecAccepted") or {}
        progressing = (condition(obj, "Progressing") or {}).get("message", "")
        return obj if (f"CreateMemberPod of {lost} waits" in progressing and accepted.get("status") == "False"
                       and f"the pod of {lost}" in accepted.get("message", "")) else None
    wait_for_holding(create_refused, members_kept, 120, interval=1.0, what=f"status says why {lost} has no pod")
    assert set(view.identity().pods) == set(before_loss.pods)

    priority_class = f"etcd-{namespace}"
    kubectl("create", "priorityclass", priority_class, "--value=1000")
    try:
        patch_spec(namespace, name, {"size": 3, "pod": {"priorityClassName": priority_class}})

        def rolled():
            obj = view.cluster()
            pods = view.pods()
            on_class = [p for p in pods if p.spec.priority_class_name == priority_class
                        and p.metadata.uid not in before.pods.values()]
            accepted = condition(obj, "PodSpecAccepted") or {}
            return obj if accepted.get("status") == "True" and len(on_class) == 3 and is_healthy(obj, 3) else None
        wait_for(rolled, 360, interval=2.0, what="the condition cleared and every member rolled onto the class")
        assert member_ids(view.serving_endpoints()) == before.members
        assert view.pvcs() == before.pvcs
    finally:
        kubectl("delete", "priorityclass", priority_class, "--ignore-not-found")
