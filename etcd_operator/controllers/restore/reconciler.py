"""One pass for an EtcdRestore: observe, plan one step, take it, write status once.

Pending → Verifying → Restoring → Completed | Failed | AlreadyApplied. The decisions are
in restore.planner (pure, its invariants at the top); a restarted operator resumes from
what it observes and from status."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers import faults, metrics
from etcd_operator.controllers.restore.executor import RestoreExecutor
from etcd_operator.controllers.restore.observer import RestoreObserver
from etcd_operator.core.outcome import EventPoster
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.planner import plan, plan_deletion
from etcd_operator.core.restore.spec import TERMINAL_PHASES, RestoreSpec, RestoreStatus
from etcd_operator.core.restore.status import build_status
from etcd_operator.core.shard import Shard
from etcd_operator.core.status_patch import changed_fields
from etcd_operator.core.storage_policy import StoragePolicy
from etcd_operator.core.timefmt import format_time

logger = logging.getLogger(__name__)

# Seconds until the next pass, by what the last pass did.
AFTER_STATUS_STEP = 0.1  # the step only wrote status; go on at once
AFTER_STEP = 0.2  # the next step usually follows at once (the pass reads live objects)
WHILE_WAITING = 2.0
WHILE_RESTORING = 0.5  # restore pods or members are about to finish: each pass is a few list calls
NOT_DONE = 1.0  # the step could not be taken now: look again soon
STATUS_ONLY = (
    s.StartVerifying,
    s.BeginRestore,
    s.RecordPreservedData,
    s.ChooseMembers,
    s.PlanReplay,
    s.RecordReplayResult,
)
TERMINAL = (s.Idle, s.Fail, s.SkipAlreadyApplied, s.Complete)


class RestoreReconciler:
    def __init__(
        self,
        kube_client: kube.KubeClient,
        operator_image: str,
        post_event: EventPoster,
        shard: Shard = Shard(),
        storage_policy: StoragePolicy = StoragePolicy(),
    ):
        self.kube = kube_client
        self.operator_image = operator_image
        self.post_event = post_event
        self.finalizer = shard.finalizer
        self.observer = RestoreObserver(kube_client, shard, storage_policy)

    async def reconcile(self, body: Mapping[str, Any]) -> float | None:
        meta = body["metadata"]
        previous = body.get("status") or {}
        spec, status = RestoreSpec.from_dict(body["spec"]), RestoreStatus.from_dict(previous)
        if status.phase in TERMINAL_PHASES:
            return None  # ended: not even observed again
        observed = await self.observer.observe(body, spec, status)
        now = time.time()
        step = plan(spec, status, observed, now)
        if not isinstance(step, (s.Idle, s.Wait)):
            logger.info("%s/%s: %s (%s)", meta["namespace"], meta["name"], step.kind, step.reason)
        if isinstance(step, s.CreateSeedVolumes):
            await faults.stall_once(
                faults.STALE_RESTORE_PASS,
                f"{meta['namespace']}/{meta['name']}",
                lambda: self._target_being_deleted(meta["namespace"], spec.target),
            )
        outcome = await RestoreExecutor(self.kube, self.operator_image, body, self.post_event, self.finalizer).run(
            step, spec, status, observed
        )
        if not outcome.done:
            logger.info("%s/%s: %s not done: %s", meta["namespace"], meta["name"], step.kind, outcome.message)
        if isinstance(step, s.Idle):
            return None
        new_status = build_status(previous, step, outcome, meta.get("generation"), format_time(now))
        patch = changed_fields(previous, new_status)
        if patch:
            await self.kube.merge_patch(
                kube.ETCDRESTORES, meta["namespace"], meta["name"], {"status": patch}, subresource="status"
            )
        metrics.record_restore(meta["namespace"], meta["name"], previous.get("phase"), new_status)
        if outcome.failure or isinstance(step, TERMINAL):
            return None
        if outcome.retry_after is not None:
            return outcome.retry_after
        if not outcome.done:
            return NOT_DONE
        if isinstance(step, s.Wait):
            return WHILE_RESTORING if step.code in ("Restoring", "Replaying") else WHILE_WAITING
        return AFTER_STATUS_STEP if isinstance(step, STATUS_ONLY) else AFTER_STEP

    async def _target_being_deleted(self, namespace: str, target: str) -> bool:
        live = await self.kube.get(kube.ETCDCLUSTERS, namespace, target)
        return live is None or bool(live["metadata"].get("deletionTimestamp"))

    async def release_on_deletion(self, body: Mapping[str, Any]) -> bool:
        """The EtcdRestore is being deleted: take its hold off the target when that is safe
        (restore.planner.plan_deletion). False when the target changed meanwhile (try again)."""
        meta = body["metadata"]
        spec, status = RestoreSpec.from_dict(body["spec"]), RestoreStatus.from_dict(body.get("status") or {})
        if status.phase in TERMINAL_PHASES:
            return True
        observed = await self.observer.observe(body, spec, status)
        step = plan_deletion(spec, status, observed)
        if not isinstance(step, s.Idle):
            logger.info("%s/%s deleted: %s (%s)", meta["namespace"], meta["name"], step.kind, step.reason)
        if isinstance(step, s.Wait):
            self.post_event("Warning", step.code, step.reason)
        outcome = await RestoreExecutor(self.kube, self.operator_image, body, self.post_event, self.finalizer).run(
            step, spec, status, observed
        )
        return outcome.done
