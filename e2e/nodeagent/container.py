"""One container of a pod: starting its process, probing it, restarting it per the
pod's restartPolicy with exponential back-off, and the containerStatus that results."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import TYPE_CHECKING

from nodeagent import clock, images, probes, wildcard
from nodeagent.envvars import ConfigError, expand_all
from nodeagent.launcher import ContainerProcess, LaunchSpec
from nodeagent.volumes import VolumeError

if TYPE_CHECKING:
    from nodeagent.pod import PodWorker

log = logging.getLogger(__name__)


def terminated(
    exit_code: int,
    started_at: str | None,
    container_id: str | None,
    reason: str | None = None,
    message: str | None = None,
) -> dict:
    state = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "startedAt": started_at,
        "finishedAt": clock.rfc3339(),
    }
    if message:
        state["message"] = message
    if container_id:
        state["containerID"] = container_id
    return {"terminated": state}


class ContainerRunner:
    def __init__(self, pod: PodWorker, spec: dict, init: bool):
        self.pod = pod
        self.spec = spec
        self.name = spec["name"]
        self.init = init
        self.state: dict = {"waiting": {"reason": "PodInitializing" if init or pod.has_init else "ContainerCreating"}}
        self.last_state: dict = {}
        self.restart_count = 0
        self.ready = False
        self.started = False
        self.container_id: str | None = None
        self.process: ContainerProcess | None = None
        self.runtime: images.ImageRuntime | None = None
        self.env: dict[str, str] = {}
        self.done = False  # finished for good (not restarting)
        self.stopping = False
        self._restart_pending = False  # the next start counts as a restart
        self._wake = asyncio.Event()
        self._kill_task: asyncio.Task | None = None
        self._backoff_exponent = 0
        self._immediate = False

    @property
    def image(self) -> str:
        return self.spec.get("image", "")

    # --- resuming after an agent restart ----------------------------------------------

    def resume(self, previous: dict | None, process: ContainerProcess | None, exit_code: int | None) -> None:
        """Takes over what an earlier agent recorded: the status in the API and,
        if it still runs, the process."""
        if previous:
            self.restart_count = previous.get("restartCount", 0)
            self.last_state = previous.get("lastState") or {}
            self.container_id = previous.get("containerID")
        if process is not None:
            self.process = process
            self.container_id = self.container_id or f"localkube://{process.pid}"
            self.state = {"running": {"startedAt": process.started_at}}
            self.started = not self.spec.get("startupProbe")
            self.ready = self.started and not self.spec.get("readinessProbe") and not self.init
            self._restart_pending = True
            return
        if not previous:
            return
        state = previous.get("state") or {}
        if "terminated" in state:
            code = state["terminated"].get("exitCode", 0)
            if not self._should_restart(code):
                self.state, self.done = state, True
                self.ready = self.init and code == 0
                return
            self.last_state = state
            self._restart_pending = True
        elif "running" in state:
            # it ran when the earlier agent stopped, and is gone now
            started_at = state["running"].get("startedAt")
            if exit_code is None:
                self.last_state = terminated(
                    137,
                    started_at,
                    self.container_id,
                    "ContainerStatusUnknown",
                    "The container could not be located when the agent restarted",
                )
            else:
                self.last_state = terminated(exit_code, started_at, self.container_id)
            self._restart_pending = True
        elif self.last_state:
            self._restart_pending = True

    # --- the loop ---------------------------------------------------------------------

    def _should_restart(self, exit_code: int) -> bool:
        policy = self.pod.restart_policy
        if self.init:
            return exit_code != 0 and policy != "Never"
        return policy == "Always" or (policy == "OnFailure" and exit_code != 0)

    async def run(self) -> bool:
        """Runs until the container is finished for good or stopped; returns whether it
        succeeded (exit 0)."""
        if self.done:
            return "terminated" in self.state and self.state["terminated"].get("exitCode") == 0
        while not self.stopping:
            if self.process is None:
                self.process = await self._start()
                if self.process is None:
                    break
            elif self.runtime is None:
                await self._restore_context()
            started_at = self.process.started_at
            run_began = time.monotonic()
            exit_code = await self._supervise(self.process)
            self.ready = False
            if self.stopping:
                self.state = terminated(exit_code, started_at, self.container_id)
                break
            immediate, self._immediate = self._immediate, False
            if not immediate and not self._should_restart(exit_code):
                self.state = terminated(exit_code, started_at, self.container_id)
                self.done = True
                self.ready = self.init and exit_code == 0
                self.started = False
                self.pod.changed()
                return exit_code == 0
            if time.monotonic() - run_began > 2 * self.pod.backoff_cap:
                self._backoff_exponent = 0
            delay = 0.0 if immediate else min(self.pod.backoff_base * 2**self._backoff_exponent, self.pod.backoff_cap)
            self._backoff_exponent += 0 if immediate else 1
            self.last_state = terminated(exit_code, started_at, self.container_id)
            self.started = False
            self.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed container={self.name} pod={self.pod.describe()}",
                }
            }
            self.pod.changed()
            self.pod.event("Warning", "BackOff", f"Back-off restarting failed container {self.name}")
            self.process = None
            await self._sleep(delay)
        self.ready = False
        self.pod.changed()
        return False

    async def _start(self) -> ContainerProcess | None:
        attempts = 0
        while not self.stopping:
            await self.pod.node_up()
            if self.stopping or self.pod.terminating:
                return None
            delay = min(self.pod.backoff_base * 2**attempts, self.pod.backoff_cap)
            attempts += 1
            try:
                self.runtime = images.resolve(self.image, self.pod.testbin)
            except images.UnknownImage as e:
                await self._image_pull_failed(str(e), delay)
                continue
            try:
                spec = await self._launch_spec(self.runtime)
            except (ConfigError, VolumeError, images.UnknownImage) as e:
                self._wait_state("CreateContainerConfigError", str(e))
                await self._sleep(delay)
                continue
            if self._restart_pending:
                self.restart_count += 1
            self._restart_pending = True
            try:
                process = await self.pod.launcher.start(spec)
            except OSError as e:
                self._wait_state("RunContainerError", str(e))
                await self._sleep(delay)
                continue
            self.container_id = f"localkube://{self.pod.uid[:8]}-{self.name}-{self.restart_count}"
            self.state = {"running": {"startedAt": process.started_at}}
            self.started = not self.spec.get("startupProbe") or self.init
            self.ready = self.started and not self.spec.get("readinessProbe") and not self.init
            self.pod.changed()
            self.pod.event("Normal", "Started", f"Started container {self.name}")
            log.info(
                "%s: started container %s (pid %d, restarts %d)",
                self.pod.describe(),
                self.name,
                process.pid,
                self.restart_count,
            )
            return process
        return None

    async def _restore_context(self) -> None:
        """For an adopted process: what probes need (runtime and environment)."""
        try:
            self.runtime = images.resolve(self.image, self.pod.testbin)
            self.env = await self.pod.container_env(self.spec, self.runtime)
        except Exception as e:
            log.warning("%s: container %s: %s", self.pod.describe(), self.name, e)

    async def _image_pull_failed(self, message: str, delay: float) -> None:
        self._wait_state("ErrImagePull", message)
        self.pod.event("Warning", "Failed", f'Failed to pull image "{self.image}": {message}')
        await self._sleep(max(1.0, self.pod.backoff_base))
        if self.stopping:
            return
        self._wait_state("ImagePullBackOff", f'Back-off pulling image "{self.image}": {message}')
        self.pod.event("Normal", "BackOff", f'Back-off pulling image "{self.image}"')
        await self._sleep(delay)

    def _wait_state(self, reason: str, message: str) -> None:
        new = {"waiting": {"reason": reason, "message": message}}
        if new != self.state:
            self.state = new
            self.pod.changed()

    async def _launch_spec(self, runtime: images.ImageRuntime) -> LaunchSpec:
        env = await self.pod.container_env(self.spec, runtime)
        argv = runtime.argv(
            expand_all(self.spec.get("command"), env), expand_all(self.spec.get("args"), env), self.pod.ip
        )
        # A wildcard bind inside a pod means the pod's own address (see wildcard.py).
        argv[1:] = wildcard.bind_all_to_pod(argv[1:], self.pod.ip)
        mounts = self.pod.volumes.mounts(self.spec, env, runtime.kind == "operator")
        paths = self.pod.paths
        self.env = env
        return LaunchSpec(
            uid=self.pod.uid,
            namespace=self.pod.namespace,
            pod=self.pod.name,
            container=self.name,
            argv=argv,
            env=env,
            mounts=mounts,
            workdir=self._workdir(),
            hostname=self.pod.hostname,
            log_file=paths.log_file(self.pod.namespace, self.pod.name, self.name),
            exit_file=paths.exit_file(self.pod.uid, self.name),
        )

    def _workdir(self) -> str:
        return self.spec.get("workingDir") or str(self.pod.paths.work_dir(self.pod.uid, self.name))

    async def _supervise(self, process: ContainerProcess) -> int:
        tasks = [] if self.init else self._probe_tasks(process)
        try:
            return await process.wait()
        finally:
            for task in tasks:
                task.cancel()
            if self._kill_task is not None:
                await asyncio.gather(self._kill_task, return_exceptions=True)
                self._kill_task = None

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), seconds)
        except TimeoutError:
            pass

    # --- probes -----------------------------------------------------------------------

    def _probe_tasks(self, process: ContainerProcess) -> list[asyncio.Task]:
        if self.runtime is None:
            return []

        def target() -> probes.ProbeTarget:
            return probes.ProbeTarget(self.pod.ip, self.spec, self.env, process.pid, self.runtime, self._workdir())

        session = self.pod.session
        startup, readiness, liveness = (self.spec.get(k) for k in ("startupProbe", "readinessProbe", "livenessProbe"))

        async def on_startup(ok: bool, message: str) -> bool:
            if ok:
                self.started = True
                self.ready = not readiness
                self.pod.changed()
                return True
            self._unhealthy("Startup", message)
            self._kill(f"Container {self.name} failed startup probe, will be restarted", startup)
            return True

        async def on_readiness(ok: bool, message: str) -> bool:
            if not ok:
                self._unhealthy("Readiness", message)
            if self.ready != ok:
                self.ready = ok
                self.pod.changed()
            return False

        async def on_liveness(ok: bool, message: str) -> bool:
            if ok:
                return False
            self._unhealthy("Liveness", message)
            self._kill(f"Container {self.name} failed liveness probe, will be restarted", liveness)
            return True

        async def probing() -> None:
            if startup:
                await probes.watch(startup, target, session, on_startup)
            if not self.started or process.exit_code is not None:
                return
            await asyncio.gather(
                *([probes.watch(readiness, target, session, on_readiness)] if readiness else []),
                *([probes.watch(liveness, target, session, on_liveness)] if liveness else []),
            )

        return [asyncio.ensure_future(probing())]

    def _unhealthy(self, kind: str, message: str) -> None:
        self.pod.event("Warning", "Unhealthy", f"{kind} probe failed: {message}")

    def _kill(self, why: str, probe: dict) -> None:
        if self.process is None or self._kill_task is not None:
            return
        grace = probe.get("terminationGracePeriodSeconds")
        if grace is None:
            grace = self.pod.spec_grace()
        self.pod.event("Normal", "Killing", why)
        log.info("%s: %s", self.pod.describe(), why)
        deadline = time.monotonic() + float(grace)
        self._kill_task = asyncio.ensure_future(terminate(self.process, lambda: deadline))

    # --- stopping and faults ----------------------------------------------------------

    async def stop(self, deadline) -> None:
        """Stops for good: SIGTERM, then SIGKILL once deadline() (monotonic) passes."""
        self.stopping = True
        self._wake.set()
        if self.process is not None and self.process.running():
            await terminate(self.process, deadline)

    def settle_stopped(self) -> None:
        """The pod ended for good (eviction): a container that was not running when it was
        stopped reports its last termination, or an unknown one, as kubelet does."""
        if "running" in self.state and self.process is not None and self.process.exit_code is not None:
            self.state = terminated(self.process.exit_code, self.state["running"].get("startedAt"), self.container_id)
        elif "terminated" not in self.state:
            self.state = (
                self.last_state
                if "terminated" in self.last_state
                else terminated(
                    137,
                    None,
                    self.container_id,
                    "ContainerStatusUnknown",
                    "The container could not be located when the pod was terminated",
                )
            )
        self.done, self.started = True, False
        self.ready = self.init and self.state["terminated"].get("exitCode") == 0

    def keep_terminated(self, previous: dict | None) -> None:
        """After an agent restart, a container of a pod that ended for good keeps the
        state the API has for it (it never restarts)."""
        state = (previous or {}).get("state") or {}
        if "terminated" in state:
            self.state = state
        self.last_state = (previous or {}).get("lastState") or {}
        self.settle_stopped()
        self._restart_pending = False

    def restart_now(self) -> None:
        """Restarts promptly (e.g. the image changed), counting as a restart."""
        if self.process is not None and self.process.running():
            self._immediate = True
            self._kill(f"Container {self.name} definition changed, will be restarted", {})
        self._wake.set()

    def signal(self, sig: int) -> int | None:
        if self.process is not None and self.process.signal(sig):
            return self.process.pid
        return None

    # --- status -----------------------------------------------------------------------

    def status(self) -> dict:
        out = {
            "name": self.name,
            "image": self.image,
            "imageID": f"localkube://{self.image}" if self.container_id else "",
            "ready": self.ready,
            "started": self.started if "running" in self.state else False,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out


async def terminate(process: ContainerProcess, deadline) -> None:
    """SIGTERM (and SIGCONT, in case it is frozen) to the process group, then SIGKILL at
    deadline(); deadline is re-read so a shorter grace can take over."""
    process.signal(signal.SIGTERM)
    process.signal(signal.SIGCONT)
    while process.running():
        remaining = deadline() - time.monotonic()
        if remaining <= 0:
            process.signal(signal.SIGKILL)
            await process.wait()
            return
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), min(remaining, 0.5))
        except TimeoutError:
            pass
