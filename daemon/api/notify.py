"""The operations of ``/api/v1/notify`` and ``/api/v1/inbox`` (see :mod:`daemon.api.call`).

The sender of a notify and the reader of an inbox are the acting agent:
``X-Agent-Id`` (or the API key's agent) and a body/query ``agent_id`` must
agree (403 otherwise) and one of them is required (400). An agent reads and
marks only its own inbox.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from daemon.api.call import ApiCall, Route, serve
from daemon.schemas.notify import InboxQuery, MarkReadQuery, MarkReadRequest, NotifyRequest
from daemon.services import notify as service


def _caller(c: ApiCall, claimed: str | None) -> str:
    agent = c.agent(claimed)
    assert agent is not None  # required=True raises instead
    return agent


async def notify(c: ApiCall) -> Any:
    key = c.idempotency_key
    req = await c.body(NotifyRequest)
    sender = _caller(c, req.agent_id)
    return await service.notify(c.node, req, sender=sender, idempotency_key=key)


async def inbox(c: ApiCall) -> Any:
    q = c.params(InboxQuery)
    return await service.inbox(c.node, q, agent=_caller(c, q.agent_id))


async def mark_read(c: ApiCall) -> Any:
    q = c.params(MarkReadQuery)
    req = await c.body(MarkReadRequest)
    agent = _caller(c, req.agent_id)
    return await service.mark_read(c.node, req.ids, agent=agent, consistency=q.consistency)


OPERATIONS = [
    Route("POST", "/api/v1/notify", notify, 201),
    Route("GET", "/api/v1/inbox", inbox),
    Route("POST", "/api/v1/inbox/read", mark_read),
]


def add_routes(app: web.Application) -> None:
    serve(app, OPERATIONS)
