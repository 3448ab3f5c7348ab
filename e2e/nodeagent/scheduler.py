"""Binds pending pods (schedulerName default-scheduler) to our available nodes through
the Binding subresource; pods that fit nowhere get PodScheduled=False/Unschedulable."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from nodeagent import clock, placement
from nodeagent.kube import is_status, pod_path
from nodeagent.loops import WakeableLoop

if TYPE_CHECKING:
    from nodeagent.agent import Agent

log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
RETRY_INTERVAL = 2.0


def wants_scheduling(pod: dict) -> bool:
    spec = pod["spec"]
    return (
        not spec.get("nodeName")
        and (spec.get("schedulerName") or SCHEDULER_NAME) == SCHEDULER_NAME
        and not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in placement.TERMINAL
    )


class Scheduler(WakeableLoop):
    interval = RETRY_INTERVAL
    purpose = "scheduling cycle"

    def __init__(self, agent: Agent):
        self.agent = agent
        super().__init__()
        self.assumed: dict[str, dict] = {}  # uid -> pod as bound, until the informer shows it

    async def _cycle(self) -> None:
        pods = self.agent.pods.items()
        current = {p["metadata"]["uid"]: p for p in pods}
        for uid in list(self.assumed):
            if uid not in current or current[uid]["spec"].get("nodeName"):
                del self.assumed[uid]
        pending = sorted(
            (p for p in pods if wants_scheduling(p) and p["metadata"]["uid"] not in self.assumed),
            key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]),
        )
        if not pending:
            return
        nodes = self.agent.schedulable_nodes()
        placed = placement.active_pods(list(pods) + list(self.assumed.values()))
        for pod in pending:
            name, why = placement.choose_node(pod, nodes, placed)
            if name is None:
                await self._unschedulable(pod, why)
                continue
            if await self._bind(pod, name):
                bound = {**pod, "spec": {**pod["spec"], "nodeName": name}}
                self.assumed[pod["metadata"]["uid"]] = bound
                placed.setdefault(name, []).append(bound)

    async def _bind(self, pod: dict, node: str) -> bool:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self.agent.kube.create(pod_path(meta["namespace"], meta["name"], "binding"), body)
        except Exception as e:
            if not is_status(e, 404, 409):
                log.warning("binding %s/%s to %s failed: %s", meta["namespace"], meta["name"], node, e)
            return False
        log.info("bound %s/%s to %s", meta["namespace"], meta["name"], node)
        self.agent.events.emit(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
            component=SCHEDULER_NAME,
        )
        return True

    async def _unschedulable(self, pod: dict, why: str) -> None:
        meta = pod["metadata"]
        conditions = (pod.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if c["type"] == "PodScheduled"), None)
        if current and current.get("status") == "False" and current.get("message") == why:
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": why,
            "lastProbeTime": None,
            "lastTransitionTime": clock.rfc3339(),
        }
        others = [c for c in conditions if c["type"] != "PodScheduled"]
        try:
            await self.agent.kube.patch(
                pod_path(meta["namespace"], meta["name"], "status"), {"status": {"conditions": others + [condition]}}
            )
        except Exception as e:
            if not is_status(e, 404):
                log.warning("could not mark %s/%s unschedulable: %s", meta["namespace"], meta["name"], e)
            return
        log.info("%s/%s is unschedulable: %s", meta["namespace"], meta["name"], why)
        self.agent.events.emit(pod, "Warning", "FailedScheduling", why, component=SCHEDULER_NAME)
