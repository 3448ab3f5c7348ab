"""Drives one EtcdBackup: a one-shot run, or runs on a cron schedule. Every run's slot is
recorded in status before it starts, so a restarted operator finishes that slot (same
object key) instead of running it twice; two runs of one cluster never overlap."""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any, Callable, Mapping

from etcd_operator import conditions as c
from etcd_operator import metrics
from etcd_operator.backup import schedule
from etcd_operator.backup.runner import BackupFailed, BackupRunner, BackupSpec
from etcd_operator.timefmt import now_text
from etcd_operator.timefmt import format_time, parse_time
from etcd_operator.kube import client as kube

logger = logging.getLogger(__name__)

RECENT_BACKUPS = 10
IDLE_RECHECK = 60.0
SUSPENDED_RECHECK = 30.0

EventPoster = Callable[[str, str, str], None]


def _utc(ts: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)


class BackupController:
    def __init__(self, kube_client: kube.KubeClient, cluster_locks: dict, post_event: EventPoster):
        self.kube = kube_client
        self.cluster_locks = cluster_locks
        self.post_event = post_event

    async def _patch_status(self, body: Mapping[str, Any], status: dict) -> None:
        meta = body["metadata"]
        await self.kube.merge_patch(kube.ETCDBACKUPS, meta["namespace"], meta["name"], {"status": status},
                                    subresource="status")

    def _conditions(self, body: Mapping[str, Any], available: c.Condition, progressing: c.Condition,
                    degraded: c.Condition) -> list[dict]:
        previous = (body.get("status") or {}).get("conditions")
        return c.merge(previous, [available, progressing, degraded], now_text(), body["metadata"].get("generation"))

    async def reconcile(self, body: Mapping[str, Any]) -> float | None:
        """Returns seconds until the next look, or None when there is nothing more to do."""
        spec, status = body.get("spec") or {}, body.get("status") or {}
        now = datetime.datetime.now(datetime.timezone.utc)
        expression = spec.get("schedule")
        interrupted = (status.get("progress") or {}).get("slot")

        if not expression:
            if status.get("phase") in ("Completed", "Failed") and not interrupted:
                return None
            created = parse_time(body["metadata"]["creationTimestamp"])
            slot = interrupted or "once-" + schedule.slot_name(_utc(created))
            await self._run(body, slot, one_shot=True)
            return None

        if not schedule.valid(expression):
            await self._patch_status(body, {"phase": "Failed", "conditions": self._conditions(
                body, c.Condition("Available", bool(status.get("lastSuccessfulTime")), "NoNewBackups"),
                c.Condition("Progressing", False, "InvalidSchedule"),
                c.Condition("Degraded", True, "InvalidSchedule", f"spec.schedule {expression!r} is not a cron expression"))})
            return None
        if spec.get("suspend"):
            if status.get("phase") != "Suspended":
                await self._patch_status(body, {"phase": "Suspended", "nextScheduleTime": None})
            return SUSPENDED_RECHECK
        if interrupted:
            await self._run(body, interrupted, one_shot=False)
            return 0.5

        last = parse_time(status.get("lastScheduleTime"))
        created = parse_time(body["metadata"]["creationTimestamp"])
        due = schedule.due(expression, _utc(last) if last else None, _utc(created), now)
        if due.slot is not None:
            await self._patch_status(body, {"lastScheduleTime": format_time(due.slot.timestamp()),
                                            "progress": {"slot": schedule.slot_name(due.slot), "startTime": now_text(),
                                                         "bytesSent": 0}})
            await self._run(body, schedule.slot_name(due.slot), one_shot=False)
            return 0.5
        if status.get("nextScheduleTime") != format_time(due.next_slot.timestamp()) or status.get("phase") != "Scheduled":
            await self._patch_status(body, {"phase": "Scheduled",
                                            "nextScheduleTime": format_time(due.next_slot.timestamp()),
                                            "observedGeneration": body["metadata"].get("generation")})
        return min(max((due.next_slot - now).total_seconds(), 0.5), IDLE_RECHECK)

    async def _run(self, body: Mapping[str, Any], slot: str, one_shot: bool) -> None:
        meta, status = body["metadata"], body.get("status") or {}
        spec = BackupSpec.from_dict(body["spec"])
        started = (status.get("progress") or {}).get("startTime") or now_text()
        await self._patch_status(body, {
            "phase": "Running",
            "progress": {"slot": slot, "startTime": started, "bytesSent": 0},
            "conditions": self._conditions(
                body, c.Condition("Available", bool(status.get("lastSuccessfulTime")),
                                  "BackupAvailable" if status.get("lastSuccessfulTime") else "NoBackupYet"),
                c.Condition("Progressing", True, "BackupRunning", f"snapshot for slot {slot}"),
                c.Condition("Degraded", False, "Healthy")),
        })
        progress_writes: list[asyncio.Task] = []

        def on_progress(sent: int, member: str) -> None:
            patch = {"progress": {"slot": slot, "startTime": started, "bytesSent": sent, "member": member}}
            progress_writes.append(asyncio.ensure_future(self._patch_status(body, patch)))

        lock = self.cluster_locks.setdefault((meta["namespace"], spec.cluster), asyncio.Lock())
        runner = BackupRunner(self.kube, on_progress)
        async with lock:
            try:
                manifest, deleted = await runner.run(meta["namespace"], meta["name"], spec, slot)
            except BackupFailed as failure:
                await asyncio.gather(*progress_writes, return_exceptions=True)
                await self._record_failure(body, failure, one_shot)
                return
        await asyncio.gather(*progress_writes, return_exceptions=True)
        record = {**manifest.status_record(), "startTime": started}
        if runner.duration is not None:
            record["durationSeconds"] = round(runner.duration, 3)
        recent = [record] + [r for r in status.get("recentBackups") or [] if r.get("key") != record["key"]]
        recent = [r for r in recent if r.get("key") not in {m.snapshot_key for m in deleted}][:RECENT_BACKUPS]
        await self._patch_status(body, {
            "phase": "Completed" if one_shot else "Scheduled",
            "lastBackup": record,
            "lastSuccessfulTime": manifest.created_at,
            "recentBackups": recent,
            "progress": None,
            "observedGeneration": meta.get("generation"),
            "conditions": self._conditions(
                body, c.Condition("Available", True, "BackupSucceeded", f"latest backup {manifest.snapshot_key}"),
                c.Condition("Progressing", False, "Idle"),
                c.Condition("Degraded", False, "Healthy")),
        })
        metrics.backup_last_success.labels(meta["namespace"], meta["name"]).set_to_current_time()
        metrics.backup_bytes.labels(meta["namespace"], meta["name"]).set(manifest.size)
        if runner.duration is not None:
            metrics.backup_duration.labels(meta["namespace"], meta["name"]).observe(runner.duration)
        self.post_event("Normal", "BackupSucceeded",
                        f"Uploaded {manifest.snapshot_key} ({manifest.size} bytes, revision {manifest.revision}, "
                        f"sha256 {manifest.sha256[:12]}…) from {manifest.member}")
        if deleted:
            self.post_event("Normal", "RetentionApplied",
                            f"Deleted {len(deleted)} expired backups: {', '.join(m.snapshot_key for m in deleted)}")

    async def _record_failure(self, body: Mapping[str, Any], failure: BackupFailed, one_shot: bool) -> None:
        status = body.get("status") or {}
        await self._patch_status(body, {
            "phase": "Failed" if one_shot else "Scheduled",
            "progress": None,
            "observedGeneration": body["metadata"].get("generation"),
            "conditions": self._conditions(
                body, c.Condition("Available", bool(status.get("lastSuccessfulTime")),
                                  "BackupAvailable" if status.get("lastSuccessfulTime") else "NoBackupYet"),
                c.Condition("Progressing", False, "Idle"),
                c.Condition("Degraded", True, failure.reason, failure.message)),
        })
        metrics.backup_failures.labels(body["metadata"]["namespace"], body["metadata"]["name"], failure.reason).inc()
        self.post_event("Warning", "BackupFailed", f"{failure.reason}: {failure.message}")
