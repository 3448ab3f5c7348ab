"""An EtcdBackup acting beside the cluster's controller (and an in-place restore, when one
runs) in the simulated world: the REAL backup planner (backup.planner.plan, looked up on its
module so that mutants can patch it) decides each pass on the object as a GET returned it and
on a copy of the EtcdCluster that may be some passes old; the status is the REAL
backup.status.build_status's, patched onto the live object as the controller patches it.

Its steps are carried out against a model bucket as backup/executor.py and backup/runner.py
do them against S3: the REAL run's own pieces run on it (stale_uploads.abort_recorded and
abort_orphans with orphans.orphaned, catalogue.apply_retention with read_manifests and
retention.to_delete),
the snapshot itself is modelled (the member backup.source_choice picks, the revision and
cluster ID its data holds). Faults: S3 refusals (transient and permanent), an upload cut off
(the operator killed before or after recording it, or the store failing mid-stream), status
writes and pod creates the API server refuses, the backup or the cluster (or the namespace)
deleted, with the deletion landing while a pass decides."""

from __future__ import annotations

import dataclasses
import datetime
import random

from croniter import croniter

from etcd_operator.clients.storage.s3 import StorageError
from etcd_operator.controllers.backup import catalogue, stale_uploads
from etcd_operator.controllers.backup import runner as backup_runner
from etcd_operator.core.backup import fence as backup_fence
from etcd_operator.core.backup import object_lock, retention, source_choice
from etcd_operator.core.backup import planner as backup_planner
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.manifest import (
    MANIFEST_SUFFIX,
    SNAPSHOT_SUFFIX,
    Identity,
    Manifest,
    backup_prefix,
    manifest_key,
    snapshot_key,
)
from etcd_operator.core.backup.spec import BackupSpec
from etcd_operator.core.backup.state import CheckResult, Observed, Prerequisites, RunState, ScheduleSpec, ScratchPod
from etcd_operator.core.backup.status import build_status
from etcd_operator.core.durations import parse_duration
from etcd_operator.core.prerequisites import ClusterReadiness
from etcd_operator.core.status_patch import changed_fields as changes
from etcd_operator.core.timefmt import format_time
from tests.sim import backup_model
from tests.sim import invariants as inv
from tests.sim.world import CLUSTER, NAMESPACE, merge_patch

NAME, UID = "b1", "uid-b1"
PREFIX = "nightly"
FOLDER = backup_prefix(PREFIX, NAMESPACE, NAME)
SCHEDULE = "* * * * *"
ORPHAN_GRACE_SECONDS = 90.0
UTC = datetime.UTC
# Objects of others in the bucket: a sibling backup whose folder starts the same, another
# prefix, and another backup's manifest in this folder. None may ever be deleted.
FOREIGN_KEYS = (
    f"{PREFIX}/{NAMESPACE}/{NAME}0/20231114T000000Z.db",
    f"other/{NAMESPACE}/{NAME}/20231114T000000Z.db",
    f"{FOLDER}deep/20231114T000000Z.db",
)
FOREIGN_SLOT = "20231114T000100Z"

# Per run / per pass chances of the faults.
S3_TRANSIENT, S3_DENIED = 0.06, 0.01
KILLED_BEFORE_RECORD, KILLED_MID_UPLOAD, UPLOAD_FAILS = 0.03, 0.04, 0.05
STATUS_WRITE_REFUSED, POD_CREATE_REFUSED = 0.05, 0.1
CREATING = (s.RunBackup, s.CreateScratchPod)
DELETED = {"deletionTimestamp": "2026-11-26T00:00:00Z"}


def drive(coroutine):
    """Runs a coroutine that never suspends (the model bucket answers at once)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the model bucket never suspends")


def slot_already_ran(bucket: Bucket, key: str) -> Manifest | None:
    """backup/runner.py _attempt: the slot's manifest, when the slot already ran (a run of it
    again takes no snapshot). A module function so that a mutant can take the check out."""
    body = bucket.objects.get(manifest_key(key))
    return None if body is None else Manifest.from_json(body)


def own_snapshot(key: str) -> bool:
    rest = key[len(FOLDER) :] if key.startswith(FOLDER) else ""
    return bool(rest) and "/" not in rest


class Bucket:
    """The S3 bucket as the runner uses it (storage/s3.py's methods), on the store's clock."""

    def __init__(self, clock):
        self.clock = clock  # the store's own time (true time)
        self.objects: dict[str, bytes] = {}
        self.modified: dict[str, float] = {}
        self.uploads: dict[str, tuple[str, float]] = {}  # upload id -> (key, initiated)
        self.next_upload = 0
        self.on_delete = None  # an invariant check, called with the key before each delete

    def _now(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.clock(), UTC)

    async def list_keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    async def list_modified(self, prefix: str):
        return (
            {k: datetime.datetime.fromtimestamp(t, UTC) for k, t in self.modified.items() if k.startswith(prefix)},
            self._now(),
        )

    async def get(self, key: str) -> bytes:
        if key not in self.objects:
            raise StorageError(key, "NoSuchKey")
        return self.objects[key]

    async def exists(self, key: str) -> bool:
        return key in self.objects

    async def put(self, key: str, body: bytes, content_type: str = "") -> None:
        self.objects[key], self.modified[key] = body, self.clock()

    async def stored(self, key: str) -> object_lock.StoredObject:
        """A bucket without versions or Object Lock: one plain version, or nothing."""
        versions = (object_lock.StoredVersion(None),) if key in self.objects else ()
        return object_lock.StoredObject(key, versions, self._now())

    async def delete(self, key: str, version_id: str | None = None) -> None:
        if self.on_delete is not None:
            self.on_delete(key)
        self.objects.pop(key, None)
        self.modified.pop(key, None)

    def start_multipart(self, key: str) -> str:
        self.next_upload += 1
        upload_id = f"upload-{self.next_upload}"
        self.uploads[upload_id] = (key, self.clock())
        return upload_id

    def complete_multipart(self, key: str, upload_id: str, body: bytes) -> None:
        del self.uploads[upload_id]
        self.objects[key], self.modified[key] = body, self.clock()

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        if self.uploads.get(upload_id, (None,))[0] != key:
            raise StorageError(upload_id, "NoSuchUpload")
        del self.uploads[upload_id]

    async def list_uploads(self, prefix: str):
        found = [
            (key, upload_id, datetime.datetime.fromtimestamp(initiated, UTC))
            for upload_id, (key, initiated) in sorted(self.uploads.items())
            if key.startswith(prefix)
        ]
        return found, self._now()


class Killed(Exception):
    """The operator process died during the pass: no status write, a new process takes over."""

    def __init__(self, where: str):
        super().__init__(where)
        self.where = where


class BackupActor:
    def __init__(self, sim, seed: int):
        self.sim = sim
        self.world = sim.world
        self.rng = random.Random(f"backup {seed}")  # its own draws: the cluster's schedule stays as it was
        rng = self.rng
        self.one_shot = rng.random() < 0.3
        kept = rng.choice(
            (
                {"maxBackups": rng.randint(1, 4)},
                {"maxBackups": rng.randint(1, 4)},
                {"maxAge": f"{rng.randint(2, 8)}m"},
                {"maxBackups": 3, "maxAge": "5m"},
            )
        )
        spec: dict = {
            "clusterRef": {"name": CLUSTER},
            "storage": {"s3": {"bucket": "b", "prefix": PREFIX}},
            "retention": kept,
            "backoffLimit": rng.randint(0, 3),
        }
        if not self.one_shot:
            spec["schedule"] = SCHEDULE
        if rng.random() < 0.5:
            spec["verification"] = {"enabled": True, "everyN": rng.randint(1, 3)}
        self.spec = ScheduleSpec.from_dict(spec)
        self.max_backups = kept.get("maxBackups")
        self.max_age = parse_duration(kept["maxAge"]) if "maxAge" in kept else None
        self.created = self.world.now
        self.status: dict = {}
        self.deleting = False
        self.deletion_mid_pass = False  # a deletion waiting to land while a pass decides to create
        self.gone = False
        self.namespace_terminating = False
        self.bucket = Bucket(lambda: self.world.now)
        for key in FOREIGN_KEYS:
            self.bucket.objects[key], self.bucket.modified[key] = b"theirs", self.world.now - 3600
        # An earlier EtcdBackup of the same name (deleted and created again) backed up the same cluster.
        main = self.world.main
        foreign = Manifest(
            snapshot_key(PREFIX, NAMESPACE, NAME, FOREIGN_SLOT),
            NAME,
            NAMESPACE,
            CLUSTER,
            "1" if main is None else f"{main.cluster_id:x}",
            "3.6.16",
            1,
            1,
            "00",
            format_time(self.world.now - 3600),
            "x",
            FOREIGN_SLOT,
            backup_uid="uid-of-an-earlier-b1",
        )
        self.bucket.objects[foreign.key] = foreign.to_json()
        for key in FOREIGN_KEYS:  # others' uploads in progress, long started
            self.bucket.uploads[f"theirs-{key}"] = (key, self.world.now - 3600)
        self.scratch_pod: ScratchPod | None = None
        self.started_slots: dict[str, int] = {}  # slot name -> step its StartSlot landed
        self.last_cron_slot: datetime.datetime | None = None
        self.manifests_written: set[str] = set()  # snapshot keys whose manifest was ever written
        self.snapshots: dict[str, tuple[int, str]] = {}  # snapshot key -> (revision, cluster ID) as taken
        self.taken_at: dict[str, float] = {}  # snapshot key -> the true time its manifest was written
        self.last_step: s.Step | None = None
        self.decided_on_deletion = False  # the last pass's copies showed the backup or the cluster being deleted

    # --- what one pass sees ------------------------------------------------------------------

    def _readiness(self, copy) -> ClusterReadiness | None:
        if copy is None:
            return None
        return ClusterReadiness.from_body({"metadata": DELETED if copy.deleting else {}, "status": copy.status})

    def observe(self, deleting_copy: bool, cluster_copy, state: RunState) -> Observed:
        observed = Observed(
            datetime.datetime.fromtimestamp(self.created, UTC),
            1,
            deleting=deleting_copy,
            prerequisites=Prerequisites(NAMESPACE, CLUSTER, self._readiness(cluster_copy)),
        )
        if state.verification is None or not state.verification.in_progress:
            return observed
        return dataclasses.replace(observed, scratch_pod_observed=True, scratch_pod=self.scratch_pod)

    # --- one pass ------------------------------------------------------------------------------

    def act(self, now: float, cluster_copy) -> None:
        """One pass at the acting process's wall clock `now`, on `cluster_copy` (None: the
        EtcdCluster is gone). A deletion pending mid-pass lands after the pass's GET of a pass
        that decided to create something."""
        if self.gone:
            return
        self._finish_scratch_pod()
        rng, sim = self.rng, self.sim
        state = RunState.from_dict(self.status)
        deleting_copy = self.deleting
        observed = self.observe(deleting_copy, cluster_copy, state)
        when = datetime.datetime.fromtimestamp(now, UTC)
        step = backup_planner.plan(self.spec, state, observed, now)
        self.last_step = step
        self.decided_on_deletion = deleting_copy or (cluster_copy is not None and cluster_copy.deleting)
        if self.deletion_mid_pass and isinstance(step, CREATING):
            self.deleting, self.deletion_mid_pass = True, False
            sim.faults.append((sim.step, f"EtcdBackup deleted while a pass decides {step.kind}"))
            sim.stats["backup_deleted_mid_pass"] += 1
        if (
            isinstance(step, (s.StartSlot, s.RetrySlot, s.RunBackup))
            and cluster_copy is not None
            and cluster_copy.deleting
        ):
            inv.nothing_created_for_an_object_being_deleted(
                f"{step.kind} (a run started)", f"EtcdCluster {CLUSTER}", True
            )
        try:
            outcome = self._carry_out(step, now)
        except Killed as killed:
            sim.faults.append((sim.step, f"backup {step.kind}: operator killed {killed.where}"))
            sim.stats["backup_killed"] += 1
            sim._new_process()
            return
        if outcome is None:
            return  # the pass raised: nothing written
        if step.kind not in ("WaitForSlot", "WaitForScratchPod", "Idle", "WaitForRetry"):
            sim.faults.append((sim.step, f"backup {step.kind} {getattr(step, 'slot', getattr(step, 'key', ''))}"))
        sim.stats[f"backup:{step.kind}"] += 1
        previous = self.status
        new = build_status(step, outcome, previous, 1, format_time(now))
        patch = changes(previous, new)
        if not patch:
            return
        if rng.random() < STATUS_WRITE_REFUSED:
            sim.stats["backup_status_write_refused"] += 1
            return
        if isinstance(step, s.StartSlot):
            self._slot_started(step, when)
        self.status = merge_patch(self.status, patch)

    def _slot_started(self, step: s.StartSlot, when: datetime.datetime) -> None:
        """The StartSlot's status write lands: the slot is started."""
        inv.slot_started_once(step.slot, self.started_slots.get(step.slot))
        if step.slot_time is not None:
            inv.catch_up_starts_the_latest_slot_once(
                step.slot,
                step.slot_time,
                self.last_cron_slot,
                croniter(SCHEDULE, step.slot_time).get_next(datetime.datetime),
                when,
            )
            self.last_cron_slot = step.slot_time
        self.started_slots[step.slot] = self.sim.step

    def _live_deleting(self) -> str | None:
        if self.deleting:
            return f"EtcdBackup {NAME}"
        if self.sim.cluster_deleting():
            return f"EtcdCluster {CLUSTER}"
        return None

    def _live(self, cluster_name: str | None) -> str | None:
        """backup/executor.py's fence: a GET of the backup (and the cluster) right before a create."""
        backup = None if self.gone else {"metadata": {"uid": UID, **(DELETED if self.deleting else {})}}
        sim = self.sim
        cluster = None if sim.cluster_gone() else {"metadata": DELETED if sim.cluster_deleting() else {}}
        refusal = backup_fence.creation_refusal(UID, backup, cluster_name, cluster)
        if refusal:
            sim.stats["backup_create_refused_by_the_live_fence"] += 1
        return refusal

    def _carry_out(self, step: s.Step, now: float) -> s.Outcome | None:
        rng = self.rng
        if isinstance(step, s.RunBackup):
            refusal = self._live(CLUSTER)
            if refusal:
                return s.RunNotStarted(message=refusal)
            return self._run(step, now)
        if isinstance(step, s.CreateScratchPod):
            if self._live(None):
                return s.NOTHING_DONE
            if self.namespace_terminating or rng.random() < POD_CREATE_REFUSED:
                self.sim.stats["backup_pod_create_refused"] += 1
                return None  # the API server refused it (a quota, NamespaceTerminating): the pass raised
            if self.scratch_pod is not None:
                return s.NOTHING_DONE  # Conflict
            if self.deleting:
                inv.nothing_created_for_an_object_being_deleted("CreateScratchPod", f"EtcdBackup {NAME}", True)
            self.scratch_pod = ScratchPod(f"{NAME}-verify", self.world.uid("scratch"), owned=True, phase="Pending")
            return s.ScratchPodCreated(pod_name=self.scratch_pod.name, pod_uid=self.scratch_pod.uid)
        if isinstance(step, s.DeleteStrayScratchPod):
            if self.scratch_pod is not None and self.scratch_pod.uid == step.pod_uid:
                self.scratch_pod = None
            return s.NOTHING_DONE
        if isinstance(step, s.FinishVerification):
            if self.scratch_pod is not None and self.scratch_pod.uid == step.pod_uid:
                self.scratch_pod = None
            at = format_time(now)
            if step.verified is None and not step.complete:
                return s.VerificationDone(
                    key=step.key, verified=None, reason=step.reason, message=step.message, at=at, complete=False
                )
            manifest = self._manifest(step.key)
            if manifest is None:
                return s.VerificationDone(
                    key=step.key,
                    verified=None,
                    reason="ManifestNotFound",
                    message=f"{step.key} is gone",
                    at=at,
                    complete=False,
                )
            marked = dataclasses.replace(manifest, verified=step.verified, verified_at=at)
            self.bucket.objects[marked.key] = marked.to_json()
            return s.VerificationDone(
                key=step.key,
                verified=step.verified,
                reason=step.reason,
                message=step.message,
                at=at,
                complete=step.complete,
            )
        return s.NOTHING_DONE

    def _finish_scratch_pod(self) -> None:
        """A scratch pod created before this pass has finished its check: the backup is whole."""
        pod = self.scratch_pod
        if pod is not None and pod.check is None:
            self.scratch_pod = dataclasses.replace(pod, phase="Succeeded", check=CheckResult(0, ""))

    def _manifest(self, key: str) -> Manifest | None:
        body = self.bucket.objects.get(manifest_key(key))
        return None if body is None else Manifest.from_json(body)

    # --- a run, as backup/runner.py does it -----------------------------------------------------

    def _run(self, step: s.RunBackup, now: float) -> s.Outcome:
        rng, sim = self.rng, self.sim
        runner = backup_runner.BackupRunner(
            None,
            pending_uploads=[dict(u) for u in step.pending_uploads],
            cluster_id_history=step.cluster_id_history,
            orphan_grace_seconds=ORPHAN_GRACE_SECONDS,
            clock=lambda: datetime.datetime.fromtimestamp(now, UTC),
        )
        spec = BackupSpec(CLUSTER, {}, PREFIX, 1 << 20, 1, self.max_backups, self.max_age)
        identity = Identity(NAMESPACE, NAME, UID)
        draw = rng.random()
        if draw < S3_TRANSIENT + S3_DENIED:
            denied = draw < S3_DENIED
            sim.stats["backup_s3_refused"] += 1
            return s.RunFailed(
                reason="AccessDenied" if denied else "StorageError",
                message="S3: " + ("403 AccessDenied" if denied else "503 SlowDown"),
                transient=not denied,
                pending_uploads=tuple(runner.pending_uploads),
            )
        key = snapshot_key(PREFIX, NAMESPACE, NAME, step.slot)
        drive(stale_uploads.abort_recorded(self.bucket, runner.pending_uploads))
        recorded = {u["uploadId"] for u in runner.pending_uploads}
        drive(stale_uploads.abort_orphans(self.bucket, FOLDER, key, recorded, ORPHAN_GRACE_SECONDS))
        self._check_uploads()
        existing = slot_already_ran(self.bucket, key)
        if existing is not None:
            if not existing.belongs_to(identity):
                return s.RunFailed(
                    reason="SlotTakenByForeignBackup",
                    message=key,
                    transient=False,
                    pending_uploads=tuple(runner.pending_uploads),
                )
            manifest = existing
            sim.stats["backup_slot_already_ran"] += 1
        else:
            taken = self._snapshot(runner, step, key, now)
            if not isinstance(taken, Manifest):
                return taken
            manifest = taken
        history = retention.extend_history(runner.cluster_id_history, manifest.cluster_id)
        self.bucket.on_delete = lambda doomed: self._check_deletion(doomed, manifest.snapshot_key)
        try:
            deleted = drive(
                catalogue.apply_retention(self.bucket, identity, spec, manifest.snapshot_key, history, runner.clock)
            ).deleted
        finally:
            self.bucket.on_delete = None
        self._check_kept(manifest)
        if deleted:
            sim.stats["backup_retention_deleted"] += 1
        record = {**manifest.status_record(), "startTime": format_time(now)}
        return s.RunSucceeded(
            record=record,
            completed_at=manifest.created_at,
            pending_uploads=tuple(runner.pending_uploads),
            deleted_keys=tuple(m.snapshot_key for m in deleted),
        )

    def _snapshot(self, runner, step: s.RunBackup, key: str, now: float) -> Manifest | s.Outcome:
        rng, sim, world = self.rng, self.sim, self.world
        # find_candidates reads the EtcdCluster right before it asks the members.
        if sim.cluster_gone():
            return s.RunFailed(
                reason="ClusterNotFound", message="gone", transient=True, pending_uploads=tuple(runner.pending_uploads)
            )
        choice, behind = backup_model.snapshot_source(world, sim.status)
        if not isinstance(choice, source_choice.SourceMember):
            sim.stats[f"backup_source_refused:{choice.reason}"] += 1
            return s.RunFailed(
                reason=choice.reason,
                message=choice.message,
                transient=True,
                pending_uploads=tuple(runner.pending_uploads),
            )
        inv.snapshot_from_the_cluster_itself(backup_model.snapshot_truth(world, choice, behind))
        owner = self._live_deleting()
        if owner is not None:
            inv.nothing_created_for_an_object_being_deleted("RunBackup (a snapshot upload)", owner, True)
        _, data, group = behind[choice.name]
        upload_id = self.bucket.start_multipart(key)
        if rng.random() < KILLED_BEFORE_RECORD:
            raise Killed("after start_multipart, before the upload was recorded in status")
        upload = {"key": key, "uploadId": upload_id}
        runner.pending_uploads.append(upload)
        self.status = merge_patch(self.status, {"pendingUploads": list(runner.pending_uploads)})
        draw = rng.random()
        if draw < KILLED_MID_UPLOAD:
            raise Killed("mid-upload")
        if draw < KILLED_MID_UPLOAD + UPLOAD_FAILS:
            sim.stats["backup_upload_failed"] += 1
            return s.RunFailed(
                reason="StorageError",
                message="S3: 500 during UploadPart",
                transient=True,
                pending_uploads=tuple(runner.pending_uploads),
            )
        self.bucket.complete_multipart(key, upload_id, b"snapshot")
        runner.pending_uploads.remove(upload)
        cluster_id = f"{group.cluster_id:x}"
        manifest = Manifest(
            snapshot_key=key,
            backup=NAME,
            namespace=NAMESPACE,
            cluster=CLUSTER,
            cluster_id=cluster_id,
            etcd_version="3.6.16",
            revision=data.revision,
            size=4096,
            sha256="ab" * 32,
            created_at=format_time(now),
            member=choice.name,
            slot=step.slot,
            backup_uid=UID,
        )
        inv.one_snapshot_per_slot(key, key in self.manifests_written)
        drive(self.bucket.put(manifest.key, manifest.to_json()))
        self.manifests_written.add(key)
        self.snapshots[key] = (data.revision, cluster_id)
        self.taken_at[key] = world.now
        sim.stats["backup_snapshot_taken"] += 1
        return manifest

    def _check_uploads(self) -> None:
        """After a run's aborts: none of this backup's uploads older than the grace is left, and
        nobody else's was touched."""
        theirs = [key for upload_id, (key, _) in self.bucket.uploads.items() if upload_id.startswith("theirs-")]
        left = [
            key
            for upload_id, (key, initiated) in self.bucket.uploads.items()
            if not upload_id.startswith("theirs-") and self.world.now - initiated >= ORPHAN_GRACE_SECONDS
        ]
        inv.orphaned_uploads_aborted_only_own(left, sorted(set(FOREIGN_KEYS) - set(theirs)))

    # --- retention, against the truth -----------------------------------------------------------

    def _own_complete(self) -> list[tuple[int, str, str, bool]]:
        """(revision, snapshot key, cluster ID, verified) of this backup's complete snapshots."""
        found = []
        for key in self.manifests_written:
            manifest = self._manifest(key)
            if manifest is not None and key in self.bucket.objects:
                revision, cluster_id = self.snapshots[key]
                found.append((revision, key, cluster_id, bool(manifest.verified)))
        return found

    def _current_lineage(self) -> list[tuple[int, str, str, bool]]:
        main = self.world.main
        current = None if main is None else f"{main.cluster_id:x}"
        return sorted((c for c in self._own_complete() if c[2] == current), reverse=True)

    def _check_deletion(self, key: str, written: str) -> None:
        snapshot = key.removesuffix(MANIFEST_SUFFIX) + SNAPSHOT_SUFFIX if key.endswith(MANIFEST_SUFFIX) else key
        theirs = snapshot not in self.manifests_written
        inv.retention_stays_in_its_folder(key, own_snapshot(key) and not theirs)
        if self.max_age is not None and self.max_backups is None and not theirs:
            inv.retention_respects_max_age(key, self.world.now - self.taken_at[snapshot], self.max_age)
        lineage = self._current_lineage()
        newest = {c[1] for c in lineage[:1]} | {c[1] for c in [c for c in lineage if c[3]][:1]}
        if snapshot == written or snapshot in newest:
            inv.retention_keeps_the_newest(key, written)

    def _check_kept(self, written: Manifest) -> None:
        """After retention: the N newest of the current lineage by revision stay, and beyond
        them only the snapshot just written and the newest verified one."""
        lineage = self._current_lineage()
        if self.max_backups is None or self.max_age is not None or not lineage or written.cluster_id != lineage[0][2]:
            return
        ranked = sorted(self.snapshots.items(), key=lambda kv: (kv[1][0], kv[0]), reverse=True)
        top = [
            key
            for key, (revision, cluster_id) in ranked
            if cluster_id == lineage[0][2] and key in self.manifests_written
        ][: self.max_backups]
        present = {c[1] for c in lineage}
        extra = [c for c in lineage if c[1] not in top and c[1] != written.snapshot_key]
        missing = [k for k in top if k not in present and k in self.manifests_written]
        inv.retention_keeps_n_by_revision(
            self.max_backups, missing, [c[1] for c in extra if not c[3]], len([c for c in extra if c[3]])
        )
