"""One reconcile pass for an EtcdCluster: observe, plan one step, take it, report."""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

from etcd_operator import conditions as c
from etcd_operator import metrics
from etcd_operator.cluster import actions as a
from etcd_operator.cluster import anomalies
from etcd_operator.cluster.decision import decide
from etcd_operator.cluster.executor import ClusterExecutor, EventPoster
from etcd_operator.cluster.health import HealthState
from etcd_operator.cluster.insights import MemberMetricsWatcher
from etcd_operator.cluster.observer import ClusterObserver
from etcd_operator.cluster.spec import ClusterSpec
from etcd_operator.cluster.status import build_status
from etcd_operator.cluster import tls_plan
from etcd_operator.etcd.pool import EtcdClientPool
from etcd_operator.kube import client as kube

logger = logging.getLogger(__name__)

# Seconds until the next pass, by what the last pass did.
AFTER_STEP = 1.0
NOT_YET = 1.0  # etcd refused a step for now (e.g. a new voter not connected for 5 s yet)
WHILE_WAITING = 3.0
WHEN_STEADY = 15.0


class ClusterReconciler:
    def __init__(self, kube_client: kube.KubeClient, etcd_clients: EtcdClientPool, post_event: EventPoster,
                 operator_namespace: str = "default"):
        self.kube = kube_client
        self.operator_namespace = operator_namespace
        self.etcd_clients = etcd_clients
        self.post_event = post_event
        self.observer = ClusterObserver(kube_client, etcd_clients)
        self.member_metrics = MemberMetricsWatcher()

    async def close(self) -> None:
        await self.member_metrics.close()

    async def reconcile(self, body: Mapping[str, Any]) -> float:
        meta = body["metadata"]
        spec = ClusterSpec.from_dict(body.get("spec") or {})
        previous = body.get("status") or {}
        observed = await self.observer.observe(body, time.time())
        self.member_metrics.poke(observed.pods, observed.now)
        warnings, scraped = self.member_metrics.warnings(observed)

        executor = ClusterExecutor(self.kube, self.etcd_clients, body, self.post_event, self.operator_namespace)
        decision = decide(spec, observed, body.get("spec") or {})
        acting_spec, health, action = decision.acting_spec, decision.health, decision.action
        if not spec.paused:
            await executor.ensure_services(acting_spec, health)
        if not isinstance(action, (a.Steady, a.Wait)):
            logger.info("%s/%s: %s (%s)", meta["namespace"], meta["name"], action.kind, action.reason)
        outcome = await executor.run(action, acting_spec, observed)
        if not outcome.done:
            logger.info("%s/%s: %s not taken yet: %s", meta["namespace"], meta["name"], action.kind, outcome.message)

        conditions = [*decision.conditions, anomalies.condition(warnings, scraped)]
        self._post_transition_events(previous, conditions)
        extra = {**decision.status_fields(), **(outcome.status_patch or {})}
        tls_status = tls_plan.tls_status(spec, observed, extra.get("tls"))
        if tls_status:
            extra["tls"] = tls_status
        status = build_status(spec, observed, health, action, conditions, previous, meta.get("generation", 0),
                              extra=extra)
        status["members"] = anomalies.with_warnings(status["members"], warnings)
        for member, warning in anomalies.appeared(previous.get("members"), warnings):
            self.post_event("Warning", warning.kind, f"member {member}: {warning.message}")
        if not isinstance(action, (a.Steady, a.Wait)) and outcome.done:
            metrics.reconcile_steps.labels(meta["namespace"], meta["name"], action.kind).inc()
        metrics.record_cluster(
            meta["namespace"], meta["name"], spec.size,
            [(m["name"], m["role"], m["healthy"], m.get("dbSize", 0), m.get("dbSizeInUse", 0))
             for m in status["members"]],
            health.has_quorum, health.state == HealthState.QUORUM_LOST)
        metrics.record_member_warnings(meta["namespace"], meta["name"], warnings)
        metrics.record_alarms(meta["namespace"], meta["name"], tuple(health.alarm_names))
        if any(previous.get(key) != value for key, value in status.items()):
            await self.kube.merge_patch(kube.ETCDCLUSTERS, meta["namespace"], meta["name"], {"status": status},
                                        subresource="status")
        if outcome.retry_after is not None:
            return outcome.retry_after  # a member addition in flight (cluster.pacing)
        if isinstance(action, a.Steady):
            return WHEN_STEADY
        if isinstance(action, a.Wait):
            return WHILE_WAITING
        return AFTER_STEP if outcome.done else NOT_YET

    def _post_transition_events(self, previous: Mapping[str, Any], current: list[c.Condition]) -> None:
        by_type = {cond.type: cond for cond in current}
        warnings = {
            "QuorumLost": (by_type["QuorumLost"], True),
            "Alarm": (by_type["Alarm"], True),
            "SpecAccepted": (by_type["SpecAccepted"], False),
            "OddSize": (by_type["OddSize"], False),
        }
        for name, (condition, bad_status) in warnings.items():
            before = c.find(previous.get("conditions"), name)
            if condition.status is bad_status and (before is None or before.get("status") != condition.status_text):
                self.post_event("Warning", condition.reason, condition.message)
