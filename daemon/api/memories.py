"""HTTP handlers for ``/api/v1/memories``.

Each handler reads and validates its input (body, query, path id,
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
from daemon.http.appkeys import NODE
from daemon.http.auth import acting_agent, principal_of
from daemon.http.errors import query_model, read_body, read_json
from daemon.schemas.ids import check_idempotency_key
from daemon.schemas.memories import CreateMemory, ListMemoriesQuery, UpdateMemory
from daemon.services import memories


def _caller(request: web.Request, claimed: str | None) -> str | None:
    return acting_agent(principal_of(request), claimed, required=False)


def _key(request: web.Request) -> str | None:
    return check_idempotency_key(request.headers.get("Idempotency-Key"))


async def create(request: web.Request) -> web.Response:
    key = _key(request)
    req = await read_json(request, CreateMemory)
    agent = _caller(request, req.agent_id)
    out = await memories.create(request.app[NODE], req, agent=agent, idempotency_key=key)
    return web.json_response(out, status=201)


async def list_(request: web.Request) -> web.Response:
    q = query_model(request, ListMemoriesQuery)
    return web.json_response(await memories.list_memories(request.app[NODE], q))


async def get(request: web.Request) -> web.Response:
    return web.json_response(await memories.get(request.app[NODE], request.match_info["id"]))


async def update(request: web.Request) -> web.Response:
    req = await read_json(request, UpdateMemory)
    agent = _caller(request, req.agent_id)
    out = await memories.update(request.app[NODE], request.match_info["id"], req,
                                principal=replace(principal_of(request), agent=agent))
    return web.json_response(out)


async def delete(request: web.Request) -> web.Response:
    _caller(request, None)
    return web.json_response(await memories.delete(request.app[NODE], request.match_info["id"],
                                                   principal=principal_of(request)))


async def promote(request: web.Request) -> web.Response:
    _caller(request, None)
    return web.json_response(await memories.promote(request.app[NODE], request.match_info["id"]))


def _bulk_items(data: Any) -> list[Any]:
    if isinstance(data, dict) and isinstance(data.get("memories"), list):
        return list(data["memories"])
    if isinstance(data, list):
        return data
    raise BadRequest('bulk body must be a JSON array of memories (or {"memories": [...]})')


async def bulk(request: web.Request) -> web.Response:
    key = _key(request)
    items = _bulk_items(await read_body(request))
    agent = _caller(request, None)
    out = await memories.bulk_create(request.app[NODE], items, agent=agent, idempotency_key=key)
    return web.json_response(out, status=201 if out["created"] else 200)


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/api/v1/memories", create)
    r.add_get("/api/v1/memories", list_)
    r.add_post("/api/v1/memories/bulk", bulk)
    r.add_get("/api/v1/memories/{id}", get)
    r.add_put("/api/v1/memories/{id}", update)
    r.add_delete("/api/v1/memories/{id}", delete)
    r.add_post("/api/v1/memories/{id}/promote", promote)
