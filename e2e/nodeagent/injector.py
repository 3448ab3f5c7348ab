"""The agent side of fault injection (see faults.py for the helpers tests call)."""

from __future__ import annotations

import logging
import pathlib
import shutil
import signal
from typing import TYPE_CHECKING

from nodeagent.server import FaultError

if TYPE_CHECKING:
    from nodeagent.agent import Agent
    from nodeagent.pod import PodWorker

log = logging.getLogger(__name__)

DEFAULT_EVICTION_MESSAGE = "The node was low on resource: ephemeral-storage."
CONTAINER_SIGNALS = {"crash": signal.SIGKILL, "freeze": signal.SIGSTOP, "thaw": signal.SIGCONT}


class FaultInjector:
    def __init__(self, agent: Agent):
        self.agent = agent
        self.slow_stops: dict[str, float] = {}  # namespace -> seconds a deleted pod runs before SIGTERM

    async def inject(self, action: str, body: dict) -> dict:
        if action in CONTAINER_SIGNALS:
            return self._signal_container(action, body)
        if action == "lose-node":
            return self._lose_node(body["node"])
        if action == "restore-node":
            return self._restore_node(body["node"])
        if action == "lose-disk":
            return self._lose_disk(body["namespace"], body["claim"])
        if action == "evict":
            return self._evict(body)
        if action == "slow-stops":
            return self._slow_stops(body["namespace"], float(body["seconds"]))
        raise FaultError(404, f"unknown fault {action!r}")

    def _worker(self, namespace: str, pod: str) -> PodWorker:
        worker = self.agent.worker_for(namespace, pod)
        if worker is None:
            raise FaultError(404, f"pod {namespace}/{pod} does not run on this agent")
        return worker

    def _signal_container(self, action: str, body: dict) -> dict:
        worker = self._worker(body["namespace"], body["pod"])
        runner = worker.runner(body.get("container"))
        if runner is None:
            raise FaultError(404, f"no container {body.get('container')!r} in {worker.describe()}")
        pid = runner.signal(CONTAINER_SIGNALS[action])
        if pid is None:
            raise FaultError(409, f"container {runner.name} of {worker.describe()} is not running")
        log.info("fault %s: %s container %s (pid %d)", action, worker.describe(), runner.name, pid)
        return {"pid": pid, "container": runner.name}

    def _evict(self, body: dict) -> dict:
        worker = self._worker(body["namespace"], body["pod"])
        if worker.terminal or worker.eviction:
            raise FaultError(409, f"{worker.describe()} has already ended ({worker.terminal or 'evicted'})")
        grace = body.get("grace")
        message = body.get("message") or DEFAULT_EVICTION_MESSAGE
        grace = worker.evict(message, None if grace is None else int(grace))
        log.info("fault evict: %s (grace %ss)", worker.describe(), grace)
        return {"pod": worker.describe(), "uid": worker.uid, "grace": grace}

    def _slow_stops(self, namespace: str, seconds: float) -> dict:
        if seconds > 0:
            self.slow_stops[namespace] = seconds
        else:
            self.slow_stops.pop(namespace, None)
        log.info("fault slow-stops: deleted pods in %s run %ss before SIGTERM", namespace, seconds)
        return {"namespace": namespace, "seconds": seconds}

    def stop_delay(self, namespace: str) -> float:
        return self.slow_stops.get(namespace, 0.0)

    def _lose_node(self, node: str) -> dict:
        if node not in self.agent.nodes:
            raise FaultError(404, f"no node {node!r}")
        self.agent.nodes.lose(node)
        pods = []
        for worker in self.agent.workers_on(node):
            worker.kill_processes()
            pods.append(worker.describe())
        log.info("fault lose-node %s: killed %d pod(s)", node, len(pods))
        return {"node": node, "pods": pods}

    def _restore_node(self, node: str) -> dict:
        if node not in self.agent.nodes:
            raise FaultError(404, f"no node {node!r}")
        self.agent.nodes.restore(node)
        return {"node": node}

    def _lose_disk(self, namespace: str, claim: str) -> dict:
        path = self.agent.provisioner.claim_directory(namespace, claim)
        if path is None:
            raise FaultError(404, f"claim {namespace}/{claim} is not bound to a volume with a host directory")
        directory = pathlib.Path(path)
        removed = 0
        for entry in directory.iterdir() if directory.exists() else []:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed += 1
        log.info("fault lose-disk %s/%s: wiped %s (%d entries)", namespace, claim, directory, removed)
        return {"path": str(directory), "removed": removed}
