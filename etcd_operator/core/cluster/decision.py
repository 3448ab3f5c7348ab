"""The pure part of one reconcile pass: from the spec and what was observed to the spec
acted on, the diagnosed health, the one next step and the conditions. The reconciler wraps
it with I/O; the fault simulator drives it directly."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core import versions
from etcd_operator.core.cluster import admission, builders, downgrade, learners, roll, space, tls_plan
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.certs import CertKind
from etcd_operator.core.cluster.health import Health, diagnose
from etcd_operator.core.cluster.observed import JoinRecord, Observed, RollRecord
from etcd_operator.core.cluster.planner import plan
from etcd_operator.core.cluster.spec import ClusterSpec, SpecProblem, spec_problems, version_change_problem
from etcd_operator.core.cluster.status import cluster_conditions


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


def effective_spec(spec: ClusterSpec, observed: Observed, problems: list[SpecProblem]) -> ClusterSpec:
    """The spec the operator acts on: a refused change keeps what is running."""
    reasons = {p.reason for p in problems}
    if reasons & VERSION_REFUSALS and observed.known_version:
        spec = dataclasses.replace(spec, version=observed.known_version)
    tls_on = tls_plan.serves_tls(spec, observed)
    member_cert = observed.tls.cert(CertKind.MEMBER) if tls_on else None
    trusted = tuple(sorted(member_cert.trusted)) if member_cert and not member_cert.problem else ()
    if tls_on != spec.tls.enabled or trusted != spec.tls.trusted:
        spec = dataclasses.replace(spec, tls=dataclasses.replace(spec.tls, enabled=tls_on, trusted=trusted))
    if "StorageClassChange" in reasons:
        existing = sorted({p.storage_class for p in observed.pvcs.values() if p.storage_class})
        spec = dataclasses.replace(spec, storage=dataclasses.replace(spec.storage, storage_class=existing[0]))
    return spec


def decide(spec: ClusterSpec, observed: Observed, raw_spec: Mapping[str, Any] | None = None) -> Decision:
    """`raw_spec` is the EtcdCluster's spec as stored; it is recorded as the last good one
    once every member runs it healthily (without it, none is recorded)."""
    problems = spec_problems(spec)
    for found in (
        versions.release_problem(spec.version),
        versions.upgrade_problem(observed.known_version, spec.version),
    ):
        if found and found.reason not in {p.reason for p in problems}:
            problems.append(SpecProblem(found.reason, found.message))
    # With no member answering, the version they last ran still decides: a refused change
    # must not reach pods recreated during an outage.
    for problem in (
        version_change_problem(observed.known_version, spec.version),
        storage_class_problem(spec, observed),
        tls_plan.transport_problem(spec, observed),
    ):
        if problem:
            problems.append(problem)
    problems += space.storage_problems(spec, observed)
    if downgrade.acting_version(spec.version, observed) or observed.downgrade_target:
        # A downgrade through etcd's API: not refused; the downgrade module paces it.
        problems = [p for p in problems if p.reason != "VersionDowngrade"]
    acting_spec = effective_spec(spec, observed, problems)
    held_version = downgrade.acting_version(spec.version, observed)
    if held_version:
        acting_spec = dataclasses.replace(acting_spec, version=held_version)
    # The quota is resolved before the roll compares pod spec hashes, and again on a
    # rolled-back spec, so every hash here is of the pod spec the members would really run.
    acting_spec = space.acting_storage(acting_spec, observed, problems)
    acting_spec, roll_held = roll.acting_spec(acting_spec, observed.rollout)
    if roll_held:
        acting_spec = space.acting_storage(acting_spec, observed, problems)
    desired_hash = builders.pod_spec_hash(acting_spec)
    health = diagnose(acting_spec, observed)
    action = plan(
        acting_spec,
        observed,
        health,
        desired_hash=desired_hash,
        recovery_allowed=spec.recovery.automatic_quorum_recovery or observed.recovery_approved,
    )
    if not (spec.paused or observed.restoring or observed.operation):
        action = downgrade.step(spec.version, observed, health, action) or action
    conditions = cluster_conditions(spec, observed, health, action, problems)
    rollout = roll.next_record(raw_spec, observed, health, action, desired_hash, roll_held, not problems)
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
    conditions += space.space_conditions(acting_spec, observed, health, action)
    conditions.append(learners.condition(observed, health, action))
    conditions.append(admission.condition(observed, desired_hash))
    return Decision(
        acting_spec,
        tuple(problems),
        health,
        action,
        tuple(conditions),
        rollout,
        learners.next_record(observed, action),
        skew,
    )
