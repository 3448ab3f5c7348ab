"""How a cluster is created: every member at once (static), or one member and then learners.
Pure. The safety argument of each path: docs/concepts.md, "A new cluster starts all its
members at once, and never over data".

Static: etcd's own bootstrap of a new cluster. Every member's pod names all `spec.size`
members in --initial-cluster, with --initial-cluster-state=new and --initial-cluster-token
set to the EtcdCluster's uid (builders.etcd_args), so member and cluster IDs are this
object's alone. It is taken only when all of these hold (static_refusal):
- no path was recorded yet (status.bootstrap) and the cluster never served (status.clusterID):
  the path is recorded in status before anything is created (RecordBootstrap), so a
  restarted operator follows the same path with the same initial cluster;
- no PVC of the cluster exists: a PVC may hold data, and a member is never bootstrapped
  over data (such a cluster starts on its PVC as its data says, then grows with learners);
- no member pod exists and no member answers;
- no restore holds the cluster, it is not adopted and not asleep (those seed on their own).
Once recorded, every member of the initial cluster that has never started (no client URL
published in etcd's member list, no member ID on its PVC) and has no pod gets one with the
same initial cluster and state=new, in one step (BootstrapMembers): an operator killed
between two pod creations converges to the recorded cluster, never to learners. A member
that has started is like any other from then on (rejoins on its PVC, or is replaced). The
record is completed once each member of the initial cluster has started or left etcd's
member list (the leader's list).

Learners: one member with itself as the initial cluster (BootstrapFirstMember), then each
other member added as a learner and promoted. For clusters whose PVC existed before any
record, and for every member added later (scale up, replacement)."""

from __future__ import annotations

from etcd_operator.core.cluster import naming, tls_plan
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import member_name
from etcd_operator.core.cluster.joining import next_ordinal
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.recorded import BootstrapRecord, ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec

STATIC = "Static"
LEARNERS = "Learners"


def static_refusal(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> str | None:
    """Why the cluster is not created statically; None: it may be."""
    if status.bootstrap is not None:
        return f"the cluster's creation was recorded ({status.bootstrap.mode})"
    if status.bootstrapped:
        return "the cluster has served before (status.clusterID)"
    if observed.pvcs:
        return f"a PVC of the cluster exists and may hold data: {', '.join(sorted(observed.pvcs))}"
    if observed.pods:
        return "a member pod exists"
    if observed.etcd.members:
        return "a member answers"
    if observed.restoring or status.adoption is not None or spec.adoption is not None:
        return "a restore or an adoption seeds the cluster"
    if status.hibernation is not None:
        return "the cluster is asleep"
    return None


def recorded_static(status: ClusterStatus) -> bool:
    """The cluster was created statically: a PVC without a member ID is one of its members,
    never a first member to start on its own (a one-member cluster beside the others)."""
    return status.bootstrap is not None and status.bootstrap.mode == STATIC


def initial_cluster(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> str:
    """Every member of a new cluster of spec.size, at its peer URL."""
    tls = tls_plan.serves_tls_observed(status, observed)
    first = next_ordinal(observed)
    names = [naming.member_name(observed.cluster, first + i) for i in range(spec.size)]
    return ",".join(f"{n}={naming.peer_url(observed.cluster, observed.namespace, n, tls)}" for n in names)


def next_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> a.Step | None:
    """The static path's step, if it takes one now."""
    if static_refusal(spec, status, observed) is None:
        cluster = initial_cluster(spec, status, observed)
        return a.RecordBootstrap(f"creating the cluster with {spec.size} members at once", cluster)
    record = status.bootstrap
    if record is None or record.mode != STATIC or record.completed or status.hibernation is not None:
        return None
    waiting = never_started_without_pod(record, observed)
    if not waiting:
        return None
    return a.BootstrapMembers(
        f"starting {', '.join(waiting)} with the recorded initial cluster", waiting, record.initial_cluster
    )


def never_started_without_pod(record: BootstrapRecord, observed: Observed) -> tuple[str, ...]:
    """Members of the recorded initial cluster that never started and have no pod. etcd's
    member list (when one answers) shows a started member with its client URLs; a PVC shows
    one with its member ID once the member settled."""
    listed = {url: m for m in observed.etcd.members for url in m.peer_urls}
    waiting = []
    for name in record.members:
        member = listed.get(record.peer_url(name) or "")
        if observed.etcd.members and member is None:
            continue  # removed from the cluster since
        if member is not None and member.client_urls:
            continue  # started: rejoins on its PVC or is replaced, as any member
        pvc = observed.pvcs.get(naming.pvc_name(name))
        if name in observed.pods or (pvc is not None and (pvc.deleting or pvc.member_id is not None or pvc.restored)):
            continue
        waiting.append(name)
    return tuple(waiting)


def next_record(status: ClusterStatus, observed: Observed, action: a.Step) -> BootstrapRecord | None:
    """status.bootstrap after this pass (before the step's own record): a static record is
    completed once the leader's member list shows each of its members started or gone; the
    learner path is recorded with the first member. A restore's hold drops it: the restored
    cluster is another one, seeded by the restore."""
    record = status.bootstrap
    if observed.restoring:
        return None
    if record is None:
        return BootstrapRecord(LEARNERS) if isinstance(action, a.BootstrapFirstMember) else None
    if record.mode != STATIC or record.completed or not observed.etcd.from_leader:
        return record
    started = {member_name(observed, m) for m in observed.etcd.members if m.client_urls}
    listed = {member_name(observed, m) for m in observed.etcd.members}
    if all(name in started or name not in listed for name in record.members):
        return BootstrapRecord(record.mode, record.initial_cluster, completed=True)
    return record
