"""Readiness, liveness and startup probes: httpGet, tcpSocket and exec (run inside the
container's mount namespace with nsenter). The host defaults to the pod IP."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import signal
from collections.abc import Awaitable, Callable

import aiohttp

from nodeagent.envvars import expand
from nodeagent.images import ImageRuntime

log = logging.getLogger(__name__)

OUTPUT_LIMIT = 1024


@dataclasses.dataclass
class ProbeTarget:
    pod_ip: str
    container: dict
    env: dict[str, str]
    pid: int
    runtime: ImageRuntime
    workdir: str


def resolve_port(port: int | str, container: dict) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"port {port!r} is not a named port of container {container['name']}")


async def probe_once(probe: dict, target: ProbeTarget, session: aiohttp.ClientSession) -> tuple[bool, str]:
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        if "httpGet" in probe:
            return await _http(probe["httpGet"], target, session, timeout)
        if "tcpSocket" in probe:
            return await _tcp(probe["tcpSocket"], target, timeout)
        if "exec" in probe:
            return await _exec(probe["exec"], target, timeout)
        return False, f"unsupported probe handler {sorted(k for k in probe if not k[0].isupper())}"
    except TimeoutError:
        return False, f"probe timed out after {timeout:g}s"
    except (OSError, ValueError, aiohttp.ClientError) as e:
        return False, str(e) or type(e).__name__


async def _http(spec: dict, target: ProbeTarget, session: aiohttp.ClientSession, timeout: float) -> tuple[bool, str]:
    scheme = spec.get("scheme", "HTTP").lower()
    host = spec.get("host") or target.pod_ip
    port = resolve_port(spec["port"], target.container)
    path = spec.get("path") or "/"
    if not path.startswith("/"):
        path = "/" + path
    headers = {h["name"]: h["value"] for h in spec.get("httpHeaders") or []}
    url = f"{scheme}://{host}:{port}{path}"
    async with session.get(url, headers=headers, ssl=False, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
        body = (await r.content.read(OUTPUT_LIMIT)).decode(errors="replace")
        if 200 <= r.status < 400:
            return True, ""
        return False, f"HTTP probe failed with statuscode: {r.status} {body.strip()}"


async def _tcp(spec: dict, target: ProbeTarget, timeout: float) -> tuple[bool, str]:
    host = spec.get("host") or target.pod_ip
    port = resolve_port(spec["port"], target.container)
    _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return True, ""


async def _exec(spec: dict, target: ProbeTarget, timeout: float) -> tuple[bool, str]:
    command = [expand(part, target.env.get) for part in spec.get("command") or []]
    if not command:
        return False, "exec probe without a command"
    command[0] = target.runtime.executable(command[0])
    nsenter = shutil.which("nsenter") or "/usr/bin/nsenter"
    proc = await asyncio.create_subprocess_exec(
        nsenter,
        f"--target={target.pid}",
        "--mount",
        "--uts",
        f"--wd={target.workdir}",
        "--",
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=target.env,
        start_new_session=True,
    )
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
        raise
    if proc.returncode == 0:
        return True, ""
    text = output[:OUTPUT_LIMIT].decode(errors="replace").strip()
    return False, f"command {command!r} exited with {proc.returncode}: {text}"


async def watch(
    probe: dict,
    target: Callable[[], ProbeTarget],
    session: aiohttp.ClientSession,
    on_result: Callable[[bool, str], Awaitable[bool]],
) -> None:
    """Probes forever per the probe's timing; on_result is called when the settled
    result changes (after successThreshold/failureThreshold); returning True stops."""
    period = float(probe.get("periodSeconds") or 10)
    success_threshold = int(probe.get("successThreshold") or 1)
    failure_threshold = int(probe.get("failureThreshold") or 3)
    await asyncio.sleep(float(probe.get("initialDelaySeconds") or 0))
    successes = failures = 0
    settled: bool | None = None
    while True:
        ok, message = await probe_once(probe, target(), session)
        successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
        verdict = None
        if ok and successes >= success_threshold:
            verdict = True
        elif not ok and failures >= failure_threshold:
            verdict = False
        if verdict is not None and verdict != settled:
            settled = verdict
            if await on_result(verdict, message):
                return
        await asyncio.sleep(period)
