"""Builds an EtcdCluster's status from one pass. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core.cluster import adoption, hibernation, naming, ownership, tls_plan
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import Health, HealthState, member_name
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec, SpecProblem
from etcd_operator.core.timefmt import format_time

PROGRESS_REASONS = {
    "BootstrapFirstMember": "Bootstrapping",
    "BootstrapMembers": "Bootstrapping",
    "SettleStartedMembers": "MemberJoined",
    "StartRestoredMembers": "Bootstrapping",
    "AddLearner": "AddingMember",
    "CheckPodSpec": "CheckingPodSpec",
    "CreateMemberPod": "StartingMember",
    "SettleMemberPod": "MemberJoined",
    "PromoteLearner": "PromotingLearner",
    "AppendEntryForLearner": "AddingMember",
    "RemoveMember": "RemovingMember",
    "DeleteMemberPod": "CleaningUp",
    "DeleteMemberPVC": "CleaningUp",
    "RestartFailedPod": "RestartingFailedPod",
    "MoveLeader": "MovingLeader",
    "MoveLeaderOnRequest": "MovingLeader",
    "FinishLeaderMoveRequest": "MovingLeader",
    "RollMember": "RollingUpdate",
    "RollFailed": "RollFailed",
    "EnableDowngrade": "Downgrading",
    "CancelDowngrade": "Downgrading",
    "FinishDowngrade": "Downgrading",
    "Defragment": "Defragmenting",
    "BeginQuorumRecovery": "RecoveringQuorum",
    "StopMemberPod": "RecoveringQuorum",
    "SetAsideMemberData": "RecoveringQuorum",
    "ForceNewCluster": "RecoveringQuorum",
    "FinishQuorumRecovery": "RecoveringQuorum",
    "AbandonQuorumRecovery": "RecoveryAbandoned",
    "RecordTransport": "Bootstrapping",
    "RecordPeerIdentity": "RotatingCertificates",
    "IssueCertificate": "IssuingCertificate",
    "RecordRotation": "RotatingCertificates",
    "UpdateCASecret": "RotatingCertificates",
    "SyncTrustBundle": "RotatingCertificates",
    "BeginSpaceRecovery": "RecoveringSpace",
    "CompactRevisions": "RecoveringSpace",
    "DefragmentForSpace": "RecoveringSpace",
    "DisarmNoSpaceAlarm": "RecoveringSpace",
    "FinishSpaceRecovery": "RecoveringSpace",
    "DefragmentOnRequest": "Defragmenting",
    "FinishDefragmentRequest": "Defragmenting",
    "ExpandMemberPVC": "ExpandingStorage",
    "RecordHibernation": "Hibernating",
    "StopMemberForHibernation": "Hibernating",
    "RecordUserCertificateBound": "IssuingCertificate",
    "IssueUserCertificate": "IssuingCertificate",
    "DeleteUserCertificate": "ReconcilingAuth",
    "AddAuthRole": "ReconcilingAuth",
    "GrantRolePermission": "ReconcilingAuth",
    "RevokeRolePermission": "ReconcilingAuth",
    "DeleteAuthRole": "ReconcilingAuth",
    "AddAuthUser": "ReconcilingAuth",
    "ChangeUserPassword": "ReconcilingAuth",
    "ClearUserPassword": "ReconcilingAuth",
    "GrantUserRole": "ReconcilingAuth",
    "RevokeUserRole": "ReconcilingAuth",
    "DeleteAuthUser": "ReconcilingAuth",
    "EnableAuth": "EnablingAuth",
    "DisableAuth": "DisablingAuth",
}


def is_degraded(health: Health, status: ClusterStatus) -> bool:
    """Something is broken, as opposed to still being built or changed on purpose."""
    if health.state == HealthState.HIBERNATED:
        return False  # stopped on purpose
    if health.state in (
        HealthState.NO_QUORUM,
        HealthState.QUORUM_LOST,
        HealthState.NO_SPACE,
        HealthState.CORRUPT,
        HealthState.UNREACHABLE,
    ):
        return True
    if health.state == HealthState.UNKNOWN:
        return status.bootstrapped
    return any(not health.is_healthy(m) for m in health.members)


def alarm_condition(health: Health) -> c.Condition:
    if not health.alarms:
        return c.Condition("Alarm", False, "NoAlarm")
    reason = {"NOSPACE": "NoSpace", "CORRUPT": "Corrupt"}
    names = health.alarm_names
    by_member = ", ".join(f"{name} on {member:x}" for member, name in health.alarms)
    return c.Condition(
        "Alarm",
        True,
        reason.get(names[0], names[0].title()),
        f"etcd alarms raised: {by_member}; writes fail until they are resolved and disarmed",
    )


def cluster_conditions(
    spec: ClusterSpec,
    status: ClusterStatus,
    observed: Observed,
    health: Health,
    action: a.Step,
    problems: list[SpecProblem],
) -> list[c.Condition]:
    available: bool | None = health.has_quorum
    if health.state == HealthState.UNREACHABLE:
        available = None  # the operator cannot tell
    progressing = not isinstance(action, (a.Steady, a.Wait)) or (
        isinstance(action, a.Wait) and health.state in (HealthState.DEGRADED, HealthState.UNKNOWN)
    )
    degraded = is_degraded(health, status)
    result = [
        c.Condition("Available", available, "QuorumHealthy" if available else health.state.value, health.message),
        alarm_condition(health),
        c.Condition(
            "Progressing",
            progressing,
            PROGRESS_REASONS.get(action.kind, "Waiting" if progressing else "Reconciled"),
            action.reason,
        ),
        c.Condition(
            "Degraded",
            degraded,
            health.state.value if degraded else "AllMembersHealthy",
            health.message if degraded else "",
        ),
        c.Condition(
            "QuorumLost",
            health.state == HealthState.QUORUM_LOST,
            "QuorumLost" if health.state == HealthState.QUORUM_LOST else "QuorumHeld",
            health.message if health.state == HealthState.QUORUM_LOST else "",
        ),
    ]
    if problems:
        result.append(c.Condition("SpecAccepted", False, problems[0].reason, "; ".join(p.message for p in problems)))
    else:
        result.append(c.Condition("SpecAccepted", True, "Accepted", ""))
    if observed.annotation_problems:
        result.append(
            c.Condition("AnnotationsAccepted", False, "InvalidAnnotation", "; ".join(observed.annotation_problems))
        )
    else:
        result.append(c.Condition("AnnotationsAccepted", True, "Accepted", ""))
    result.append(hibernation.condition(spec, status, action))
    even = spec.size % 2 == 0
    result.append(
        c.Condition(
            "OddSize",
            not even,
            "EvenSize" if even else "OddSize",
            f"size {spec.size} tolerates {(spec.size - 1) // 2} failed members, the same as size {spec.size - 1}, "
            f"while needing a larger quorum; prefer an odd size"
            if even
            else "",
        )
    )
    return result


# The conditions that keep Ready False while they are not as given: (type, status, reasons
# that are the spec's own wish and so do not count against it).
READY_GATES: tuple[tuple[str, bool, frozenset[str]], ...] = (
    ("SpecAccepted", True, frozenset()),
    ("PodSpecAccepted", True, frozenset()),
    ("RollPaused", False, frozenset()),
    (ownership.CONDITION, True, frozenset()),
    ("Alarm", False, frozenset()),
    ("DatabaseFits", True, frozenset()),
    ("StorageResized", True, frozenset()),
    ("VersionSkew", False, frozenset()),
    ("AuthInSync", True, frozenset({"UnmanagedEntries"})),  # left alone on purpose
    (adoption.CONDITION, True, frozenset({"ForeignMembersKept"})),  # spec.adoption keeps them
)
# ... and those whose reason alone says the spec is not in effect yet, whatever their status.
READY_BLOCKING_REASONS = {"AuthEnabled": frozenset({"Enabling", "Disabling", "Unknown"})}


# The conditions that mean the cluster cannot progress until a person acts: (type, status,
# reasons, any reason when empty; only while the step is a Wait and no operation such as a
# quorum recovery is under way). The first that holds is Stalled's reason (kstatus: Failed);
# everything else in the way passes by itself.
STALLED_WHEN: tuple[tuple[str, bool, frozenset[str], bool], ...] = (
    ("SpecAccepted", False, frozenset(), False),  # a refused spec: only an edit moves it
    ("PodSpecAccepted", False, frozenset(), False),  # the API server refuses member pods (dry run)
    (ownership.CONDITION, False, frozenset(), False),  # a child's name is a foreign object's, or a foreign Secret
    ("RollPaused", True, frozenset(), False),  # a failed roll: revert or fix the spec
    ("QuorumLost", True, frozenset(), True),  # waits for approval, or for a restore from a backup
    ("Alarm", True, frozenset({"Corrupt"}), False),  # nothing changes automatically; a person decides
    ("DatabaseFits", False, frozenset({"QuotaExceeded"}), False),  # delete keys or raise the quota
    ("StorageResized", False, frozenset({"ExpansionNotAllowed"}), False),  # the StorageClass does not expand
    ("Hibernated", False, frozenset({"HibernationRefused"}), False),
    ("AuthInSync", False, frozenset({"PasswordSecretMissing"}), False),
    (
        adoption.CONDITION,
        False,
        frozenset(
            {"ClusterIDMismatch", "ClusterIDRequired", "CrossNamespaceEndpoint", "ClusterIDChanged", "VersionMismatch"}
        ),
        False,
    ),
)


def stalled_condition(
    spec: ClusterSpec, status: ClusterStatus, action: a.Step, conditions: list[c.Condition]
) -> c.Condition:
    """Stalled, from the other conditions (STALLED_WHEN); never while paused on request."""
    if spec.paused:
        return c.stalled(None)
    by_type = {cond.type: cond for cond in conditions}
    for type_, wanted, reasons, only_waiting in STALLED_WHEN:
        found = by_type.get(type_)
        if found is None or found.status is not wanted or (reasons and found.reason not in reasons):
            continue
        if only_waiting and (not isinstance(action, a.Wait) or status.operation is not None):
            continue
        return c.stalled(found)
    return c.stalled(None)


def ready_condition(
    spec: ClusterSpec, observed: Observed, health: Health, action: a.Step, conditions: list[c.Condition]
) -> c.Condition:
    """Ready, the summary `kubectl wait` and kstatus (Flux, Argo CD) read: True when the
    cluster is where its latest spec asks, with a quorum and spec.size healthy members and no
    step left to take, or asleep on request (reason Hibernated: no member serves then, and
    Available says so); otherwise False with the reason of the first thing in the way."""
    by_type = {cond.type: cond for cond in conditions}
    if spec.paused:
        return c.Condition("Ready", False, "Paused", "reconciliation is paused (spec.paused): the spec is not acted on")
    if observed.restoring:
        return c.Condition("Ready", False, "Restoring", f"EtcdRestore {observed.restoring} is replacing the data")
    asleep = by_type.get("Hibernated")
    if asleep is not None and asleep.status:
        if isinstance(action, a.Steady):
            return c.Condition(
                "Ready", True, "Hibernated", "hibernated on request: no member runs and no client is served"
            )
        return c.Condition("Ready", False, "Hibernating", action.reason)
    if asleep is not None and asleep.reason in ("Hibernating", "Waking"):
        return c.Condition("Ready", False, asleep.reason, asleep.message)
    if health.state != HealthState.HEALTHY:
        return c.Condition("Ready", False, health.state.value, health.message)
    for type_, wanted, tolerated in READY_GATES:
        gate = by_type.get(type_)
        if gate is not None and gate.status is not wanted and gate.reason not in tolerated:
            return c.Condition("Ready", False, gate.reason, gate.message or f"{type_} is {gate.status_text}")
    for type_, reasons in READY_BLOCKING_REASONS.items():
        gate = by_type.get(type_)
        if gate is not None and gate.reason in reasons:
            return c.Condition("Ready", False, gate.reason, gate.message)
    if not isinstance(action, a.Steady):
        progressing = by_type.get("Progressing")
        reason = progressing.reason if progressing is not None and progressing.status else "Waiting"
        return c.Condition("Ready", False, reason, action.reason)
    return c.Condition("Ready", True, "Reconciled", health.message)


def phase(spec: ClusterSpec, health: Health, action: a.Step, status: ClusterStatus, observed: Observed) -> str:
    if spec.paused:
        return "Paused"
    if observed.restoring:
        return "Restoring"
    if status.operation is not None:
        return "Recovering"
    asleep = hibernation.phase(spec, status)
    if asleep:
        return asleep
    if health.state == HealthState.QUORUM_LOST:
        return "QuorumLost"
    if health.state == HealthState.BOOTSTRAPPING or not status.bootstrapped:
        return "Creating"
    if isinstance(action, a.RollMember) or isinstance(action, a.MoveLeader):
        return "Upgrading"
    if isinstance(action, (a.AddLearner, a.AppendEntryForLearner, a.PromoteLearner)) or (
        isinstance(action, a.RemoveMember) and not action.replacing
    ):
        return "Scaling"
    if health.state == HealthState.HEALTHY:
        return "Running"
    return "Degraded"


def member_entries(observed: Observed, health: Health, now: float) -> list[dict[str, Any]]:
    entries = []
    for member in sorted(health.members, key=lambda m: member_name(observed, m) or m.hex_id):
        name = member_name(observed, member) or member.hex_id
        status = observed.etcd.statuses.get(member.id)
        role = "learner" if member.is_learner else ("leader" if member.id == health.leader_id else "follower")
        entry: dict[str, Any] = {
            "name": name,
            "id": member.hex_id,
            "peerURL": member.peer_urls[0] if member.peer_urls else "",
            "clientURL": member.client_urls[0]
            if member.client_urls
            else naming.client_url(observed.cluster, observed.namespace, name),
            "role": role,
            "healthy": health.is_healthy(member),
        }
        if status is not None:
            entry.update(
                dbSize=status.db_size,
                dbSizeInUse=status.db_size_in_use,
                revision=status.revision,
                version=status.version,
            )
        if name in observed.unhealthy_for:  # for people: no decision reads it back (cluster/timers.py)
            entry["unhealthySince"] = format_time(now - observed.unhealthy_for[name])
        entries.append(entry)
    return entries


def alarm_entries(observed: Observed, health: Health) -> list[dict[str, Any]]:
    """status.alarms: etcd's alarms as this pass saw them (the Alarm condition's), each with
    the member it is raised on, by name where the member is known, else by its hex ID. Empty
    when none is raised, or when no member answered (the condition then says NoAlarm too)."""
    names = {m.id: member_name(observed, m) or m.hex_id for m in health.members}
    return [
        {"member": names.get(member_id, f"{member_id:x}"), "memberID": f"{member_id:x}", "alarm": alarm}
        for member_id, alarm in sorted(health.alarms)
    ]


def restore_hold_ack(observed: Observed) -> dict[str, Any] | None:
    """status.restoreHold: the hold this pass saw (the EtcdRestore's name and uid), or None."""
    if not observed.restoring:
        return None
    return {"restore": observed.restoring, "uid": observed.restore_hold or ""}


def restore_hold_fields(observed: Observed) -> dict[str, Any]:
    """What a pass that sees a restore's hold writes, in one status write: the acknowledgement
    the restore waits for before it stops or creates anything (status.restoreHold), and the
    records about the old data dropped, since a restore makes a new cluster from a snapshot:
    its identity, any quorum recovery and any hibernation record (the restored cluster is
    another one; with hibernation still asked for, it goes to sleep again). status.operation
    is this controller's own record; the restore does not write it, it waits to observe it
    gone (restore/planner.py)."""
    ack = restore_hold_ack(observed)
    if ack is None:
        return {"restoreHold": None}
    return {"restoreHold": ack, "clusterID": None, "operation": None, "hibernation": None}


def build_status(
    spec: ClusterSpec,
    status: ClusterStatus,
    observed: Observed,
    now: float,
    health: Health,
    action: a.Step,
    conditions: list[c.Condition],
    previous: Mapping[str, Any],
    generation: int,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    leader = next((m for m in health.members if m.id == health.leader_id), None)
    written: dict[str, Any] = {
        "phase": phase(spec, health, action, status, observed),
        "members": member_entries(observed, health, now),
        "readyMembers": sum(1 for m in health.voters if health.is_healthy(m)),
        "leader": (member_name(observed, leader) or leader.hex_id) if leader else "",
        "currentVersion": observed.running_version or previous.get("currentVersion", ""),
        "clientURL": f"{naming.scheme(tls_plan.serves_tls(spec, status, observed))}://"
        f"{naming.client_service_host(observed.cluster, observed.namespace)}:{naming.CLIENT_PORT}",
        # The member pods, for the scale subresource (an HPA or VPA targets the cluster by it).
        "selector": naming.label_selector(naming.selector_labels(observed.cluster)),
        "noQuorumSince": None if observed.no_quorum_for is None else format_time(now - observed.no_quorum_for),
        "alarms": alarm_entries(observed, health),
        "conditions": c.merge(previous.get("conditions"), conditions, format_time(now), generation),
        "observedGeneration": generation,
    }
    if observed.etcd.cluster_id:
        written["clusterID"] = f"{observed.etcd.cluster_id:x}"
    # This pass decided on a copy of the object that carries the hold, if there is one.
    written.update(restore_hold_fields(observed))
    if extra:
        written.update(extra)
    return written
