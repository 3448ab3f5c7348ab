"""Carries out one planned backup step. RunBackup runs BackupRunner, once, for a slot (and
attempt) already recorded in status, aborting the uploads the step names first; a failure is
returned for the status to retry; the verification steps each make one call to
BackupVerifier (create the scratch pod, delete a stray one, record the pod's verdict and
delete the pod). Every other step's effect is the status the pass writes. A run's progress
and its pending uploads go to status only through `write_status`, the controller's writer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.s3 import StorageError
from etcd_operator.controllers import faults, metrics
from etcd_operator.controllers.backup.continuous_streams import ContinuousStreams
from etcd_operator.controllers.backup.continuous_writer import SegmentWriter
from etcd_operator.controllers.backup.failure import BackupFailed
from etcd_operator.controllers.backup.runner import BackupRunner
from etcd_operator.controllers.backup.scratch_verifier import BackupVerifier, VerificationError
from etcd_operator.core.backup import fence, object_lock, orphans
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.continuous import ContinuousSpec, SegmentsWritten
from etcd_operator.core.backup.manifest import Identity, ignored_summary
from etcd_operator.core.backup.scratch_verdict import Verdict
from etcd_operator.core.backup.segments import SegmentManifest
from etcd_operator.core.backup.spec import BackupSpec
from etcd_operator.core.backup.status import pending_upload_fields, progress_fields
from etcd_operator.core.outcome import Event
from etcd_operator.core.shard import Shard
from etcd_operator.core.timefmt import now_text

logger = logging.getLogger(__name__)


StatusWriter = Callable[[Mapping[str, Any]], Awaitable[None]]  # merges fields into the object's status


class UnknownStep(TypeError):
    """A step with no handler: a programming error, never "done"."""


async def _no_status_writer(fields: Mapping[str, Any]) -> None:
    raise RuntimeError("this executor was given no status writer; the controller passes its own")


class BackupExecutor:
    def __init__(
        self,
        kube_client: kube.KubeClient,
        cluster_locks: dict,
        body: Mapping[str, Any],
        operator_image: str = "",
        shard: Shard = Shard(),
        orphan_grace_seconds: float = orphans.DEFAULT_GRACE_SECONDS,
        write_status: StatusWriter = _no_status_writer,
        streams: ContinuousStreams | None = None,
    ):
        self.kube = kube_client
        self.streams = streams if streams is not None else ContinuousStreams()
        self.write_status = write_status
        self.orphan_grace_seconds = orphan_grace_seconds
        self.shard = shard
        self.operator_image = operator_image
        self.cluster_locks = cluster_locks
        self.body = body
        self.namespace = body["metadata"]["namespace"]
        self.name = body["metadata"]["name"]

    async def run(self, step: s.Step) -> s.Outcome:
        handler = HANDLERS.get(type(step))
        if handler is None:
            raise UnknownStep(f"no handler for backup step {step.kind}")
        return await handler(self, step)

    async def _status_only(self, step: s.Step) -> s.Outcome:
        return s.NOTHING_DONE

    async def _fence(self, cluster_name: str | None) -> str | None:
        """Right before a run or a scratch pod: the live objects, not the pass's copies, decide."""
        backup = await self.kube.get(kube.ETCDBACKUPS, self.namespace, self.name)
        cluster = None if cluster_name is None else await self.kube.get(kube.ETCDCLUSTERS, self.namespace, cluster_name)
        return fence.creation_refusal(self.body["metadata"]["uid"], backup, cluster_name, cluster)

    async def _run_backup(self, step: s.RunBackup) -> s.Outcome:
        spec = BackupSpec.from_dict(self.body["spec"])
        refusal = await self._fence(spec.cluster)
        if refusal:
            # Not a failed attempt: nothing started, and the next pass sees the deletion (the
            # backup starts nothing; a run waits for a cluster that is not being deleted).
            return s.RunNotStarted(message=f"no snapshot taken: {refusal}")
        started = ((self.body.get("status") or {}).get("progress") or {}).get("startTime") or now_text()
        progress_writes: list[asyncio.Task] = []

        def on_progress(sent: int, member: str) -> None:
            progress_writes.append(
                asyncio.ensure_future(self.write_status(progress_fields(step.slot, started, sent, member)))
            )

        async def record_uploads(pending: list[dict[str, str]]) -> None:
            # Awaited: the key and upload ID are in status before any part is sent.
            await self.write_status(pending_upload_fields(pending))

        lock = self.cluster_locks.setdefault((self.namespace, spec.cluster), asyncio.Lock())
        runner = BackupRunner(
            self.kube,
            on_progress,
            [dict(u) for u in step.pending_uploads],
            record_uploads,
            self.shard,
            step.cluster_id_history,
            self.orphan_grace_seconds,
            continuous_chain=step.continuous_chain,
        )
        identity = Identity(self.namespace, self.name, self.body["metadata"]["uid"])
        async with lock:
            try:
                manifest, retained = await runner.run(identity, spec, step.slot)
            except BackupFailed as failure:
                await asyncio.gather(*progress_writes, return_exceptions=True)
                metrics.backup_failures.labels(self.namespace, self.name, failure.reason).inc()
                # Its Warning event comes from the status it leaves (status.run_events).
                return s.RunFailed(
                    reason=failure.reason,
                    message=failure.message,
                    transient=not failure.permanent,
                    pending_uploads=tuple(runner.pending_uploads),
                )
        await asyncio.gather(*progress_writes, return_exceptions=True)

        record = {**manifest.status_record(), "startTime": started}
        if runner.duration is not None:
            record["durationSeconds"] = round(runner.duration, 3)
            metrics.backup_duration.labels(self.namespace, self.name).observe(runner.duration)
        events: list[Event] = [
            (
                "Normal",
                "BackupSucceeded",
                f"Uploaded {manifest.snapshot_key} ({manifest.size} bytes, revision {manifest.revision}, "
                f"sha256 {manifest.sha256[:12]}…) from {manifest.member}",
            )
        ]
        deleted = retained.deleted
        if deleted:
            events.append(
                (
                    "Normal",
                    "RetentionApplied",
                    f"Deleted {len(deleted)} expired backups: {', '.join(m.snapshot_key for m in deleted)}",
                )
            )
        if retained.locked:
            kept = object_lock.summary(object_lock.status_fields(retained.locked))
            events.append(("Normal", "RetentionKeptLocked", kept))
        if retained.ignored:
            events.append(("Warning", "ManifestUnauthenticated", ignored_summary(retained.ignored)))
        return s.RunSucceeded(
            record=record,
            completed_at=manifest.created_at,
            pending_uploads=tuple(runner.pending_uploads),
            deleted_keys=tuple(m.snapshot_key for m in deleted),
            locked=retained.locked,
            events=tuple(events),
        )

    def _verifier(self) -> BackupVerifier:
        return BackupVerifier(self.kube, self.operator_image, self.body)

    async def _create_scratch_pod(self, step: s.CreateScratchPod) -> s.Outcome:
        refusal = await self._fence(None)
        if refusal:
            logger.info("%s/%s: no scratch pod created: %s", self.namespace, self.name, refusal)
            return s.NOTHING_DONE  # the next pass sees the deletion
        try:
            pod = await self._verifier().create_pod(step.key)
        except kube.Conflict:
            return s.NOTHING_DONE  # a pod of that name appeared: the next pass looks at it
        except (VerificationError, StorageError) as e:
            return _incomplete(step.key, e)
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        return s.ScratchPodCreated(
            pod_name=name,
            pod_uid=uid,
            events=(("Normal", "VerificationStarted", f"{step.key}: scratch pod {name} (uid {uid}) created"),),
        )

    async def _delete_stray_scratch_pod(self, step: s.DeleteStrayScratchPod) -> s.Outcome:
        await self._verifier().delete_pod(step.pod_name, step.pod_uid)
        return s.NOTHING_DONE

    async def _wait_for_scratch_pod(self, step: s.WaitForScratchPod) -> s.Outcome:
        faults.hit(faults.AFTER_SCRATCH_POD_RECORDED)
        return s.NOTHING_DONE

    async def _finish(self, step: s.FinishVerification) -> s.Outcome:
        verifier = self._verifier()
        if step.pod_name and step.pod_uid:
            faults.hit(faults.AFTER_SCRATCH_POD_RECORDED)
            await verifier.delete_pod(step.pod_name, step.pod_uid)
        if step.verified is None and not step.complete:
            return s.VerificationDone(
                key=step.key, verified=None, reason=step.reason, message=step.message, at=now_text(), complete=False
            )
        verdict = Verdict(step.verified, step.reason, step.message)
        try:
            at = await verifier.record_verdict(step.key, verdict)
        except (VerificationError, StorageError) as e:
            return _incomplete(step.key, e)
        return self._verdict(step.key, verdict, at)

    def _verdict(self, key: str, verdict: Verdict, at: str) -> s.VerificationDone:
        """A comparison's outcome (a verdict or an inconclusive one): never retried."""
        event: Event
        if verdict.verified:
            event = ("Normal", "BackupVerified", f"{key}: {verdict.message}")
        elif verdict.verified is False:
            metrics.backup_verification_failures.labels(self.namespace, self.name, verdict.reason).inc()
            event = ("Warning", "BackupVerificationFailed", f"{key}: {verdict.reason}: {verdict.message}")
        else:
            event = ("Normal", "VerificationInconclusive", f"{key}: {verdict.reason}: {verdict.message}")
        return s.VerificationDone(
            key=key, verified=verdict.verified, reason=verdict.reason, message=verdict.message, at=at, events=(event,)
        )

    # --- the continuous backup's writer --------------------------------------------------

    @property
    def _key(self) -> tuple[str, str]:
        return self.namespace, self.name

    def _identity(self) -> Identity:
        return Identity(self.namespace, self.name, self.body["metadata"]["uid"])

    def _since_full_snapshot(self, segments: list[SegmentManifest]) -> SegmentsWritten:
        """What of `segments` lies after the newest full snapshot (status.lastBackup)."""
        base = ((self.body.get("status") or {}).get("lastBackup") or {}).get("revision") or 0
        after = [m for m in segments if m.last_revision > int(base)]
        return SegmentsWritten(len(after), sum(m.events for m in after), sum(m.size for m in after))

    async def _start_stream(self, step: s.StartStream) -> s.Outcome:
        continuous = ContinuousSpec.from_dict(self.body["spec"])
        if continuous is None:
            raise ValueError("StartStream planned for a backup without spec.continuous")
        writer = SegmentWriter(
            self.kube, self._identity(), BackupSpec.from_dict(self.body["spec"]), continuous, step.start, self.shard
        )
        before = await self.streams.start(self._key, writer)
        written = self._since_full_snapshot(before.drain()) if before is not None else SegmentsWritten()
        event: Event = ("Normal", "ContinuousBackupStarted", step.message)
        return s.StreamReport(view=writer.view(), written=written, events=(event,))

    async def _stream(self, step: s.Stream) -> s.Outcome:
        writer = self.streams.get(self._key)
        if writer is None:
            return s.StreamReport(view=None)  # gone since the pass observed it: the next starts one
        return s.StreamReport(view=writer.view(), written=self._since_full_snapshot(writer.drain()))

    async def _mark_chain_broken(self, step: s.MarkChainBroken) -> s.Outcome:
        await self.streams.stop(self._key)
        broken = step.chain_break
        message = (
            f"chain {broken.chain} cannot go on after revision {broken.last_revision} ({broken.reason}: "
            f"{broken.message}); a full snapshot is taken now and a new chain starts from it"
        )
        return s.Outcome(events=(("Warning", "ContinuousChainBroken", message),))

    async def _stop_stream(self, step: s.StopStream) -> s.Outcome:
        await self.streams.stop(self._key)
        return s.Outcome(events=(("Normal", "ContinuousBackupStopped", step.message),))


def _incomplete(key: str, error: Exception) -> s.VerificationDone:
    """No verdict: the attempt could not compare. Its events come from the status it leaves."""
    reason, message = (
        (error.reason, error.message) if isinstance(error, VerificationError) else ("StorageError", str(error))
    )
    return s.VerificationDone(key=key, verified=None, reason=reason, message=message, at=now_text(), complete=False)


HANDLERS: dict[type[s.Step], Callable[[BackupExecutor, Any], Awaitable[s.Outcome]]] = {
    s.Idle: BackupExecutor._status_only,
    s.WaitForSlot: BackupExecutor._status_only,
    s.Suspend: BackupExecutor._status_only,
    s.RefuseSchedule: BackupExecutor._status_only,
    s.RefuseCredentials: BackupExecutor._status_only,
    s.WaitForPrerequisite: BackupExecutor._status_only,
    s.WaitForRetry: BackupExecutor._status_only,
    s.StartSlot: BackupExecutor._status_only,
    s.RetrySlot: BackupExecutor._status_only,
    s.RunBackup: BackupExecutor._run_backup,
    s.StartVerification: BackupExecutor._status_only,
    s.CreateScratchPod: BackupExecutor._create_scratch_pod,
    s.DeleteStrayScratchPod: BackupExecutor._delete_stray_scratch_pod,
    s.WaitForScratchPod: BackupExecutor._wait_for_scratch_pod,
    s.FinishVerification: BackupExecutor._finish,
    s.StartStream: BackupExecutor._start_stream,
    s.Stream: BackupExecutor._stream,
    s.MarkChainBroken: BackupExecutor._mark_chain_broken,
    s.StopStream: BackupExecutor._stop_stream,
}
