"""A continuous backup's writer in a simulated world: a model etcd whose clients put, delete,
and grant, use and revoke short leases (a lock session: grant, put, revoke within one
segment), an operator that restarts at any point (between a segment's body and its
manifest too), and a store that sometimes loses its answer to a PUT that landed (the client
tries again: the store answers twice).

What runs is REAL where it decides: the backup planner (backup.planner.plan) and the status
it leaves (backup.status.build_status, merged as the API server merges a status write), the
revision grouping and segment cutting with its leases (segment_cutting), the codec
(segments.encode/decode), the store's segment functions (segment_store.upload_segment and
last_segment, on a model bucket), the choice of what a restore replays (chain.plan_replay),
the stamps a writer gives the revisions it sees (segment_cutting.SeenClock, from the chain's
last stamp on) and the replay's core (programs.replay.replay, against a model member). The
writer's loop is modelled after controllers/backup/continuous_writer.py: resume from the
store, watch, cut, learn the leases a cut uses, upload one segment at a time. With
`Faults.clock_skew`, each writer started (after a restart, or for a new chain) reads a wall
clock off by up to that many seconds, drawn anew: two writers of one chain, or of two chains
of one cluster, disagree by minutes.

With `Faults.hibernate_at`, the cluster (three members) starts going to sleep at that step,
in state Stopping, and the REAL cluster planner (core/cluster/hibernation.next_step) decides
each member's stop, from the members still running and the EtcdBackup's status as the
backup planner left it; the clients' writes are acknowledged while a quorum runs.

Invariants (`check`):
- no chain holds two manifests under one sequence number;
- every revision the writers uploaded, from the first base on, is reachable by a revision
  target, unless a recorded break (status.continuous.lastBreak, as each MarkChainBroken
  step recorded it) excuses it; and the replay to it gives exactly the store the clients
  saw at that revision (keys, values, the leases they were put under);
- a restore to a time never holds a revision seen after it: the revision a time target
  reaches (its base snapshot's, then the replay's) has no revision at or below it that a
  segment of any chain stamps after the time (its manifest at its first and last revision,
  its body at each); the replay stops at the first revision its segment stamps after the
  time; and the store it gives is what the clients saw there;
- once the cluster is hibernated, every revision acknowledged before its members stopped
  is in the chain;
- with `Faults.auth_change` (user and role changes: no KV revision, only etcd's auth
  revision moves), a restore to a revision that says its auth state is the target's
  (restore.point_in_time.auth_condition True, from the auth revisions the snapshots and the
  writers' segments record) has a base holding an auth state etcd had at that revision, and
  a restore to a time (clocks not skewed) one etcd had at that time;
  and once a writer's report of an auth revision newer than the newest snapshot's went into
  a status write, the planner never streams on in that snapshot's chain as if unread: not
  after an operator restart between the auth change and the next cut, nor after a hand-over
  (status.continuous.authRead keeps it; checked at every operator pass)."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import math
import random
from collections.abc import Callable
from typing import Any

from etcd_operator.clients.storage.s3 import StorageError
from etcd_operator.controllers.backup import segment_store
from etcd_operator.core import hibernation as h
from etcd_operator.core.backup import continuous as cb
from etcd_operator.core.backup import planner as backup_planner
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.chain import ChainProblem, Target, plan_replay
from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.backup.segment_cutting import SeenClock, SegmentCutter
from etcd_operator.core.backup.segment_retention import parse_manifest_key
from etcd_operator.core.backup.segments import (
    KeyChange,
    RevisionRecord,
    SegmentManifest,
    chain_id,
    decode,
    encode,
    segment_key,
    segments_prefix,
)
from etcd_operator.core.backup.state import Observed, Prerequisites, RunState, ScheduleSpec
from etcd_operator.core.backup.status import build_status
from etcd_operator.core.cluster import hibernation as cluster_hibernation
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster import steps as cluster_steps
from etcd_operator.core.cluster.health import diagnose
from etcd_operator.core.cluster.spec import Hibernation
from etcd_operator.core.prerequisites import ClusterReadiness
from etcd_operator.core.restore.point_in_time import ReplayRecord, auth_condition
from etcd_operator.programs import replay as program
from tests.sim.world import merge_patch
from tests.support.backup_manifests import snapshot_manifest
from tests.support.object_store import MemoryStore
from tests.unit import cluster_scenarios as cs

CLUSTER_ID = "c1"
PREFIX, NAMESPACE, BACKUP = "p", "ns", "b"
SEGMENTS = segments_prefix(PREFIX, NAMESPACE, BACKUP)
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
SPEC = ScheduleSpec(None, continuous=cb.ContinuousSpec(full_snapshot_after_events=25))
CREATED = Observed(T0, generation=1)


def drive(coroutine):
    """Runs a coroutine that never suspends (the model bucket and member answer at once)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("a model coroutine suspended")


# --- the model etcd ---------------------------------------------------------------------


@dataclasses.dataclass
class Lease:
    ttl: int
    keys: set[bytes] = dataclasses.field(default_factory=set)
    alive: bool = True


class ModelEtcd:
    def __init__(self) -> None:
        self.revision = 1
        self.data: dict[bytes, tuple[bytes, int]] = {}
        self.events: dict[int, tuple[KeyChange, ...]] = {}
        self.states: dict[int, dict[bytes, tuple[bytes, int]]] = {1: {}}
        self.leases: dict[int, Lease] = {}
        self.alive_at: dict[int, set[int]] = {1: set()}  # revision: leases alive then
        self._next_lease = 0x7000
        # etcd's auth revision: moved by user and role changes, which make no KV revision
        self.auth_revision = 1
        self.auth_at: dict[int, int] = {1: 1}  # revision: the auth revision when it was committed

    def _commit(self, changes: tuple[KeyChange, ...]) -> None:
        self.revision += 1
        self.events[self.revision] = changes
        self.states[self.revision] = dict(self.data)
        self.alive_at[self.revision] = {i for i, lease in self.leases.items() if lease.alive}
        self.auth_at[self.revision] = self.auth_revision

    def change_auth(self) -> None:
        """A user or role added, changed or deleted: no KV revision, nothing in the watch."""
        self.auth_revision += 1

    def put(self, key: bytes, value: bytes, lease: int = 0) -> None:
        old = self.data.get(key)
        if old is not None and old[1]:
            self.leases[old[1]].keys.discard(key)
        self.data[key] = (value, lease)
        if lease:
            self.leases[lease].keys.add(key)
        self._commit((KeyChange(key, value, lease),))

    def delete(self, key: bytes) -> None:
        old = self.data.pop(key, None)
        if old is None:
            return  # deleting nothing makes no revision
        if old[1]:
            self.leases[old[1]].keys.discard(key)
        self._commit((KeyChange(key, None),))

    def grant(self, ttl: int) -> int:
        """A grant makes no revision (a snapshot at this revision taken before it lacks it)."""
        self._next_lease += 1
        self.leases[self._next_lease] = Lease(ttl)
        return self._next_lease

    def revoke(self, lease: int) -> None:
        """The lease's keys are deleted in one revision, which the watch delivers like any
        delete; a lease without keys goes without a revision."""
        entry = self.leases[lease]
        entry.alive = False
        keys = sorted(entry.keys)
        entry.keys.clear()
        for key in keys:
            del self.data[key]
        if keys:
            self._commit(tuple(KeyChange(key, None) for key in keys))

    def lease_granted_ttl(self, lease: int) -> int | None:
        entry = self.leases[lease]
        return entry.ttl if entry.alive else None

    def alive_leases(self) -> list[int]:
        return [i for i, lease in self.leases.items() if lease.alive]


# --- the model bucket -------------------------------------------------------------------


class ModelBucket(MemoryStore):
    """A store that honours If-None-Match: * (MemoryStore); `lose_answers` is the chance that a
    PUT lands but its answer is lost (the client sees an error and tries again)."""

    def __init__(self, rng: random.Random, lose_answers: float) -> None:
        super().__init__()
        self.rng = rng
        self.lose_answers = lose_answers
        self.landed_unanswered = 0

    async def put(self, key: str, data: bytes, content_type: str | None = None, create_only: bool = False) -> None:
        await super().put(key, data, content_type, create_only)
        if self.rng.random() < self.lose_answers:
            self.landed_unanswered += 1
            raise StorageError("connection reset after the request was sent", "ConnectionReset")

    def manifests(self) -> list[SegmentManifest]:
        return [SegmentManifest.from_json(v) for k, v in self.objects.items() if k.endswith(".segment.json")]


# --- the writer -------------------------------------------------------------------------


class Killed(Exception):
    """The operator died in the middle of an upload."""


class ModelWriter:
    def __init__(
        self, start: cb.ChainStart, etcd: ModelEtcd, bucket: ModelBucket, clock: Callable[[], float] = lambda: 0.0
    ) -> None:
        self.start = start
        self.clock = clock  # this writer's wall clock
        self.seen = SeenClock()
        self.chain = start.chain
        self.etcd = etcd
        self.bucket = bucket
        self.last_revision = start.base_revision
        self.sequence = 1
        self.next_grouped = start.base_revision + 1
        self.cut_next = start.base_revision + 1
        self.cutter = SegmentCutter(1.0, 1 << 20)
        self.known: dict[int, int | None] = {}
        self.reported: set[int] = set()
        self.written: list[SegmentManifest] = []
        self.broken: cb.ChainBreak | None = None
        self.resumed = False
        self.auth_revision: int | None = None  # as last read for a segment

    def view(self) -> cb.StreamView:
        return cb.StreamView(
            chain=self.chain,
            last_revision=self.last_revision,
            broken=self.broken,
            auth_revision=self.auth_revision,
            cluster_id=CLUSTER_ID,
        )

    def drain(self) -> cb.SegmentsWritten:
        written, self.written = self.written, []
        return cb.SegmentsWritten(len(written), sum(m.events for m in written), sum(m.size for m in written))

    def resume(self) -> None:
        prefix = f"{SEGMENTS}{self.chain}/"
        last = drive(segment_store.last_segment(self.bucket, prefix, SEGMENTS, self.chain))  # type: ignore[arg-type]
        if last is not None:
            self.sequence, self.last_revision = last.sequence + 1, last.last_revision
            self.next_grouped = self.cut_next = last.last_revision + 1
            self.seen = SeenClock(last.last_seen_at)
            if last.auth_revision is not None:  # read by the writer before, at that cut
                self.auth_revision = max(self.auth_revision or 0, last.auth_revision)
        self.resumed = True

    def watch(self, up_to: int) -> None:
        """The watch delivers the revisions after the last grouped, up to `up_to`."""
        while self.next_grouped <= min(up_to, self.etcd.revision):
            revision = self.next_grouped
            seen_at = self.seen.stamp(self.clock())
            self.cutter.add(RevisionRecord(revision, seen_at, self.etcd.events[revision]), 0.0)
            self.next_grouped += 1

    def cut(self, lease_answers: bool, kill_between: bool) -> None:
        """Learns the leases the held revisions use (as etcd answers now), cuts and uploads."""
        if self.cutter.empty:
            return
        for lease in sorted(self.cutter.leases_used() - self.known.keys()):
            if not lease_answers:
                self.broken = cb.ChainBreak(self.chain, cb.LEASE_UNKNOWN, f"lease {lease:x}", self.last_revision)
                return
            self.known[lease] = self.etcd.lease_granted_ttl(lease)
        auth_revision = self.etcd.auth_revision  # read after the watch gave every revision held
        cut = self.cutter.take(self.known, self.reported)
        records = cut.body.revisions
        first, last = records[0].revision, records[-1].revision
        assert first == self.cut_next, (first, self.cut_next)
        data = encode(cut.body)
        manifest = SegmentManifest(
            segment_key=segment_key(PREFIX, NAMESPACE, BACKUP, self.chain, self.sequence, first, last),
            backup=BACKUP,
            namespace=NAMESPACE,
            backup_uid="u",
            cluster_id=CLUSTER_ID,
            chain=self.chain,
            base_revision=self.start.base_revision,
            base_key=self.start.base_key,
            sequence=self.sequence,
            first_revision=first,
            last_revision=last,
            revisions=len(records),
            events=cut.body.events,
            first_seen_at=records[0].seen_at,
            last_seen_at=records[-1].seen_at,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            created_at="2026-01-01T00:00:00Z",
            auth_revision=auth_revision,
        )
        if kill_between:  # the body lands, then the operator dies before the manifest
            self.bucket.objects.setdefault(manifest.segment_key, data)
            raise Killed()
        for _ in range(50):  # the writer retries a failed upload
            try:
                drive(segment_store.upload_segment(self.bucket, manifest, data))  # type: ignore[arg-type]
                break
            except StorageError:
                continue
        else:
            raise AssertionError("the model store never answered")
        self.cut_next, self.sequence, self.last_revision = last + 1, self.sequence + 1, last
        self.written.append(manifest)
        self.auth_revision = auth_revision


# --- the world ----------------------------------------------------------------------------


@dataclasses.dataclass
class Faults:
    restart: float = 0.04  # per step: the operator restarts (its writer is gone)
    kill_mid_upload: float = 0.05  # per cut: the operator dies between body and manifest
    lost_answer: float = 0.1  # per PUT: it landed, its answer was lost
    lease_unanswered: float = 0.0  # per cut with an unknown lease: LeaseTimeToLive fails
    session: float = 0.3  # per client step: a lock session (grant, put, revoke) rather than a put
    clock_skew: float = 0.0  # seconds: each writer's wall clock is off by up to this, either way
    hibernate_at: int | None = None  # the step at which the cluster's members start stopping
    auth_change: float = 0.0  # per client step: a user or role change rather than a write


SLEEP_SPEC = cs.spec(hibernation=Hibernation(enabled=True, snapshot_timeout=150.0))
MEMBERS = 3


class Cluster:
    """The EtcdCluster going to sleep: which members still run, as the real cluster planner
    stops them (core/cluster/hibernation.py)."""

    def __init__(self, since: float) -> None:
        members = tuple((naming.member_name(cs.CLUSTER, i), 0x100 + i) for i in range(MEMBERS))
        self.record = h.HibernationRecord(h.STOPPING, int(CLUSTER_ID, 16), 0, members)
        self.running = set(range(MEMBERS))
        self.since = since
        self.without_chain: tuple[str, ...] = ()

    @property
    def acknowledges(self) -> bool:
        return len(self.running) >= h.quorum(MEMBERS)

    def readiness(self) -> ClusterReadiness:
        return ClusterReadiness("Running", True, len(self.running), hibernation=self.record)

    def cluster_pass(self, etcd: ModelEtcd, backup_status: dict, now: float) -> None:
        members = [
            cs.M(i, applied=etcd.revision) if i in self.running else cs.M(i, pod=False, healthy=False)
            for i in range(MEMBERS)
        ]
        leader = 0 if self.acknowledges else None
        body = {
            "metadata": {"name": BACKUP},
            "spec": {"clusterRef": {"name": cs.CLUSTER}, "continuous": {"enabled": True}},
            "status": backup_status,
        }
        observed = dataclasses.replace(
            cs.observed(members, leader=leader),
            snapshot_backups=cluster_hibernation.snapshot_backups(cs.CLUSTER, [body]),
            snapshot_wait_for=now - self.since,
        )
        status = cs.recorded(hibernation=self.record)
        health = diagnose(SLEEP_SPEC, status, observed)
        step = cluster_hibernation.next_step(SLEEP_SPEC, status, observed, health)
        match step:
            case cluster_steps.StopMemberForHibernation():
                self.running.discard(naming.member_ordinal(cs.CLUSTER, step.member) or 0)
                self.without_chain += step.without_chain
            case cluster_steps.RecordHibernation() if step.record is not None:
                self.record = step.record


class World:
    def __init__(self, seed: int, faults: Faults | None = None) -> None:
        self.rng = random.Random(seed)
        self.faults = faults = faults or Faults()
        self.etcd = ModelEtcd()
        self.bucket = ModelBucket(self.rng, faults.lost_answer)
        self.status: dict = {}
        self.writer: ModelWriter | None = None
        self.snapshots: list[Manifest] = []
        self.breaks: list[tuple[int, int]] = []  # (last revision the chain held, the base after it)
        self.now = T0.timestamp() + 3600
        self.sessions: list[int] = []  # leases of sessions still open
        self.resumed_behind_newer_base = 0  # writers started on a chain older than the newest snapshot
        self.skews: list[float] = []  # the wall clock offset of each writer started, in order
        self.writers: list[ModelWriter] = []  # every writer started, in order
        self.cluster: Cluster | None = None  # going to sleep since faults.hibernate_at
        self.acknowledged = 1  # the cluster's revision after the last write a client was answered
        self.committed_at: dict[int, float] = {}  # revision: when a client's write committed it
        self.auth_changed_at: list[float] = []  # when each auth change committed, in order
        self.acknowledged_while_stopping = 0  # revisions written after the members started stopping
        self.snapshot_auth: dict[str, int] = {}  # snapshot key: the auth state it holds
        self.bases_for_auth = 0  # full snapshots the planner took because the auth revision moved
        # The newest auth revision a writer's report handed to a status write, and the writers
        # started since (after a restart, or for the next chain): none of them read it.
        self.auth_reported: int | None = None
        self.writers_since_auth_reported = 0
        self.restarts_since_auth_reported = 0
        # Full snapshots for auth that only status.continuous.authRead knew of (the running
        # writer started after the report and had not read it): the operator restarts between
        # the report and each.
        self.bases_for_recorded_auth: list[int] = []
        self.steps = 0

    # the clients
    def client_step(self) -> None:
        if self.cluster is not None and not self.cluster.acknowledges:
            return  # no quorum: every write fails
        before = self.etcd.revision
        self._client_write()
        self.committed_at.update(dict.fromkeys(range(before + 1, self.etcd.revision + 1), self.now))
        self.acknowledged = self.etcd.revision
        if self.cluster is not None:
            self.acknowledged_while_stopping += self.etcd.revision > before

    def _client_write(self) -> None:
        rng = self.rng
        if rng.random() < self.faults.auth_change:
            self.etcd.change_auth()
            self.auth_changed_at.append(self.now)
        elif self.sessions and rng.random() < 0.5:
            self.etcd.revoke(self.sessions.pop(rng.randrange(len(self.sessions))))
        elif rng.random() < self.faults.session:
            lease = self.etcd.grant(rng.choice((3, 10, 60)))
            self.etcd.put(b"/locks/%d" % lease, b"held", lease)
            self.sessions.append(lease)
        elif rng.random() < 0.2 and self.etcd.data:
            self.etcd.delete(rng.choice(sorted(self.etcd.data)))
        else:
            self.etcd.put(b"/k/%d" % rng.randrange(8), b"v%d" % self.etcd.revision)

    # the operator
    def restart(self) -> None:
        self.writer = None
        self.restarts_since_auth_reported += 1

    def operator_pass(self) -> None:
        stream = self.writer.view() if self.writer is not None else None
        observed = dataclasses.replace(CREATED, stream=stream)
        if self.cluster is not None:
            prerequisites = Prerequisites(NAMESPACE, cs.CLUSTER, self.cluster.readiness())
            observed = dataclasses.replace(observed, prerequisites=prerequisites)
        state = RunState.from_dict(self.status)
        step = backup_planner.plan(SPEC, state, observed, self.now)
        no_auth_reading_is_forgotten(self, state, stream, step)
        outcome: s.Outcome = s.NOTHING_DONE
        match step:
            case s.RunBackup():
                revision = self.etcd.revision
                snapshot = snapshot_manifest(revision, cluster_id=CLUSTER_ID, verified=None)
                snapshot = dataclasses.replace(snapshot, auth_revision=self.etcd.auth_revision)
                self.snapshot_auth[snapshot.snapshot_key] = self.etcd.auth_revision
                self.snapshots.append(snapshot)
                broken = (self.status.get("continuous") or {}).get("needsFullSnapshot")
                last_break = (self.status.get("continuous") or {}).get("lastBreak")
                if broken and last_break:
                    self.breaks.append((int(last_break["lastRevision"]), revision))
                record = {
                    "key": snapshot.snapshot_key,
                    "revision": revision,
                    "clusterID": CLUSTER_ID,
                    "authRevision": snapshot.auth_revision,
                }
                outcome = s.RunSucceeded(record=record, completed_at="2026-01-01T01:00:00Z")
            case s.StartSlot():
                for_auth = "auth revision" in step.message
                self.bases_for_auth += for_auth
                unread = stream is not None and (stream.auth_revision or 0) < (self.auth_reported or 0)
                if for_auth and unread and self.writers_since_auth_reported > 0:
                    self.bases_for_recorded_auth.append(self.restarts_since_auth_reported)
            case s.StartStream():
                newest = int((self.status.get("lastBackup") or {}).get("revision") or 0)
                self.resumed_behind_newer_base += step.start.base_revision < newest
                skew = (
                    self.rng.uniform(-self.faults.clock_skew, self.faults.clock_skew) if self.faults.clock_skew else 0.0
                )
                self.skews.append(skew)
                self.writer = ModelWriter(step.start, self.etcd, self.bucket, lambda: self.now + skew)
                self.writers.append(self.writer)
                self.writers_since_auth_reported += 1
                outcome = s.StreamReport(view=self.writer.view())
            case s.Stream():
                writer = self.writer
                assert writer is not None
                outcome = s.StreamReport(view=writer.view(), written=writer.drain())
            case s.MarkChainBroken() | s.StopStream():
                self.writer = None
        patch = build_status(step, outcome, self.status, 1, "2026-01-01T01:00:00Z")
        self.status = merge_patch(self.status, patch)
        reading = outcome.view.auth_revision if isinstance(outcome, s.StreamReport) and outcome.view else None
        if reading is not None and reading > (self.auth_reported or 0):
            self.auth_reported, self.writers_since_auth_reported, self.restarts_since_auth_reported = reading, 0, 0

    def writer_step(self) -> None:
        writer = self.writer
        if writer is None or writer.broken is not None:
            return
        if self.cluster is not None and not self.cluster.running:
            return  # no member to watch
        if not writer.resumed:
            writer.resume()
        writer.watch(writer.next_grouped + self.rng.randrange(4))
        if self.rng.random() < 0.5:
            unanswered = self.rng.random() < self.faults.lease_unanswered
            try:
                writer.cut(not unanswered, self.rng.random() < self.faults.kill_mid_upload)
            except Killed:
                self.restart()

    def step(self) -> None:
        self.steps += 1
        if self.steps == self.faults.hibernate_at:
            self.cluster = Cluster(self.now)
        roll = self.rng.random()
        if self.cluster is not None and roll > 0.9:
            self.cluster.cluster_pass(self.etcd, self.status, self.now)
        elif roll < self.faults.restart:
            self.restart()
        elif roll < 0.45:
            self.client_step()
        elif roll < 0.75:
            self.writer_step()
        else:
            self.operator_pass()
        self.now += 0.5


# --- the invariants -----------------------------------------------------------------------


class Violation(AssertionError):
    pass


def no_duplicate_sequences(bucket: ModelBucket) -> None:
    seen: dict[tuple[str, int], str] = {}
    for key in bucket.objects:
        parsed = parse_manifest_key(SEGMENTS, key)
        if parsed is None:
            continue
        chain, sequence = parsed[0], parsed[1]
        if (chain, sequence) in seen:
            raise Violation(f"chain {chain} holds two manifests numbered {sequence}: {seen[chain, sequence]}, {key}")
        seen[chain, sequence] = key


class ModelMember:
    """The scratch member a replay writes to: restored from a base snapshot of the model etcd."""

    def __init__(self, etcd: ModelEtcd, base: int) -> None:
        self.revision = base
        self.data = dict(etcd.states[base])
        self.leases = set(etcd.alive_at[base])

    async def grant_lease(self, lease: int, ttl: int) -> bool:
        if lease in self.leases:
            return False
        self.leases.add(lease)
        return True

    async def apply(self, revision: int, changes) -> None:
        if revision != self.revision + 1:
            raise Violation(f"the replay sent revision {revision} after {self.revision}")
        for change in changes:
            if change.deleted:
                self.data.pop(change.key, None)
            else:
                if change.lease and change.lease not in self.leases:
                    raise Violation(f"a put under lease {change.lease:x}, which the replay did not grant")
                self.data[change.key] = (change.value, change.lease)
        self.revision = revision


def replay(world: World, plan, until: float | None, target: str) -> tuple[ModelMember, Any]:
    """The replay's core run as a restore runs it: the plan's base, then its segments, on a
    model member; a refusal is a violation named by `target`."""
    member = ModelMember(world.etcd, plan.base.revision)
    bodies = iter([decode(world.bucket.objects[m.segment_key]) for m in plan.segments])
    try:
        progress = drive(
            program.replay(member, bodies, plan.base.revision, plan.up_to_revision, until, set(member.leases))
        )
    except program.Refused as e:
        raise Violation(f"{target}: the replay refused: {e.reason}: {e.message}") from None
    return member, progress


def replayed_state(world: World, revision: int) -> dict[bytes, tuple[bytes, int]]:
    plan = plan_replay(Target(revision=revision), world.snapshots, world.bucket.manifests())
    member, progress = replay(world, plan, None, f"revision {revision}")
    if progress.revision != revision:
        raise Violation(f"revision {revision}: the replay reached {progress.revision}")
    return member.data


def every_uploaded_revision_is_reachable(world: World) -> int:
    """Returns how many revisions were checked."""
    manifests = world.bucket.manifests()
    if not manifests or not world.snapshots:
        return 0
    first = min(s.revision for s in world.snapshots)
    uploaded = max(m.last_revision for m in manifests)
    checked = 0
    for revision in range(first, uploaded + 1):
        if any(held < revision < base for held, base in world.breaks):
            continue  # a recorded break: a full snapshot followed it
        try:
            state = replayed_state(world, revision)
        except ChainProblem as e:
            raise Violation(f"revision {revision} (of {first}..{uploaded}) is not reachable: {e}") from None
        if state != world.etcd.states[revision]:
            raise Violation(f"revision {revision}: the replayed store differs from what the clients saw")
        checked += 1
    return checked


def stamps(world: World) -> list[tuple[int, float]]:
    """(revision, stamp): when the backup saw each revision, by every segment of any chain
    stored: each revision's own stamp in the segment's body (its manifest carries those of
    the first and last). The planner reads the manifests only; a revision inside another
    chain's segment, stamped there after the time, must not be held either."""
    found = []
    for manifest in world.bucket.manifests():
        found += [(manifest.first_revision, manifest.first_seen_at), (manifest.last_revision, manifest.last_seen_at)]
        stored = world.bucket.objects.get(manifest.segment_key)
        if stored is not None:
            found += [(record.revision, record.seen_at) for record in decode(stored).revisions]
    return found


TIME_TARGETS = 60  # the most times a schedule restores to


def time_targets(seen: list[tuple[int, float]]) -> list[float]:
    """At most TIME_TARGETS times, spread over those at and just before every stamp."""
    moments = sorted({t + d for _, t in seen for d in (-0.25, 0.0)})
    return moments[:: max(1, len(moments) // TIME_TARGETS)]


def no_time_target_holds_a_revision_seen_after_it(world: World) -> int:
    """Restores to times around every stamp the store holds; returns how many were reachable."""
    seen = stamps(world)
    if not seen or not world.snapshots:
        return 0
    reached = 0
    for moment in time_targets(seen):
        try:
            plan = plan_replay(Target(time=moment), world.snapshots, world.bucket.manifests())
        except ChainProblem:
            continue  # unreachable is allowed: nothing shows the chain held every revision up to it
        member, progress = replay(world, plan, moment, f"time {moment}")
        after = [(r, t) for r, t in seen if r <= progress.revision and t > moment]
        if after:
            revision, stamp = min(after)
            raise Violation(
                f"time {moment}: the restore reached revision {progress.revision} (base {plan.base.revision}), "
                f"which holds revision {revision}, seen at {stamp}, after the time"
            )
        if member.data != world.etcd.states[progress.revision]:
            raise Violation(f"time {moment}: the replayed store differs from revision {progress.revision}")
        reached += 1
    return reached


def a_restore_says_when_its_auth_state_is_not_the_targets(world: World) -> int:
    """Every revision a restore reaches: when the restore says the auth state is the
    target's (AuthStateAtTarget True), the base snapshot holds an auth state etcd had while
    that revision was its newest (auth changes make no revision: from its commit until the
    next revision's). Returns how many such restores followed an auth change."""
    manifests = world.bucket.manifests()
    if not manifests or not world.snapshots:
        return 0
    etcd, after_a_change = world.etcd, 0
    for revision in range(min(b.revision for b in world.snapshots), max(m.last_revision for m in manifests) + 1):
        try:
            plan = plan_replay(Target(revision=revision), world.snapshots, manifests)
        except ChainProblem:
            continue  # every_uploaded_revision_is_reachable says which must be reachable
        condition = auth_condition(ReplayRecord.of_plan(Target(revision=revision), plan, ""))
        if condition.status is not True:
            continue
        held = world.snapshot_auth[plan.base.snapshot_key]
        earliest, latest = etcd.auth_at[revision], etcd.auth_at.get(revision + 1, etcd.auth_revision)
        if not earliest <= held <= latest:
            raise Violation(
                f"revision {revision}: the restore says the auth state is the target's ({condition.reason}), yet its "
                f"base {plan.base.snapshot_key} holds auth revision {held}; etcd had {earliest}..{latest} then"
            )
        after_a_change += held > 1
    return after_a_change


def a_time_restore_says_when_its_auth_state_is_not_the_times(world: World) -> int:
    """Restores to times around every stamp: when one says the auth state is the point's
    (AuthStateAtTarget True), its base holds the auth state etcd had at that time. Where the
    restore stops before a revision committed by then but seen after it, any state from the
    last revision it holds up to that commit is the point's too. Writers' clocks must be the
    world's (no skew): a time is read on them. Returns how many such restores followed an auth
    change."""
    seen = stamps(world)
    if world.faults.clock_skew or not seen or not world.snapshots:
        return 0

    def auth_in_effect(moment: float, including_it: bool) -> int:
        return 1 + sum(1 for t in world.auth_changed_at if t < moment or (including_it and t == moment))

    after_a_change = 0
    for moment in time_targets(seen):
        try:
            plan = plan_replay(Target(time=moment), world.snapshots, world.bucket.manifests())
        except ChainProblem:
            continue
        condition = auth_condition(ReplayRecord.of_plan(Target(time=moment), plan, ""))
        if condition.status is not True:
            continue
        _, progress = replay(world, plan, moment, f"time {moment}")
        next_commit = world.committed_at.get(progress.revision + 1, math.inf)
        earliest = auth_in_effect(min(moment, next_commit), including_it=False)
        latest = auth_in_effect(moment, including_it=True)
        held = world.snapshot_auth[plan.base.snapshot_key]
        if not earliest <= held <= latest:
            raise Violation(
                f"time {moment}: the restore says the auth state is the point's ({condition.reason}), yet its base "
                f"{plan.base.snapshot_key} holds auth revision {held}; etcd had {earliest}..{latest} then (the "
                f"restore reached revision {progress.revision})"
            )
        after_a_change += held > 1
    return after_a_change


def no_auth_reading_is_forgotten(world: World, state: RunState, stream: cb.StreamView | None, step: s.Step) -> None:
    """Once a writer's report of an auth revision newer than the newest snapshot's was handed
    to a status write, the planner never streams on in that snapshot's chain (with no retry
    pending) as if it had not been read: not after the operator restarted between the auth
    change and the next cut, nor after a hand-over, whose new writer has read nothing yet."""
    base = state.last_backup
    if not isinstance(step, s.Stream) or state.retry or base is None or base.auth_revision is None:
        return
    if stream is None or stream.chain != chain_id(base.cluster_id, base.revision):
        return
    if world.auth_reported is not None and world.auth_reported > base.auth_revision:
        raise Violation(
            f"the planner streams chain {stream.chain} on though a writer reported auth revision "
            f"{world.auth_reported} and its base {base.key} holds {base.auth_revision}; "
            f"{world.writers_since_auth_reported} writers started since, {world.restarts_since_auth_reported} operator "
            f"restarts; none of those writers read it"
        )


def every_acknowledged_revision_is_in_the_chain_once_hibernated(world: World) -> None:
    cluster = world.cluster
    if cluster is None or cluster.record.state != h.HIBERNATED:
        return
    uploaded = max((m.last_revision for m in world.bucket.manifests()), default=0)
    if uploaded < world.acknowledged:
        raise Violation(
            f"revision {world.acknowledged}, acknowledged before the members stopped, is in no segment "
            f"(the chain ends at {uploaded})"
        )


def run(seed: int, steps: int = 400, faults: Faults | None = None) -> World:
    world = World(seed, faults)
    for _ in range(steps):
        world.step()
        no_duplicate_sequences(world.bucket)
        every_acknowledged_revision_is_in_the_chain_once_hibernated(world)
    every_uploaded_revision_is_reachable(world)
    no_time_target_holds_a_revision_seen_after_it(world)
    a_restore_says_when_its_auth_state_is_not_the_targets(world)
    a_time_restore_says_when_its_auth_state_is_not_the_times(world)
    return world
