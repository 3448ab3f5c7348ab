"""Builds the planner's inputs for its tests: a compact description of members, pods and
PVCs in, Observed out; ClusterStatus for what status recorded."""

from __future__ import annotations

import dataclasses

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.decision import Decision, plan
from etcd_operator.core.cluster.health import diagnose
from etcd_operator.core.cluster.observed import (
    EtcdView,
    Member,
    MemberStatus,
    Observed,
    PodAdmission,
    PodView,
    PVCView,
    VolumePin,
)
from etcd_operator.core.cluster.planner import next_step, self_only_cluster
from etcd_operator.core.cluster.recorded import ClusterStatus, Operation
from etcd_operator.core.cluster.spec import ClusterSpec

CLUSTER, NAMESPACE = "c", "ns"
NOW = 1_000_000.0
HASH = "current-hash"


@dataclasses.dataclass
class M:
    ordinal: int
    started: bool = True
    learner: bool = False
    healthy: bool = True
    pod: bool = True
    pvc: bool = True
    settled: bool = True
    outdated: bool = False
    unhealthy_for: float | None = None
    applied: int = 100
    db_size: int = 1000
    db_in_use: int = 1000
    pod_phase: str = "Running"
    starting: bool = False  # the pod is inside its startup probe's budget
    pod_ready: bool | None = None  # the kubelet's view; defaults to `healthy`
    waiting: str | None = None  # why the container does not run (CrashLoopBackOff, ImagePullBackOff)
    stopping: bool = False  # its pod is being deleted (its etcd may still answer)
    pin: VolumePin | None = None  # the node its PVC's volume is pinned to, as observed

    @property
    def name(self) -> str:
        return naming.member_name(CLUSTER, self.ordinal)

    @property
    def id(self) -> int:
        return 0x100 + self.ordinal


def spec(size: int = 3, **overrides) -> ClusterSpec:
    base = ClusterSpec.from_dict(
        {"size": size, "recovery": {"memberUnhealthyTimeout": "60s", "quorumLossTimeout": "30s"}}
    )
    return dataclasses.replace(base, **overrides)


def observed(
    members: list[M],
    leader: int | None = 0,
    extra_pods=(),
    extra_pvcs=(),
    no_quorum_for: float | None = None,
    alarms: tuple[tuple[int, str], ...] = (),
    reachable: set[int] | None = None,
) -> Observed:
    etcd_members, statuses, pods, pvcs, unhealthy, endpoints = [], {}, {}, {}, {}, {}
    leader_id = next((m.id for m in members if m.ordinal == leader and m.healthy), None)
    for m in members:
        etcd_members.append(
            Member(
                m.id,
                m.name if m.started else "",
                (naming.peer_url(CLUSTER, NAMESPACE, m.name),),
                (naming.client_url(CLUSTER, NAMESPACE, m.name),) if m.started else (),
                m.learner,
            )
        )
        if m.healthy and m.started and m.pod and (reachable is None or m.ordinal in reachable):
            errors = tuple(f"memberID:{member} alarm:{name} " for member, name in alarms)
            statuses[m.id] = MemberStatus(
                1,
                m.id,
                leader_id or 0,
                "3.6.16",
                m.db_size,
                m.db_in_use,
                m.applied,
                m.applied,
                m.applied,
                2,
                m.learner,
                errors,
            )
            endpoints[m.id] = f"10.0.0.{m.ordinal}:2379"
        if m.pod:
            settled_cluster = f"{m.name}={naming.peer_url(CLUSTER, NAMESPACE, m.name)}"
            ready = m.healthy if m.pod_ready is None else m.pod_ready
            pods[m.name] = PodView(
                m.name,
                f"uid-{m.name}",
                m.id if m.settled else None,
                m.pod_phase,
                ready and m.pod_phase == "Running",
                m.stopping,
                f"10.0.0.{m.ordinal}",
                "old-hash" if m.outdated else HASH,
                "existing" if m.settled else "new",
                settled_cluster if m.settled else "x",
                False,
                waiting_reason=m.waiting,
                started=not m.starting and m.waiting is None,
            )
        if m.pvc:
            pvcs[naming.pvc_name(m.name)] = PVCView(
                naming.pvc_name(m.name), f"pvc-{m.name}", m.id if m.settled else None, False, None, pin=m.pin
            )
        if not m.healthy and m.unhealthy_for is not None:
            unhealthy[m.name] = m.unhealthy_for
    for pod in extra_pods:
        pods[pod.name] = pod
    for pvc in extra_pvcs:
        pvcs[pvc.name] = pvc
    answered = bool(statuses)
    from_leader = leader_id is not None and leader_id in statuses
    return Observed(
        cluster=CLUSTER,
        namespace=NAMESPACE,
        uid="uid",
        pods=pods,
        pvcs=pvcs,
        etcd=EtcdView(
            tuple(etcd_members) if answered else (),
            statuses,
            1 if answered else None,
            leader_id,
            from_leader,
            {},
            endpoints,
        ),
        unhealthy_for=unhealthy,
        no_quorum_for=no_quorum_for,
        running_version="3.6.16" if answered else None,
    )


def recorded(operation: Operation | None = None, bootstrapped: bool = True, **fields) -> ClusterStatus:
    """What status recorded: by default, of a cluster that was created."""
    return ClusterStatus(operation=operation, bootstrapped=bootstrapped, **fields)


RECORDED = recorded()


def health_of(s: ClusterSpec, o: Observed, st: ClusterStatus = RECORDED):
    return diagnose(s, st, o)


def pod_accepted(o: Observed, check: a.CheckPodSpec) -> Observed:
    """`o` with the API server's acceptance of the pod `check` asks about, just answered."""
    answer = PodAdmission(check.member, check.pod_spec_hash)
    return dataclasses.replace(o, pod_admissions={**o.pod_admissions, check.member: answer})


def plan_accepting(
    s: ClusterSpec, o: Observed, health, st: ClusterStatus = RECORDED, now: float = NOW, **kwargs
) -> a.Step:
    """The planner's step where the API server accepts every member pod: a dry run it asks
    for is answered "accepted" (as the executor would) and the next pass plans again."""
    step = next_step(s, st, o, health, now, **kwargs)
    if isinstance(step, a.CheckPodSpec):
        step = next_step(s, st, pod_accepted(o, step), health, now, **kwargs)
    return step


def decide_accepting(s: ClusterSpec, o: Observed, raw=None, st: ClusterStatus = RECORDED, now: float = NOW) -> Decision:
    """decision.plan, where the API server accepts every member pod (see plan_accepting)."""
    decision = plan(s, st, o, now, stored_spec=raw)
    if isinstance(decision.action, a.CheckPodSpec):
        decision = plan(s, st, pod_accepted(o, decision.action), now, stored_spec=raw)
    return decision


__all__ = ["M", "spec", "observed", "recorded", "RECORDED", "health_of", "HASH", "NOW", "self_only_cluster"]
