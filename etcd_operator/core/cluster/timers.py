"""The clocks behind the timed destructive steps: how long THIS operator process has itself
seen each member unhealthy (memberUnhealthyTimeout: replacement, a learner's removal, a
failed roll), evidence that quorum is lost (quorumLossTimeout: recovery), and a hibernating
cluster waiting for its snapshot (spec.hibernation.snapshotTimeout). Pure: the
process's memory (Sightings) and its monotonic clock's reading come in as arguments.

No start time is read back from status. One left there may belong to an earlier outage
whose end was never written (the operator was down while the member recovered), or to
another replica whose clock differs; either would declare the timeout early. A restarted
or newly elected operator therefore waits the full timeout again."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from etcd_operator.core.cluster.health import member_healthy, member_name, quorum_loss_evidence
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.hibernation import SNAPSHOTTING, STOPPING

# Sightings older than this are forgotten: a process that did not look for so long (its
# passes failed) did not see what happened meanwhile. Passes come every few seconds while a
# timer runs (the reconciler waits 3 s, or 10 s after a failed pass).
SIGHTINGS_EXPIRE = 60.0


@dataclasses.dataclass(frozen=True)
class Sightings:
    """What one operator process saw, on its own monotonic clock, pass after pass."""

    at: float | None = None  # the pass that recorded them
    unhealthy_since: Mapping[str, float] = dataclasses.field(
        default_factory=dict
    )  # member -> unhealthy in every pass since
    quorum_loss_since: float | None = None  # evidence of a lost quorum in every pass since
    # status.learnerJoins' last failure (the removed learner's id), and when this process first saw it
    join_failure_since: tuple[int, float] | None = None
    # status.hibernation in Snapshotting or Stopping (its cluster ID, revision and state), and
    # when this process first saw it in that state
    snapshot_wait_since: tuple[int, int, str, float] | None = None


def carry_timers(
    status: ClusterStatus, observed: Observed, seen: Sightings, monotonic_now: float
) -> tuple[Observed, Sightings]:
    """This pass's timers (`observed.unhealthy_for`, `observed.no_quorum_for`, in seconds)
    and the sightings to remember for the next pass. A member seen healthy, or not seen in
    the member list, starts from zero the next time it is seen unhealthy. A learner's join
    failure recorded in status is timed from this process's first pass that saw it
    (`observed.since_join_failure`)."""
    if seen.at is None or not 0.0 <= monotonic_now - seen.at <= SIGHTINGS_EXPIRE:
        seen = Sightings()
    unhealthy_since = {}
    for member in observed.etcd.members:
        name = member_name(observed, member)
        # A learner that has not published itself serves nothing, whatever Status says.
        if name and (not member_healthy(observed, member.id) or (member.is_learner and not member.name)):
            unhealthy_since[name] = seen.unhealthy_since.get(name, monotonic_now)
    quorum_loss_since = None
    if quorum_loss_evidence(status, observed):
        quorum_loss_since = seen.quorum_loss_since if seen.quorum_loss_since is not None else monotonic_now
    join_failure_since = None
    record = status.learner_joins
    if record.failures and record.last_member_id is not None:
        earlier = seen.join_failure_since
        join_failure_since = (
            earlier if earlier and earlier[0] == record.last_member_id else (record.last_member_id, monotonic_now)
        )
    snapshot_wait_since: tuple[int, int, str, float] | None = None
    sleeping = status.hibernation
    if sleeping is not None and sleeping.state in (SNAPSHOTTING, STOPPING):
        waiting = seen.snapshot_wait_since
        key = (sleeping.cluster_id, sleeping.revision, sleeping.state)
        same = waiting is not None and waiting[:3] == key
        snapshot_wait_since = waiting if same else (*key, monotonic_now)
    observed = dataclasses.replace(
        observed,
        unhealthy_for={name: monotonic_now - since for name, since in unhealthy_since.items()},
        no_quorum_for=None if quorum_loss_since is None else monotonic_now - quorum_loss_since,
        since_join_failure=None if join_failure_since is None else monotonic_now - join_failure_since[1],
        snapshot_wait_for=None if snapshot_wait_since is None else monotonic_now - snapshot_wait_since[3],
    )
    return observed, Sightings(
        monotonic_now, unhealthy_since, quorum_loss_since, join_failure_since, snapshot_wait_since
    )
