"""The operator must not destroy healthy data: states that look bad but leave every member
and its data intact (a full database, a pod spec the API server refuses) are repaired in
place, never by quorum recovery, member replacement or a member's pod taken away. On the real
nodes, with the operator as a process on the host."""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from etcd_operator.core.cluster import naming
from tests.support.cluster_view import DESTRUCTIVE_EVENTS, ClusterView, hex_ids
from tests.support.clusters import apply_cluster, condition, get_cluster, is_healthy, patch_spec, wait_healthy
from tests.support.etcd_data import (
    ALARM_NOSPACE,
    alarms,
    fill_history_until_nospace,
    member_ids,
    put_key,
    put_markers,
    read_keys,
)
from tests.support.kubectl import kubectl
from tests.support.kubectl_etcd import member_table, plugin
from tests.support.waiting import holds_throughout, wait_for, wait_for_holding

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.lane5]

QUOTA = 16 * 1024 * 1024
QUORUM_LOSS_TIMEOUT = 30
OBSERVATION_MARGIN = 30
SPACE_RECOVERY_EVENTS = ["NoSpaceAlarmDetected", "RevisionsCompacted", "MemberDefragmented", "NoSpaceAlarmDisarmed"]


def test_nospace_alarm_is_remediated_in_place(kube_api, namespace, operator):
    """A full database is neither quorum loss nor a reason to replace anyone: the operator
    compacts, defragments one member at a time, disarms the alarm, and every member, pod,
    PVC and key stays. While the alarm is recorded in status, `kubectl etcd status` shows it
    on the member it is raised on, and the quota the operator recorded."""
    name = "full"
    apply_cluster(
        namespace,
        name,
        {
            "size": 3,
            "storage": {"size": "1Gi"},
            "etcd": {"quotaBackendBytes": QUOTA},
            "recovery": {"automaticQuorumRecovery": True, "quorumLossTimeout": f"{QUORUM_LOSS_TIMEOUT}s"},
            "maintenance": {"spaceRecovery": {"retainRevisions": 5}},
        },
    )
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

    def plugin_while_recorded():
        """`kubectl etcd status` (-o json and the table, run side by side) once the operator has
        recorded in status the NOSPACE alarms etcd holds, with the Alarm condition; None (look
        again) until it has, or when status.alarms changed while the plugin ran, so that both
        outputs were read from the status read before and after them."""
        raised = {f"{member:x}" for member, kind in alarms(view.serving_endpoints()) if kind == ALARM_NOSPACE}
        status = get_cluster(namespace, name).get("status") or {}
        recorded = status.get("alarms") or []
        alarm = condition({"status": status}, "Alarm") or {}
        if not raised or {a["memberID"] for a in recorded} != raised or alarm.get("status") != "True":
            return None
        with ThreadPoolExecutor(2) as pool:
            as_json, as_table = pool.map(
                lambda output: plugin("status", name, "-n", namespace, *output), [("-o", "json"), ()]
            )
        if (get_cluster(namespace, name).get("status") or {}).get("alarms") != recorded:
            return None
        return status, as_json, as_table

    # The plugin while the alarm is raised, before remediation disarms it: the operator records
    # etcd's alarms in status on the pass that sees them and on each pass until the one that
    # disarms (compaction and three defragmentations in between).
    status, as_json, as_table = wait_for_holding(
        plugin_while_recorded,
        nothing_destroyed,
        max(60.0, window_end - time.monotonic()),
        interval=0.5,
        what="NOSPACE recorded in status.alarms with the Alarm condition True",
    )
    assert as_json.returncode == 0 and as_table.returncode == 0, (as_json.stderr, as_table.stderr)
    recorded = status["alarms"]
    assert {a["alarm"] for a in recorded} == {"NOSPACE"}, recorded
    id_of = {m["name"]: m["id"] for m in status["members"]}
    assert all(id_of.get(a["member"]) == a["memberID"] for a in recorded), (recorded, id_of)
    alarmed = {a["member"] for a in recorded}
    shown = json.loads(as_json.stdout)
    assert shown["alarms"] == recorded, (shown["alarms"], recorded)
    assert {m["name"]: m["alarms"] for m in shown["members"]} == {
        member: ["NOSPACE"] if member in alarmed else [] for member in id_of
    }, shown["members"]
    assert shown["quotaBytes"] == status["quota"]["backendBytes"] == QUOTA, (shown["quotaBytes"], status["quota"])
    assert {m["quotaBytes"] for m in shown["members"]} == {QUOTA}, shown["members"]
    rows = member_table(as_table.stdout)
    assert {member: row["ALARMS"] for member, row in rows.items()} == {
        member: "NOSPACE" if member in alarmed else "-" for member in id_of
    }, as_table.stdout
    assert all(f"NOSPACE on {member}" in as_table.stdout for member in alarmed), as_table.stdout

    def remediated():
        reasons = view.event_reasons("Normal")
        if not set(SPACE_RECOVERY_EVENTS) <= reasons:
            return None
        if any(kind == ALARM_NOSPACE for _, kind in alarms(view.serving_endpoints())):
            return None
        fits = condition(view.cluster(), "DatabaseFits") or {}
        return reasons if fits.get("status") == "True" else None

    wait_for_holding(
        remediated,
        nothing_destroyed,
        max(60.0, window_end - time.monotonic()),
        interval=1.0,
        what="NOSPACE compacted, defragmented and disarmed",
    )
    assert "NoSpace" in view.event_reasons("Warning"), "the alarm was never reported"
    defragmented = [
        e
        for e in view.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        if e.reason == "MemberDefragmented"
    ]
    assert len(defragmented) >= 3, [e.message for e in defragmented]

    put_key(view.serving_endpoints(), "/after/nospace", "written")
    holds_throughout(
        nothing_destroyed, max(0.0, window_end - time.monotonic()), interval=1.0, what="a NOSPACE cluster left intact"
    )

    assert view.identity().members == before.members
    assert read_keys(view.serving_endpoints(), list(markers)) == markers
    assert read_keys(view.serving_endpoints(), ["/after/nospace"]) == {"/after/nospace": "written"}


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
    obj = wait_for_holding(
        refused_condition("RollMember"),
        same_members_and_pods,
        120,
        interval=1.0,
        what="PodSpecAccepted=False while the roll waits",
    )
    accepted = condition(obj, "PodSpecAccepted")
    assert accepted["reason"] == "RejectedByAPIServer", accepted
    assert "spec.pod.priorityClassName" in accepted["message"], accepted
    assert f"no PriorityClass with name {MISSING_PRIORITY_CLASS} was found" in accepted["message"], accepted
    assert accepted["observedGeneration"] == obj["metadata"]["generation"]
    wait_for(lambda: "RejectedByAPIServer" in view.event_reasons("Warning"), 30, what="a Warning event")
    holds_throughout(same_members_and_pods, 15, what="no member pod taken away while the pod spec is refused")

    # A scale-up meets the same refusal before any member is added.
    patch_spec(namespace, name, {"size": 4})
    wait_for_holding(
        refused_condition("AddLearner"),
        same_members_and_pods,
        120,
        interval=1.0,
        what="the scale-up waits on the refused pod spec",
    )
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
        return (
            obj
            if (
                f"CreateMemberPod of {lost} waits" in progressing
                and accepted.get("status") == "False"
                and f"the pod of {lost}" in accepted.get("message", "")
            )
            else None
        )

    wait_for_holding(create_refused, members_kept, 120, interval=1.0, what=f"status says why {lost} has no pod")
    assert set(view.identity().pods) == set(before_loss.pods)

    priority_class = f"etcd-{namespace}"
    kubectl("create", "priorityclass", priority_class, "--value=1000")
    try:
        patch_spec(namespace, name, {"size": 3, "pod": {"priorityClassName": priority_class}})

        def rolled():
            obj = view.cluster()
            pods = view.pods()
            on_class = [
                p
                for p in pods
                if p.spec.priority_class_name == priority_class and p.metadata.uid not in before.pods.values()
            ]
            accepted = condition(obj, "PodSpecAccepted") or {}
            return obj if accepted.get("status") == "True" and len(on_class) == 3 and is_healthy(obj, 3) else None

        wait_for(rolled, 360, interval=2.0, what="the condition cleared and every member rolled onto the class")
        assert member_ids(view.serving_endpoints()) == before.members
        assert view.pvcs() == before.pvcs
    finally:
        kubectl("delete", "priorityclass", priority_class, "--ignore-not-found")
