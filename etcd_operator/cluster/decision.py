"""The pure part of one reconcile pass: from the spec and what was observed to the spec
acted on, the diagnosed health, the one next step and the conditions. The reconciler wraps
it with I/O; the fault simulator drives it directly."""

from __future__ import annotations

import dataclasses

from etcd_operator import conditions as c
from etcd_operator.cluster import actions as a
from etcd_operator.cluster import builders, space
from etcd_operator.cluster.health import Health, diagnose
from etcd_operator.cluster.observed import Observed
from etcd_operator.cluster.planner import plan
from etcd_operator.cluster.spec import ClusterSpec, SpecProblem, spec_problems, version_change_problem
from etcd_operator.cluster.status import cluster_conditions


@dataclasses.dataclass(frozen=True)
class Decision:
    acting_spec: ClusterSpec  # the spec with refused changes replaced by what runs
    problems: tuple[SpecProblem, ...]
    health: Health
    action: a.Action
    conditions: tuple[c.Condition, ...]


def storage_class_problem(spec: ClusterSpec, observed: Observed) -> SpecProblem | None:
    if spec.storage.empty_dir or not spec.storage.storage_class:
        return None
    existing = {p.storage_class for p in observed.pvcs.values() if p.storage_class}
    if existing and spec.storage.storage_class not in existing:
        return SpecProblem("StorageClassChange",
                           f"spec.storage.storageClassName {spec.storage.storage_class} differs from the members' "
                           f"{', '.join(sorted(existing))}; the storage class of existing members cannot change")
    return None


def effective_spec(spec: ClusterSpec, observed: Observed, problems: list[SpecProblem]) -> ClusterSpec:
    """The spec the operator acts on: a refused change keeps what is running."""
    reasons = {p.reason for p in problems}
    if reasons & {"VersionDowngrade", "MinorVersionSkip"} and observed.running_version:
        spec = dataclasses.replace(spec, version=observed.running_version)
    if "StorageClassChange" in reasons:
        existing = sorted({p.storage_class for p in observed.pvcs.values() if p.storage_class})
        spec = dataclasses.replace(spec, storage=dataclasses.replace(spec.storage, storage_class=existing[0]))
    return spec


def decide(spec: ClusterSpec, observed: Observed) -> Decision:
    problems = spec_problems(spec)
    for problem in (version_change_problem(observed.running_version, spec.version),
                    storage_class_problem(spec, observed)):
        if problem:
            problems.append(problem)
    problems += space.storage_problems(spec, observed)
    acting_spec = space.acting_storage(effective_spec(spec, observed, problems), observed, problems)
    health = diagnose(acting_spec, observed)
    action = plan(
        acting_spec, observed, health,
        desired_hash=builders.pod_spec_hash(acting_spec),
        recovery_allowed=spec.recovery.automatic_quorum_recovery or observed.recovery_approved,
    )
    conditions = cluster_conditions(spec, observed, health, action, problems)
    conditions += space.space_conditions(acting_spec, observed, health, action)
    return Decision(acting_spec, tuple(problems), health, action, tuple(conditions))
