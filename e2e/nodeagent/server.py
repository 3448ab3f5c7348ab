"""The agent's HTTP port (127.0.0.1 only): /healthz, pod process info, and the fault
injection endpoints that nodeagent.faults calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from nodeagent.agent import Agent


class FaultError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def build_app(agent: Agent) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        if agent.ready:
            return web.Response(text="ok")
        return web.Response(status=503, text="starting")

    async def pod_info(request: web.Request) -> web.Response:
        info = agent.pod_info(request.match_info["namespace"], request.match_info["name"])
        if info is None:
            return web.json_response({"error": "no such pod on this agent"}, status=404)
        return web.json_response(info)

    async def fault(request: web.Request) -> web.Response:
        action = request.match_info["action"]
        body = await request.json() if request.can_read_body else {}
        try:
            result = await agent.inject_fault(action, body)
        except FaultError as e:
            return web.json_response({"error": str(e)}, status=e.status)
        except (KeyError, TypeError) as e:
            return web.json_response({"error": f"bad request: {e}"}, status=400)
        return web.json_response(result)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/pods/{namespace}/{name}", pod_info)
    app.router.add_post("/faults/{action}", fault)
    return app


async def start(agent: Agent, port: int) -> web.AppRunner:
    runner = web.AppRunner(build_app(agent), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner
