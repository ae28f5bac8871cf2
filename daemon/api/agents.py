"""The operations of ``/api/v1/agents`` and the last-seen middleware.

Registering names an agent; it does not act as one. So, as upstream does,
any agent id may be registered in anonymous mode (``X-Agent-Id`` is a claim
there and need not equal the registered id). A key bound to an agent
registers only that agent (403 otherwise); an unbound key registers any. The middleware hands a registered caller's
last-seen refresh to the background (see :mod:`daemon.services.agents` for
the throttle) once the request has succeeded; it never delays or fails the
request it rides on, and a refused request (any 4xx/5xx) writes nothing.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from common.errors import AiMemoryError
from daemon.api.call import ApiCall, Route, serve
from daemon.http.appkeys import NODE
from daemon.http.auth import principal_of
from daemon.http.errors import Handler
from daemon.schemas.agents import RegisterAgent
from daemon.services import agents as service


async def register(c: ApiCall) -> Any:
    req = await c.body(RegisterAgent)
    if c.principal.agent_bound:
        c.agent(req.agent_id)
    return await service.register(c.node, req)


async def list_(c: ApiCall) -> Any:
    return await service.list_agents(c.node)


OPERATIONS = [
    Route("POST", "/api/v1/agents", register, 201),
    Route("GET", "/api/v1/agents", list_),
]


@web.middleware
async def last_seen(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)  # a refusal raises, or answers >= 400: not seen
    if response.status < 400 and request.path.startswith("/api/v1/") and (
            "X-Agent-Id" in request.headers or "X-API-Key" in request.headers
            or "Authorization" in request.headers):
        note_seen(request)
    return response


def note_seen(request: web.Request) -> None:
    node = request.app[NODE]
    try:
        agent = principal_of(request).agent
    except AiMemoryError:
        return  # an open route: nobody to note
    if agent is not None and node.seen_throttle.due(agent, node.now_ms()):
        node.spawn(service.refresh_seen(node, agent))


MIDDLEWARES = [last_seen]


def add_routes(app: web.Application) -> None:
    serve(app, OPERATIONS)
