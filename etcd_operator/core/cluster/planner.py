"""Decides the one next step for a cluster from its spec and what was observed. Pure.

Invariants, each covered by tests/unit/test_cluster_planner.py and the fault simulator
(tests/sim):
- at most one membership change per step, and none while a learner is pending;
- a member is removed only when the remaining healthy voters still form a quorum;
- the leader is never removed, and never restarted while another member can lead;
- healthy members are never removed while an unhealthy one exists;
- pods and PVCs are only deleted for members absent from the leader's member list;
- under an alarm (NOSPACE, CORRUPT) or when the operator is cut off from a quorum that may
  hold, nothing is removed, replaced, rolled or recovered;
- a member whose pod failed (evicted) or is still starting is restarted on its data, never
  replaced for it; nor is one whose pod is Pending (not placed or not started, as on a
  cordoned node its volume is pinned to) while its PVC is kept, unless the API server has
  no Node left where its volume is pinned (deleted: the data is out of reach for good);
- no pod is taken away to be re-created, and no member added, without the API server's
  recent acceptance of its new pod (a dry run; cluster/admission.py);
- while a foreign cluster is being adopted (spec.adoption, status.adoption), cluster/adoption.py
  plans every step: no foreign member is replaced or removed as if it were the operator's own;
- a new cluster's members start together (static bootstrap) only when nothing of it exists and
  its data lives on PVCs; a member seen running restarts as itself, never as bootstrapped, and
  a lost bootstrap PVC is created again only when no member can have run (cluster/bootstrap.py);
- no first member is created while an object of one of the cluster's child names is not the
  operator's (cluster/ownership.py): its Services would be someone else's;
- while the cluster is asleep, going to sleep or waking (spec.hibernation, status.hibernation),
  cluster/hibernation.py plans every step: nothing is replaced, removed, added, rolled,
  recovered or downgraded for members stopped on purpose.
"""

from __future__ import annotations

from etcd_operator.core.cluster import (
    admission,
    auth,
    bootstrap,
    downgrade,
    hibernation,
    leader_move,
    learners,
    naming,
    ownership,
    roll,
    space,
    tls_plan,
)
from etcd_operator.core.cluster import adoption as adopting
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import (
    Health,
    HealthState,
    member_healthy,
    member_name,
    pod_broken,
    quorum_loss_evidence,
)
from etcd_operator.core.cluster.joining import initial_cluster, next_ordinal
from etcd_operator.core.cluster.observed import Member, Observed
from etcd_operator.core.cluster.recorded import ClusterStatus, JoinRecord
from etcd_operator.core.cluster.rejoin import self_only_cluster
from etcd_operator.core.cluster.spec import ClusterSpec

QUORUM_RECOVERY = "QuorumRecovery"

# States in which nothing is removed, replaced, rolled or recovered: the cluster may be
# fine (the operator is cut off) or a person must look (alarms).
HOLD_STATES = frozenset({HealthState.NO_SPACE, HealthState.CORRUPT, HealthState.UNREACHABLE})


def member_add_receivers(observed: Observed) -> list[int]:
    """The voters a member add may be sent to, in order: the leader, then the others,
    newest first. etcd checks an add on the member that receives it (it must have been
    connected to a quorum of voters for its HealthInterval, 5 s) with that member's own
    connection clocks. The leader's clock for the newest member often starts late: it
    dialled the member's name the moment it was added, before its pod had an address, and
    name lookups that failed are cached for a few seconds (the Go resolver re-reads
    /etc/hosts at most every 5 s; cluster DNS caches a missing name too). The newest
    member dialled everyone by names that resolved from its first second."""
    voters = [
        m
        for m in observed.etcd.members
        if not m.is_learner and member_healthy(observed, m.id) and m.id in observed.etcd.endpoints
    ]
    leader = observed.etcd.leader_id
    others = sorted((m for m in voters if m.id != leader), key=lambda m: -_ordinal(observed, m))
    return [m.id for m in voters if m.id == leader] + [m.id for m in others]


def restored_cluster(observed: Observed) -> str:
    """The initial cluster a restore wrote into its members' data: every member whose PVC
    was restored, also those that have joined (started and settled) since. A member started
    later on its own (its pod was lost, or never started) gets the same full list: its data
    directory, if intact, ignores it; if it is empty, etcd bootstraps from the flags, and a
    list naming only itself would make it a new one-member cluster serving no data, while
    the full list (with the cluster's token, not the restore's) never reaches a quorum."""
    members = sorted(naming.pvc_member(p.name) for p in observed.pvcs.values() if p.restored)
    return ",".join(f"{m}={naming.peer_url(observed.cluster, observed.namespace, m)}" for m in members)


def removal_keeps_quorum(health: Health, member: Member) -> bool:
    remaining = [m for m in health.voters if m.id != member.id]
    if member.is_learner:
        return health.has_quorum
    staying = [m for m in remaining if health.stays(m)]
    return bool(remaining) and len(staying) >= naming.quorum(len(remaining))


def _ordinal(observed: Observed, member: Member) -> int:
    return naming.member_ordinal(observed.cluster, member_name(observed, member) or "") or -1


def next_step(
    spec: ClusterSpec,
    status: ClusterStatus,
    observed: Observed,
    health: Health,
    now: float,
    desired_hash: str,
    recovery_allowed: bool = False,
    desired_version: str | None = None,
) -> a.Step:
    """The one next step for the acting `spec`. `desired_version` is the version the user
    asked for: a downgrade to it goes through etcd's API, paced by the downgrade module, and
    its steps come before the planner's own (never while paused, restoring or recovering)."""
    chosen = _next_step(spec, status, observed, health, now, desired_hash, recovery_allowed)
    step = admission.gate(chosen, observed, desired_hash)
    if desired_version is None or spec.paused or observed.restoring or status.operation:
        return step
    if hibernation.owns(spec, status) or adopting.owns(spec, status):
        return step  # no downgrade step while asleep, going to sleep or waking, or adopting
    return downgrade.step(desired_version, status, observed, health, step) or step


def _next_step(
    spec: ClusterSpec,
    status: ClusterStatus,
    observed: Observed,
    health: Health,
    now: float,
    desired_hash: str,
    recovery_allowed: bool,
) -> a.Step:
    if spec.paused:
        return a.Wait("reconciliation is paused (spec.paused)")
    tls_step = tls_plan.next_step(spec, status, observed, now)
    if tls_step and not (isinstance(tls_step, a.Wait) and hibernation.owns(spec, status)):
        return tls_step  # certificates are kept while asleep; a TLS wait does not hold sleep or waking
    if observed.restoring:
        return a.Wait(f"EtcdRestore {observed.restoring} is restoring this cluster")
    if status.operation and status.operation.kind == QUORUM_RECOVERY:
        return _plan_quorum_recovery(spec, status, observed, health, desired_hash)
    if hibernation.owns(spec, status):
        step = hibernation.next_step(spec, status, observed, health)
        if step:
            return step
    if tls_step:
        return tls_step
    if adopting.owns(spec, status):
        return adopting.next_step(spec, status, observed, health)  # foreign members are never "ours"
    if health.state == HealthState.QUORUM_LOST and not observed.pods and not observed.pvcs:
        return a.Wait(health.message)
    if health.state == HealthState.BOOTSTRAPPING and ownership.collisions(observed):
        held = ", ".join(sorted(ownership.collisions(observed)))
        return a.Wait(f"the first member is not created while objects of the cluster's names are not its own: {held}")
    if health.state == HealthState.BOOTSTRAPPING:
        return bootstrap.first_step(spec, status, observed)
    step = roll.roll_failure(status.rollout, observed, health, desired_hash)
    if step:
        return step
    if not health.members:
        return _plan_without_member_list(spec, status, observed, desired_hash)

    names = {m.id: member_name(observed, m) for m in health.members}

    holding = health.state in HOLD_STATES
    step = bootstrap.settle_started(observed, health, names) or space.finish_space_recovery(
        status.space_recovery, observed, health
    )
    if step:
        return step
    if not holding:
        step = _cleanup_removed_members(observed, health, names)
        if step:
            return step
    step = _restart_failed_pods(spec, observed)
    if step:
        return step
    step = _start_missing_pods(spec, status, observed, health, names, may_remove=not holding)
    if step:
        return step
    step = _settle_joined_pods(status, observed, health, names)
    if step:
        return step
    if holding:
        if health.state == HealthState.NO_SPACE:
            return space.plan_no_space(
                spec, status.space_recovery, observed, health, names
            )  # in place: never removes or rolls
        return a.Wait(health.message)
    step = _restart_broken_outdated_members(spec, observed, health, names, desired_hash)
    if step:
        return step
    if health.has_quorum:
        step = _handle_learners(spec, status.learner_joins, observed, health, names)
        if step:
            return step

    if health.state == HealthState.QUORUM_LOST:
        return _plan_quorum_loss(spec, observed, health, names, recovery_allowed)
    if not health.has_quorum:
        return a.Wait(health.message)
    step = auth.revocation_step(spec, status, observed, now)  # undeclared access ends before any roll or scaling
    if step:
        return step
    step = roll.rollback_step(status.rollout, observed, health, desired_hash) or roll.roll_gate(
        status.rollout, observed, health, desired_hash
    )
    if step:
        return step

    step = _replace_or_shrink(spec, observed, health, names)
    if step:
        return step
    voters = health.voters
    if len(voters) < spec.size:
        step = learners.add_backoff(status.learner_joins, observed)
        if step:
            return step
        name = naming.member_name(observed.cluster, next_ordinal(observed))
        return a.AddLearner(f"scaling up to {spec.size}: {len(voters)} voting members", name)
    step = space.plan_volume_expansion(spec, observed)
    if step:
        return step
    if health.stopping_ids:
        return a.Wait(health.message)  # a roll or defragmentation now could leave too few voters
    step = _roll_outdated_member(observed, health, names, desired_hash)
    if step:
        return step
    step = leader_move.plan_requested_leader_move(status.leader_move, observed, health, names)
    if step:
        return step
    step = space.plan_requested_defragmentation(spec, status.defragmentation, observed, health, names)
    if step:
        return step
    step = _defragment(spec, observed, health, names, now)
    if step:
        return step
    if health.state == HealthState.HEALTHY:
        step = auth.next_step(spec, status, observed, now)  # users, roles, the auth switch: a settled cluster only
        if step:
            return step
    return a.Steady(health.message)


def _plan_without_member_list(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, desired_hash: str
) -> a.Step:
    """No member answered. Restart pods of members whose data is still on a PVC."""
    step = _restart_failed_pods(spec, observed)
    if step:
        return step
    if not spec.storage.empty_dir:
        for pod in sorted(observed.pods.values(), key=lambda p: p.name):
            if pod_broken(pod) and pod.spec_hash != desired_hash:
                return a.RollMember(
                    f"{pod.name} does not start with its old pod spec; restarting it with the current one on its data",
                    pod.name,
                )
    step = _start_restored_members(observed) or bootstrap.resume(observed)
    if step:
        return step
    for pvc in sorted(observed.pvcs.values(), key=lambda p: p.name):
        member = naming.pvc_member(pvc.name)
        if member in observed.pods or pvc.deleting:
            continue
        if pvc.member_id is None:
            # Created for the first member, which may never have started: start it as such.
            return a.BootstrapFirstMember("restarting the first member on its PVC", member)
        return a.CreateMemberPod(
            "restarting a member on its PVC",
            member,
            pvc.member_id,
            self_only_cluster(status, observed, member),
            joined_before=True,
        )
    return a.Wait("waiting for a member to answer")


def _start_restored_members(observed: Observed) -> a.Step | None:
    """Members restored from one snapshot (their PVCs marked by the restore, never joined)
    start together, each as its data says; only pods that do not exist yet are created."""
    waiting = tuple(
        sorted(
            naming.pvc_member(p.name)
            for p in observed.pvcs.values()
            if p.restored and p.member_id is None and not p.deleting and naming.pvc_member(p.name) not in observed.pods
        )
    )
    if not waiting:
        return None
    return a.StartRestoredMembers(
        f"starting {', '.join(waiting)} together on their restored data", waiting, restored_cluster(observed)
    )


def _cleanup_removed_members(observed: Observed, health: Health, names: dict[int, str | None]) -> a.Step | None:
    if not observed.etcd.from_leader:
        return None  # only the leader's member list is trusted for deletions
    known_ids = {m.id for m in health.members}
    known_names = {n for n in names.values() if n}
    for pod in sorted(observed.pods.values(), key=lambda p: p.name):
        if pod.deleting or pod.name in known_names:
            continue
        if pod.member_id is None or pod.member_id not in known_ids:
            return a.DeleteMemberPod(f"{pod.name} is not a member of the cluster", pod.name)
    for pvc in sorted(observed.pvcs.values(), key=lambda p: p.name):
        member = naming.pvc_member(pvc.name)
        if pvc.deleting or member in known_names or member in observed.pods:
            continue
        return a.DeleteMemberPVC(f"{member} is not a member of the cluster and its pod is gone", member)
    return None


def _restart_failed_pods(spec: ClusterSpec, observed: Observed) -> a.Step | None:
    """An ended pod (evicted, node shutdown: phase Failed or Succeeded) is never restarted by
    the kubelet: delete it so that its member starts again on its PVC."""
    for pod in sorted(observed.pods.values(), key=lambda p: p.name):
        if pod.ended and not pod.deleting:
            where = "an emptyDir: its member will be replaced" if spec.storage.empty_dir else "its PVC"
            return a.RestartFailedPod(
                f"{pod.name} ended ({pod.waiting_reason or pod.phase}); it restarts on {where}", pod.name
            )
    return None


def _restart_broken_outdated_members(
    spec: ClusterSpec, observed: Observed, health: Health, names: dict[int, str | None], desired_hash: str
) -> a.Step | None:
    """A member that stopped serving with an outdated pod (a bad image or flag that the user
    since reverted) is restarted with the current spec. It serves nothing, so restarting it
    takes nothing away; its data stays on its PVC."""
    if spec.storage.empty_dir:
        return None
    for member in health.members:
        pod = observed.pods.get(names[member.id] or "")
        if pod is None or health.is_healthy(member) or pod.spec_hash == desired_hash or not pod_broken(pod):
            continue
        return a.RollMember(
            f"{pod.name} does not serve with its old pod spec; restarting it with the current one", pod.name
        )
    return None


def _start_missing_pods(
    spec: ClusterSpec,
    status: ClusterStatus,
    observed: Observed,
    health: Health,
    names: dict[int, str | None],
    may_remove: bool = True,
) -> a.Step | None:
    for member in sorted(health.members, key=lambda m: names[m.id] or ""):
        name = names[member.id]
        if name is None or name in observed.pods:
            continue
        step = bootstrap.unsettled_member_step(observed, name)
        if step:
            return step
        if not member.name:
            return a.CreateMemberPod(
                f"starting the pod of added member {name}",
                name,
                member.id,
                initial_cluster(observed, health.members, member),
                joined_before=False,
            )
        pvc = observed.pvcs.get(naming.pvc_name(name))
        if not spec.storage.empty_dir and pvc is not None and not pvc.deleting:
            return a.CreateMemberPod(
                f"{name} lost its pod; it rejoins on its PVC",
                name,
                member.id,
                self_only_cluster(status, observed, name),
                joined_before=True,
            )
        if may_remove and health.has_quorum and removal_keeps_quorum(health, member):
            return a.RemoveMember(f"{name} lost its data; it will be replaced", name, member.id, replacing=True)
    return None


def _settle_joined_pods(
    status: ClusterStatus, observed: Observed, health: Health, names: dict[int, str | None]
) -> a.Step | None:
    for member in health.members:
        name = names[member.id]
        pod = observed.pods.get(name or "")
        if name is None or pod is None or pod.deleting or not member.name or not health.is_healthy(member):
            continue
        settled = (
            pod.member_id == member.id
            and pod.initial_state == "existing"
            and pod.initial_cluster == self_only_cluster(status, observed, name)
            and not pod.force_new_cluster
        )
        pvc = observed.pvcs.get(naming.pvc_name(name))
        if not settled or (pvc is not None and pvc.member_id != member.id):
            return a.SettleMemberPod(f"{name} has joined", name, member.id)
    return None


def _handle_learners(
    spec: ClusterSpec, joins: JoinRecord, observed: Observed, health: Health, names: dict[int, str | None]
) -> a.Step | None:
    for learner in health.learners:
        name = names[learner.id] or learner.hex_id
        if learner.name and health.is_healthy(learner) and health.has_quorum:
            return a.PromoteLearner(f"{name} has caught up", name, learner.id)
        unhealthy_for = observed.unhealthy_for.get(name)
        how = learners.progress(observed, learner).describe()
        if unhealthy_for is not None and unhealthy_for >= spec.recovery.member_unhealthy_timeout:
            failures = learners.failures_after_removing(joins, learner.id)
            return a.RemoveMember(
                f"learner {name} did not catch up in {unhealthy_for:.0f}s: {how}; the next member "
                f"is added after {learners.join_backoff(failures):.0f}s (failure {failures} in a row)",
                name,
                learner.id,
                learner_not_caught_up=True,
            )
        step = learners.entry_for(observed, learner, name, how)
        if step:
            return step
        return a.WaitForLearner(f"learner {name} is catching up: {how}", unhealthy_for or 0.0)
    return None


def _replace_or_shrink(
    spec: ClusterSpec, observed: Observed, health: Health, names: dict[int, str | None]
) -> a.Step | None:
    voters = health.voters
    unhealthy = [m for m in voters if not health.is_healthy(m)]
    if len(voters) > spec.size:
        if unhealthy:
            victim = unhealthy[0]
        else:
            followers = [m for m in voters if m.id != health.leader_id]
            victim = max(followers, key=lambda m: _ordinal(observed, m))
        if removal_keeps_quorum(health, victim):
            return a.RemoveMember(f"scaling down to {spec.size}", names[victim.id] or victim.hex_id, victim.id)
        return a.Wait(f"scaling down to {spec.size} would lose quorum; waiting for members to recover")
    waiting_for_node: list[str] = []
    for member in unhealthy:
        name = names[member.id] or member.hex_id
        unhealthy_for = observed.unhealthy_for.get(name)
        if unhealthy_for is None or unhealthy_for < spec.recovery.member_unhealthy_timeout:
            continue
        pod = observed.pods.get(name)
        if pod is not None and (pod.starting or pod.ended):
            continue  # restarting on its data; the startup probe bounds how long that may take
        why = f"{name} was unhealthy for {unhealthy_for:.0f}s"
        if pod is not None and pod.phase == "Pending" and _data_kept(spec, observed, name):
            gone_node = _gone_node(observed, name)
            if gone_node is None:
                waiting_for_node.append(name)
                continue  # not running yet (a drained node's volume): its data waits on its PVC
            why += f" and node {gone_node} is gone from the API (its PV pins the member's data there)"
        if removal_keeps_quorum(health, member):
            return a.RemoveMember(f"{why}; replacing it", name, member.id, replacing=True)
    if waiting_for_node:
        return a.Wait(
            f"{', '.join(waiting_for_node)} not running for longer than memberUnhealthyTimeout: "
            f"its pod is Pending and its data is kept on its PVC, so it is not replaced (a volume "
            f"pinned to a cordoned or unreachable node waits for that node, and is replaced once "
            f"that Node is deleted from the API; delete the PVC to replace the member elsewhere now)"
            f"{_pins_unknown(observed, waiting_for_node)}; {health.message}"
        )
    if unhealthy:
        return a.Wait(health.message)
    return None


def _data_kept(spec: ClusterSpec, observed: Observed, name: str) -> bool:
    if spec.storage.empty_dir:
        return False
    pvc = observed.pvcs.get(naming.pvc_name(name))
    return pvc is not None and not pvc.deleting


def _gone_node(observed: Observed, name: str) -> str | None:
    """The node the member's volume is pinned to, when the API server says it has no such
    Node; None while the Node exists or is unknown (then the member waits for it)."""
    pvc = observed.pvcs.get(naming.pvc_name(name))
    pin = pvc.pin if pvc is not None else None
    return pin.node if pin is not None and pin.node_gone and not pin.unknown else None


def _pins_unknown(observed: Observed, names: list[str]) -> str:
    unknown = [
        f"{name}: {pin.unknown}"
        for name in names
        if (pvc := observed.pvcs.get(naming.pvc_name(name))) and (pin := pvc.pin) and pin.unknown
    ]
    if not unknown:
        return ""
    return (
        f"; the operator cannot tell whether the node holding the data still exists, so it waits ({'; '.join(unknown)})"
    )


def _roll_outdated_member(
    observed: Observed, health: Health, names: dict[int, str | None], desired_hash: str
) -> a.Step | None:
    if health.state != HealthState.HEALTHY:
        return None
    outdated = {
        m: name
        for m in health.voters
        if (name := names[m.id]) and (pod := observed.pods.get(name)) and pod.spec_hash != desired_hash
    }
    if not outdated:
        return None
    followers = [m for m in outdated if m.id != health.leader_id]
    if followers:
        target = max(followers, key=lambda m: _ordinal(observed, m))
        return a.RollMember("following the spec (followers first)", outdated[target])
    leader, leader_name = next(iter(outdated.items()))
    successors = [m for m in health.voters if m.id != leader.id]
    if successors:
        to = min(successors, key=lambda m: _ordinal(observed, m))
        return a.MoveLeader(
            f"moving leadership before restarting {leader_name}", leader.id, to.id, names[to.id] or to.hex_id
        )
    return a.RollMember("following the spec", leader_name)


def _defragment(
    spec: ClusterSpec, observed: Observed, health: Health, names: dict[int, str | None], now: float
) -> a.Step | None:
    if not spec.defrag.enabled or health.state != HealthState.HEALTHY:
        return None
    if not space.in_defrag_window(spec, now):
        return None
    candidates = []
    for member in health.voters:
        status = observed.etcd.statuses.get(member.id)
        if status is None or status.db_size <= 0:
            continue
        if space.defrag_room(spec, observed, names[member.id] or member.hex_id, member.id):
            continue  # no room on its volume for the defragmented copy
        free = status.db_size - status.db_size_in_use
        if free >= spec.defrag.min_fragmented_bytes and free / status.db_size >= spec.defrag.min_fragmented_ratio:
            candidates.append(member)
    if not candidates:
        return None
    # The leader last: defragmenting blocks the member for a moment.
    candidates.sort(key=lambda m: (m.id == health.leader_id, _ordinal(observed, m)))
    target = candidates[0]
    return a.Defragment("database is fragmented", names[target.id] or target.hex_id, target.id)


def _plan_quorum_loss(
    spec: ClusterSpec, observed: Observed, health: Health, names: dict[int, str | None], recovery_allowed: bool
) -> a.Step:
    if spec.storage.empty_dir:
        return a.Wait(
            f"{health.message}; recovering quorum restarts the survivor, which would lose its emptyDir "
            f"data: restore from a backup with an EtcdRestore"
        )
    if not recovery_allowed:
        return a.Wait(
            f"{health.message}; set spec.recovery.automaticQuorumRecovery or annotate the "
            f"EtcdCluster with {naming.ANNOTATION_APPROVE_QUORUM_RECOVERY}=true to recover "
            f"from the surviving member, or restore from a backup"
        )
    answering = [(observed.etcd.statuses[m.id], m) for m in health.voters if m.id in observed.etcd.statuses]
    if not answering:
        return a.Wait(f"{health.message}; no surviving member answers, so only a restore from backup can help")
    status, survivor = max(answering, key=lambda sm: (sm[0].raft_applied_index, sm[0].revision))
    return a.BeginQuorumRecovery(
        f"recovering quorum from {names[survivor.id]} (applied index {status.raft_applied_index})",
        names[survivor.id] or survivor.hex_id,
        survivor.id,
    )


def _plan_quorum_recovery(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, health: Health, desired_hash: str
) -> a.Step:
    op = status.operation
    if op is None:
        raise ValueError("planned a quorum recovery's next step without one under way")
    survivor_pod = observed.pods.get(op.member)
    forced = survivor_pod is not None and survivor_pod.force_new_cluster
    if not forced:
        # Until the survivor restarts as a new one-member cluster, the recovery can be called off.
        if not quorum_loss_evidence(status, observed):
            return a.AbandonQuorumRecovery(
                "quorum came back before the survivor was restarted; the members "
                "that were stopped restart on their data"
            )
        if not spec.storage.empty_dir and naming.pvc_name(op.member) not in observed.pvcs:
            return a.AbandonQuorumRecovery(f"the survivor {op.member} lost its data; nothing is forced")
        if survivor_pod is not None and pod_broken(survivor_pod) and survivor_pod.spec_hash == desired_hash:
            return a.AbandonQuorumRecovery(f"the survivor {op.member} no longer starts on its data; nothing is forced")
    others = sorted(p.name for p in observed.pods.values() if p.name != op.member and not p.deleting)
    if others:
        return a.StopMemberPod("quorum recovery: stopping the other members", others[0])
    if any(p.deleting for p in observed.pods.values() if p.name != op.member):
        return a.Wait("quorum recovery: waiting for the other members to stop")
    set_aside = sorted(p.name for p in observed.pvcs.values() if p.name != naming.pvc_name(op.member))
    if set_aside:
        member = naming.pvc_member(set_aside[0])
        return a.SetAsideMemberData(
            f"quorum recovery: keeping {member}'s data aside; it may hold writes {op.member} lacks",
            member,
            next_ordinal(observed),
        )
    survivor_alone = [m.id for m in health.members] == [op.member_id]
    if survivor_alone and op.member_id in health.healthy_ids:
        return a.FinishQuorumRecovery(f"{op.member} now leads a new single-member cluster", op.member)
    pod = observed.pods.get(op.member)
    if pod is not None and pod.deleting:
        return a.Wait(f"quorum recovery: waiting for {op.member} to stop")
    if pod is None or not pod.force_new_cluster:
        return a.ForceNewCluster(f"restarting {op.member} with --force-new-cluster", op.member, op.member_id)
    if pod.ended or (pod_broken(pod) and pod.spec_hash != desired_hash):
        return a.ForceNewCluster(
            f"{op.member}'s pod failed or has an outdated spec; starting it again with --force-new-cluster",
            op.member,
            op.member_id,
        )
    if pod_broken(pod):
        # Nothing more can be forced; should it start later, it leads a one-member cluster as usual.
        return a.AbandonQuorumRecovery(
            f"{op.member} does not start after --force-new-cluster; its data may be gone. The other members' "
            f"data is kept in PVCs labelled {naming.LABEL_SET_ASIDE_FROM}={observed.cluster}; restore from a "
            f"backup, or from one of them by hand"
        )
    return a.Wait(f"quorum recovery: waiting for {op.member} to start as a single-member cluster")
