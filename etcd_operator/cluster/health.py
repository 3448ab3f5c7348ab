"""Names the health of a cluster from what was observed. Pure."""

from __future__ import annotations

import dataclasses
import enum

from etcd_operator.cluster import naming
from etcd_operator.cluster.observed import Member, Observed
from etcd_operator.cluster.spec import ClusterSpec


class HealthState(str, enum.Enum):
    # No member was ever created: the first one is still to start.
    BOOTSTRAPPING = "Bootstrapping"
    # Every voter answers and sees a leader, and there are spec.size of them.
    HEALTHY = "Healthy"
    # A quorum of voters answers, but a member is unhealthy, a learner is catching up,
    # or the member count differs from spec.size.
    DEGRADED = "Degraded"
    # Fewer voters than a quorum answer; may be a rolling restart or a short outage.
    NO_QUORUM = "NoQuorum"
    # NO_QUORUM has lasted longer than spec.recovery.quorumLossTimeout.
    QUORUM_LOST = "QuorumLost"
    # Pods exist but no member answered and no member list was ever seen.
    UNKNOWN = "Unknown"


@dataclasses.dataclass(frozen=True)
class Health:
    state: HealthState
    members: tuple[Member, ...]
    healthy_ids: frozenset[int]
    leader_id: int | None
    message: str

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
        return bool(self.voters) and len(self.healthy_voters) >= naming.quorum(len(self.voters))

    def is_healthy(self, member: Member) -> bool:
        return member.id in self.healthy_ids


def member_healthy(observed: Observed, member_id: int) -> bool:
    status = observed.etcd.statuses.get(member_id)
    return status is not None and not status.errors and status.leader_id != 0


def member_name(observed: Observed, member: Member) -> str | None:
    if member.name:
        return member.name
    for url in member.peer_urls:
        name = naming.member_from_peer_url(observed.cluster, observed.namespace, url)
        if name:
            return name
    return None


def diagnose(spec: ClusterSpec, observed: Observed) -> Health:
    members = observed.etcd.members
    healthy = frozenset(m.id for m in members if member_healthy(observed, m.id))
    leader = observed.etcd.leader_id if observed.etcd.leader_id in healthy else None

    def health(state: HealthState, message: str) -> Health:
        return Health(state, members, healthy, leader, message)

    if not members:
        if not observed.pods and not observed.pvcs:
            if observed.bootstrapped:
                return health(HealthState.QUORUM_LOST,
                              "every member and its data is gone; restore from a backup with an EtcdRestore")
            return health(HealthState.BOOTSTRAPPING, "creating the first member")
        if observed.no_quorum_since is not None:
            lasted = observed.now - observed.no_quorum_since
            state = (HealthState.QUORUM_LOST if lasted >= spec.recovery.quorum_loss_timeout
                     else HealthState.NO_QUORUM)
            return health(state, f"no member answers (for {lasted:.0f}s)")
        return health(HealthState.UNKNOWN, "no member answered; waiting for the members to start")

    voters = [m for m in members if not m.is_learner]
    healthy_voters = [m for m in voters if m.id in healthy]
    needed = naming.quorum(len(voters))
    if len(healthy_voters) < needed:
        since = observed.no_quorum_since
        if since is not None and observed.now - since >= spec.recovery.quorum_loss_timeout:
            return health(HealthState.QUORUM_LOST,
                          f"only {len(healthy_voters)} of {len(voters)} voting members are healthy "
                          f"(quorum is {needed}) for {observed.now - since:.0f}s")
        return health(HealthState.NO_QUORUM,
                      f"only {len(healthy_voters)} of {len(voters)} voting members are healthy (quorum is {needed})")
    unhealthy = [member_name(observed, m) or m.hex_id for m in members if m.id not in healthy]
    learners = [member_name(observed, m) or m.hex_id for m in members if m.is_learner]
    if unhealthy:
        return health(HealthState.DEGRADED, f"unhealthy members: {', '.join(sorted(unhealthy))}")
    if learners:
        return health(HealthState.DEGRADED, f"learner catching up: {', '.join(sorted(learners))}")
    if len(voters) != spec.size:
        return health(HealthState.DEGRADED, f"{len(voters)} voting members, {spec.size} wanted")
    return health(HealthState.HEALTHY, f"{len(voters)} healthy voting members")
