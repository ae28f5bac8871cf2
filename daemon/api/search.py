"""HTTP handlers for the upstream SDK's wider surface: ``/search``,
``/recall``, ``/forget``, ``/links``, ``/memories/{id}/lineage``, ``/stats``,
``/namespaces``, ``/gc``, ``/export``, ``/import``, ``/consolidate``,
``/memories/{id}/grant|revoke|grants`` and ``POST /cluster``.

Each handler validates its input completely (query, body, path id), then
calls :mod:`daemon.services.search`, :mod:`daemon.services.links` or
:mod:`daemon.services.admin`; bad input is a 4xx before anything is written.
Forget, gc and import act on every author's memories: in keys mode they
need a root key (:data:`common.policy.ROOT_ONLY`). Search and recall are
operations (:mod:`daemon.api.call`), which ``/mcp`` runs as well.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from common import limits
from common.errors import BadRequest, PayloadTooLarge
from common.policy import check
from daemon.api.call import ApiCall, Route, serve
from daemon.http.appkeys import NODE
from daemon.http.auth import acting_agent, principal_of
from daemon.http.errors import decode_json, query_model, read_body, read_json
from daemon.http.jsonio import json_response
from daemon.schemas.ids import check_idempotency_key
from daemon.schemas.search import (
    ConsolidateBody,
    ForgetFilter,
    GrantBody,
    ImportBody,
    LineageQuery,
    LinkBody,
    RecallBody,
    RecallQuery,
    RevokeBody,
    SearchBody,
    SearchQuery,
)
from daemon.schemas.validation import validate
from daemon.services import admin, inbox_view, links
from daemon.services import search as svc


def _who(request: web.Request, claimed: str | None = None) -> str | None:
    return acting_agent(principal_of(request), claimed,
                        required=False)


async def _optional_object(request: web.Request) -> dict[str, Any]:
    """A JSON object body that may be absent (the SDK sends none for some calls)."""
    if not request.body_exists:
        return {}
    if request.content_length is not None and request.content_length > limits.request_body_max_bytes:
        raise PayloadTooLarge(f"request body over {limits.request_body_max_bytes} bytes "
                              "(limits.request_body_max_bytes)")
    raw = await request.read()
    if not raw.strip():
        return {}
    data = decode_json(raw)  # the same refusals as every body (a 4,300-digit integer too)
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return data


# -- search / recall -------------------------------------------------------------------

async def _search(c: ApiCall, req: SearchBody) -> Any:
    inbox_of = inbox_view.inbox_agent(req.namespace)
    if inbox_of is not None:  # the recipient's notifications, as memories
        return await inbox_view.search_inbox(c.node, c.principal, inbox_of, req)
    return await svc.search(c.node, req)


async def search_get(c: ApiCall) -> Any:
    c.agent(None, required=False)
    q = c.params(SearchQuery)
    return await _search(c, SearchBody.model_construct(**q.model_dump()))


async def search_post(c: ApiCall) -> Any:
    c.agent(None, required=False)
    return await _search(c, await c.body(SearchBody))


async def recall_post(c: ApiCall) -> Any:
    c.agent(None, required=False)
    return await svc.recall(c.node, await c.body(RecallBody))


async def recall_get(c: ApiCall) -> Any:
    c.agent(None, required=False)
    q = c.params(RecallQuery)
    return await svc.recall(c.node, RecallBody.model_construct(**q.model_dump()))


# -- forget / gc ---------------------------------------------------------------------------

async def forget(request: web.Request) -> web.Response:
    check(principal_of(request), "memory.forget")
    fields: dict[str, Any] = dict(request.query)
    fields.update(await _optional_object(request))  # upstream sends a JSON body
    f = validate(ForgetFilter, fields)
    return json_response(await admin.forget(request.app[NODE], f))


async def gc(request: web.Request) -> web.Response:
    check(principal_of(request), "admin.gc")
    return json_response(await admin.gc(request.app[NODE]))


# -- links / lineage -----------------------------------------------------------------------

async def create_link(request: web.Request) -> web.Response:
    _who(request)
    req = await read_json(request, LinkBody)
    return json_response(await links.link(request.app[NODE], req), status=201)


async def get_links(request: web.Request) -> web.Response:
    _who(request)
    return json_response(await links.get_links(request.app[NODE], request.match_info["id"]))


async def lineage(request: web.Request) -> web.Response:
    _who(request)
    q = query_model(request, LineageQuery)
    return json_response(await links.lineage(request.app[NODE], request.match_info["id"], q))


# -- stats / namespaces / export / import ---------------------------------------------------

async def stats(request: web.Request) -> web.Response:
    _who(request)
    return json_response(await admin.stats(request.app[NODE]))


async def namespaces(request: web.Request) -> web.Response:
    _who(request)
    return json_response(await admin.namespaces(request.app[NODE]))


async def export(request: web.Request) -> web.Response:
    _who(request)
    return json_response(await admin.export(request.app[NODE]))


async def import_(request: web.Request) -> web.Response:
    check(principal_of(request), "memory.import")
    data = await read_body(request)
    if isinstance(data, list):  # a bare list of memories
        data = {"memories": data}
    if not isinstance(data, dict):
        raise BadRequest('import body must be {"memories": [...], "links": [...]}')
    body = validate(ImportBody, data)
    return json_response(await admin.import_(request.app[NODE], body))


# -- consolidate / grants / cluster ----------------------------------------------------------

async def consolidate(request: web.Request) -> web.Response:
    req = await read_json(request, ConsolidateBody)
    agent = _who(request, req.agent_id)
    key = check_idempotency_key(request.headers.get("Idempotency-Key"))
    return json_response(await admin.consolidate(request.app[NODE], req, agent=agent,
                                                 idempotency_key=key), status=201)


async def grant(request: web.Request) -> web.Response:
    _who(request)
    req = await read_json(request, GrantBody)
    return json_response(await admin.grant(request.app[NODE], request.match_info["id"], req))


async def revoke(request: web.Request) -> web.Response:
    _who(request)
    req = await read_json(request, RevokeBody)
    return json_response(await admin.revoke(request.app[NODE], request.match_info["id"], req))


async def list_grants(request: web.Request) -> web.Response:
    _who(request)
    return json_response(await admin.grants(request.app[NODE], request.match_info["id"]))


async def cluster(request: web.Request) -> web.Response:
    _who(request)
    body = await _optional_object(request)
    return json_response(admin.cluster(request.app[NODE], body))


OPERATIONS = [
    Route("GET", "/api/v1/search", search_get),
    Route("POST", "/api/v1/search", search_post),
    Route("GET", "/api/v1/recall", recall_get),
    Route("POST", "/api/v1/recall", recall_post),
]


def add_routes(app: web.Application) -> None:
    serve(app, OPERATIONS)
    r = app.router
    r.add_post("/api/v1/forget", forget)
    r.add_post("/api/v1/gc", gc)
    r.add_post("/api/v1/links", create_link)
    r.add_get("/api/v1/links/{id}", get_links)
    r.add_get("/api/v1/memories/{id}/lineage", lineage)
    r.add_get("/api/v1/stats", stats)
    r.add_get("/api/v1/namespaces", namespaces)
    r.add_get("/api/v1/export", export)
    r.add_post("/api/v1/import", import_)
    r.add_post("/api/v1/consolidate", consolidate)
    r.add_post("/api/v1/memories/{id}/grant", grant)
    r.add_post("/api/v1/memories/{id}/revoke", revoke)
    r.add_get("/api/v1/memories/{id}/grants", list_grants)
    r.add_post("/api/v1/cluster", cluster)
