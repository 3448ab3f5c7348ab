"""Health-gated rolls with automatic rollback. Pure.

A roll is in progress while the pod spec the operator acts on differs from the last good
one (recorded in status.rollout once every member ran it healthily). Rules:
- a rolled member (its pod runs the new pod spec) must be healthy and caught up (applied
  index within CAUGHT_UP_ENTRIES of the leader's) before the next member is rolled, and a
  rolled member that is not is never replaced (its PVC is never deleted) for it: the roll
  waits instead;
- it fails when the rolled member's pod cannot run etcd with the new spec (image pull
  error, crash loop) or stays unhealthy longer than the startup-probe budget plus a margin;
- a failed roll pauses: the spec acted on becomes the last good one, so the rolled member
  restarts with its last good pod spec on its own PVC. The pause holds until the user
  changes the spec (a revert, or another try);
- the last good spec is recorded on the first healthy pass where every pod runs the spec
  acted on; before that (a cluster adopted from an older operator, mid-roll) rolls are not
  gated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core.cluster import builders
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import Health, HealthState, member_name, pod_broken, pod_serving
from etcd_operator.core.cluster.observed import Observed, PodView
from etcd_operator.core.cluster.recorded import RollRecord
from etcd_operator.core.cluster.spec import ClusterSpec

# A rolled member is caught up when its applied index is this close to the leader's.
CAUGHT_UP_ENTRIES = 1000
# Time a rolled member gets beyond its startup probe's budget to answer with a leader.
CATCH_UP_MARGIN = 60.0
# The fields of the spec that decide a member's pod spec, and so what a rollback restores.
ROLLED_FIELDS = ("version", "repository", "pod", "etcd")
ROLL_DEADLINE = builders.STARTUP_PROBE_PERIOD * builders.STARTUP_PROBE_FAILURES + CATCH_UP_MARGIN


def acting_spec(spec: ClusterSpec, record: RollRecord) -> tuple[ClusterSpec, bool]:
    """The spec to act on, and whether a failed roll holds it (the user has not changed the
    spec since). Held with a last good spec known, the pod settings are the last good ones."""
    if not record.failed_hash or builders.pod_spec_hash(spec) != record.failed_hash:
        return spec, False
    last_good = record.last_good
    if last_good is None:
        return spec, True
    return dataclasses.replace(spec, **{f: getattr(last_good, f) for f in ROLLED_FIELDS}), True


def _last_good_hash(record: RollRecord) -> str | None:
    if record.last_good_hash:
        return record.last_good_hash
    last_good = record.last_good  # recorded before the hash was kept beside it
    return builders.pod_spec_hash(last_good) if last_good is not None else None


def rolling(record: RollRecord, desired_hash: str) -> bool:
    """A roll is under way: the desired pod spec differs from the last good one. Pods on the
    last good spec are never a roll's fault: they follow the ordinary rules. Until a last
    good spec is recorded (the first healthy, settled pass), rolls are not gated."""
    last_good = _last_good_hash(record)
    return last_good is not None and last_good != desired_hash


def _rolled_pods(observed: Observed, desired_hash: str) -> list[PodView]:
    return sorted(
        (p for p in observed.pods.values() if p.spec_hash == desired_hash and not p.deleting), key=lambda p: p.name
    )


def lag(observed: Observed, health: Health, member_id: int) -> int | None:
    """How many entries the member's applied index trails the leader's; None if unknown."""
    mine = observed.etcd.statuses.get(member_id)
    leader = observed.etcd.statuses.get(health.leader_id) if health.leader_id else None
    if mine is None or leader is None:
        return None
    return max(0, leader.raft_applied_index - mine.raft_applied_index)


def roll_failure(record: RollRecord, observed: Observed, health: Health, desired_hash: str) -> a.RollFailed | None:
    """The roll to `desired_hash` failed: name the member and why. Only while rolling."""
    if not rolling(record, desired_hash) or record.failed_hash == desired_hash:
        return None  # not rolling, or this failure is recorded already
    ids = {member_name(observed, m): m.id for m in health.members}
    for pod in _rolled_pods(observed, desired_hash):
        if pod_broken(pod):
            return a.RollFailed(
                f"{pod.name} does not run etcd with the new pod spec ({pod.waiting_reason})", pod.name, desired_hash
            )
        member_id = ids.get(pod.name)
        unhealthy_for = observed.unhealthy_for.get(pod.name)
        if member_id is not None and unhealthy_for is not None and unhealthy_for >= ROLL_DEADLINE:
            return a.RollFailed(
                f"{pod.name} was not healthy {unhealthy_for:.0f}s after it was rolled "
                f"(limit {ROLL_DEADLINE:.0f}s, from its startup probe)",
                pod.name,
                desired_hash,
            )
    return None


def roll_gate(record: RollRecord, observed: Observed, health: Health, desired_hash: str) -> a.Wait | None:
    """While rolling, every member already rolled must be healthy and caught up before
    anything else (another roll, or replacing a member) happens."""
    if not rolling(record, desired_hash):
        return None
    ids = {member_name(observed, m): m for m in health.members}
    for pod in _rolled_pods(observed, desired_hash):
        member = ids.get(pod.name)
        if member is None or member.is_learner:
            continue  # not a member yet: the learner rules apply
        if not health.is_healthy(member):
            return a.Wait(
                f"rolled member {pod.name} is not healthy yet; the roll waits (at most "
                f"{ROLL_DEADLINE:.0f}s, then it is rolled back)"
            )
        behind = lag(observed, health, member.id)
        if behind is not None and behind > CAUGHT_UP_ENTRIES:
            return a.Wait(f"rolled member {pod.name} trails the leader by {behind} entries; the roll waits")
    return None


def rollback_step(record: RollRecord, observed: Observed, health: Health, desired_hash: str) -> a.RollMember | None:
    """After a failed roll, a member still on the failed pod spec that does not serve is
    restarted with the spec acted on now (the last good one) on its PVC. A broken pod is
    handled the same way by the planner's outdated-broken rule. "Does not serve" needs
    evidence: a member the operator cannot reach whose pod is ready may be serving, even
    leading, so it is left to the ordinary, gated roll."""
    failed = record.failed_hash
    if not failed or failed == desired_hash:
        return None
    ids = {member_name(observed, m): m for m in health.members}
    for pod in sorted(observed.pods.values(), key=lambda p: p.name):
        member = ids.get(pod.name)
        if pod.deleting or pod.spec_hash != failed:
            continue
        if (member is not None and health.is_healthy(member)) or pod_serving(pod):
            continue  # serving, or maybe serving out of the operator's sight: the ordinary, gated roll
        return a.RollMember(
            f"rolling {pod.name} back to the last good pod spec on its data: {record.failed_reason}", pod.name
        )
    return None


def next_record(
    raw_spec: Mapping[str, Any] | None,
    record: RollRecord,
    observed: Observed,
    health: Health,
    action: a.Step,
    desired_hash: str,
    held: bool,
    spec_accepted: bool,
) -> RollRecord:
    """status.rollout after this pass."""
    if isinstance(action, a.RollFailed):
        return dataclasses.replace(
            record, failed_hash=action.pod_spec_hash, failed_member=action.member, failed_reason=action.reason
        )
    settled = (
        health.state == HealthState.HEALTHY
        and not held
        and spec_accepted
        and raw_spec is not None
        and observed.pods
        and all(p.spec_hash == desired_hash for p in observed.pods.values())
    )
    if settled and raw_spec is not None:
        return RollRecord(last_good_spec=dict(raw_spec), last_good_hash=desired_hash)
    return record


def roll_condition(record: RollRecord, held: bool) -> c.Condition:
    if not held:
        return c.Condition("RollPaused", False, "NotPaused", "")
    if record.last_good_spec is None:
        return c.Condition(
            "RollPaused",
            True,
            "RollFailed",
            f"the roll failed on {record.failed_member}: {record.failed_reason}. No last good pod "
            f"spec is recorded to roll back to; revert or fix the spec. No member is replaced "
            f"for it",
        )
    return c.Condition(
        "RollPaused",
        True,
        "RolledBack",
        f"the roll failed on {record.failed_member}: {record.failed_reason}. It was rolled back "
        f"to the last good pod spec on its data; change the spec (revert or fix it) to roll again",
    )
