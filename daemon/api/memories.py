"""The operations of ``/api/v1/memories`` (see :mod:`daemon.api.call`).

Each reads and validates its input (body, query, path id,
``Idempotency-Key``), resolves the acting agent (``X-Agent-Id`` and a body
``agent_id`` must agree; a key bound to an agent fixes it), calls :mod:`daemon.services.memories`, and shapes
the status code. Validation happens before any service call, so bad input
never writes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aiohttp import web

from common.errors import BadRequest
from daemon.api.call import ApiCall, Route, serve
from daemon.http.jsonio import json_response
from daemon.schemas.memories import CreateMemory, ListMemoriesQuery, UpdateMemory
from daemon.services import inbox_view, memories


async def create(c: ApiCall) -> Any:
    key = c.idempotency_key
    req = await c.body(CreateMemory)
    agent = c.agent(req.agent_id, required=False)
    return await memories.create(c.node, req, agent=agent, idempotency_key=key)


async def list_(c: ApiCall) -> Any:
    q = c.params(ListMemoriesQuery)
    inbox_of = inbox_view.inbox_agent(q.namespace)
    if inbox_of is not None:  # the recipient's notifications, as memories
        c.agent(None, required=False)
        return await inbox_view.list_inbox(c.node, c.principal, inbox_of, q)
    return await memories.list_memories(c.node, q)


async def get(c: ApiCall) -> Any:
    return await memories.get(c.node, c.path["id"])


async def update(c: ApiCall) -> Any:
    req = await c.body(UpdateMemory)
    agent = c.agent(req.agent_id, required=False)
    return await memories.update(c.node, c.path["id"], req,
                                 principal=replace(c.principal, agent=agent))


async def delete(c: ApiCall) -> Any:
    c.agent(None, required=False)
    return await memories.delete(c.node, c.path["id"], principal=c.principal)


async def promote(c: ApiCall) -> Any:
    c.agent(None, required=False)
    return await memories.promote(c.node, c.path["id"])


def _bulk_items(data: Any) -> list[Any]:
    if isinstance(data, dict) and isinstance(data.get("memories"), list):
        return list(data["memories"])
    if isinstance(data, list):
        return data
    raise BadRequest('bulk body must be a JSON array of memories (or {"memories": [...]})')


async def bulk(request: web.Request) -> web.Response:
    c = ApiCall.of(request)
    key = c.idempotency_key
    items = _bulk_items(await c.read())
    agent = c.agent(None, required=False)
    out = await memories.bulk_create(c.node, items, agent=agent, idempotency_key=key)
    return json_response(out, status=201 if out["created"] else 200)


OPERATIONS = [
    Route("POST", "/api/v1/memories", create, 201),
    Route("GET", "/api/v1/memories", list_),
    Route("GET", "/api/v1/memories/{id}", get),
    Route("PUT", "/api/v1/memories/{id}", update),
    Route("DELETE", "/api/v1/memories/{id}", delete),
    Route("POST", "/api/v1/memories/{id}/promote", promote),
]


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/memories/bulk", bulk)  # its status depends on what it made
    serve(app, OPERATIONS)
