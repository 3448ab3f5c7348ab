"""Runs one fault schedule: the real pure pass (carry_timers -> decision.plan -> build_status)
against the model, its action applied through the model executor, invariants checked
after every step. Deterministic for a seed."""

from __future__ import annotations

import collections
import dataclasses
import random

from etcd_operator.core.cluster import admission, builders, naming, pacing
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.decision import plan
from etcd_operator.core.cluster.observed import Member
from etcd_operator.core.cluster.recorded import ClusterStatus, RollRecord
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.cluster.status import build_status
from etcd_operator.core.cluster.timers import Sightings
from etcd_operator.core.timefmt import parse_time
from tests.sim import backup_model, effects, findings
from tests.sim import invariants as inv
from tests.sim.backup_actor import BackupActor
from tests.sim.restore_model import NAME as RESTORE_NAME
from tests.sim.restore_model import UID as RESTORE_UID
from tests.sim.restore_model import ClusterCopy, RestoreActor
from tests.sim.view import observe
from tests.sim.world import (
    CLUSTER,
    MISSING_PRIORITY_CLASS,
    PVC,
    Data,
    Foreign,
    Group,
    Pod,
    World,
    client_url,
    merge_patch,
    peer_url,
)

MAX_SKEW = 8.0
SETTLE_STEPS = 150  # passes allowed after the last fault; converging schedules need at most ~75
REPLAY_LINES = 30
WAITING_PASSES = 12  # passes spent waiting by design (QuorumLost, no approval) before the schedule ends
# Families: "main", "stale_replica", and "focus:<fault>+<fault>" (those faults ten times as
# likely, automatic recovery on: used to hunt mutants of the guards those faults exercise).
FAMILIES = ("main", "stale_replica", "restore_hold", "refused_pod", "restore_race", "backup_race")
# Family "restore_hold": an EtcdRestore holds the cluster for a while; the hold lands while a
# pass decides, so that pass acts on a view without it (issue 25).
RESTORE_HOLD = "restore_hold"
HOLD_WEIGHT = 8
HOLD_STEPS = (1, 1)  # released before the next pass: the restore was deleted before any acknowledgement
FOCUS = "focus:"
# Family "restore_race": an in-place EtcdRestore (the real restore planner, restore_model.py)
# acts beside the cluster's controller from a random pass on; each decides now and then on an
# old copy of the EtcdCluster (the cluster's controller some passes old, the restore's GET
# without the cluster pass of the same step) and the restore on a copy of its own status
# some passes old.
RESTORE_RACE = "restore_race"
OLD_COPY_CHANCE = 0.3
OLD_COPY_PASSES = (1, 3)
# A deletion cascade in a quarter of its schedules: the EtcdCluster gets a deletionTimestamp
# while the restore is under way; its controller takes no more passes (reconciler.being_deleted),
# the garbage collector deletes its pods, and the object goes some passes later (its finalizer).
CLUSTER_DELETED_CHANCE = 0.25
CLUSTER_DELETED_AFTER = (1, 15)  # passes after the restore began
CLUSTER_GONE_AFTER = (1, 4)  # passes the object stays with its deletionTimestamp
# Family "backup_race": an EtcdBackup (scheduled, or one-shot) whose controller (the real
# backup planner, backup_actor.py) takes a pass after each of the cluster's, with the operator's
# downtime and standby takeovers (a wall-clock gap, a skewed clock, status from before), old
# copies of the EtcdCluster, and in some schedules an in-place restore beside it, the backup,
# the cluster or the whole namespace deleted.
BACKUP_RACE = "backup_race"
BACKUP_RESTORE_CHANCE = 0.25
BACKUP_STANDBY_WEIGHT = 6
BACKUP_DELETED_CHANCE, BACKUP_CLUSTER_DELETED_CHANCE, NAMESPACE_DELETED_CHANCE = 0.15, 0.12, 0.08
BACKUP_DELETED_AT = (3, 50)
BACKUP_GONE_AFTER = (5, 25)  # passes an object stays with its deletionTimestamp (finalizers)
DELETION_MID_PASS = 0.5
MID_PASS_WAIT = 15  # passes a deletion waits to land while a pass decides to create
BACKUP_PASSES = 30  # passes after the faults before a converged schedule may end: several slots run

# Seconds until the next pass, as the reconciler requeues (cluster/reconciler.py), and
# sooner while a member is added or removed (cluster/pacing.py).
AFTER_STEP, NOT_YET, WHILE_WAITING, WHEN_STEADY = 1.0, 1.0, 3.0, 15.0

FAULT_WEIGHTS = {
    "kill_member": 8,
    "crash_loop": 4,
    "delete_pod": 5,
    "evict_pod": 3,
    "lose_data": 3,
    "partition": 6,
    "nospace": 4,
    "corrupt": 1,
    "resize": 7,
    "version": 4,
    "bad_image": 2,
    "operator_kill": 5,
    "clock_skew": 3,
    "foreign_etcd": 3,
    "approve": 1,
    "fragment": 2,
    "isolate_member": 4,
    "operator_down": 2,
    "standby_takeover": 2,
    # Last, at weight 0 in the main family, so that its schedules draw exactly as before; the
    # refused_pod family gives it a weight.
    "refused_pod_spec": 0,
}
REFUSED_POD_WEIGHT = 6
NEW_PROCESS_FAULTS = ("operator_down", "standby_takeover")
OPERATOR_DOWN_SECONDS = (20.0, 240.0)
DOWN_TICK = 2.0  # the world advances in these steps while no operator runs
STANDBY_CLOCK_ERROR = (-60.0, 600.0)  # a standby's wall clock, against the true time
PROCESS_CLOCK_ORIGIN = 1000.0  # a process's monotonic clock when it starts (the node's uptime)


def status_unhealthy_for(status: dict, now: float) -> dict:
    """How long status.members[].unhealthySince says each member has been unhealthy, read on
    a clock showing `now`."""
    found = {}
    for member in status.get("members") or []:
        since = parse_time(member.get("unhealthySince"))
        if since is not None:
            found[member.get("name")] = now - since
    return found


def base_spec(size: int, auto_recovery: bool) -> dict:
    return {
        "size": size,
        "version": "3.6.16",
        "recovery": {
            "memberUnhealthyTimeout": "60s",
            "quorumLossTimeout": "30s",
            "automaticQuorumRecovery": auto_recovery,
        },
        "maintenance": {"defragmentation": {"enabled": True, "minFragmentedBytes": 500, "minFragmentedRatio": 0.3}},
    }


@dataclasses.dataclass
class Result:
    seed: int
    family: str
    violation: inv.Violation | None
    finding: str | None
    faults: list
    replay: list
    steps: int
    actions: collections.Counter
    stats: collections.Counter

    def report(self) -> str:
        lines = [
            f"seed {self.seed} family {self.family}: {self.violation}"
            + (f" [known finding: {self.finding}]" if self.finding else "")
        ]
        lines.append("faults: " + "; ".join(f"#{s} {f}" for s, f in self.faults) or "faults: none")
        lines.append(f"last {len(self.replay)} passes (step t actor | health members | action -> outcome):")
        lines += [f"  {line}" for line in self.replay]
        lines.append(
            f"re-run: SIM_SEED={self.seed} SIM_FAMILY={self.family} .venv/bin/python -m pytest tests/sim -k replay -q"
        )
        return "\n".join(lines)


@dataclasses.dataclass
class Replica:
    """One operator process: what it last wrote and what it will do when killed."""

    name: str
    started_at: float  # true time
    clock_error: float = 0.0  # its wall clock against the true time, before any clock_skew step
    kill_pending: bool = False
    sightings: Sightings = Sightings()  # the operator's memory (ClusterObserver.sightings): lost with the process
    admissions: dict = dataclasses.field(default_factory=dict)  # ClusterObserver.admissions: lost with it too
    # Model truth about this process, for the invariant (not the operator's memory): member id
    # -> the true time since which every pass of this process has shown the member unhealthy.
    saw_unhealthy_since: dict = dataclasses.field(default_factory=dict)

    def saw(self, observed, now: float) -> None:
        """Records one pass's observation: a member in the member list that does not answer
        with a leader is unhealthy; anything else ends the run of unhealthy sightings."""
        seen = {}
        for member in observed.etcd.members:
            status = observed.etcd.statuses.get(member.id)
            if status is None or status.leader_id == 0:
                seen[member.id] = self.saw_unhealthy_since.get(member.id, now)
        self.saw_unhealthy_since = seen

    def monotonic(self, now: float) -> float:
        """The process's monotonic clock: it runs with the true time from an origin of its own."""
        return now - self.started_at + PROCESS_CLOCK_ORIGIN

    def unhealthy_for(self, now: float) -> dict:
        return {member_id: now - since for member_id, since in self.saw_unhealthy_since.items()}


class Sim:
    def __init__(self, seed: int, family: str = "main", patches=None):
        self.seed = seed
        self.family = family
        self.rng = random.Random(seed)
        rng = self.rng
        self.world = World(rng)
        size = rng.choice((1, 2, 3, 3, 3, 4, 5, 5))
        self.auto_recovery = rng.random() < 0.35
        self.weights = dict(FAULT_WEIGHTS)
        focused = family.removeprefix(FOCUS).split("+") if family.startswith(FOCUS) else []
        for kind in focused:
            self.weights[kind] *= 10
        if family not in ("main", BACKUP_RACE):
            for kind in set(NEW_PROCESS_FAULTS) - set(focused):
                # A new operator process only restarts its timers, which the main family covers.
                # Weight 0 draws exactly as before, so the other families keep their schedules
                # (and the rare seeds that kill the mutants hunted in focus families).
                self.weights[kind] = 0
        if focused:
            self.auto_recovery = True
        if family == RESTORE_HOLD:
            self.weights["restore_hold"] = HOLD_WEIGHT  # a key the other families lack: their draws stay
        self.hold_until: int | None = None
        self.hold_mid_pass = False
        if family == BACKUP_RACE:
            self.weights["standby_takeover"] = BACKUP_STANDBY_WEIGHT  # clocks that disagree write its manifests
        if family == "refused_pod":
            self.weights["refused_pod_spec"] = REFUSED_POD_WEIGHT
        self.spec_dict = base_spec(size, self.auto_recovery)
        self.annotations: dict[str, str] = {}
        self.generation = 1
        self._spec_cache: ClusterSpec | None = None
        self.status: dict = {}
        self.skew = 0.0
        self.unreachable: dict[str, int] = {}  # pod name -> last step it stays unreachable
        self.fault_steps = rng.randint(8, 45)
        self.fault_rate = rng.uniform(0.15, 0.5)
        self.faults: list[tuple[int, str]] = []
        self.replay: collections.deque = collections.deque(maxlen=REPLAY_LINES)
        self.actions: collections.Counter = collections.Counter()
        self.stats: collections.Counter = collections.Counter()
        self.operator = Replica("op", self.world.now)
        self.status_unhealthy_for: dict = {}  # by member name, as status showed it before the last step
        self.history: collections.deque = collections.deque(
            maxlen=6
        )  # (recorded, observed, now, status, spec) of past passes
        self.stale_until = -1
        self.stale_lag = 0
        self.stale_status: dict | None = None
        self.bad_image_revert_at: int | None = None
        self.refused_pod_revert_at: int | None = None
        self.step = 0
        self.last_decision = None
        self.last_outcome = None
        self._hash_of = (None, "")
        self.lost_timer_reset = False
        self.stale_acted = False  # the stale replica changed something (or wrote an operation)
        if rng.random() < 0.15:
            pass  # start from nothing: the operator bootstraps
        else:
            self._build_healthy(size)
        if family == "stale_replica":
            self.stale_start = rng.randint(1, max(1, self.fault_steps - 3))
        else:
            self.stale_start = None
        self.restore: RestoreActor | None = None
        self.restore_at = rng.randint(1, self.fault_steps) if family == RESTORE_RACE else None
        self.copies: collections.deque = collections.deque(maxlen=OLD_COPY_PASSES[1] + 1)  # ClusterCopy per pass
        self.hold_acknowledged = False  # a status write of a pass that saw the restore's hold
        self.cluster_deleted_at: int | None = None  # the step the EtcdCluster got its deletionTimestamp
        self.cluster_gone_at: int | None = None  # ... and the step it is gone
        if self.restore_at is not None:
            deletion = random.Random(f"deletion {seed}")  # its own draws: the other schedules stay as they were
            if deletion.random() < CLUSTER_DELETED_CHANCE:
                self.cluster_deleted_at = self.restore_at + deletion.randint(*CLUSTER_DELETED_AFTER)
                self.cluster_gone_at = self.cluster_deleted_at + deletion.randint(*CLUSTER_GONE_AFTER)
        self.backup: BackupActor | None = None
        self.backup_deleted_at = self.backup_gone_at = None
        if family == BACKUP_RACE:
            self._set_up_backup(seed)

    # --- set-up -----------------------------------------------------------------------------

    def _set_up_backup(self, seed: int) -> None:
        self.backup = BackupActor(self, seed)
        draws = random.Random(f"backup faults {seed}")  # its own draws
        if draws.random() < BACKUP_RESTORE_CHANCE:
            self.restore_at = draws.randint(1, self.fault_steps)
        deletion = draws.random()
        at = draws.randint(*BACKUP_DELETED_AT)
        if deletion < NAMESPACE_DELETED_CHANCE:  # everything in it gets a deletionTimestamp at once
            self.backup.namespace_terminating = True
            self.backup_deleted_at = self.cluster_deleted_at = at
            self.cluster_gone_at = at + draws.randint(*BACKUP_GONE_AFTER)
            self.backup_gone_at = at + draws.randint(*BACKUP_GONE_AFTER)
        elif deletion < NAMESPACE_DELETED_CHANCE + BACKUP_DELETED_CHANCE:
            self.backup_deleted_at = at
            self.backup_gone_at = at + draws.randint(*BACKUP_GONE_AFTER)
        elif deletion < NAMESPACE_DELETED_CHANCE + BACKUP_DELETED_CHANCE + BACKUP_CLUSTER_DELETED_CHANCE:
            self.cluster_deleted_at = at
            self.cluster_gone_at = at + draws.randint(*BACKUP_GONE_AFTER)

    def backup_pass(self) -> None:
        """The EtcdBackup's controller takes one pass (backup_race), at the operator's wall clock."""
        backup = self.backup
        if self.step == self.backup_deleted_at:
            self.stats["backup_deleted"] += 1
            if not backup.namespace_terminating and backup.rng.random() < DELETION_MID_PASS:
                backup.deletion_mid_pass = True  # lands after the GET of a pass that decides to create
            else:
                backup.deleting = True
                self.faults.append(
                    (
                        self.step,
                        "EtcdBackup deleted"
                        + (" (the namespace is terminating)" if backup.namespace_terminating else ""),
                    )
                )
        elif backup.deletion_mid_pass and self.step >= self.backup_deleted_at + MID_PASS_WAIT:
            backup.deleting, backup.deletion_mid_pass = True, False
        if self.backup_gone_at is not None and self.step >= self.backup_gone_at:
            backup.gone, backup.scratch_pod = True, None  # the garbage collector takes its scratch pod
            return
        copy = None if self.cluster_gone() else self.cluster_copy(for_restore=True)
        backup.act(self.world.now + self.skew, copy)

    @property
    def spec(self) -> ClusterSpec:
        if self._spec_cache is None:
            self._spec_cache = ClusterSpec.from_dict(self.spec_dict)
        return self._spec_cache

    def _change_spec(self, **changes) -> None:
        self.spec_dict = {**self.spec_dict, **changes}
        self._spec_cache = None
        self.generation += 1

    @property
    def recovery_allowed(self) -> bool:
        return self.auto_recovery or self.annotations.get(naming.ANNOTATION_APPROVE_QUORUM_RECOVERY) == "true"

    def _build_healthy(self, size: int) -> None:
        """A settled cluster of `size` members, as the operator leaves it."""
        w, spec = self.world, self.spec
        lineage = w._new_lineage()
        cluster_id = w.rng.randint(1, 2**63)
        names = [naming.member_name(CLUSTER, i) for i in range(size)]
        members = tuple(Member(w.new_member_id(), n, (peer_url(n),), (client_url(n),), False) for n in names)
        applied = w.rng.randint(50, 500)
        group = Group(cluster_id, lineage, members, applied, applied, w.now)
        w.groups[lineage] = group
        w.main_lineage = lineage
        for m, n in zip(members, names, strict=True):
            pvc = PVC(naming.pvc_name(n), w.uid("pvc"), m.id)
            pvc.data = Data(cluster_id, lineage, m.id, applied, applied, members)
            w.pvcs[pvc.name] = pvc
            pod = Pod(
                n,
                w.uid("pod"),
                m.id,
                builders.pod_spec_hash(spec),
                "existing",
                f"{n}={peer_url(n)}",
                False,
                spec.version,
                False,
            )
            pod.ip, pod.phase, pod.up, pod.up_since, pod.waiting = w.allocate_ip(), "Running", True, w.now - 60, None
            w.pods[n] = pod
        group.leader = w.rng.choice(members).id
        self.status = {"clusterID": f"{cluster_id:x}", "rollout": RollRecord(last_good_spec=self.spec_dict).to_dict()}

    # --- faults -----------------------------------------------------------------------------

    def _log(self, text: str) -> None:
        self.faults.append((self.step, text))
        self.stats[f"fault:{text.split()[0]}"] += 1

    def inject_faults(self) -> None:
        rng = self.rng
        if self.hold_until is not None and self.step >= self.hold_until:
            self.annotations.pop(naming.ANNOTATION_RESTORE_IN_PROGRESS, None)
            self.annotations.pop(naming.ANNOTATION_RESTORE_HOLD, None)
            self.hold_until = None
            self._log("restore_hold released")
        if self.refused_pod_revert_at is not None and self.step >= self.refused_pod_revert_at:
            self._change_spec()
            self.spec_dict.pop("pod", None)
            self.refused_pod_revert_at = None
            self._log("refused_pod_spec reverted")
        if self.bad_image_revert_at is not None and self.step >= self.bad_image_revert_at:
            self._change_spec(repository=None)
            self.spec_dict.pop("repository", None)
            self.bad_image_revert_at = None
            self._log("bad_image reverted")
        if self.step == self.fault_steps:
            self._end_faults()
        if self.step >= self.fault_steps or rng.random() >= self.fault_rate:
            return
        kind = rng.choices(list(self.weights), weights=list(self.weights.values()))[0]
        getattr(self, f"_fault_{kind}")()

    def _end_faults(self) -> None:
        """Faults stop: alarms are disarmed (a person freed space or repaired the data)."""
        for group in self.world.groups.values():
            if group.alarms:
                self._log(f"alarms {','.join(sorted(group.alarms))} disarmed")
                group.alarms.clear()

    def _some_pod(self, running: bool = False):
        pods = [p for p in self.world.pods.values() if not p.deleting and (not running or p.up)]
        return self.rng.choice(sorted(pods, key=lambda p: p.name)) if pods else None

    def _fault_kill_member(self):
        main = self.world.main
        leader = inv.true_leader_pod(self.world)
        pod = self.world.pods.get(leader) if leader and self.rng.random() < 0.4 else self._some_pod(running=True)
        if pod:
            self.world.stop_process(pod)
            self._log(f"kill_member {pod.name}{' (leader)' if main and pod.name == leader else ''}")

    def _fault_crash_loop(self):
        pod = self._some_pod()
        if pod:
            length = self.rng.uniform(10, 120)
            pod.crash_until = self.world.now + length
            self.world.stop_process(pod)
            self._log(f"crash_loop {pod.name} for {length:.0f}s")

    def _fault_delete_pod(self):
        pod = self._some_pod()
        if pod:
            self.world.delete_pod(pod, graceful=False)
            self._log(f"delete_pod {pod.name}")

    def _fault_evict_pod(self):
        pod = self._some_pod()
        if pod and pod.phase != "Failed":
            self.world.stop_process(pod)
            pod.phase, pod.waiting = "Failed", None
            self.world.release_ip(pod)  # the Failed pod keeps showing the address
            self._log(f"evict_pod {pod.name}")

    def _fault_lose_data(self):
        pvcs = sorted((p for p in self.world.pvcs.values() if p.data is not None), key=lambda p: p.name)
        if pvcs:
            pvc = self.rng.choice(pvcs)
            pvc.data = None
            pod = self.world.pods.get(naming.pvc_member(pvc.name))
            if pod:
                self.world.stop_process(pod)
            self._log(f"lose_data {pvc.name}")

    def _fault_partition(self):
        names = sorted(self.world.pods)
        if names:
            cut = self.rng.sample(names, self.rng.randint(1, len(names)))
            until = self.step + self.rng.randint(1, 20)
            for n in cut:
                self.unreachable[n] = until
            self._log(f"partition operator from {','.join(cut)} until #{until}")

    def _fault_isolate_member(self):
        """A network partition between one member and its peers; the operator may still reach it."""
        pod = self._some_pod(running=True)
        if pod:
            length = self.rng.uniform(5, 90)
            pod.isolated_until = self.world.now + length
            self._log(f"isolate_member {pod.name} from its peers for {length:.0f}s")

    def _toggle_alarm(self, alarm: str) -> None:
        main = self.world.main
        if main is None:
            return
        if alarm in main.alarms:
            main.alarms.discard(alarm)
            self._log(f"{alarm.lower()} cleared")
        else:
            main.alarms.add(alarm)
            self._log(f"{alarm.lower()} raised")

    def _fault_nospace(self):
        self._toggle_alarm("NOSPACE")

    def _fault_corrupt(self):
        self._toggle_alarm("CORRUPT")

    def _fault_resize(self):
        size = self.rng.randint(1, 7)
        self._change_spec(size=size)
        self._log(f"resize to {size}")

    def _fault_version(self):
        version = "3.6.17" if self.spec_dict["version"] == "3.6.16" else "3.6.16"
        self._change_spec(version=version)
        self._log(f"version {version}")

    def _fault_bad_image(self):
        if self.bad_image_revert_at is None:
            self._change_spec(repository=effects.BAD_REPOSITORY)
            self.bad_image_revert_at = min(self.step + self.rng.randint(2, 15), self.fault_steps)
            self._log(f"bad_image until #{self.bad_image_revert_at}")

    def _fault_refused_pod_spec(self):
        """spec.pod names a PriorityClass that does not exist: the CRD accepts it, the API
        server refuses every member pod built from it, until the spec is reverted."""
        if self.refused_pod_revert_at is None:
            self._change_spec(pod={"priorityClassName": MISSING_PRIORITY_CLASS})
            self.refused_pod_revert_at = min(self.step + self.rng.randint(5, 30), self.fault_steps)
            self._log(f"refused_pod_spec until #{self.refused_pod_revert_at}")

    def _fault_operator_kill(self):
        self.operator.kill_pending = True
        self._log("operator_kill")

    def _fault_clock_skew(self):
        """The operator's wall clock is stepped (NTP) around its error."""
        self.skew = self.operator.clock_error + self.rng.uniform(-MAX_SKEW, MAX_SKEW)
        self._log(f"clock_skew {self.skew:+.1f}s")

    def _new_process(self, clock_error: float | None = None) -> None:
        """Another operator process acts from now on: it remembers nothing, and its wall clock
        may differ."""
        if clock_error is None:
            clock_error = self.operator.clock_error
        self.operator = Replica("op", self.world.now, clock_error=clock_error)
        self.skew = clock_error

    def _fault_operator_down(self):
        """The operator is down for a while (no pass runs; its status stays as it last wrote it)
        and a new process starts. Half the time a member fails just before it returns, preferably
        one that status shows unhealthy from before (it recovered meanwhile, or never did)."""
        w = self.world
        length = self.rng.uniform(*OPERATOR_DOWN_SECONDS)
        flap = None
        if self.rng.random() < 0.5:
            listed = {m.get("name") for m in self.status.get("members") or [] if m.get("unhealthySince")}
            pods = sorted((p for p in w.pods.values() if not p.deleting), key=lambda p: (p.name not in listed, p.name))
            flap = pods[0] if pods and pods[0].name in listed else self._some_pod()
        before = self.rng.uniform(1.0, 10.0) if flap else 0.0  # it fails this long before the operator returns
        end = w.now + length
        while w.now < end - before:
            w.advance(min(DOWN_TICK, end - before - w.now))
        if flap:
            flap.isolated_until = w.now + self.rng.uniform(30.0, 120.0)
        while w.now < end:
            w.advance(min(DOWN_TICK, end - w.now))
        self._new_process()
        self._log(
            f"operator_down for {length:.0f}s"
            + (f", {flap.name} isolated from its peers {before:.0f}s before it returns" if flap else "")
        )

    def _fault_standby_takeover(self):
        """A standby takes over at once; its wall clock differs from the old leader's."""
        self._new_process(self.rng.uniform(*STANDBY_CLOCK_ERROR))
        self._log(f"standby_takeover with its clock {self.operator.clock_error:+.0f}s off")

    def _fault_restore_hold(self):
        """An EtcdRestore's hold lands while the next pass decides (after it observed, before it
        acts) and is gone before the pass after: the restore was deleted before the cluster
        acknowledged it, so it had stopped nothing (restore.planner). What a restore then does
        to the members is not modelled."""
        if self.hold_until is None and not self.hold_mid_pass:
            self.hold_mid_pass = True
            self.hold_until = self.step + self.rng.randint(*HOLD_STEPS)
            self._log("restore_hold set while the next pass decides, released before the pass after")

    def _fault_foreign_etcd(self):
        w = self.world
        candidates = sorted(ip for ip in w.free_ips if ip not in w.foreign)
        if not candidates:
            return
        ip = self.rng.choice(candidates)
        w.free_ips.remove(ip)
        w.foreign[ip] = Foreign(self.rng.randint(1, 2**63), w.new_member_id(), self.rng.randint(1, 10**6))
        holders = [p.name for p in w.pods.values() if p.ip == ip]
        self._log(f"foreign_etcd on {ip} (shown by {','.join(holders) or 'no pod'})")

    def _fault_approve(self):
        self.annotations[naming.ANNOTATION_APPROVE_QUORUM_RECOVERY] = "true"
        self._log("approve quorum recovery")

    def _fault_fragment(self):
        main = self.world.main
        if main is None:
            return
        for pvc in self.world.pvcs.values():
            if pvc.data is not None and pvc.data.lineage == main.lineage:
                pvc.data.db_size = pvc.data.db_in_use * 2
        self._log("fragment databases")

    # --- one operator pass ---------------------------------------------------------------------

    def unreachable_now(self) -> set[str]:
        return {n for n, until in self.unreachable.items() if until >= self.step}

    def operator_pass(self) -> float:
        w = self.world
        spec = self.spec
        unreachable = self.unreachable_now()
        annotations = self.cluster_copy().annotations if self.restore_at is not None else self.annotations
        recorded, observed, now, self.operator.sightings = observe(
            w, self.status, annotations, unreachable, self.skew, self.operator.sightings, self.operator.monotonic(w.now)
        )
        observed = admission.carry(observed, self.operator.admissions, self.operator.monotonic(w.now))
        self.operator.saw(observed, w.now)
        self.status_unhealthy_for = status_unhealthy_for(self.status, now)
        decision = plan(spec, recorded, observed, now, stored_spec=self.spec_dict)
        self.last_decision = decision
        try:
            inv.diagnosis_matches_truth(w, decision.health, unreachable, bool(w.foreign))
        except inv.Violation:
            self.replay.append(self._replay_line("op", observed, decision, effects.Outcome(False, "not run")))
            raise
        if (
            annotations is not self.annotations
            and naming.ANNOTATION_RESTORE_IN_PROGRESS in self.annotations
            and naming.ANNOTATION_RESTORE_IN_PROGRESS not in annotations
            and not isinstance(decision.action, (a.Steady, a.Wait))
        ):
            self.stats["step_decided_on_a_copy_without_the_hold"] += 1
        if self.hold_mid_pass:
            self.hold_mid_pass = False
            self.annotations[naming.ANNOTATION_RESTORE_IN_PROGRESS] = "r1"
            self.annotations[naming.ANNOTATION_RESTORE_HOLD] = "uid-r1"
            if not isinstance(decision.action, (a.Steady, a.Wait)):
                self.stats["step_decided_before_hold"] += 1
        killed = self.operator.kill_pending
        self.operator.kill_pending = False
        mode = self.rng.choice(("before", "mid", "after")) if killed else None
        outcome = self.apply(
            decision,
            recorded,
            observed,
            now,
            "op",
            kill_mid=mode == "mid",
            skip=mode == "before",
            seen_unhealthy_for=self.operator.unhealthy_for(w.now),
        )
        if outcome.admission is not None:
            self.operator.admissions = admission.remember(
                self.operator.admissions, outcome.admission, self.operator.monotonic(w.now)
            )
        self.history.append((recorded, observed, now, self.status, spec))
        if mode is None and not outcome.aborted:
            self.status = merge_patch(
                self.status,
                build_status(
                    spec,
                    recorded,
                    observed,
                    now,
                    decision.health,
                    decision.action,
                    list(decision.conditions),
                    self.status,
                    self.generation,
                    extra={**decision.status_fields(), **(outcome.status_fields or {})},
                ),
            )
            if self.status.get("restoreHold") == {"restore": RESTORE_NAME, "uid": RESTORE_UID}:
                self.hold_acknowledged = True
        elif observed.no_quorum_for is None and self.status.get("noQuorumSince"):
            self.lost_timer_reset = True  # the pass that saw quorum again never wrote its status
        if killed:
            self.stats["operator_killed"] += 1
            self._new_process()  # a new process remembers nothing
        action = decision.action
        paced = pacing.next_pass(action, outcome.done)
        if paced is not None:
            return paced
        if isinstance(action, a.Steady):
            return WHEN_STEADY
        if isinstance(action, a.Wait):
            return WHILE_WAITING
        return AFTER_STEP if outcome.done else NOT_YET

    def cluster_copy(self, for_restore: bool = False) -> ClusterCopy:
        """The EtcdCluster as a controller's copy shows it: the live object, or (restore_race)
        now and then one some passes old (the cluster's controller decides on its kopf body,
        which lags). The restore's copy is a GET at the start of its pass (restore/observer.py),
        made after its previous pass ended: it can miss what the cluster's pass of this step
        wrote meanwhile, never anything from before (the hold it set itself, say), so it is
        at most the copy taken after the restore's previous pass (the same draws either way)."""
        live = ClusterCopy(self.annotations, self.status, self.spec_dict, self.cluster_deleting())
        if (self.restore_at is None and self.backup is None) or not self.copies or self.rng.random() >= OLD_COPY_CHANCE:
            return live
        back = min(self.rng.randint(*OLD_COPY_PASSES), len(self.copies))
        self.stats["old_cluster_copy"] += 1
        return self.copies[-1 if for_restore else -back]

    def restore_pass(self) -> None:
        """The EtcdRestore's controller takes one pass (restore_race)."""
        if self.restore is None:
            self.restore = RestoreActor(self.world)
            self.faults.append((self.step, "EtcdRestore r1 (in place) created"))
        restore = self.restore
        if restore.done:
            return
        own = restore.status
        if restore.own_copies and self.rng.random() < OLD_COPY_CHANCE:
            own = restore.own_copies[-min(self.rng.randint(*OLD_COPY_PASSES), len(restore.own_copies))]
            self.stats["old_restore_copy"] += 1
        copy = None if self.cluster_gone() else self.cluster_copy(for_restore=True)
        step = restore.act(self, copy, own, self.hold_acknowledged, self.cluster_deleting())
        self.stats.update(restore.pass_stats)
        if step.kind not in ("Wait", "Idle"):
            refused = f" (nothing created: {restore.refusal})" if restore.refusal else ""
            self.faults.append(
                (self.step, f"restore {step.kind}" + (f" ({step.reason})" if step.kind == "Fail" else "") + refused)
            )
            self.stats[f"restore:{step.kind}"] += 1

    def backup_check(self) -> None:
        """restore_race and the focus families (mutant hunts): a backup run starting now snapshots
        only the cluster's current data (cluster IDs change with a restore, and a foreign etcd
        answers on an address one of our pods shows); the
        first pass also checks the verification pod the real builder returns."""
        if self.step == 0:
            pod = backup_model.some_verification_pod(random.Random(self.seed))
            inv.verification_serves_only_inside_its_pod(backup_model.exposure(pod))
        choice, behind = backup_model.snapshot_source(self.world, self.status)
        inv.snapshot_from_the_cluster_itself(backup_model.snapshot_truth(self.world, choice, behind))
        self.stats["snapshot_source_chosen" if hasattr(choice, "role") else f"snapshot_refused:{choice.reason}"] += 1

    def restore_pending(self) -> bool:
        return (
            self.restore_at is not None and (self.restore is None or not self.restore.done) and not self.cluster_gone()
        )

    def cluster_deleting(self) -> bool:
        return self.cluster_deleted_at is not None and self.step >= self.cluster_deleted_at

    def cluster_gone(self) -> bool:
        return self.cluster_gone_at is not None and self.step >= self.cluster_gone_at

    def delete_cluster(self) -> None:
        """The deletion cascade: the garbage collector deletes the member pods (owned by the
        EtcdCluster); PVCs stay (no owner reference)."""
        if self.step == self.cluster_deleted_at:
            self.faults.append((self.step, "EtcdCluster deleted (deletionTimestamp)"))
            self.stats["cluster_deleted"] += 1
        for pod in list(self.world.pods.values()):
            self.world.delete_pod(pod)
        if self.step == self.cluster_gone_at:
            self.faults.append((self.step, "EtcdCluster gone"))

    def stale_pass(self) -> None:
        """A replica that lost its lease keeps acting on what it saw `stale_lag` passes ago."""
        if len(self.history) <= self.stale_lag:
            return
        recorded, observed, now, status, spec = self.history[-1 - self.stale_lag]
        decision = plan(spec, recorded, observed, now)
        if not isinstance(decision.action, (a.Steady, a.Wait)):
            self.stale_acted = True
        outcome = self.apply(decision, recorded, observed, now, "stale", spec=spec)
        if self.rng.random() < 0.5 and not outcome.aborted:
            self.stale_acted = True  # its old timers and operation land in status
            self.status = merge_patch(
                self.status,
                build_status(
                    spec,
                    recorded,
                    observed,
                    now,
                    decision.health,
                    decision.action,
                    list(decision.conditions),
                    status,
                    self.generation,
                    extra={**decision.status_fields(), **(outcome.status_fields or {})},
                ),
            )
            self.stats["stale_status_written"] += 1

    def apply(
        self,
        decision,
        recorded: ClusterStatus,
        observed,
        now: float,
        actor: str,
        kill_mid: bool = False,
        skip: bool = False,
        spec: ClusterSpec | None = None,
        seen_unhealthy_for: dict | None = None,
    ) -> effects.Outcome:
        """`seen_unhealthy_for`: how long the acting process saw each member unhealthy (model
        time); None for the stale replica, whose view is the live process's of passes ago."""
        w = self.world
        action = decision.action
        acting = spec or decision.acting_spec
        if skip:
            outcome = effects.Outcome(False, "operator killed before the step")
        elif isinstance(action, (a.Steady, a.Wait)):
            outcome = effects.Outcome(True)
        else:
            waiting = (
                not self.recovery_allowed
                and self.status_condition("QuorumLost") == "True"
                and decision.health.state.value == "QuorumLost"
            )
            checks = inv.ActionChecks(
                w,
                action,
                self.recovery_allowed,
                decision.acting_spec,
                waiting,
                seen_unhealthy_for,
                held_by=self.annotations.get(naming.ANNOTATION_RESTORE_IN_PROGRESS),
            )
            ctx = effects.Context(
                w, acting, recorded, observed, now, kill_at_kill_point=kill_mid, annotations=self.annotations
            )
            leader_before = w.main.leader if w.main else None
            outcome = effects.run(ctx, action)
            took_effect = outcome.done or (outcome.interrupted and type(action) in effects.TWO_PHASE)
            try:
                checks.after(took_effect)
            finally:
                self.replay.append(self._replay_line(actor, observed, decision, outcome))
            if outcome.done and not isinstance(action, (a.Steady, a.Wait)):
                self.actions[action.kind] += 1
            if w.main is not None and w.main.leader != leader_before and leader_before is not None:
                self.stats["leader_changed_by_action"] += 1
            return outcome
        self.replay.append(self._replay_line(actor, observed, decision, outcome))
        return outcome

    def status_condition(self, kind: str) -> str | None:
        return next((c.get("status") for c in self.status.get("conditions") or [] if c.get("type") == kind), None)

    def _replay_line(self, actor, observed, decision, outcome):
        return (self.step, self.world.now, actor, observed, decision, outcome)

    def format_replay(self) -> list[str]:
        lines = []
        for step, now, actor, observed, decision, outcome in self.replay:
            health = decision.health
            members = " ".join(
                f"{(m.name or m.hex_id)}:{'L' if m.is_learner else 'V'}{'+' if health.is_healthy(m) else '-'}"
                f"{'*' if m.id == health.leader_id else ''}"
                for m in health.members
            )
            pods = ",".join(
                f"{p.name}{'' if p.ready else '!'}{'x' if p.deleting else ''}" for p in observed.pods.values()
            )
            action = decision.action
            target = getattr(action, "member", "")
            result = "done" if outcome.done else f"not done ({outcome.message})"
            lines.append(
                f"#{step} t={now - self.world_epoch:.0f} {actor} | {health.state.value} [{members}] "
                f"pods[{pods}] {'leader-list' if observed.etcd.from_leader else 'local-list'} | "
                f"{action.kind} {target} -> {result}"
            )
        return lines

    world_epoch = 1_700_000_000.0

    def desired_hash(self, spec: ClusterSpec) -> str:
        if self._hash_of[0] is not spec:
            self._hash_of = (spec, builders.pod_spec_hash(spec))
        return self._hash_of[1]

    # --- the schedule ----------------------------------------------------------------------------

    def run(self) -> Result:
        violation = None
        try:
            self._run()
        except inv.Violation as v:
            violation = v
        except effects.UnknownAction:
            raise
        except Exception as e:  # the real pass raised: that is a defect too
            violation = inv.Violation("pass_completes", f"{type(e).__name__}: {e}")
        finding = findings.classify(self, violation) if violation else None
        return Result(
            self.seed,
            self.family,
            violation,
            finding,
            self.faults,
            self.format_replay(),
            self.step,
            self.actions,
            self.stats,
        )

    def _run(self) -> None:
        w = self.world
        dt = 1.0
        stable = waiting = 0
        end = self.fault_steps + SETTLE_STEPS
        while self.step < end:
            self.inject_faults()
            w.advance(dt * self.rng.uniform(0.8, 1.3))
            if self.restore_at is not None or self.family.startswith(FOCUS):
                self.backup_check()  # a backup run may start at any moment, also before the cluster's pass
            if self.cluster_deleting():
                self.delete_cluster()  # reconciler.being_deleted: no cluster pass any more
                dt = WHILE_WAITING
            else:
                dt = self.operator_pass()
            if self.stale_start is not None and self.step == self.stale_start:
                self.stale_until = self.step + self.rng.randint(4, 15)
                self.stale_lag = self.rng.randint(2, 5)
                self._log(f"stale_replica acts on a view {self.stale_lag} passes old until #{self.stale_until}")
            if self.step <= self.stale_until:
                self.stale_pass()
            if self.restore_at is not None and self.step >= self.restore_at:
                self.restore_pass()
            if self.backup is not None:
                self.backup_pass()
            if self.cluster_gone() and not self.restore_pending():
                break  # nothing left to converge: the cluster is gone and its restore ended
            if self.restore_at is not None or self.backup is not None:
                self.copies.append(
                    ClusterCopy(
                        dict(self.annotations), dict(self.status), dict(self.spec_dict), self.cluster_deleting()
                    )
                )
            inv.single_dataset_served(w)
            inv.at_most_one_learner(w)
            inv.no_member_bootstrapped_twice(w)
            if (
                self.step >= self.fault_steps
                and self.bad_image_revert_at is None
                and self.refused_pod_revert_at is None
                and not self.unreachable_now()
                and not self.restore_pending()
                and (self.backup is None or self.step >= self.fault_steps + BACKUP_PASSES)
            ):
                spec = self.last_decision.acting_spec
                if inv.converged(w, spec.size, self.desired_hash(spec)):
                    stable += 1
                    if stable >= 2:
                        break
                elif inv.waits_by_design(w, self.status, self.recovery_allowed):
                    waiting += 1
                    if waiting >= WAITING_PASSES:
                        break
                else:
                    stable = waiting = 0
            self.step += 1
        self._count_coverage()
        if self.cluster_gone():
            return
        spec = self.last_decision.acting_spec
        inv.converges_to_spec(
            w, spec.size, self.desired_hash(spec), self.status, self.recovery_allowed, self.last_decision.health
        )

    def _count_coverage(self) -> None:
        main = self.world.main
        self.stats["leader_changes"] += sum(g.leader_changes for g in self.world.groups.values())
        if main is not None:
            self.stats["lineages"] += len(self.world.groups)


def run_seed(seed: int, family: str = "main") -> Result:
    return Sim(seed, family).run()
