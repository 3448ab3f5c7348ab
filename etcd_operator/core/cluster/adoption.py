"""Adopts a running etcd cluster (spec.adoption) without downtime. Pure.

While an adoption is asked for and not completed (status.adoption), this module plans
every step of the cluster planner: the ordinary planner would take the foreign members
for its own broken ones and replace them.

Invariants, covered by tests/unit/test_adoption.py:
- nothing is sent to an endpoint naming another namespace's Service or pod (`….<ns>.svc`,
  `<service>.<ns>`) unless the operator's install allows it (ADOPTION_ALLOW_CROSS_NAMESPACE),
  nor to any endpoint while spec.adoption.clusterID is unset: those endpoints are not dialled;
- nothing is added before the foreign cluster's ID is recorded in status.adoption, and only
  the ID spec.adoption.clusterID names is recorded: an answer with another ID
  (observed.etcd.foreign) or a changed ID stops everything (ClusterIDMismatch);
- nothing changes unless every foreign member answers with the same leader, no alarm is
  raised, and the members run the minor of spec.version;
- own members join one at a time as learners into the foreign cluster, and are promoted
  once they serve; a failing own member stops the adoption (it is reported, never replaced);
- a foreign member is removed only with spec.adoption.removeForeignMembers, once all
  spec.size own members are healthy voters, one per step, when the remaining healthy
  voters keep a quorum; non-leaders first, the leader last, after leadership moved to an
  own member;
- the adoption completes (status.adoption.completed) only once no foreign member is left.
"""

from __future__ import annotations

from etcd_operator.core import conditions as c
from etcd_operator.core import versions
from etcd_operator.core.cluster import learners, naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.adoption_record import AdoptionRecord
from etcd_operator.core.cluster.health import Health, member_healthy, member_name
from etcd_operator.core.cluster.joining import initial_cluster, next_ordinal
from etcd_operator.core.cluster.observed import Member, Observed
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.rejoin import self_only_cluster
from etcd_operator.core.cluster.spec import ClusterSpec

CONDITION = "Adopted"
STOPPED = "adoption stopped"


def owns(spec: ClusterSpec, status: ClusterStatus) -> bool:
    """This module plans the cluster's steps: an adoption is asked for or under way."""
    if status.adoption is not None:
        return not status.adoption.completed
    return spec.adoption is not None


def dial_endpoints(
    spec: ClusterSpec, status: ClusterStatus, namespace: str, cross_namespace_allowed: bool = False
) -> tuple[str, ...]:
    """The foreign endpoints the observer asks too, while the adoption is under way: none
    while the spec names no cluster ID or an endpoint of another namespace it may not."""
    if spec.adoption is None or not owns(spec, status) or spec.adoption.cluster_id is None:
        return ()
    if endpoint_problem(spec, namespace, cross_namespace_allowed):
        return ()
    return spec.adoption.dial_endpoints


def expected_cluster_id(spec: ClusterSpec, status: ClusterStatus) -> int | None:
    """The cluster ID every answer must carry (others are foreign, identity.split_foreign):
    the one status recorded, or before that, while adopting, spec.adoption.clusterID."""
    if status.recorded_cluster_id is not None:
        return status.recorded_cluster_id
    return spec.adoption.cluster_id if spec.adoption is not None and owns(spec, status) else None


def endpoint_namespace(endpoint: str) -> str | None:
    """The namespace a Kubernetes DNS name of `endpoint` (host:port) points into: a Service's
    or pod's `….<ns>.svc[.<domain>]`, or the short `<service>.<ns>` that the DNS search path
    expands into `<service>.<ns>.svc.<domain>`. None for an IP address or another name."""
    host = endpoint.rsplit(":", 1)[0] if not endpoint.startswith("[") else ""
    labels = host.rstrip(".").lower().split(".")
    if "svc" in labels[2:]:
        return labels[labels.index("svc", 2) - 1]
    if len(labels) == 2 and not all(label.isdigit() for label in labels) and all(labels):
        return labels[1]
    return None


def endpoint_problem(spec: ClusterSpec, namespace: str, cross_namespace_allowed: bool) -> tuple[str, str] | None:
    """(reason, message) when an endpoint names a Service or pod of another namespace and the
    operator's install does not allow adopting across namespaces."""
    if spec.adoption is None or cross_namespace_allowed:
        return None
    elsewhere = [
        f"{e} (namespace {ns})"
        for e in spec.adoption.dial_endpoints
        if (ns := endpoint_namespace(e)) not in (None, namespace)
    ]
    if not elsewhere:
        return None
    return (
        "CrossNamespaceEndpoint",
        f"spec.adoption.endpoints name another namespace than {namespace}: {', '.join(elsewhere)}. This operator "
        f"does not adopt across namespaces (its setting ADOPTION_ALLOW_CROSS_NAMESPACE is off); nothing is sent "
        f"to them. Create the EtcdCluster in that namespace, or name the members by address",
    )


def pin_problem(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> tuple[str, str] | None:
    """(reason, message) unless the answering cluster is the one spec.adoption.clusterID names."""
    pinned = spec.adoption.cluster_id if spec.adoption is not None else None
    if pinned is None:
        return (
            "ClusterIDRequired",
            "spec.adoption.clusterID is not set (or is not hex): the ID of the cluster to adopt, in hex as "
            "`etcdctl member list -w json --hex` prints it (header.cluster_id), is required; nothing is sent to "
            "the endpoints",
        )
    record = status.adoption
    seen = {cid for cid in observed.etcd.foreign.values() if cid != pinned}
    if observed.etcd.cluster_id is not None and observed.etcd.cluster_id != pinned:
        seen.add(observed.etcd.cluster_id)
    if record is not None and record.cluster_id != pinned:
        seen.add(record.cluster_id)
    if seen:
        ids = ", ".join(f"{cid:x}" for cid in sorted(seen))
        return (
            "ClusterIDMismatch",
            f"the endpoints answer for cluster {ids}, not for spec.adoption.clusterID {pinned:x}: nothing is added "
            f"to or removed from it",
        )
    return None


def is_own(observed: Observed, member: Member) -> bool:
    """Named like this cluster's members and reached at its own peer URL."""
    name = member_name(observed, member)
    ours_by_url = any(naming.member_from_peer_url(observed.cluster, observed.namespace, u) for u in member.peer_urls)
    return ours_by_url and name is not None and naming.member_ordinal(observed.cluster, name) is not None


def foreign_members(observed: Observed, members: tuple[Member, ...] | list[Member]) -> list[Member]:
    return [m for m in members if not is_own(observed, m)]


def _label(member: Member) -> str:
    return member.name or member.hex_id


def _foreign_problem(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, health: Health
) -> tuple[str, str] | None:
    """(reason, message) when the cluster is not fit for the next membership change."""
    refused = endpoint_problem(spec, observed.namespace, observed.adoption_cross_namespace)
    refused = refused or pin_problem(spec, status, observed)
    if refused:
        return refused
    etcd = observed.etcd
    if etcd.foreign:
        ids = ", ".join(f"{e} ({cid:x})" for e, cid in sorted(etcd.foreign.items()))
        return "ClusterIDChanged", f"endpoints answer for another cluster than the recorded one: {ids}"
    if not etcd.members or not etcd.from_leader:
        errors = "; ".join(f"{k}: {v}" for k, v in sorted(etcd.errors.items()))
        return "ForeignUnreachable", f"the cluster's leader does not answer its member list ({errors or 'no answer'})"
    foreign = foreign_members(observed, etcd.members)
    silent = [_label(m) for m in foreign if not member_healthy(observed, m.id)]
    if silent:
        return "ForeignUnhealthy", f"foreign members do not answer with a leader: {', '.join(sorted(silent))}"
    leaders = {etcd.statuses[m.id].leader_id for m in foreign}
    if len(leaders) > 1:
        return "ForeignUnhealthy", f"members disagree on the leader: {', '.join(f'{i:x}' for i in sorted(leaders))}"
    if health.alarms:
        return "ForeignUnhealthy", f"etcd raised alarms: {', '.join(health.alarm_names)}"
    running = sorted({s.version for s in etcd.statuses.values()})
    wanted = versions.parse(spec.version)[:2]
    mismatched = [v for v in running if versions.parse(v)[:2] != wanted]
    if mismatched:
        return (
            "VersionMismatch",
            f"the cluster runs etcd {', '.join(running)}; spec.version {spec.version} must be of the same "
            f"minor ({versions.text(wanted)}): set spec.version to the running version",
        )
    return None


def next_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed, health: Health) -> a.Step:
    """The one next step while `owns` holds."""
    if spec.adoption is None:
        return a.Wait(
            "spec.adoption was removed before the adoption completed: no member is added or removed; "
            "foreign members are never treated as this cluster's own"
        )
    record = status.adoption
    problem = _foreign_problem(spec, status, observed, health)
    if problem:
        return a.Wait(f"{STOPPED}: {problem[1]}")
    cluster_id = observed.etcd.cluster_id
    if cluster_id is None:
        return a.Wait("adoption waits for the cluster ID")
    if record is not None and record.cluster_id != cluster_id:
        return a.Wait(f"{STOPPED}: the cluster ID changed from {record.cluster_id:x} to {cluster_id:x}")
    members = health.members
    foreign = foreign_members(observed, members)
    foreign_names = tuple(sorted(_label(m) for m in foreign))
    if record is None or record.foreign_members != foreign_names:
        return a.RecordAdoption(
            f"adopting cluster {cluster_id:x}; foreign members: {', '.join(foreign_names) or 'none'}",
            AdoptionRecord(cluster_id, foreign_names),
        )
    return _own_members(spec, status, observed, health) or _handover(spec, observed, health, foreign, record)


def _own_members(spec: ClusterSpec, status: ClusterStatus, observed: Observed, health: Health) -> a.Step | None:
    """Brings the operator's own members up to spec.size, one learner at a time."""
    own = [m for m in health.members if is_own(observed, m)]
    for member in own:
        name = member_name(observed, member) or member.hex_id
        pod = observed.pods.get(name)
        if not member.name and pod is None:
            return a.CreateMemberPod(
                f"starting the pod of {name}, added to the adopted cluster",
                name,
                member.id,
                initial_cluster(observed, health.members, member),
                joined_before=False,
            )
        if member.is_learner:
            if member.name and health.is_healthy(member) and health.has_quorum:
                return a.PromoteLearner(f"{name} has caught up with the adopted cluster", name, member.id)
            how = learners.progress(observed, member).describe()
            step = learners.entry_for(observed, member, name, how)
            if step:
                return step
            return a.WaitForLearner(f"learner {name} is catching up: {how}", observed.unhealthy_for.get(name) or 0.0)
        if pod is None or not health.stays(member):
            return a.Wait(
                f"{STOPPED}: own member {name} is not a healthy voter"
                + (" (its pod is gone)" if pod is None else " (its pod is stopping)" if pod.deleting else "")
                + "; no member is added or removed until it is"
            )
        settled = pod.initial_state == "existing" and pod.initial_cluster == self_only_cluster(status, observed, name)
        if not settled or pod.member_id != member.id:
            return a.SettleMemberPod(f"{name} has joined", name, member.id)
    voters = [m for m in own if not m.is_learner]
    if len(voters) < spec.size:
        if not health.has_quorum:
            return a.Wait(f"adoption waits for a quorum: {health.message}")
        wait = learners.add_backoff(status.learner_joins, observed)
        if wait:
            return wait
        name = naming.member_name(observed.cluster, next_ordinal(observed))
        return a.AddLearner(f"adopting: {len(voters)} of {spec.size} own voting members", name)
    if len(voters) > spec.size:
        return a.Wait(f"adoption: {len(voters)} own voting members, more than spec.size {spec.size}; nothing removed")
    return None


def _handover(
    spec: ClusterSpec, observed: Observed, health: Health, foreign: list[Member], record: AdoptionRecord
) -> a.Step:
    """With every own member a healthy voter: the foreign members leave, if asked."""
    if not foreign:
        return a.RecordAdoption(
            "no foreign member is left: the adoption is complete",
            AdoptionRecord(record.cluster_id, (), completed=True),
        )
    names = ", ".join(record.foreign_members)
    if spec.adoption is None or not spec.adoption.remove_foreign_members:
        return a.Steady(
            f"adopted: all {spec.size} own members are healthy voters; foreign members {names} stay "
            f"until spec.adoption.removeForeignMembers is true"
        )
    # Non-leaders first (learners before voters), the leader last.
    victim = min(foreign, key=lambda m: (m.id == health.leader_id, not m.is_learner, _label(m)))
    label = _label(victim)
    if victim.id == health.leader_id:
        successors = [m for m in health.voters if is_own(observed, m) and health.stays(m)]
        if not successors:
            return a.Wait(f"adoption: no healthy own voter to move leadership from {label} to")
        to = min(successors, key=lambda m: naming.member_ordinal(observed.cluster, m.name) or 0)
        why = f"moving leadership from foreign member {label} before removing it"
        return a.MoveLeader(why, victim.id, to.id, to.name)
    if not _keeps_quorum(health, victim):
        return a.Wait(f"adoption: removing {label} would leave too few healthy voters for a quorum; {health.message}")
    return a.RemoveMember(f"adoption: removing foreign member {label}", label, victim.id)


def _keeps_quorum(health: Health, member: Member) -> bool:
    remaining = [m for m in health.voters if m.id != member.id]
    staying = [m for m in remaining if health.stays(m)]
    return bool(remaining) and len(staying) >= naming.quorum(len(remaining))


def condition(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, health: Health, action: a.Step
) -> c.Condition | None:
    """Adopted: True once no foreign member is left; False with why while under way; None
    for a cluster that never adopted one."""
    record = status.adoption
    if record is None and spec.adoption is None:
        return None
    if isinstance(action, a.RecordAdoption) and action.record is not None and action.record.completed:
        return c.Condition(CONDITION, True, "ForeignMembersRemoved", action.reason)
    if record is not None and record.completed:
        return c.Condition(CONDITION, True, "ForeignMembersRemoved", "no foreign member is left")
    reason = "Adopting"
    if isinstance(action, a.Wait) and action.reason.startswith(STOPPED):
        problem = _foreign_problem(spec, status, observed, health)
        reason = problem[0] if problem else "AdoptionStopped"
    elif isinstance(action, a.Steady):
        reason = "ForeignMembersKept"
    return c.Condition(CONDITION, False, reason, action.reason)
