"""HTTP handlers for ``/api/v1/notify`` and ``/api/v1/inbox``.

The sender of a notify and the reader of an inbox are the acting agent:
``X-Agent-Id`` (or the API key's agent) and a body/query ``agent_id`` must
agree (403 otherwise) and one of them is required (400). An agent reads and
marks only its own inbox.
"""

from __future__ import annotations

from aiohttp import web

from daemon.http.appkeys import NODE
from daemon.http.auth import acting_agent, principal_of
from daemon.http.errors import query_model, read_json
from daemon.schemas.ids import check_idempotency_key
from daemon.schemas.notify import InboxQuery, MarkReadQuery, MarkReadRequest, NotifyRequest
from daemon.services import notify as service


def _caller(request: web.Request, claimed: str | None) -> str:
    agent = acting_agent(principal_of(request), claimed)
    assert agent is not None  # required=True raises instead
    return agent


async def notify(request: web.Request) -> web.Response:
    key = check_idempotency_key(request.headers.get("Idempotency-Key"))
    req = await read_json(request, NotifyRequest)
    sender = _caller(request, req.agent_id)
    out = await service.notify(request.app[NODE], req, sender=sender, idempotency_key=key)
    return web.json_response(out, status=201)


async def inbox(request: web.Request) -> web.Response:
    q = query_model(request, InboxQuery)
    agent = _caller(request, q.agent_id)
    return web.json_response(await service.inbox(request.app[NODE], q, agent=agent))


async def mark_read(request: web.Request) -> web.Response:
    q = query_model(request, MarkReadQuery)
    req = await read_json(request, MarkReadRequest)
    agent = _caller(request, req.agent_id)
    out = await service.mark_read(request.app[NODE], req.ids, agent=agent, consistency=q.consistency)
    return web.json_response(out)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/notify", notify)
    app.router.add_get("/api/v1/inbox", inbox)
    app.router.add_post("/api/v1/inbox/read", mark_read)
