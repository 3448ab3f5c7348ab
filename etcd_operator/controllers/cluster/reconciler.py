"""One reconcile pass for an EtcdCluster: observe, plan one step, take it, report."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from etcd_operator import DEFAULT_OPERATOR_IMAGE
from etcd_operator.clients.etcd.pool import EtcdClientPool
from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers import metrics
from etcd_operator.controllers.cluster.executor import BeingDeleted, ClusterExecutor, HeldByRestore
from etcd_operator.controllers.cluster.metrics_watcher import SCRAPE_EVERY, MemberMetricsWatcher
from etcd_operator.controllers.cluster.observer import ClusterObserver, StorageClassExpansion
from etcd_operator.core import conditions as c
from etcd_operator.core.cluster import anomaly_detection, auth, hibernation, ownership, pacing, tls_plan
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.decision import plan
from etcd_operator.core.cluster.health import HealthState
from etcd_operator.core.cluster.member_pod_outcome import CollisionOutcome, MemberPodOutcome
from etcd_operator.core.cluster.naming import DEFAULT_CLUSTER_DOMAIN
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.cluster.status import build_status
from etcd_operator.core.outcome import EventPoster
from etcd_operator.core.status_patch import changed_fields

logger = logging.getLogger(__name__)

# Seconds until the next pass, by what the last pass did.
AFTER_STEP = 1.0
NOT_YET = 1.0  # etcd refused a step for now (e.g. a new voter not connected for 5 s yet)
WHILE_WAITING = 3.0
WHILE_DELETED = 10.0  # until kopf stops the daemon of an object being deleted
WHEN_STEADY = 15.0  # the default of OperatorConfig.steady_poll_seconds
WHEN_STEADY_AND_QUIET = 60.0  # the default of OperatorConfig.steady_poll_max_seconds
RESYNC = 600.0  # the default of OperatorConfig.resync_seconds
RESYNC_JITTER = 0.25  # each cluster's resync interval varies by this fraction, so clusters drift apart

ChildSource = Callable[[str, str], "tuple[list[dict], list[dict]] | None"]  # (namespace, cluster) -> (pods, PVCs)


class ClusterReconciler:
    def __init__(
        self,
        kube_client: kube.KubeClient,
        etcd_clients: EtcdClientPool,
        post_event: EventPoster,
        operator_namespace: str = "default",
        cached_children: ChildSource | None = None,
        storage_classes: StorageClassExpansion | None = None,
        steady_poll: float = WHEN_STEADY,
        steady_poll_max: float = WHEN_STEADY_AND_QUIET,
        resync: float = RESYNC,
        clock: Callable[[], float] = time.monotonic,
        being_deleted: Callable[[], bool] = lambda: False,
        held_by: Callable[[], str | None] = lambda: None,
        operator_image: str = DEFAULT_OPERATOR_IMAGE,
        cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
        adoption_cross_namespace: bool = False,
        member_metrics_every: float = SCRAPE_EVERY,
        child_changed: asyncio.Event | None = None,
    ):
        """`cached_children`: the operator's pod and PVC caches (None: every pass lists live).
        `being_deleted` reads the live object's deletionTimestamp: once it is set, no pass
        acts and nothing more is created (kopf stops the daemon, the deletion handler runs).
        `held_by` reads the live object's restore hold: a pass that decided on an older copy
        takes no member step while it stands (executor.HeldByRestore). `child_changed`: the
        daemon's wake-up (ClusterObserver)."""
        self.kube = kube_client
        self.operator_namespace = operator_namespace
        self.operator_image = operator_image
        self.etcd_clients = etcd_clients
        self.post_event = post_event
        self.observer = ClusterObserver(
            kube_client,
            etcd_clients,
            storage_classes,
            cluster_domain=cluster_domain,
            adoption_cross_namespace=adoption_cross_namespace,
            child_changed=child_changed,
        )
        self.member_metrics = MemberMetricsWatcher(every=member_metrics_every)
        self.cached_children = cached_children
        self.steady_poll = steady_poll
        self.steady_poll_max = steady_poll_max
        self.quiet_passes = 0  # Steady passes in a row that changed nothing in status (pacing.steady_interval)
        self.resync = resync
        self.clock = clock
        self.next_resync = 0.0  # the first pass is live
        self.last_action: a.Step | None = None  # what the previous pass decided; None: no pass yet
        self.bootstrapped_at: float | None = None  # when this daemon last started bootstrap members, on `clock`
        self.services_applied: str | None = None  # hash of the child manifests last applied in full
        self.live_passes = 0  # counters for tests and logs
        self.cached_passes = 0
        self.redecided = 0
        self.being_deleted = being_deleted
        self.held_by = held_by
        self.namespace_terminating = False  # a create was refused: the namespace is being deleted

    async def close(self) -> None:
        await self.member_metrics.close()

    @property
    def wakeable(self) -> bool:
        """Whether a child's change may cut the sleep after this pass short: only after a pass
        that took no step, so that steps keep their pace (a step's own pod and PVC events
        would otherwise start the next step at once)."""
        return isinstance(self.last_action, (a.Steady, a.Wait))

    def _resync_due(self) -> bool:
        return self.clock() >= self.next_resync

    def _schedule_resync(self) -> None:
        self.next_resync = self.clock() + self.resync * random.uniform(1 - RESYNC_JITTER, 1 + RESYNC_JITTER)

    def _cached(self, meta: Mapping[str, Any], last: a.Step | None) -> tuple[list[dict], list[dict]] | None:
        """The children from the caches, when this pass may read them: the previous pass ended
        without a step (`last`), no resync is due and the caches hold a full listing."""
        if self.cached_children is None or self._resync_due():
            return None
        if not isinstance(last, (a.Steady, a.Wait)):
            return None
        return self.cached_children(meta["namespace"], meta["name"])

    def _left_alone(self, meta: Mapping[str, Any]) -> bool:
        """An object marked for deletion, or in a namespace being deleted, gets no pass."""
        return bool(meta.get("deletionTimestamp")) or self.being_deleted() or self.namespace_terminating

    async def reconcile(self, body: Mapping[str, Any]) -> float:
        meta = body["metadata"]
        if self._left_alone(meta):
            return WHILE_DELETED
        try:
            return await self._pass(body)
        except BeingDeleted:
            logger.info(
                "%s/%s: marked for deletion during the pass; nothing more is created", meta["namespace"], meta["name"]
            )
        except HeldByRestore as e:
            # The next pass decides on a copy with the hold, and acknowledges it in status.
            logger.info(
                "%s/%s: the pass decided on a copy without the restore hold: %s", meta["namespace"], meta["name"], e
            )
            return AFTER_STEP
        except kube.NamespaceTerminating:
            self.namespace_terminating = True  # for good: a namespace never stops terminating
            logger.info(
                "%s/%s: namespace %s is being deleted; nothing more is created for this cluster",
                meta["namespace"],
                meta["name"],
                meta["namespace"],
            )
        return WHILE_DELETED

    async def _pass(self, body: Mapping[str, Any]) -> float:
        meta = body["metadata"]
        spec = ClusterSpec.from_dict(body.get("spec") or {})
        previous = body.get("status") or {}
        recorded = ClusterStatus.from_dict(previous)
        resync = self._resync_due()
        last, self.last_action = self.last_action, None  # a pass that fails is followed by a live one
        children = self._cached(meta, last)
        # TLS Secrets: reused only on a pass after a steady one (a rotation is always read live).
        live_secrets = children is None or not isinstance(last, a.Steady)
        now = time.time()  # the wall clock as the pass starts to look
        observed = await self.observer.observe(body, recorded, children, live_secrets=live_secrets)
        decision = plan(spec, recorded, observed, now, stored_spec=body.get("spec") or {})
        if children is not None and not isinstance(decision.action, (a.Steady, a.Wait)):
            # No step is ever taken on cached data: look again, live, and decide again.
            logger.info(
                "%s/%s: %s decided on cached state; observing live before acting",
                meta["namespace"],
                meta["name"],
                decision.action.kind,
            )
            self.redecided += 1
            children = None
            now = time.time()
            observed = await self.observer.observe(body, recorded, None, live_secrets=True)
            decision = plan(spec, recorded, observed, now, stored_spec=body.get("spec") or {})
        if children is None:
            self.live_passes += 1
        else:
            self.cached_passes += 1
        self.member_metrics.poke(observed.pods, now)
        warnings, scraped = self.member_metrics.warnings(observed, now)

        executor = ClusterExecutor(
            self.kube,
            self.etcd_clients,
            body,
            self.post_event,
            self.operator_namespace,
            self.being_deleted,
            self.held_by,
            self.operator_image,
            status=recorded,
            now=now,
        )
        acting_spec, health, action = decision.acting_spec, decision.health, decision.action
        await executor.disown_member_pvcs(observed)  # even when paused: it protects data
        if not spec.paused:
            # Applied when what they should be changed, and at every resync.
            applied, self.services_applied = self.services_applied, None  # unknown until the apply completes
            self.services_applied, collisions = await executor.ensure_services(
                acting_spec, health, applied=applied, force=resync
            )
            if self.services_applied is not None or collisions:
                self.observer.collisions = collisions  # reported from the next pass on (cluster/ownership.py)
        if not isinstance(action, (a.Steady, a.Wait)):
            logger.info("%s/%s: %s (%s)", meta["namespace"], meta["name"], action.kind, action.reason)
        if isinstance(action, a.AppendEntryForLearner):
            self.observer.remember_learner_entry(action.member_id)  # before sending: a failed one is paced too
        outcome = await executor.run(action, acting_spec, observed)
        if isinstance(outcome, MemberPodOutcome):
            self.observer.remember(outcome.admission)  # evidence for the next pass (cluster/admission.py)
        if not outcome.done:
            logger.info("%s/%s: %s not taken yet: %s", meta["namespace"], meta["name"], action.kind, outcome.message)
        if isinstance(outcome, CollisionOutcome):
            self.observer.step_collisions = dict([outcome.collision])  # reported from the next pass on
        elif outcome.done:
            self.observer.step_collisions = {}

        conditions = [*decision.conditions, anomaly_detection.condition(warnings, scraped)]
        self._post_transition_events(previous, conditions)
        extra = {**decision.status_fields(), **(outcome.status_fields or {})}
        tls_status = tls_plan.tls_status(spec, observed, extra.get("tls"))
        if tls_status:
            extra["tls"] = tls_status
        if decision.auth_record is not None:
            extra["auth"] = auth.status_record(
                decision.auth_record, (outcome.status_fields or {}).get("auth"), recorded.auth
            )
        status = build_status(
            spec, recorded, observed, now, health, action, conditions, previous, meta.get("generation", 0), extra=extra
        )
        status["members"] = anomaly_detection.with_warnings(status["members"], warnings)
        for member, warning in anomaly_detection.appeared(previous.get("members"), warnings):
            self.post_event("Warning", warning.kind, f"member {member}: {warning.message}")
        if not isinstance(action, (a.Steady, a.Wait)) and outcome.done:
            metrics.reconcile_steps.labels(meta["namespace"], meta["name"], action.kind).inc()
        metrics.record_cluster(
            meta["namespace"],
            meta["name"],
            spec.size,
            [
                (m["name"], m["role"], m["healthy"], m.get("dbSize", 0), m.get("dbSizeInUse", 0))
                for m in status["members"]
            ],
            health.has_quorum,
            health.state == HealthState.QUORUM_LOST,
            hibernating=hibernation.owns(spec, recorded),
        )
        metrics.record_member_warnings(meta["namespace"], meta["name"], warnings)
        metrics.record_alarms(meta["namespace"], meta["name"], tuple(health.alarm_names))
        status_changed = bool(changed_fields(previous, status))
        if status_changed:  # the whole status is written
            await self.kube.merge_patch(
                kube.ETCDCLUSTERS, meta["namespace"], meta["name"], {"status": status}, subresource="status"
            )
        quiet = isinstance(action, a.Steady) and isinstance(last, a.Steady) and not status_changed
        self.quiet_passes = self.quiet_passes + 1 if quiet else 0
        if isinstance(action, a.Steady) and not isinstance(last, a.Steady):
            logger.info(
                "%s/%s: steady; members polled every %gs%s, a child's change wakes the next pass at once",
                meta["namespace"],
                meta["name"],
                self.steady_poll,
                f", up to every {self.steady_poll_max:g}s while nothing changes"
                if self.steady_poll_max > self.steady_poll
                else "",
            )
        self.last_action = action if outcome.done or isinstance(action, (a.Steady, a.Wait)) else None
        if resync:
            self._schedule_resync()
        if isinstance(action, a.BootstrapMembers) and outcome.done:
            self.bootstrapped_at = self.clock()
        if outcome.retry_after is not None:
            return outcome.retry_after  # a member being added or removed (cluster.pacing)
        if pacing.members_starting(action, self.bootstrapped_at, self.clock()):
            return pacing.MEMBERS_STARTING
        if isinstance(action, a.Steady):
            delay = pacing.steady_interval(self.steady_poll, self.steady_poll_max, self.quiet_passes)
            if delay > self.steady_poll:
                # Quiet: the members' gRPC channels (about 60 KiB each) close until the next pass.
                await self.etcd_clients.close()
            return delay
        if isinstance(action, a.Wait):
            return WHILE_WAITING
        return AFTER_STEP if outcome.done else NOT_YET

    def _post_transition_events(self, previous: Mapping[str, Any], current: list[c.Condition]) -> None:
        by_type = {cond.type: cond for cond in current}
        warnings = {
            "QuorumLost": (by_type["QuorumLost"], True),
            "Alarm": (by_type["Alarm"], True),
            "SpecAccepted": (by_type["SpecAccepted"], False),
            "AnnotationsAccepted": (by_type["AnnotationsAccepted"], False),
            "OddSize": (by_type["OddSize"], False),
            "PodSpecAccepted": (by_type["PodSpecAccepted"], False),
            ownership.CONDITION: (by_type[ownership.CONDITION], False),
        }
        for name, (condition, bad_status) in warnings.items():
            before = c.find(previous.get("conditions"), name)
            if condition.status is bad_status and (before is None or before.get("status") != condition.status_text):
                self.post_event("Warning", condition.reason, condition.message)
        drift = by_type["AuthInSync"]
        before = c.find(previous.get("conditions"), "AuthInSync")
        if drift.reason in auth.WARNING_REASONS and (before is None or before.get("reason") != drift.reason):
            self.post_event("Warning", drift.reason, drift.message)
