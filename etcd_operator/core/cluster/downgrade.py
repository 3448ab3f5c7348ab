"""Minor downgrades (3.6 -> 3.5) through etcd's downgrade API. Pure.

Phases, recorded in status.downgrade so a restarted operator resumes:
1. the spec asks for a supported lower minor, every member runs the higher one and the
   cluster is healthy: validate and enable the downgrade on the leader (EnableDowngrade;
   status.downgrade.target is written with it);
2. wait until etcd reports the cluster version at the target (etcd lowers it, and the
   storage version, a few seconds after enabling); until then the members keep their version;
3. roll the members to the target version, one at a time, leader last (the ordinary gated
   roll: a member that does not come back healthy is rolled back);
4. when every member runs the target minor, the downgrade is done (etcd ends its job itself).
If the spec goes back to the higher minor mid-way, the downgrade is cancelled (CancelDowngrade)
and the members already downgraded are upgraded again by the ordinary roll. The cancel goes
before ordinary steps only (CANCEL_GOES_BEFORE), and waits for a reachable leader.
"""

from __future__ import annotations

from etcd_operator.core import versions
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import Health, HealthState
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.recorded import ClusterStatus, known_version

# Steps that change a working cluster on purpose: a cancel goes first, so that the roll back up
# starts with etcd's downgrade off. Every other step the planner chooses is one that keeps or
# regains quorum, members or data (quorum recovery, restarting failed or lost pods, replacing a
# failed member, settling a joined member, recording a failed roll, NOSPACE remediation,
# certificate issue and rotation, a first member): it goes first, and the cancel, which changes
# nothing while it waits, follows in a later pass.
CANCEL_GOES_BEFORE = (
    a.Steady,
    a.Wait,
    a.RollMember,
    a.MoveLeader,
    a.MoveLeaderOnRequest,
    a.FinishLeaderMoveRequest,
    a.AddLearner,
    a.PromoteLearner,
    a.Defragment,
    a.DefragmentOnRequest,
    a.FinishDefragmentRequest,
    a.ExpandMemberPVC,
    a.DeleteMemberPod,
    a.DeleteMemberPVC,
)


def cancel_may_go_before(planned: a.Step) -> bool:
    if isinstance(planned, a.CheckPodSpec):  # asked for the step that follows: judged as that step
        return planned.before in {kind.__name__ for kind in CANCEL_GOES_BEFORE}
    if isinstance(planned, a.RemoveMember):
        return not planned.replacing  # a scale-down; replacing a failed member is a repair
    return isinstance(planned, CANCEL_GOES_BEFORE)


def _minor(version: str) -> str:
    return versions.text(versions.parse(version)[:2])


def members_minors(observed: Observed) -> set[str]:
    return {_minor(s.version) for s in observed.etcd.statuses.values()}


def cluster_at(observed: Observed, target: str) -> bool:
    return (
        observed.cluster_version is not None
        and bool(observed.cluster_version)
        and (_minor(observed.cluster_version) == target)
    )


def acting_version(spec_version: str, status: ClusterStatus, observed: Observed) -> str | None:
    """The version to keep running instead of the spec's while a downgrade may not roll yet
    (not enabled, or etcd has not lowered the cluster version); None when the spec applies."""
    record = status.downgrade_target
    running = known_version(status, observed.running_version)
    if record is not None:
        waiting = _minor(spec_version) == record and not cluster_at(observed, record)
    else:
        waiting = versions.downgrade_target(running, spec_version) is not None
    return running if waiting else None


def _cancel(spec_version: str, record: str, observed: Observed, planned: a.Step) -> a.Step | None:
    if not cancel_may_go_before(planned):
        return None
    if observed.etcd.leader_id not in observed.etcd.endpoints:  # etcd takes the cancel on the leader only
        if type(planned) is a.Wait:
            return a.Wait(f"{planned.reason}; cancelling the downgrade to {record} waits for a reachable leader")
        return None
    return a.CancelDowngrade(
        f"spec.version {spec_version} is no longer a {record} version; cancelling the downgrade", record
    )


def step(
    spec_version: str, status: ClusterStatus, observed: Observed, health: Health, planned: a.Step
) -> a.Step | None:
    """The downgrade step that comes before what the planner chose, if any."""
    record = status.downgrade_target
    if record is not None:
        if _minor(spec_version) != record:
            return _cancel(spec_version, record, observed, planned)
        if health.state == HealthState.HEALTHY and members_minors(observed) == {record}:
            return a.FinishDowngrade(f"every member runs {record}", record)
        if not cluster_at(observed, record) and isinstance(planned, (a.Steady, a.Wait)):
            return a.Wait(
                f"downgrade to {record} enabled; waiting for etcd to lower the cluster version "
                f"(now {observed.cluster_version or 'unknown'})"
            )
        return None
    target = versions.downgrade_target(known_version(status, observed.running_version), spec_version)
    if target is None or not isinstance(planned, (a.Steady, a.Wait)):
        return None
    if health.state != HealthState.HEALTHY or len(members_minors(observed)) != 1:
        return a.Wait(f"a downgrade to {target} waits for a healthy cluster on one version: {health.message}")
    return a.EnableDowngrade(
        f"spec.version {spec_version}: downgrading the cluster to {target} through etcd's downgrade API", target
    )
