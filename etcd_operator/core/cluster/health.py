"""Names the health of a cluster from what was observed. Pure.

A member is alive when it answers and knows a leader; an alarm it reports (NOSPACE,
CORRUPT) is a state of the cluster, never a sign that the member is down. Quorum is
declared lost only on evidence: no reachable member reports a leader, and too few voters
may still be serving (a voter the operator cannot reach, but whose pod the kubelet finds
ready, may be serving)."""

from __future__ import annotations

import dataclasses
import enum
import re

from etcd_operator.core import hibernation
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.observed import Member, MemberStatus, Observed, PodView
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec

# quorumLossTimeout is never shorter than one election timeout plus this margin: a leader
# change must be able to finish before a lost quorum is declared.
QUORUM_LOSS_MARGIN = 10.0
DEFAULT_ELECTION_TIMEOUT = 1.0

NOSPACE = "NOSPACE"
CORRUPT = "CORRUPT"
_ALARM = re.compile(r"memberID:\s*(?P<member>\d+)\s+alarm:\s*(?P<alarm>[A-Z]+)")


class HealthState(enum.StrEnum):
    # No member was ever created: the first one is still to start.
    BOOTSTRAPPING = "Bootstrapping"
    # Every voter answers and sees a leader, and there are spec.size of them.
    HEALTHY = "Healthy"
    # A quorum of voters answers, but a member is unhealthy, a voter's pod is stopping, a
    # learner is catching up, or the member count differs from spec.size.
    DEGRADED = "Degraded"
    # A quorum answers, but etcd raised the NOSPACE alarm: writes fail until space is freed
    # and the alarm disarmed. Nothing is removed, replaced or recovered for it.
    NO_SPACE = "NoSpace"
    # A quorum answers, but etcd raised the CORRUPT alarm: a member's data differs from the
    # others'. Nothing changes automatically; a person decides.
    CORRUPT = "Corrupt"
    # The operator reaches fewer voters than a quorum, but a reachable member reports a
    # leader or unreachable voters' pods are ready: quorum may hold; the operator is cut off.
    UNREACHABLE = "Unreachable"
    # Evidence says too few voters serve: no reachable member knows a leader and fewer than
    # a quorum of voters may be serving. May be a restart or a short outage.
    NO_QUORUM = "NoQuorum"
    # NO_QUORUM has lasted longer than the quorum-loss timeout.
    QUORUM_LOST = "QuorumLost"
    # Pods exist but no member answered and no member list was ever seen.
    UNKNOWN = "Unknown"
    # The cluster was put to sleep (status.hibernation) and too few voters answer: members
    # stopped on purpose, or not yet back while waking. Never a lost quorum.
    HIBERNATED = "Hibernated"


@dataclasses.dataclass(frozen=True)
class Health:
    state: HealthState
    members: tuple[Member, ...]
    healthy_ids: frozenset[int]
    leader_id: int | None
    message: str
    alarms: tuple[tuple[int, str], ...] = ()  # (member id, alarm name), as etcd reports them
    stopping_ids: frozenset[int] = frozenset()  # voters whose pod is being deleted: answering, but leaving

    @property
    def voters(self) -> list[Member]:
        return [m for m in self.members if not m.is_learner]

    @property
    def learners(self) -> list[Member]:
        return [m for m in self.members if m.is_learner]

    @property
    def healthy_voters(self) -> list[Member]:
        return [m for m in self.voters if m.id in self.healthy_ids]

    @property
    def has_quorum(self) -> bool:
        """A quorum of voters answers the operator and knows a leader: enough to act on."""
        return bool(self.voters) and len(self.healthy_voters) >= naming.quorum(len(self.voters))

    @property
    def alarm_names(self) -> tuple[str, ...]:
        return tuple(sorted({name for _, name in self.alarms}))

    def is_healthy(self, member: Member) -> bool:
        return member.id in self.healthy_ids

    def stays(self, member: Member) -> bool:
        """Healthy, and its pod is not being deleted: counts towards a quorum after the next step."""
        return member.id in self.healthy_ids and member.id not in self.stopping_ids


def alarms_of(status: MemberStatus) -> tuple[tuple[int, str], ...]:
    return tuple((int(m.group("member")), m.group("alarm")) for e in status.errors for m in _ALARM.finditer(e))


def cluster_alarms(observed: Observed) -> tuple[tuple[int, str], ...]:
    """Alarms are cluster-wide in etcd: every member reports all of them."""
    found = {alarm for status in observed.etcd.statuses.values() for alarm in alarms_of(status)}
    return tuple(sorted(found))


def member_healthy(observed: Observed, member_id: int) -> bool:
    """Answers and knows a leader. Alarms do not make a member unhealthy."""
    status = observed.etcd.statuses.get(member_id)
    return status is not None and status.leader_id != 0


def member_name(observed: Observed, member: Member) -> str | None:
    if member.name:
        return member.name
    for url in member.peer_urls:
        name = naming.member_from_peer_url(observed.cluster, observed.namespace, url)
        if name:
            return name
    return None


def pod_serving(pod: PodView | None) -> bool:
    """The kubelet's view: a running, ready pod may be serving even if the operator cannot
    reach it."""
    return pod is not None and not pod.deleting and pod.phase == "Running" and pod.ready


def pod_stopping(observed: Observed, member: Member) -> bool:
    """The member's pod is being deleted: its etcd may still answer, but is about to stop."""
    pod = observed.pods.get(member_name(observed, member) or "")
    return pod is not None and pod.deleting


def leader_reported(observed: Observed) -> bool:
    return any(s.leader_id for s in observed.etcd.statuses.values())


def quorum_loss_timeout(spec: ClusterSpec) -> float:
    election = (spec.etcd.election_timeout_ms / 1000.0) if spec.etcd.election_timeout_ms else DEFAULT_ELECTION_TIMEOUT
    return max(spec.recovery.quorum_loss_timeout, election + QUORUM_LOSS_MARGIN)


def quorum_loss_evidence(status: ClusterStatus, observed: Observed) -> bool:
    """True only when what was observed shows too few voters serving: no reachable member
    reports a leader, and the voters that answer with a leader or whose pods are ready are
    fewer than a quorum. Silence alone is not evidence, nor are members stopped on purpose
    (status.hibernation)."""
    if status.hibernation is not None or leader_reported(observed):
        return False
    members = observed.etcd.members
    if members:
        voters = [m for m in members if not m.is_learner]
        serving = [
            m
            for m in voters
            if member_healthy(observed, m.id) or pod_serving(observed.pods.get(member_name(observed, m) or ""))
        ]
        return bool(voters) and len(serving) < naming.quorum(len(voters))
    if not status.bootstrapped or not (observed.pods or observed.pvcs):
        return False
    # No member answered at all: only pods that are gone or not ready count as evidence.
    return not any(pod_serving(p) for p in observed.pods.values())


SLEEP_MESSAGES = {
    hibernation.SNAPSHOTTING: "going to sleep: waiting for a snapshot before the members stop",
    hibernation.STOPPING: "going to sleep: the member pods are stopping; each member's data stays on its PVC",
    hibernation.HIBERNATED: "hibernated: no member pod runs; each member's data is kept on its PVC",
    hibernation.WAKING: "waking: every member starts again on its own PVC; waiting for a quorum",
}


def diagnose(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> Health:
    members = observed.etcd.members
    healthy = frozenset(m.id for m in members if member_healthy(observed, m.id))
    leader = observed.etcd.leader_id if observed.etcd.leader_id in healthy else None
    alarms = cluster_alarms(observed)
    stopping = frozenset(m.id for m in members if not m.is_learner and pod_stopping(observed, m))

    def health(state: HealthState, message: str) -> Health:
        return Health(state, members, healthy, leader, message, alarms, stopping)

    asleep = SLEEP_MESSAGES.get(status.hibernation.state) if status.hibernation is not None else None
    if not members:
        if asleep:
            return health(HealthState.HIBERNATED, asleep)
        if not observed.pods and not observed.pvcs:
            if status.bootstrapped:
                return health(
                    HealthState.QUORUM_LOST,
                    "every member and its data is gone; restore from a backup with an EtcdRestore",
                )
            return health(HealthState.BOOTSTRAPPING, "creating the members")
        lasted = observed.no_quorum_for
        if lasted is not None and quorum_loss_evidence(status, observed):
            state = HealthState.QUORUM_LOST if lasted >= quorum_loss_timeout(spec) else HealthState.NO_QUORUM
            return health(state, f"no member answers and no member pod is ready (for {lasted:.0f}s)")
        if any(pod_serving(p) for p in observed.pods.values()) and status.bootstrapped:
            return health(
                HealthState.UNREACHABLE,
                "no member answers the operator, but member pods are ready: the operator may be cut off",
            )
        return health(HealthState.UNKNOWN, "no member answered; waiting for the members to start")

    voters = [m for m in members if not m.is_learner]
    healthy_voters = [m for m in voters if m.id in healthy]
    needed = naming.quorum(len(voters))
    if len(healthy_voters) < needed:
        counts = f"{len(healthy_voters)} of {len(voters)} voting members answer with a leader (quorum is {needed})"
        if asleep:
            return health(HealthState.HIBERNATED, f"{asleep}; {counts}")
        if not quorum_loss_evidence(status, observed):
            return health(
                HealthState.UNREACHABLE,
                f"only {counts}, but a reachable member reports a leader or unreachable members' pods "
                f"are ready: quorum may hold; waiting",
            )
        lasted = observed.no_quorum_for
        if lasted is not None and lasted >= quorum_loss_timeout(spec):
            return health(HealthState.QUORUM_LOST, f"only {counts} for {lasted:.0f}s")
        return health(HealthState.NO_QUORUM, f"only {counts}")
    names = {a for _, a in alarms}
    if CORRUPT in names:
        return health(
            HealthState.CORRUPT,
            "etcd raised the CORRUPT alarm: a member's data differs from the others'; nothing is changed automatically",
        )
    if NOSPACE in names:
        return health(
            HealthState.NO_SPACE,
            "etcd raised the NOSPACE alarm: writes fail until space is freed and "
            "the alarm disarmed; no member is removed or replaced for it",
        )
    unhealthy = [member_name(observed, m) or m.hex_id for m in members if m.id not in healthy]
    learners = [member_name(observed, m) or m.hex_id for m in members if m.is_learner]
    if unhealthy:
        return health(HealthState.DEGRADED, f"unhealthy members: {', '.join(sorted(unhealthy))}")
    if stopping:
        leaving = sorted(member_name(observed, m) or m.hex_id for m in members if m.id in stopping)
        return health(
            HealthState.DEGRADED,
            f"member pods stopping: {', '.join(leaving)}; no other member is restarted until they have",
        )
    if learners:
        return health(HealthState.DEGRADED, f"learner catching up: {', '.join(sorted(learners))}")
    if len(voters) != spec.size:
        return health(HealthState.DEGRADED, f"{len(voters)} voting members, {spec.size} wanted")
    return health(HealthState.HEALTHY, f"{len(voters)} healthy voting members")


# Why a container does not run: etcd never starts with this pod spec. A pod that runs but is
# not ready (no leader elected yet) is not broken.
BROKEN_WAITING_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


def pod_broken(pod: PodView) -> bool:
    """etcd does not run in this pod, and the kubelet cannot make it run as it is."""
    return not pod.deleting and not pod.ended and pod.waiting_reason in BROKEN_WAITING_REASONS
