"""How a new cluster's members first start. Pure. The safety argument is in docs/concepts.md
("Bootstrap").

- Static bootstrap: when nothing of the cluster exists (no pod, no PVC, no member, no
  cluster ID ever recorded) and its data lives on PVCs, every member starts at once with one
  --initial-cluster naming all of them and --initial-cluster-state=new. Each PVC is created
  first, carrying that initial cluster (ANNOTATION_INITIAL_CLUSTER), then each pod.
- A member started with those flags over an empty directory becomes that member again, with
  the same ID (etcd derives it from the peer URLs and the cluster token). That is safe only
  for a member that never ran: one that ran may have voted, and would forget it. So the
  operator settles every bootstrap member it sees run (answer, or publish itself in etcd's
  member list) at once: its member ID on its PVC, its pod's flags those of a restart. A member
  with its ID recorded restarts as itself (--initial-cluster-state=existing, itself only), which etcd ignores over
  its data and refuses over an empty directory. One never seen running gets the bootstrap's
  flags again, and etcd itself refuses them when a peer lists the member as published.
- A bootstrap PVC that is missing is created again only while nothing of the bootstrap can
  have run: no pod of it exists and no PVC of it was ever bound.
- An emptyDir cluster starts one member and adds the others as learners: a restarted pod
  loses its emptyDir, and a bootstrap member could then vote twice.
"""

from __future__ import annotations

from etcd_operator.core.cluster import naming, tls_plan
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import Health
from etcd_operator.core.cluster.joining import next_ordinal
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec


def members_of(initial_cluster: str) -> tuple[str, ...]:
    """The member names an --initial-cluster value lists, in order."""
    return tuple(entry.split("=", 1)[0] for entry in initial_cluster.split(",") if "=" in entry)


def first_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> a.Step:
    """The step that creates a cluster of which nothing exists yet."""
    first = next_ordinal(observed)
    if spec.storage.empty_dir:
        return a.BootstrapFirstMember("creating the first member", naming.member_name(observed.cluster, first))
    members = tuple(naming.member_name(observed.cluster, first + i) for i in range(spec.size))
    tls = tls_plan.serves_tls_observed(status, observed)
    initial = ",".join(f"{m}={naming.peer_url(observed.cluster, observed.namespace, m, tls)}" for m in members)
    return a.BootstrapMembers(f"creating members {', '.join(members)} together", members, initial)


def _bootstrap_pvcs(observed: Observed) -> dict[str, str]:
    """The initial cluster of each PVC a bootstrap created whose member ID is not recorded."""
    return {
        pvc.name: pvc.initial_cluster
        for pvc in observed.pvcs.values()
        if pvc.initial_cluster and pvc.member_id is None and not pvc.restored
    }


def resume(observed: Observed) -> a.Step | None:
    """No member answers. While nothing of the bootstrap can have run (no pod of it, no PVC of
    it bound), all of it is started again, missing PVCs too. Otherwise each member whose pod
    is missing and that was never seen running (no member ID on its PVC) starts with the
    bootstrap's flags; a missing PVC is never created again."""
    found = _bootstrap_pvcs(observed)
    if not found:
        return None
    initials = sorted(set(found.values()))
    if len(initials) > 1:
        return a.Wait(f"the PVCs of this cluster name different initial clusters ({'; '.join(initials)}); waiting")
    initial = initials[0]
    members = members_of(initial)
    pvcs = {m: observed.pvcs.get(naming.pvc_name(m)) for m in members}
    missing = [m for m, pvc in pvcs.items() if pvc is None]
    ran = sorted({m for m in members if m in observed.pods} | {m for m, p in pvcs.items() if p is not None and p.bound})
    if missing and not ran:
        return a.BootstrapMembers(
            f"resuming the bootstrap of {', '.join(members)}: no member has run yet", members, initial
        )
    waiting = tuple(
        m
        for m, pvc in pvcs.items()
        if pvc is not None and not pvc.deleting and pvc.member_id is None and m not in observed.pods
    )
    if waiting:
        return a.BootstrapMembers(f"starting {', '.join(waiting)} of the bootstrap on their PVCs", waiting, initial)
    if missing:
        return a.Wait(
            f"the PVC of {', '.join(missing)} is gone while {', '.join(ran)} may have run: its member may have "
            f"voted on the lost volume, so it is not bootstrapped again; once the others form the cluster it is "
            f"replaced through the member API"
        )
    return None


def settle_started(observed: Observed, health: Health, names: dict[int, str | None]) -> a.Step | None:
    """The bootstrap members seen running (answering, or published in etcd's member list),
    settled at once: from then on each restarts as itself, never as bootstrapped."""
    started = tuple(
        sorted(
            (name, member.id)
            for member in health.members
            if (name := names.get(member.id))
            and (member.client_urls or health.is_healthy(member))
            and (pvc := observed.pvcs.get(naming.pvc_name(name))) is not None
            and pvc.initial_cluster
            and pvc.member_id is None
            and not pvc.deleting
        )
    )
    if not started:
        return None
    return a.SettleStartedMembers(f"{', '.join(n for n, _ in started)} ran: settling them", started)


def unsettled_member_step(observed: Observed, name: str) -> a.Step | None:
    """A bootstrap member never seen running (no member ID on its PVC) whose pod is missing
    starts with the bootstrap's flags on its PVC. etcd checks again with its peers that the
    member never published itself before it bootstraps."""
    pvc = observed.pvcs.get(naming.pvc_name(name))
    if name in observed.pods or pvc is None or pvc.deleting or pvc.member_id is not None or pvc.restored:
        return None
    if name not in members_of(pvc.initial_cluster):
        return None
    return a.BootstrapMembers(
        f"{name} has no pod and was never seen running; it starts as bootstrapped on its PVC",
        (name,),
        pvc.initial_cluster,
    )
