"""One pod bound to one of our nodes: its address, volumes, init containers, containers,
status reports, and its termination (grace period, then release of the API object)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import TYPE_CHECKING

from nodeagent import clock, envvars, images, podstatus, wildcard
from nodeagent.configdata import ConfigData
from nodeagent.container import ContainerRunner
from nodeagent.kube import is_status, pod_path
from nodeagent.names import pod_hostname
from nodeagent.volumes import PodVolumes, VolumeError

if TYPE_CHECKING:
    from nodeagent.agent import Agent

log = logging.getLogger(__name__)

DEFAULT_GRACE = 30
FORCED_GRACE = 2  # the object is already gone (force deletion)
STATUS_DEBOUNCE = 0.1
TOKEN_REFRESH_CHECK = 30.0
# How often Secret and ConfigMap volumes follow their sources (the kubelet's sync period,
# shortened: nothing on this substrate needs to wait a minute for it).
VOLUME_SYNC = float(os.environ.get("LOCALKUBE_VOLUME_SYNC_SECONDS", "5"))
LIFECYCLE_SETTLE = 1.0  # an evicted pod's stopped runners finish on their own within this


def _resource_version(obj: dict) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion", "0"))
    except ValueError:
        return 0


def _digest(status: dict | None) -> tuple:
    """What the drift check compares: phase, address and condition statuses."""
    status = status or {}
    conds = tuple(
        sorted(
            (c["type"], c["status"]) for c in status.get("conditions") or [] if c["type"] in podstatus.OUR_CONDITIONS
        )
    )
    return status.get("phase"), status.get("podIP"), conds


class PodWorker:
    def __init__(self, agent: Agent, pod: dict):
        self.agent = agent
        self.pod = pod
        meta, spec = pod["metadata"], pod["spec"]
        self.uid = meta["uid"]
        self.namespace = meta["namespace"]
        self.name = meta["name"]
        self.hostname = pod_hostname(pod)
        self.node = agent.nodes.get(spec["nodeName"])
        self.restart_policy = spec.get("restartPolicy") or "Always"
        self.has_init = bool(spec.get("initContainers"))
        self.ip: str | None = None
        status = pod.get("status") or {}
        self.start_time = status.get("startTime") or clock.rfc3339()
        self.conditions = podstatus.ConditionClock(status.get("conditions"))
        self.init_runners = [ContainerRunner(self, c, True) for c in spec.get("initContainers") or []]
        self.runners = [ContainerRunner(self, c, False) for c in spec["containers"]]
        self.volumes = PodVolumes(agent.kube, agent.paths, pod, self._runs_operator_image())
        self.initialized = not self.init_runners
        self.terminal: str | None = None
        self.eviction: tuple[str, str] | None = None  # (reason, message) once evicted
        self.terminating = False
        self.deadline = float("inf")
        self._changed = asyncio.Event()
        self._stopping: set[asyncio.Task] = set()  # held so that a running stop is never collected
        self._last_sent: dict | None = None
        self._last_patch_version = 0
        self._tasks: list[asyncio.Task] = []
        self._lifecycle: asyncio.Task | None = None
        self.finished = asyncio.Event()

    # --- shared with the container runners --------------------------------------------

    @property
    def paths(self):
        return self.agent.paths

    @property
    def launcher(self):
        return self.agent.launcher

    @property
    def session(self):
        return self.agent.session

    @property
    def testbin(self):
        return self.agent.settings.layout.testbin

    @property
    def backoff_base(self) -> float:
        return self.agent.settings.backoff_base

    @property
    def backoff_cap(self) -> float:
        return self.agent.settings.backoff_cap

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"

    def changed(self) -> None:
        self._changed.set()

    async def node_up(self) -> None:
        await self.node.up.wait()

    def event(self, kind: str, reason: str, message: str) -> None:
        self.agent.events.emit(self.pod, kind, reason, message, node=self.node.name)

    def spec_grace(self) -> int:
        grace = self.pod["spec"].get("terminationGracePeriodSeconds")
        return DEFAULT_GRACE if grace is None else int(grace)

    async def container_env(self, container: dict, runtime: images.ImageRuntime) -> dict[str, str]:
        base = {
            "PATH": runtime.path,
            "HOME": "/root",
            "HOSTNAME": self.hostname,
            **self.agent.service_env(),
            **dict(runtime.env),
            **{name: self.ip for name in runtime.pod_ip_env if self.ip},
        }
        pod = self._pod_with_addresses()
        env = await envvars.container_env(pod, container, ConfigData(self.agent.kube, self.namespace), base)
        return wildcard.env_bound_to_pod(env, self.ip)

    def _pod_with_addresses(self) -> dict:
        status = dict(self.pod.get("status") or {})
        if self.ip:
            status.update(podIP=self.ip, podIPs=[{"ip": self.ip}])
        status.update(hostIP=self.node.ip, hostIPs=[{"ip": self.node.ip}])
        return {**self.pod, "status": status}

    def _runs_operator_image(self) -> bool:
        for c in self.pod["spec"]["containers"] + (self.pod["spec"].get("initContainers") or []):
            try:
                if images.resolve(c.get("image", ""), self.agent.settings.layout.testbin).kind == "operator":
                    return True
            except images.UnknownImage:
                pass
        return False

    def all_runners(self) -> list[ContainerRunner]:
        return self.init_runners + self.runners

    def runner(self, name: str | None) -> ContainerRunner | None:
        if name is None:
            return self.runners[0]
        return next((r for r in self.all_runners() if r.name == name), None)

    # --- events from the informer ------------------------------------------------------

    def start(self) -> None:
        self._setup()
        self._lifecycle = asyncio.ensure_future(self._run_lifecycle())
        self._tasks = [
            asyncio.ensure_future(self._publish_status()),
            asyncio.ensure_future(self._refresh_tokens()),
            asyncio.ensure_future(self._sync_volumes()),
        ]

    def update(self, pod: dict) -> None:
        if pod["metadata"]["uid"] != self.uid:
            return
        self.pod = pod
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds")
            grace = self.spec_grace() if grace is None else int(grace)
            self._begin_termination(grace, release=True)
            return
        specs = (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]
        for runner, spec in zip(self.all_runners(), specs, strict=True):
            if spec.get("image") != runner.image:
                runner.spec = spec
                log.info("%s: image of %s changed to %s", self.describe(), runner.name, runner.image)
                runner.restart_now()
        status = pod.get("status") or {}
        if (
            _resource_version(pod) > self._last_patch_version
            and self._last_sent is not None
            and _digest(status) != _digest(self._last_sent)
        ):
            self.changed()

    def removed(self) -> None:
        self._begin_termination(FORCED_GRACE, release=False)

    # --- lifecycle --------------------------------------------------------------------

    async def _run_lifecycle(self) -> None:
        try:
            self.agent.names_changed(now=True)
            self.changed()
            if self.terminal or self.terminating:
                return
            await self._prepare_volumes()
            if not self.initialized:
                for runner in self.init_runners:
                    if self.terminating:
                        return
                    if not await runner.run():
                        if not self.terminating:
                            self.terminal = "Failed"
                            self.changed()
                        return
                self.initialized = True
                self.changed()
            results = await asyncio.gather(*(r.run() for r in self.runners))
            if not self.terminating and all(r.done for r in self.runners):
                self.terminal = "Succeeded" if all(results) else "Failed"
                log.info("%s: %s", self.describe(), self.terminal)
                self.changed()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: lifecycle failed", self.describe())

    def _setup(self) -> None:
        """Runs synchronously when the worker is created, so adoption happens before the
        agent kills what nobody adopted."""
        status = self.pod.get("status") or {}
        if self.pod["spec"].get("hostNetwork"):
            self.ip = self.node.ip
        else:
            self.ip = self.agent.ipam.allocate(self.uid)
        if status.get("phase") in ("Succeeded", "Failed"):
            self.terminal = status["phase"]
            if status.get("reason"):
                self.eviction = (status["reason"], status.get("message") or "")
        self._resume(status)

    def _resume(self, status: dict) -> None:
        """Adopts processes an earlier agent left running, and restart counts from the API."""
        previous = {s["name"]: s for s in (status.get("initContainerStatuses") or [])}
        previous_regular = {s["name"]: s for s in (status.get("containerStatuses") or [])}
        for runner in self.all_runners():
            prior = (previous if runner.init else previous_regular).get(runner.name)
            process = self.agent.launcher.adopt(self.uid, runner.name)
            exit_code = None
            if process is None:
                exit_file = self.paths.exit_file(self.uid, runner.name)
                if exit_file.exists():
                    try:
                        exit_code = int(exit_file.read_text().strip())
                    except ValueError:
                        pass
            if self.terminal:
                if process is not None:
                    process.signal(signal.SIGKILL)
                runner.resume(prior, None, exit_code)
                if self.eviction:
                    runner.keep_terminated(prior)
                continue
            runner.resume(prior, process, exit_code)
        if self.init_runners and all(r.done and r.ready for r in self.init_runners):
            self.initialized = True
        # an init container that completed before, with regular ones already started
        if self.init_runners and any(
            "running" in (s.get("state") or {}) or s.get("lastState") for s in previous_regular.values()
        ):
            self.initialized = True
            for runner in self.init_runners:
                runner.done, runner.ready = True, True
                if "terminated" not in runner.state:
                    runner.state = {"terminated": {"exitCode": 0, "reason": "Completed"}}

    async def _prepare_volumes(self) -> None:
        attempt = 0
        while True:
            await self.node_up()
            try:
                await self.volumes.prepare(self.pod)
                return
            except VolumeError as e:
                message = str(e)
            except Exception as e:  # the API may be briefly unavailable
                message = f"{type(e).__name__}: {e}"
            for runner in self.all_runners():
                if "waiting" in runner.state:
                    runner.state = {"waiting": {"reason": runner.state["waiting"]["reason"], "message": message}}
            if attempt == 0:
                self.event("Warning", "FailedMount", message)
            self.changed()
            attempt += 1
            await asyncio.sleep(min(2.0, 0.25 * attempt))

    async def _refresh_tokens(self) -> None:
        while True:
            await asyncio.sleep(TOKEN_REFRESH_CHECK)
            if self.volumes.tokens_due() and not self.node.lost:
                try:
                    await self.volumes.prepare(self.pod)
                    log.info("%s: refreshed service-account tokens", self.describe())
                except Exception as e:
                    log.warning("%s: token refresh failed: %s", self.describe(), e)

    async def _sync_volumes(self) -> None:
        while True:
            await asyncio.sleep(VOLUME_SYNC)
            if self.node.lost or not self.volumes.host_paths:
                continue
            try:
                await self.volumes.refresh()
            except Exception as e:  # a deleted Secret keeps the last files, as on a kubelet
                log.debug("%s: volume sync: %s", self.describe(), e)

    # --- status -----------------------------------------------------------------------

    def desired_status(self) -> dict:
        return podstatus.build(
            ip=self.ip,
            host_ip=self.node.ip,
            start_time=self.start_time,
            init_statuses=[r.status() for r in self.init_runners],
            statuses=[r.status() for r in self.runners],
            initialized=self.initialized,
            terminal=self.terminal,
            conditions=self.conditions,
            other_conditions=(self.pod.get("status") or {}).get("conditions") or [],
            eviction=self.eviction if self.terminal else None,
        )

    async def _publish_status(self) -> None:
        while True:
            await self._changed.wait()
            await asyncio.sleep(STATUS_DEBOUNCE)
            await self.node_up()
            self._changed.clear()
            desired = self.desired_status()
            if desired == self._last_sent and not self._drifted():
                continue
            try:
                result = await self.agent.kube.patch(pod_path(self.namespace, self.name, "status"), {"status": desired})
                self._last_sent = desired
                self._last_patch_version = _resource_version(result)
            except Exception as e:
                if is_status(e, 404):
                    return
                log.warning("%s: status update failed: %s", self.describe(), e)
                await asyncio.sleep(1)
                self.changed()

    def _drifted(self) -> bool:
        return _resource_version(self.pod) > self._last_patch_version and _digest(self.pod.get("status")) != _digest(
            self._last_sent
        )

    # --- termination ------------------------------------------------------------------

    def _keep(self, task: asyncio.Future) -> None:
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _begin_termination(self, grace: int, release: bool) -> None:
        deadline = time.monotonic() + grace
        if self.terminating:
            self.deadline = min(self.deadline, deadline)
            return
        self.terminating = True
        self.deadline = deadline
        self._keep(asyncio.ensure_future(self._terminate(grace, release)))

    async def _terminate(self, grace: int, release: bool) -> None:
        if release and (
            delay := min(self.agent.injector.stop_delay(self.namespace), max(0.0, self.deadline - time.monotonic()))
        ):
            log.info("%s: deleted; its containers run %.1fs more (slow-stops fault)", self.describe(), delay)
            await asyncio.sleep(delay)
        log.info("%s: terminating (grace %ss)", self.describe(), grace)
        running = [r for r in self.all_runners() if r.process is not None and r.process.running()]
        if running:
            self.event("Normal", "Killing", "Stopping container(s) " + ", ".join(r.name for r in running))
        await asyncio.gather(*(r.stop(lambda: self.deadline) for r in self.all_runners()))
        if self._lifecycle is not None:
            self._lifecycle.cancel()
            await asyncio.gather(self._lifecycle, return_exceptions=True)
        if release:
            await self.node_up()
            await self._release_object()
        for task in self._tasks:
            task.cancel()
        self.volumes.cleanup()
        self.agent.pod_finished(self)
        self.finished.set()
        log.info("%s: terminated", self.describe())

    async def _release_object(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": self.uid},
        }
        for attempt in range(5):
            try:
                await self.agent.kube.delete(pod_path(self.namespace, self.name), body)
                return
            except Exception as e:
                if is_status(e, 404, 409):
                    return
                log.warning("%s: releasing the pod object failed: %s", self.describe(), e)
                await asyncio.sleep(1 + attempt)

    # --- faults -----------------------------------------------------------------------

    def kill_processes(self) -> None:
        """The node died under the pod: every process goes at once."""
        for runner in self.all_runners():
            runner.signal(signal.SIGKILL)

    def evict(self, message: str, grace: int | None) -> int:
        """Ends the pod for good, as a kubelet eviction or a graceful node shutdown does:
        SIGTERM, SIGKILL after the grace, then phase Failed with reason Evicted; nothing
        restarts, whatever the restartPolicy. Returns the grace used."""
        grace = self.spec_grace() if grace is None else grace
        self.eviction = ("Evicted", message)
        self.deadline = time.monotonic() + grace
        self.event("Warning", "Evicted", message)
        self._keep(asyncio.ensure_future(self._stop_evicted()))
        return grace

    async def _stop_evicted(self) -> None:
        running = [r for r in self.all_runners() if r.process is not None and r.process.running()]
        if running:
            self.event("Normal", "Killing", "Stopping container(s) " + ", ".join(r.name for r in running))
        await asyncio.gather(*(r.stop(lambda: self.deadline) for r in self.all_runners()))
        if self._lifecycle is not None:
            await asyncio.wait([self._lifecycle], timeout=LIFECYCLE_SETTLE)  # runners record their exit
            self._lifecycle.cancel()
            await asyncio.gather(self._lifecycle, return_exceptions=True)
        # a process launched while the first stop ran goes too
        await asyncio.gather(*(r.stop(lambda: self.deadline) for r in self.all_runners()))
        for runner in self.all_runners():
            runner.settle_stopped()
        self.terminal = "Failed"
        log.info("%s: evicted (%s)", self.describe(), self.eviction[1])
        self.changed()

    async def shutdown(self) -> None:
        """The agent stops: processes stop (see Agent.shutdown), nothing is reported."""
        for task in self._tasks + ([self._lifecycle] if self._lifecycle else []):
            task.cancel()
