"""The pure part of one reconcile pass: from the spec, what status recorded, what was
observed and the wall clock to the spec acted on, the diagnosed health, the one next step
and the conditions. The reconciler wraps it with I/O; the fault simulator drives it directly."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core import versions
from etcd_operator.core.cluster import admission, auth, builders, downgrade, learners, ownership, roll, space, tls_plan
from etcd_operator.core.cluster import adoption as adopting
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.certs import CertKind
from etcd_operator.core.cluster.health import Health, diagnose
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.planner import next_step
from etcd_operator.core.cluster.recorded import AuthRecord, ClusterStatus, JoinRecord, RollRecord, known_version
from etcd_operator.core.cluster.spec import ClusterSpec, SpecProblem, spec_problems, version_change_problem
from etcd_operator.core.cluster.status import cluster_conditions, ready_condition, stalled_condition


@dataclasses.dataclass(frozen=True)
class Decision:
    acting_spec: ClusterSpec  # the spec with refused changes replaced by what runs
    problems: tuple[SpecProblem, ...]
    health: Health
    action: a.Step
    conditions: tuple[c.Condition, ...]
    rollout: RollRecord = RollRecord()  # status.rollout after this pass
    learner_joins: JoinRecord = JoinRecord()  # status.learnerJoins after this pass
    version_skew: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # clusterVersion, mixedVersions
    auth_record: AuthRecord | None = None  # status.auth after this pass; None: nothing to record

    def status_fields(self) -> dict[str, Any]:
        """What this module adds to status, next to status.build_status's fields."""
        return {
            "rollout": self.rollout.to_dict(),
            "learnerJoins": self.learner_joins.to_dict(),
            **self.version_skew,
            "quota": {"backendBytes": self.acting_spec.etcd.quota_backend_bytes},
        }


def storage_class_problem(spec: ClusterSpec, observed: Observed) -> SpecProblem | None:
    if spec.storage.empty_dir or not spec.storage.storage_class:
        return None
    existing = {p.storage_class for p in observed.pvcs.values() if p.storage_class}
    if existing and spec.storage.storage_class not in existing:
        return SpecProblem(
            "StorageClassChange",
            f"spec.storage.storageClassName {spec.storage.storage_class} differs from the members' "
            f"{', '.join(sorted(existing))}; the storage class of existing members cannot change",
        )
    return None


# Refused version changes: the members keep the version they run.
VERSION_REFUSALS = frozenset(
    {"VersionDowngrade", "MinorVersionSkip", "UpgradeNeedsPatch", "KnownBadVersion", "UnsupportedVersion"}
)


def acting_spec(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, problems: list[SpecProblem]
) -> tuple[ClusterSpec, bool]:
    """The spec the operator acts on, and whether a failed roll holds it. A refused change
    keeps what runs (version, transport, storage class, a volume shrink); a downgrade etcd
    has not allowed yet keeps the running version; the quota is resolved from the disk; a
    failed roll puts back the last good pod settings, whose quota is resolved again, so
    every pod spec hash is of what the members would really run. While a hibernation record
    stands, the last good pod settings too: members wake as they last ran."""
    reasons = {p.reason for p in problems}
    version = spec.version
    running = known_version(status, observed.running_version)
    if (reasons & VERSION_REFUSALS or downgrade.acting_version(spec.version, status, observed)) and running:
        version = running
    tls_on = tls_plan.serves_tls(spec, status, observed)
    member_cert = observed.tls.cert(CertKind.MEMBER) if tls_on else None
    trusted = tuple(sorted(member_cert.trusted)) if member_cert and not member_cert.problem else ()
    peer_common_name = observed.tls.peer_identity if tls_on else None
    storage = spec.storage
    if "StorageClassChange" in reasons:
        existing = sorted({p.storage_class for p in observed.pvcs.values() if p.storage_class})
        storage = dataclasses.replace(storage, storage_class=existing[0])
    pinned = dataclasses.replace(
        spec,
        version=version,
        tls=dataclasses.replace(spec.tls, enabled=tls_on, trusted=trusted, peer_common_name=peer_common_name),
        storage=storage,
    )
    rolled, roll_held = roll.acting_spec(space.acting_storage(pinned, status, observed, problems), status.rollout)
    last_good = status.rollout.last_good
    waking_as_before = status.hibernation is not None and last_good is not None and not roll_held
    if waking_as_before and last_good is not None:
        # Members wake with the pod settings they last ran healthily; a change made while
        # asleep is rolled afterwards, one member at a time and health-gated.
        rolled = dataclasses.replace(rolled, **{f: getattr(last_good, f) for f in roll.ROLLED_FIELDS})
    if roll_held or waking_as_before:  # the last good settings: their quota too is resolved (never twice otherwise)
        rolled = space.acting_storage(rolled, status, observed, problems)
    return rolled, roll_held


def plan(
    spec: ClusterSpec,
    status: ClusterStatus,
    observed: Observed,
    now: float,
    *,
    stored_spec: Mapping[str, Any] | None = None,
) -> Decision:
    """`now`: the wall clock, in seconds. `stored_spec` is the EtcdCluster's spec as stored;
    it is recorded as the last good one once every member runs it healthily (without it,
    none is recorded)."""
    running = known_version(status, observed.running_version)
    problems = spec_problems(spec)
    for found in (
        versions.release_problem(spec.version),
        versions.upgrade_problem(running, spec.version),
    ):
        if found and found.reason not in {p.reason for p in problems}:
            problems.append(SpecProblem(found.reason, found.message))
    # With no member answering, the version they last ran still decides: a refused change
    # must not reach pods recreated during an outage.
    for problem in (
        version_change_problem(running, spec.version),
        storage_class_problem(spec, observed),
        tls_plan.transport_problem(spec, status, observed),
    ):
        if problem:
            problems.append(problem)
    problems += space.storage_problems(spec, observed)
    if downgrade.acting_version(spec.version, status, observed) or status.downgrade_target:
        # A downgrade through etcd's API: not refused; the downgrade module paces it.
        problems = [p for p in problems if p.reason != "VersionDowngrade"]
    acting, roll_held = acting_spec(spec, status, observed, problems)
    desired_hash = builders.pod_spec_hash(acting)
    health = diagnose(acting, status, observed)
    action = next_step(
        acting,
        status,
        observed,
        health,
        now,
        desired_hash=desired_hash,
        recovery_allowed=spec.recovery.automatic_quorum_recovery or observed.recovery_approved,
        desired_version=spec.version,
    )
    conditions = cluster_conditions(spec, status, observed, health, action, problems)
    # While a hibernation record stands the members run the last good settings, not the
    # stored spec's: nothing new is recorded as good.
    proven_spec = stored_spec if status.hibernation is None else None
    rollout = roll.next_record(
        proven_spec, status.rollout, observed, health, action, desired_hash, roll_held, not problems
    )
    conditions.append(roll.roll_condition(rollout, roll_held or isinstance(action, a.RollFailed)))
    skew = versions.skew([s.version for s in observed.etcd.statuses.values()])
    if skew["mixedVersions"]:
        conditions.append(
            c.Condition(
                "VersionSkew",
                True,
                "MixedVersions",
                "members run different etcd versions: "
                + ", ".join(sorted({s.version for s in observed.etcd.statuses.values()})),
            )
        )
    else:
        conditions.append(c.Condition("VersionSkew", False, "SameVersion", ""))
    conditions += space.space_conditions(acting, status, observed, health, action)
    conditions.append(learners.condition(status.learner_joins, observed, health, action))
    conditions.append(admission.condition(observed, desired_hash))
    conditions.append(ownership.condition(observed))
    adopted = adopting.condition(spec, status, observed, health, action)
    if adopted is not None:
        conditions.append(adopted)
    conditions += auth.conditions(spec, status, observed, action, now)
    conditions.append(stalled_condition(spec, status, action, conditions))
    conditions.append(ready_condition(spec, observed, health, action, conditions))
    keeps_auth_record = spec.auth.declared or status.auth != AuthRecord()
    return Decision(
        acting,
        tuple(problems),
        health,
        action,
        tuple(conditions),
        rollout,
        learners.next_record(status.learner_joins, action, now),
        skew,
        auth.next_record(spec, status, observed, action, now) if keeps_auth_record else None,
    )
