"""The operator's partial view of the simulated world, built the way
etcd_operator/controllers/cluster/observer.py builds it: statuses from the members that answer, the
member list from the first answering leader else from the answering member with the
highest raft index, `errors` as etcd's Status RPC formats them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.identity import member_list_sources, split_foreign
from etcd_operator.core.cluster.observed import EtcdView, MemberStatus, Observed, PodView, PVCView
from etcd_operator.core.cluster.recorded import ClusterStatus, JoinRecord
from etcd_operator.core.cluster.timers import Sightings, carry_timers
from tests.sim.world import CLUSTER, NAMESPACE, Foreign, World

NO_LEADER = "etcdserver: no leader"


_views: dict = {}  # frozen views are costly to build; equal inputs share one


def pod_view(world: World, pod) -> PodView:
    ready = False
    if world.member_up(pod):
        data = world.data_of(pod)
        group = world.groups.get(data.lineage) if data else None
        ready = group is not None and group.leader is not None and not world.cut_off(pod, group)
    started = world.member_up(pod)  # the startup probe (/livez) passes once etcd runs
    key = (
        pod.name,
        pod.uid,
        pod.member_id,
        pod.phase,
        ready,
        pod.deleting,
        pod.ip,
        pod.spec_hash,
        pod.initial_state,
        pod.initial_cluster,
        pod.force_new_cluster,
        pod.restarts,
        pod.waiting,
        started,
        pod.quota_bytes,
    )
    view = _views.get(key)
    if view is None:
        if len(_views) > 50_000:
            _views.clear()
        view = _views[key] = PodView(*key)
    return view


def pvc_view(pvc) -> PVCView:
    key = (pvc.name, pvc.uid, pvc.member_id, pvc.deleting, None, pvc.restored, pvc.initial_cluster, pvc.bound)
    view = _views.get(key)
    if view is None:
        view = _views[key] = PVCView(*key[:6], initial_cluster=pvc.initial_cluster, bound=pvc.bound)
    return view


def alarm_errors(member_id: int, alarms) -> tuple[str, ...]:
    # etcd's AlarmMember.String(): protobuf text, one per alarm, trailing space included.
    return tuple(f"memberID:{member_id} alarm:{name} " for name in sorted(alarms))


def status_at(world: World, ip: str, serving: dict):
    """What etcd's Status RPC answers on an address, or an error text."""
    foreign = world.foreign.get(ip)
    if foreign is not None:
        return MemberStatus(
            foreign.cluster_id,
            foreign.member_id,
            foreign.member_id,
            "3.6.16",
            5000,
            5000,
            foreign.applied,
            foreign.applied,
            foreign.applied,
            7,
            False,
            (),
        ), foreign
    pod = serving.get(ip)
    if pod is not None:
        data = world.data_of(pod)
        group = world.groups[data.lineage]
        member = next((m for m in data.members_view if m.id == data.member_id), None)  # its local view
        leader = 0 if world.cut_off(pod, group) else (group.leader or 0)
        errors = ((NO_LEADER,) if not leader else ()) + alarm_errors(data.member_id, group.alarms)
        key = (
            group.cluster_id,
            data.member_id,
            leader,
            pod.version,
            data.db_size,
            data.db_in_use,
            data.revision,
            data.applied,
            data.applied,
            2,
            bool(member and member.is_learner),
            errors,
        )
        status = _views.get(key)
        if status is None:
            status = _views[key] = MemberStatus(*key)
        return status, (pod, data, group)
    return "dial tcp " + ip + ":2379: connect: connection refused", None


def observe(
    world: World,
    status: Mapping[str, Any],
    annotations: Mapping[str, str],
    unreachable: set[str],
    skew: float,
    sightings: Sightings,
    monotonic_now: float,
) -> tuple[ClusterStatus, Observed, float, Sightings]:
    """The planner's inputs but the spec: what `status` records, what is observed and the
    observing process's wall clock. `sightings` and `monotonic_now` are that process's own
    memory and clock (ClusterObserver.sightings and .clock); `skew` is its wall clock's error."""
    pods = {name: pod_view(world, world.pods[name]) for name in sorted(world.pods)}
    pvcs = {name: pvc_view(world.pvcs[name]) for name in sorted(world.pvcs)}
    recorded = recorded_status(status)
    errors, answers, source = {}, {}, {}
    serving = {p.ip: p for p in world.pods.values() if p.ip and world.member_up(p)}
    for name, view in pods.items():
        if not view.ip:
            continue
        endpoint = f"{view.ip}:{naming.CLIENT_PORT}"
        if name in unreachable:
            errors[name] = "context deadline exceeded"
            continue
        result, where = status_at(world, view.ip, serving)
        if isinstance(result, str):
            errors[name] = result
            continue
        answers[endpoint] = result
        source[endpoint] = where
    by_endpoint, foreign = split_foreign(answers, recorded.recorded_cluster_id)
    for endpoint, cluster_id in foreign.items():
        errors[endpoint] = f"answers for another cluster ({cluster_id:x}); not trusted"
    statuses = {s.member_id: s for s in by_endpoint.values()}
    etcd = EtcdView(errors=errors, foreign=foreign)
    if statuses:
        endpoint_of = {s.member_id: e for e, s in by_endpoint.items()}
        etcd = EtcdView(statuses=statuses, errors=errors, endpoints=endpoint_of, foreign=foreign)
        for endpoint in member_list_sources(by_endpoint):
            where, st = source[endpoint], by_endpoint[endpoint]
            if isinstance(where, Foreign):
                cluster_id, members = where.cluster_id, (_foreign_member(where),)
            else:
                cluster_id, members = where[2].cluster_id, where[1].members_view
            if cluster_id != st.cluster_id:
                errors[endpoint] = f"member list for another cluster ({cluster_id:x}); not trusted"
                continue
            etcd = EtcdView(
                members=tuple(members),
                statuses=statuses,
                cluster_id=cluster_id,
                leader_id=st.leader_id or None,
                from_leader=bool(st.leader_id) and st.leader_id == st.member_id,
                errors=errors,
                endpoints=endpoint_of,
                foreign=foreign,
            )
            break
    versions = [s.version for s in statuses.values()]
    observed = Observed(
        cluster=CLUSTER,
        namespace=NAMESPACE,
        uid="uid-cluster",
        pods=pods,
        pvcs=pvcs,
        etcd=etcd,
        unhealthy_for={},
        no_quorum_for=None,
        running_version=min(versions, key=lambda v: tuple(int(x) for x in v.split(".")), default=None),
        recovery_approved=annotations.get(naming.ANNOTATION_APPROVE_QUORUM_RECOVERY) == "true",
        min_ordinal=naming.min_ordinal(annotations)[0],
        restoring=annotations.get(naming.ANNOTATION_RESTORE_IN_PROGRESS),
        restore_hold=annotations.get(naming.ANNOTATION_RESTORE_HOLD),
        defrag_requested=annotations.get(naming.ANNOTATION_DEFRAGMENT) or None,
        leader_move_requested=annotations.get(naming.ANNOTATION_MOVE_LEADER) or None,
    )
    observed, sightings = carry_timers(recorded, observed, sightings, monotonic_now)
    return recorded, observed, world.now + skew, sightings


def recorded_status(status: Mapping[str, Any]) -> ClusterStatus:
    """What the simulated operator reads back from status: ClusterStatus.from_dict, less
    status.downgrade and status.learnerJoins, which the model has never read."""
    return dataclasses.replace(ClusterStatus.from_dict(status), downgrade_target=None, learner_joins=JoinRecord())


def _foreign_member(foreign: Foreign):
    from etcd_operator.core.cluster.observed import Member

    return Member(
        foreign.member_id,
        "other-0",
        ("http://other-0.other-peer.elsewhere.svc:2380",),
        ("http://other-0.other-peer.elsewhere.svc:2379",),
        False,
    )
