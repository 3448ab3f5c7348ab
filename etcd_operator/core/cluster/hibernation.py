"""Puts a cluster to sleep (spec.hibernation.enabled) and wakes it. Pure.

While status.hibernation is recorded, or hibernation is asked for, this module owns every
step of the cluster planner: no member is replaced, removed, added, rolled or recovered,
since members stopped on purpose are neither failed nor lost.

Invariants, covered by tests/unit/test_hibernation.py:
- the cluster's identity (its ID, every member's name and ID) is recorded from the leader's
  member list, with a quorum answering and no member joining, before any pod stops;
- no pod stops until every snapshotting EtcdBackup of the cluster holds the recorded
  revision, or spec.hibernation.snapshotTimeout has passed on this process's clock;
- pods stop one at a time, the leader last; PVCs, Services and Secrets are never touched;
- once fewer member pods are left than a quorum of the recorded members (no write can be
  acknowledged any more), the rest stop only after every continuous EtcdBackup's chain
  holds the highest revision a running member has applied (each running member answering
  with every committed entry applied), or spec.hibernation.snapshotTimeout has passed
  since the members started stopping;
- waking creates the pods of the recorded members only, each on its own PVC with its
  recorded ID and `--initial-cluster-state existing`; a member whose PVC is gone is not
  started (a new empty member would be a new cluster); it is left to the ordinary planner,
  which replaces it only on its own evidence once the cluster is awake;
- the cluster is awake (the record dropped) only once a quorum answers with the recorded
  cluster ID and the leader lists exactly the recorded member IDs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core import hibernation as h
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import Health, member_name
from etcd_operator.core.cluster.observed import BackupSnapshot, Observed
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.rejoin import self_only_cluster
from etcd_operator.core.cluster.spec import HIBERNATION_ON_EMPTY_DIR, ClusterSpec


def wanted(spec: ClusterSpec) -> bool:
    """Hibernation is asked for, and the storage keeps data without a pod (not emptyDir)."""
    return spec.hibernation.enabled and not spec.storage.empty_dir


def owns(spec: ClusterSpec, status: ClusterStatus) -> bool:
    """This module plans the cluster's steps: it is asleep, or going to sleep, or waking."""
    return wanted(spec) or status.hibernation is not None


def next_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed, health: Health) -> a.Step | None:
    """The one next step while `owns` holds; None when the ordinary planner decides (the
    cluster is awake, or asked to sleep before it ever served)."""
    record = status.hibernation
    if wanted(spec):
        if record is None:
            return _begin(status, observed, health)
        return _going_to_sleep(spec, record, observed, health)
    if record is None:
        return None
    return _waking(status, record, observed, health)


def _begin(status: ClusterStatus, observed: Observed, health: Health) -> a.Step | None:
    if not status.bootstrapped:
        return None  # created asleep: the ordinary planner creates the cluster first, then it sleeps
    etcd = observed.etcd
    leader = etcd.statuses.get(etcd.leader_id) if etcd.leader_id is not None else None
    if not etcd.from_leader or not health.has_quorum or etcd.cluster_id is None or leader is None:
        return a.Wait(
            f"hibernation waits for the leader and a quorum to answer: the cluster ID and every "
            f"member's ID are recorded before any member stops; {health.message}"
        )
    names = {m.id: member_name(observed, m) for m in health.members}
    joining = sorted(names[m.id] or m.hex_id for m in health.members if m.is_learner or not m.name)
    if joining:
        return a.Wait(f"hibernation waits for {', '.join(joining)} to finish joining")
    members = tuple(sorted((names[m.id] or m.name, m.id) for m in health.members))
    record = h.HibernationRecord(h.SNAPSHOTTING, etcd.cluster_id, leader.revision, members)
    return a.RecordHibernation(
        f"going to sleep at revision {leader.revision}: recording the cluster ID {etcd.cluster_id:x} and "
        f"the IDs of {', '.join(name for name, _ in members)}",
        record,
    )


def _going_to_sleep(spec: ClusterSpec, record: h.HibernationRecord, observed: Observed, health: Health) -> a.Step:
    if record.state == h.WAKING:
        return a.RecordHibernation("spec.hibernation.enabled is true again: the members stop", _stopping(record))
    if record.state == h.SNAPSHOTTING:
        return _wait_for_snapshot(spec, record, observed)
    running = sorted(p.name for p in observed.pods.values() if not p.deleting)
    if record.state == h.HIBERNATED:
        if running:
            return a.RecordHibernation(
                f"{', '.join(running)} runs while the cluster is hibernated: it stops again", _stopping(record)
            )
        return a.Steady(health.message)
    stopping = sorted(p.name for p in observed.pods.values() if p.deleting)
    if stopping:
        return a.Wait(f"going to sleep: waiting for {', '.join(stopping)} to stop")
    if not running:
        return a.RecordHibernation(
            "every member pod has stopped; the members' data stays on their PVCs", record.with_state(h.HIBERNATED)
        )
    without_chain: tuple[str, ...] = ()
    if h.writes_fenced(record, len(running)):
        waiting = _wait_for_chains(spec, record, observed, running)
        if isinstance(waiting, a.Wait):
            return waiting
        without_chain = waiting

    def stop_order(name: str) -> tuple[bool, int]:
        # Followers first, the leader last; among followers, the highest ordinal first.
        leads = observed.pods[name].member_id == health.leader_id
        return leads, -(naming.member_ordinal(observed.cluster, name) or 0)

    order = sorted(running, key=stop_order)
    if without_chain:
        return a.StopMemberForHibernation(
            f"going to sleep: stopping {order[0]}; the chains of {', '.join(without_chain)} do not hold every "
            f"acknowledged revision after spec.hibernation.snapshotTimeout",
            order[0],
            without_chain=without_chain,
        )
    return a.StopMemberForHibernation(f"going to sleep: stopping {order[0]}", order[0])


def _wait_for_chains(
    spec: ClusterSpec, record: h.HibernationRecord, observed: Observed, running: list[str]
) -> a.Wait | tuple[str, ...]:
    """Writes are fenced: a Wait until every continuous backup's chain holds the last
    revision the running members hold; once it does, (); after the timeout, the backups
    whose chains do not."""
    backups = observed.snapshot_backups
    if backups is None:
        return a.Wait("going to sleep: the EtcdBackups of this cluster were not read in this pass")
    chains = [b for b in backups if b.continuous]
    if not chains:
        return ()
    answers = [observed.etcd.statuses.get(observed.pods[name].member_id or 0) for name in running]
    unsettled = sorted(
        name
        for name, answer in zip(running, answers, strict=True)
        if answer is None or answer.raft_applied_index < answer.raft_index
    )
    final = max((answer.revision for answer in answers if answer is not None), default=0)
    if unsettled:
        pending: list[str] = [b.name for b in chains]
        why = f"{', '.join(unsettled)} to answer with every committed entry applied"
    else:
        pending = [b.name for b in chains if not h.chain_holds(record, b.chain_cluster_id, b.chain_revision, final)]
        why = f"the chains of {', '.join(pending)} to hold revision {final}"
    if not pending:
        return ()
    waited = observed.snapshot_wait_for or 0.0
    timeout = spec.hibernation.snapshot_timeout
    if waited >= timeout:
        return tuple(pending)
    return a.Wait(
        f"going to sleep: no quorum is left to acknowledge writes; waiting for {why} before "
        f"{', '.join(sorted(running))} stop ({waited:.0f}s of {timeout:.0f}s)"
    )


def _stopping(record: h.HibernationRecord) -> h.HibernationRecord:
    return record.with_state(h.STOPPING)


def _wait_for_snapshot(spec: ClusterSpec, record: h.HibernationRecord, observed: Observed) -> a.Step:
    backups = observed.snapshot_backups
    if backups is None:
        return a.Wait("going to sleep: the EtcdBackups of this cluster were not read in this pass")
    pending = sorted(b.name for b in backups if not h.snapshot_holds(record, b.cluster_id, b.revision))
    if not pending:
        taken = f"the snapshots of {', '.join(sorted(b.name for b in backups))} hold" if backups else "no EtcdBackup"
        return a.RecordHibernation(
            f"{taken} revision {record.revision}"
            + (" takes snapshots of this cluster" if not backups else "")
            + "; the members stop",
            _stopping(record),
        )
    waited = observed.snapshot_wait_for or 0.0
    timeout = spec.hibernation.snapshot_timeout
    if waited >= timeout:
        return a.RecordHibernation(
            f"no snapshot holding revision {record.revision} from {', '.join(pending)} after {waited:.0f}s "
            f"(spec.hibernation.snapshotTimeout); the members stop without it, their data kept on their PVCs",
            _stopping(record),
            without_snapshot=tuple(pending),
        )
    return a.Wait(
        f"going to sleep: waiting for {', '.join(pending)} to take a snapshot holding revision "
        f"{record.revision} ({waited:.0f}s of {timeout:.0f}s)"
    )


def _waking(status: ClusterStatus, record: h.HibernationRecord, observed: Observed, health: Health) -> a.Step:
    if record.state != h.WAKING:
        return a.RecordHibernation(
            "spec.hibernation.enabled is false: every member starts again on its PVC", record.with_state(h.WAKING)
        )
    lost = []
    for name, member_id in record.members:
        if name in observed.pods:
            continue
        pvc = observed.pvcs.get(naming.pvc_name(name))
        if pvc is None or pvc.deleting:
            lost.append(name)
            continue
        return a.CreateMemberPod(
            f"waking: {name} starts on its PVC as member {member_id:x}",
            name,
            member_id,
            self_only_cluster(status, observed, name),
            joined_before=True,
        )
    etcd = observed.etcd
    lost_note = f"; {', '.join(lost)} lost its PVC while asleep and is not started" if lost else ""
    if not health.has_quorum or not etcd.from_leader:
        return a.Wait(f"waking: waiting for a quorum of the members to answer{lost_note}")
    if etcd.cluster_id != record.cluster_id:
        return a.Wait(
            f"waking: the members answer for cluster {etcd.cluster_id or 0:x}, not the recorded "
            f"{record.cluster_id:x}; nothing more is done"
        )
    listed = frozenset(m.id for m in health.members)
    if listed != record.member_ids:
        return a.Wait(
            f"waking: the leader lists members {', '.join(sorted(f'{i:x}' for i in listed))}, not the recorded "
            f"{', '.join(sorted(f'{i:x}' for i in record.member_ids))}; nothing more is done"
        )
    return a.RecordHibernation(
        f"awake: cluster {record.cluster_id:x} with its {len(record.members)} members and a quorum{lost_note}", None
    )


def phase(spec: ClusterSpec, status: ClusterStatus) -> str | None:
    """Hibernated, Hibernating or Waking; None when the cluster is simply awake."""
    record = status.hibernation
    if record is not None and record.state == h.HIBERNATED and wanted(spec):
        return "Hibernated"
    if wanted(spec) and (record is not None or status.bootstrapped):
        return "Hibernating"
    if record is not None:
        return "Waking"
    return None


def condition(spec: ClusterSpec, status: ClusterStatus, action: a.Step) -> c.Condition:
    """Hibernated: True once no member pod runs on request; its reason says where the
    cluster is on the way (Hibernating, Waking) or why it does not sleep."""
    if spec.hibernation.enabled and spec.storage.empty_dir:
        return c.Condition("Hibernated", False, "HibernationRefused", HIBERNATION_ON_EMPTY_DIR)
    now = phase(spec, status)
    if now == "Hibernated":
        return c.Condition("Hibernated", True, "Hibernated", action.reason)
    if now is not None:
        return c.Condition("Hibernated", False, now, action.reason)
    if wanted(spec):
        return c.Condition(
            "Hibernated", False, "Hibernating", "the cluster is created first; it goes to sleep once it has served"
        )
    return c.Condition("Hibernated", False, "Awake", "")


def snapshot_backups(cluster: str, backups: Sequence[Mapping[str, Any]]) -> tuple[BackupSnapshot, ...]:
    """The EtcdBackups (as listed in the cluster's namespace) that take a snapshot of
    `cluster` before it sleeps, each with its newest full snapshot; none being deleted."""
    found = []
    for body in backups:
        spec, status = body.get("spec") or {}, body.get("status") or {}
        if (spec.get("clusterRef") or {}).get("name") != cluster or not h.takes_snapshots(spec):
            continue
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            continue
        last, chain = status.get("lastBackup") or {}, status.get("continuous") or {}
        revision, chain_revision = last.get("revision"), chain.get("lastRevision")
        found.append(
            BackupSnapshot(
                body["metadata"]["name"],
                last.get("clusterID") or None,
                None if revision is None else int(revision),
                continuous=bool((spec.get("continuous") or {}).get("enabled")),
                chain_cluster_id=chain.get("clusterID") or None,
                chain_revision=None if chain_revision is None else int(chain_revision),
            )
        )
    return tuple(sorted(found, key=lambda b: b.name))
