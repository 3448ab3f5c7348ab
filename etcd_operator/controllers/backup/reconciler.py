"""One pass over an EtcdBackup: observe it, plan one step, carry it out, write status once.

A run's slot is recorded in status by its own pass (StartSlot) before the pass that runs it
(RunBackup), so a restarted operator finishes that slot under the same key instead of
running it twice. Two runs of one cluster never overlap (a lock per cluster). This
controller is the only writer of the object's status (write_status): the pass's one write,
and, while a run uploads, its pending uploads and progress, which the executor reports
through it (progress reports, not decisions). A verification takes several passes
(backup/planner.py); while one is recorded in progress, each pass also looks at its scratch
pod and comes back within VERIFY_RECHECK. Each pass also looks at what a run needs (the
EtcdCluster, the Secrets spec.storage.s3 names): a due run waits for them, looking again
every PREREQUISITE_RECHECK."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.credentials import missing_secrets
from etcd_operator.controllers import metrics
from etcd_operator.controllers.backup.continuous_streams import ContinuousStreams
from etcd_operator.controllers.backup.executor import BackupExecutor
from etcd_operator.core.backup import schedule, scratch_pod
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.continuous import stream_lag
from etcd_operator.core.backup.planner import plan
from etcd_operator.core.backup.state import Observed, Prerequisites, RunState, ScheduleSpec, ScratchPod
from etcd_operator.core.backup.status import build_status, run_events, schedule_events, verification_events
from etcd_operator.core.outcome import EventPoster
from etcd_operator.core.prerequisites import ClusterReadiness
from etcd_operator.core.shard import Shard
from etcd_operator.core.status_patch import changed_fields
from etcd_operator.core.storage_policy import StoragePolicy
from etcd_operator.core.timefmt import now_text, parse_time

logger = logging.getLogger(__name__)

# Longest wait between passes of a scheduled backup; None: until the spec or annotations change.
IDLE_RECHECK = 60.0
SOONEST_RECHECK = 0.5
VERIFY_RECHECK = 2.0  # while a scratch pod starts or goes
PREREQUISITE_RECHECK = 3.0  # while a due run waits for its cluster or a Secret
STREAM_RECHECK = 5.0  # while a continuous backup's writer runs: its progress goes to status
STREAM_START_RECHECK = 1.0


def delay_after(step: s.Step, now: datetime.datetime) -> float | None:
    """Seconds until the next pass, or None to wait for a change to the object."""
    match step:
        case (
            s.StartSlot()
            | s.RetrySlot()
            | s.RunBackup()
            | s.StartVerification()
            | s.FinishVerification()
            | s.MarkChainBroken()
            | s.StopStream()
        ):
            return 0.0
        case s.StartStream():
            return STREAM_START_RECHECK
        case s.Stream():
            return STREAM_RECHECK
        case s.WaitForPrerequisite():
            return PREREQUISITE_RECHECK
        case s.WaitForRetry():
            wake = min(t for t in (step.retry_at, step.next_slot, step.recheck_at) if t is not None)
            return min(max((wake - now).total_seconds(), SOONEST_RECHECK), IDLE_RECHECK)
        case s.CreateScratchPod() | s.DeleteStrayScratchPod() | s.WaitForScratchPod():
            return VERIFY_RECHECK
        case s.WaitForSlot():
            wake = min(step.next_slot, step.recheck_at) if step.recheck_at else step.next_slot
            return min(max((wake - now).total_seconds(), SOONEST_RECHECK), IDLE_RECHECK)
        case s.Idle() if step.recheck_at is not None:
            return max((step.recheck_at - now).total_seconds(), SOONEST_RECHECK)
        case s.Idle() | s.Suspend() | s.RefuseSchedule() | s.RefuseCredentials():
            return None
    raise TypeError(f"no delay for step {step.kind}")


class BackupReconciler:
    def __init__(
        self,
        kube_client: kube.KubeClient,
        cluster_locks: dict,
        post_event: EventPoster,
        operator_image: str = "",
        shard: Shard = Shard(),
        storage_policy: StoragePolicy = StoragePolicy(),
        streams: ContinuousStreams | None = None,
    ):
        self.kube = kube_client
        self.streams = streams if streams is not None else ContinuousStreams()
        self.storage_policy = storage_policy
        self.shard = shard
        self.operator_image = operator_image
        self.cluster_locks = cluster_locks
        self.post_event = post_event

    async def observe(self, body: Mapping[str, Any]) -> dict | None:
        """The object as the API server has it now: the status the last pass wrote may not
        have reached the daemon's copy yet."""
        meta = body["metadata"]
        return await self.kube.get(kube.ETCDBACKUPS, meta["namespace"], meta["name"])

    async def observe_scratch_pod(self, meta: Mapping[str, Any], state: RunState) -> Observed:
        """The object's metadata, and its scratch pod while a verification is recorded in
        progress (one GET; none otherwise)."""
        observed = Observed.from_metadata(meta)
        if state.verification is None or not state.verification.in_progress:
            return observed
        pod = await self.kube.get(kube.PODS, meta["namespace"], scratch_pod.pod_name(meta["name"]))
        return dataclasses.replace(
            observed,
            scratch_pod_observed=True,
            scratch_pod=None if pod is None else ScratchPod.from_pod(pod, meta["uid"]),
        )

    async def observe_prerequisites(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Prerequisites:
        """Whether the cluster exists and has served, and which named Secrets are missing.
        A Secret's data is not read here (nor ever reported)."""
        namespace, cluster_name = meta["namespace"], spec["clusterRef"]["name"]
        keys_secret = ((spec.get("encryption") or {}).get("secretRef") or {}).get("name")
        cluster, missing, keys = await asyncio.gather(
            self.kube.get(kube.ETCDCLUSTERS, namespace, cluster_name),
            missing_secrets(self.kube, namespace, spec["storage"]["s3"]),
            self.kube.get(kube.SECRETS, namespace, keys_secret) if keys_secret else asyncio.sleep(0, {}),
        )
        if keys_secret and keys is None:
            missing += (keys_secret,)
        return Prerequisites(
            namespace, cluster_name, None if cluster is None else ClusterReadiness.from_body(cluster), missing
        )

    async def write_status(self, meta: Mapping[str, Any], fields: Mapping[str, Any]) -> None:
        """The one writer of an EtcdBackup's status: merges `fields` into it."""
        await self.kube.merge_patch(
            kube.ETCDBACKUPS, meta["namespace"], meta["name"], {"status": dict(fields)}, subresource="status"
        )

    async def record_metrics(
        self, meta: Mapping[str, Any], raw_spec: Mapping[str, Any], spec: ScheduleSpec, status: dict, now: float
    ) -> None:
        """What the backup alerts judge it by (docs/monitoring.md)."""
        namespace, name = meta["namespace"], meta["name"]
        metrics.record_backup_status(namespace, name, status)
        mode = "continuous" if spec.continuous is not None else "scheduled" if spec.schedule else "one-shot"
        at = datetime.datetime.fromtimestamp(now, datetime.UTC)
        # In a thread: the longest gap walks up to a week of fires (cached per schedule).
        interval = await asyncio.to_thread(schedule.interval, spec.schedule, at) if spec.schedule else None
        metrics.record_backup_spec(namespace, name, raw_spec["clusterRef"]["name"], mode, spec.suspend, interval)
        view = self.streams.view((namespace, name))
        base_time = parse_time(status.get("lastSuccessfulTime"))
        lag = None if view is None else stream_lag(view, base_time, time.time())
        metrics.record_continuous_lag(namespace, name, lag)

    async def reconcile(self, body: Mapping[str, Any]) -> float | None:
        current = await self.observe(body)
        if current is None:
            return None  # deleted; the daemon is being stopped
        meta, status = current["metadata"], current.get("status") or {}
        state = RunState.from_dict(status)
        observed = await self.observe_scratch_pod(meta, state)
        observed = dataclasses.replace(
            observed,
            prerequisites=await self.observe_prerequisites(meta, current["spec"]),
            credentials_refusal=self.storage_policy.ambient_refusal(
                meta["namespace"], current["spec"]["storage"]["s3"]
            ),
            stream=self.streams.view((meta["namespace"], meta["name"])),
        )
        now = time.time()  # the wall clock, as every planner takes it
        # In a thread: checking a schedule's shortest gap walks up to a day of its fires
        # (about 0.3 s for one every 10 s, once a day; cached otherwise).
        spec = ScheduleSpec.from_dict(current.get("spec") or {})
        step = await asyncio.to_thread(plan, spec, state, observed, now)
        if isinstance(
            step,
            (
                s.StartSlot,
                s.RetrySlot,
                s.RunBackup,
                s.RefuseSchedule,
                s.RefuseCredentials,
                *s.VERIFICATION_STEPS,
                *s.STREAM_STEPS,
            ),
        ) and not isinstance(step, (s.WaitForScratchPod, s.Stream)):
            logger.info("%s/%s: %s (%s)", meta["namespace"], meta["name"], step.kind, step.message)

        outcome = await BackupExecutor(
            self.kube,
            self.cluster_locks,
            current,
            self.operator_image,
            self.shard,
            self.storage_policy.orphan_grace_seconds,
            write_status=functools.partial(self.write_status, meta),
            streams=self.streams,
        ).run(step)
        if outcome is not s.NOTHING_DONE:
            # A run patches status while it works (progress, pending uploads): diff against that.
            status = ((await self.observe(body)) or current).get("status") or {}

        new_status = build_status(step, outcome, status, meta.get("generation"), now_text())
        patch = changed_fields(status, new_status)
        if patch:
            await self.write_status(meta, patch)
        await self.record_metrics(meta, current["spec"], spec, {**status, **patch}, now)
        for event in (
            *outcome.events,
            *run_events(step, outcome, new_status),
            *schedule_events(status, new_status),
            *verification_events(status, new_status),
        ):
            self.post_event(*event)
        return delay_after(step, datetime.datetime.fromtimestamp(now, datetime.UTC))
