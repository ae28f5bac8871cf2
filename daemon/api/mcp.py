"""The ``/mcp`` route, without the MCP SDK on the node's start-up path.

Importing the SDK costs about 2 s of CPU (more on a loaded machine), so a
node that is never asked for MCP never pays it: the route is registered
here, and the first ``/mcp`` request imports the SDK's modules
(:mod:`daemon.mcp.http`) in a worker thread and starts the transport's
session manager (:func:`daemon.mcp.http.handle`); requests that arrive
meanwhile wait for the same import. (An import at start-up, even in a
thread, holds the GIL for those 2 s while the node already serves: the
benchmark measured it as 17 % of a 1-node notify run's CPU.) Cleanup stops
the manager if it ever ran.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import ModuleType

from aiohttp import web

from daemon.api.agents import note_seen

MCP_PATH = "/mcp"
_MODULE = "daemon.mcp.http"


@dataclass(slots=True)
class McpState:
    """One app's MCP transport: started on the first request, stopped on cleanup."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    preload: asyncio.Task[ModuleType] | None = None
    module: ModuleType | None = None  # once imported
    stop: Callable[[], Awaitable[None]] | None = None
    context: dict[str, object] = field(default_factory=dict)


MCP_STATE = web.AppKey("mcp_state", McpState)


async def _module(state: McpState) -> ModuleType:
    if state.module is not None:
        return state.module
    if state.preload is None:
        state.preload = asyncio.ensure_future(asyncio.to_thread(importlib.import_module, _MODULE))
    state.module = await asyncio.shield(state.preload)
    return state.module


async def handle(request: web.Request) -> web.StreamResponse:
    if request.method != "POST":
        # Stateless: no session to end (DELETE), and the server never has a
        # message of its own to push, so the optional SSE stream (GET) is not
        # offered, as the MCP specification allows. Served, it outlived its
        # client and held the node's shutdown for its grace period.
        raise web.HTTPMethodNotAllowed(request.method, ["POST"])
    module = await _module(request.app[MCP_STATE])
    response: web.StreamResponse = await module.handle(request)
    if response.status < 400 and ("X-Agent-Id" in request.headers
                                  or "X-API-Key" in request.headers):
        note_seen(request)  # an MCP call shows its agent alive, as an /api/v1 call does
    return response


async def _cleanup(app: web.Application) -> None:
    state = app[MCP_STATE]
    if state.preload is not None:
        await asyncio.wait({state.preload})  # an import in a thread cannot be cancelled
    if state.stop is not None:
        stop, state.stop = state.stop, None
        await stop()


def add_routes(app: web.Application) -> None:
    app[MCP_STATE] = McpState()
    app.router.add_route("*", MCP_PATH, handle)
    app.on_cleanup.append(_cleanup)
