"""An in-place EtcdRestore acting beside the cluster's controller in the simulated world: the
REAL restore planner (restore.planner.plan, looked up on its module so that mutants can patch
it) decides on a copy of the EtcdCluster that may miss what the cluster's controller wrote
during the restore's pass (its GET came first; never older than the restore's previous pass),
and on a copy of its own status that may be some passes old; its steps are carried out here
against the world, as restore/executor.py does them against the API server (with its live
fence before a create, restore.fence, looked up on its module so that mutants can patch it).

Restore pods are not run: a restore pod succeeds at the restore's next pass and leaves on its
member's PVC the data `etcdutl snapshot restore` writes (a new cluster ID, every member named,
the snapshot's revision)."""

from __future__ import annotations

import collections
import dataclasses

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.observed import Member
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.restore import builders
from etcd_operator.core.restore import fence as restore_fence
from etcd_operator.core.restore import planner as restore_planner
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.observed import ObjectState, Observed, TargetCluster, parse_records
from etcd_operator.core.restore.spec import TERMINAL_PHASES, RestoreSpec, RestoreStatus
from etcd_operator.core.restore.status import build_status
from etcd_operator.core.status_patch import changed_fields as changed
from etcd_operator.core.timefmt import format_time
from tests.sim import invariants as inv
from tests.sim.world import CLUSTER, NAMESPACE, PVC, Data, Group, World, client_url, peer_url

NAME, UID = "r1", "uid-r1"
CLUSTER_UID = "uid-cluster"
SNAPSHOT_REVISION = 10_000
SPEC = RestoreSpec.from_dict({"source": {"backupRef": {"name": "b1"}}, "target": {"inPlace": {"clusterName": CLUSTER}}})
VERIFIED = (
    ("sha256", "ab" * 32),
    ("snapshotEtcdVersion", "3.6.0"),
    ("sourceKey", "b1/snap.db"),
    ("restoredRevision", SNAPSHOT_REVISION),
    ("snapshotSize", 4096),
)
# Steps that change the target's members or data: each needs the cluster's acknowledgement first.
TOUCHING = (s.StopMembers, s.SetAsideData, s.CreateSeedVolumes, s.StartSeedPods, s.ClearQuorumRecovery)


@dataclasses.dataclass(frozen=True)
class ClusterCopy:
    """The EtcdCluster object as one GET or watch event showed it."""

    annotations: dict
    status: dict
    spec: dict
    deleting: bool = False  # metadata.deletionTimestamp is set


@dataclasses.dataclass
class SeedPod:
    name: str
    uid: str
    member: str
    phase: str = "Pending"
    deleting: bool = False


class RestoreActor:
    def __init__(self, world: World):
        self.world = world
        self.status: dict = {}
        self.own_copies: collections.deque = collections.deque(maxlen=4)  # its own status, as past passes saw it
        self.seed_of: dict[str, str] = {}  # PVC name -> uid of the restore that created it
        self.restored_by: dict[str, str] = {}
        self.seed_pods: dict[str, SeedPod] = {}
        self.restored_group: Group | None = None
        self.last_step: s.Step | None = None
        self.stale_own = 0  # passes that decided on an old copy of the restore's own status
        self.stale_cluster = 0  # passes that decided on an old copy of the EtcdCluster
        self.steps = collections.Counter()
        self.failed: str | None = None  # the code of the Fail step that ended the restore
        self.decided_on_deletion = False  # the last pass's copy of the cluster showed its deletionTimestamp
        self.preserved_uids: set[str] = set()  # PVCs it set aside (labelled preserved-from the cluster)
        self.pass_stats = collections.Counter()  # what the last pass met, for the coverage table
        self.refusal: str | None = None  # why the last pass's executor created nothing (the live fence)

    @property
    def done(self) -> bool:
        return self.status.get("phase") in TERMINAL_PHASES

    # --- what one pass sees ----------------------------------------------------------------

    def observe(self, copy: ClusterCopy | None) -> Observed:
        world = self.world
        if copy is None:  # the EtcdCluster is gone
            return Observed(NAMESPACE, NAME, UID, 1, None)
        annotations, status = copy.annotations, copy.status
        ack = status.get("restoreHold") or {}
        available = any(
            c.get("type") == "Available" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        cluster = TargetCluster(
            name=CLUSTER,
            uid=CLUSTER_UID,
            resource_version="1",
            spec=ClusterSpec.from_dict(copy.spec),
            spec_error=None,
            holder=annotations.get(naming.ANNOTATION_RESTORE_IN_PROGRESS),
            hold_uid=annotations.get(naming.ANNOTATION_RESTORE_HOLD),
            hold_ack=(ack["restore"], ack.get("uid") or "") if ack.get("restore") else None,
            records=parse_records(annotations.get(builders.ANNOTATION_RESTORED_FROM)),
            records_error=None,
            operation=(status.get("operation") or {}).get("kind"),
            recovery_approved=annotations.get(naming.ANNOTATION_APPROVE_QUORUM_RECOVERY) == "true",
            min_ordinal=naming.min_ordinal(annotations)[0],
            phase=status.get("phase"),
            available=available,
            ready_members=int(status.get("readyMembers") or 0),
            cluster_id=status.get("clusterID"),
            deleting=copy.deleting,
        )
        pods = tuple(
            ObjectState("Pod", p.name, p.uid, p.deleting, p.phase)
            for p in sorted(world.pods.values(), key=lambda p: p.name)
        )
        pvcs = tuple(self._pvc_state(p) for p in sorted(world.pvcs.values(), key=lambda p: p.name))
        seeds = {naming.pvc_name(m) for m in RestoreStatus.from_dict(self.status).seed_members}
        # By name: a PVC set aside keeps its name (only its labels change).
        seed_pvcs = tuple(self._pvc_state(p) for p in (*world.pvcs.values(), *world.set_aside) if p.name in seeds)
        seed_pods = tuple(
            ObjectState(
                "Pod",
                p.name,
                p.uid,
                p.deleting,
                p.phase,
                labels=((builders.LABEL_RESTORE_MEMBER, p.member),),
                owner_uids=(UID,),
            )
            for p in self.seed_pods.values()
        )
        preserved = tuple(
            ObjectState(
                "PersistentVolumeClaim",
                p.name,
                p.uid,
                p.deleting,
                labels=((builders.LABEL_PRESERVED_BY, NAME), (builders.LABEL_PRESERVED_FROM, CLUSTER)),
            )
            for p in world.set_aside
            if p.uid in self.preserved_uids
        )
        return Observed(
            NAMESPACE,
            NAME,
            UID,
            1,
            cluster,
            pods=pods,
            pvcs=pvcs,
            preserved_pvcs=preserved,
            seed_pvcs=seed_pvcs,
            seed_pods=seed_pods,
        )

    def _pvc_state(self, pvc: PVC) -> ObjectState:
        annotations = tuple(
            (k, v)
            for k, v in (
                (builders.ANNOTATION_SEED_OF, self.seed_of.get(pvc.name)),
                (builders.ANNOTATION_RESTORED_BY, self.restored_by.get(pvc.name)),
            )
            if v is not None
        )
        return ObjectState("PersistentVolumeClaim", pvc.name, pvc.uid, pvc.deleting, annotations=annotations)

    # --- one pass --------------------------------------------------------------------------

    def act(
        self, sim, copy: ClusterCopy | None, own: dict, hold_acknowledged: bool, cluster_deleting: bool = False
    ) -> s.Step:
        """One pass on `copy` of the cluster and `own` (a copy of its status); `sim` holds the
        live EtcdCluster (annotations, status). Returns the step taken."""
        self._finish_seed_pods()
        self.pass_stats, self.refusal = collections.Counter(), None
        observed = self.observe(copy)
        self.decided_on_deletion = copy is not None and copy.deleting
        status = RestoreStatus.from_dict(own)
        step = restore_planner.plan(SPEC, status, observed, self.world.now)
        self.last_step = step
        if isinstance(step, s.Fail):
            self.failed = step.code
        if isinstance(step, TOUCHING):
            inv.restore_waits_for_hold_ack(step.kind, hold_acknowledged)
        if isinstance(step, s.ChooseMembers) and {p.name for p in observed.preserved_pvcs} - set(status.preserved):
            self.pass_stats["members_chosen_on_a_copy_without_the_set_aside_data"] += 1
        outcome = self._carry_out(sim, step, observed, cluster_deleting)
        if outcome.done and not isinstance(step, (s.Wait, s.Idle)):
            self.steps[step.kind] += 1
        new = build_status(own, step, outcome, 1, format_time(self.world.now))
        self.status = {**self.status, **changed(own, new)}  # the status patch: what differs from its copy
        self.own_copies.append(dict(self.status))
        return step

    def _live_cluster(self, sim, deleting: bool) -> dict | None:
        """The EtcdCluster as a GET now returns it (the executor's fence reads this)."""
        if sim.cluster_gone():
            return None
        marks = {"deletionTimestamp": "2026-11-26T00:00:00Z"} if deleting else {}
        return {"metadata": {"name": CLUSTER, "uid": CLUSTER_UID, **marks}}

    def _created(self, step: s.Step, cluster_deleting: bool) -> None:
        """One object created for the cluster, as the API server accepts it."""
        inv.nothing_created_for_an_object_being_deleted(step.kind, "EtcdCluster " + CLUSTER, cluster_deleting)

    def _carry_out(self, sim, step: s.Step, observed: Observed, cluster_deleting: bool) -> s.Outcome:
        world = self.world
        if isinstance(step, (s.CreateSeedVolumes, s.StartSeedPods)):
            # restore/executor.py reads the live target right before each create.
            refusal = restore_fence.creation_refusal(observed.cluster, self._live_cluster(sim, cluster_deleting))
            if refusal:
                self.pass_stats["create_refused_by_the_live_target"] += 1
                self.refusal = refusal
                return s.Outcome(False, refusal)
        if isinstance(step, s.VerifySnapshot):
            return s.Outcome(facts=VERIFIED)
        if isinstance(step, s.HoldCluster):
            sim.annotations[naming.ANNOTATION_RESTORE_IN_PROGRESS] = NAME
            sim.annotations[naming.ANNOTATION_RESTORE_HOLD] = UID
        elif isinstance(step, s.ClearQuorumRecovery):
            if step.clear_operation:
                sim.status = {k: v for k, v in sim.status.items() if k != "operation"}
            if step.clear_approval:
                sim.annotations.pop(naming.ANNOTATION_APPROVE_QUORUM_RECOVERY, None)
        elif isinstance(step, s.StopMembers):
            for name, uid in step.pods:
                pod = world.pods.get(name)
                if pod is not None and pod.uid == uid:
                    world.delete_pod(pod)
        elif isinstance(step, s.SetAsideData):
            for name, uid in step.pvcs:
                pvc = world.pvcs.get(name)
                if pvc is not None and pvc.uid == uid:
                    world.set_aside_pvc(pvc)
                    self.preserved_uids.add(pvc.uid)
        elif isinstance(step, s.ChooseMembers):
            sim.annotations[naming.ANNOTATION_MIN_ORDINAL] = str(step.min_ordinal)
        elif isinstance(step, s.CreateSeedVolumes):
            for member in step.members:
                name = naming.pvc_name(member)
                taken = name in world.pvcs or any(p.name == name for p in world.set_aside)
                if not taken:  # a Conflict is left for the next pass to look at
                    self._created(step, cluster_deleting)
                    world.pvcs[name] = PVC(name, world.uid("pvc"), None)
                    self.seed_of[name] = UID
        elif isinstance(step, s.StartSeedPods):
            for member in step.members:
                if member not in self.seed_pods:
                    self._created(step, cluster_deleting)
                    self.seed_pods[member] = SeedPod(f"{member}-restore", world.uid("seedpod"), member)
        elif isinstance(step, s.MarkSeedsRestored):
            for name in step.pvcs:
                self.restored_by[name] = UID
                world.pvcs[name].restored = True
        elif isinstance(step, s.RemoveSeedPods):
            for name, _ in step.pods:
                self.seed_pods = {m: p for m, p in self.seed_pods.items() if p.name != name}
        elif isinstance(step, s.ReleaseCluster):
            sim.annotations.pop(naming.ANNOTATION_RESTORE_IN_PROGRESS, None)
            sim.annotations.pop(naming.ANNOTATION_RESTORE_HOLD, None)
            sim.annotations[builders.ANNOTATION_RESTORED_FROM] = step.records
        return s.Outcome()

    def _finish_seed_pods(self) -> None:
        """Each restore pod started before this pass has written its member's data directory."""
        members = RestoreStatus.from_dict(self.status).seed_members
        for pod in self.seed_pods.values():
            if pod.phase != "Pending":
                continue
            pvc = self.world.pvcs.get(naming.pvc_name(pod.member))
            if pvc is None or pvc.deleting:
                pod.phase = "Failed"
                continue
            group = self._restored(members)
            member = next(m for m in group.members if m.name == pod.member)
            pvc.data = Data(
                group.cluster_id, group.lineage, member.id, SNAPSHOT_REVISION, SNAPSHOT_REVISION, group.members
            )
            pod.phase = "Succeeded"

    def _restored(self, members: tuple[str, ...]) -> Group:
        """The raft group `etcdutl snapshot restore` writes: one for all members (same token)."""
        world = self.world
        if self.restored_group is None:
            started = tuple(Member(world.new_member_id(), m, (peer_url(m),), (client_url(m),), False) for m in members)
            group = Group(
                world.rng.randint(1, 2**63),
                world._new_lineage(),
                started,
                SNAPSHOT_REVISION,
                SNAPSHOT_REVISION,
                world.now,
            )
            world.groups[group.lineage] = group
            world.main_lineage = group.lineage
            self.restored_group = group
        return self.restored_group
