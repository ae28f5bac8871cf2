"""Upstream-shaped sync endpoints, for interoperability and harnesses.

``POST /api/v1/sync/push`` takes whole memories (the upstream daemon's
``Memory`` shape) and deletions from a peer or a tool, and applies each one
that is newer than what this node holds as an ordinary quorum write, so it
replicates like any other change. ``GET /api/v1/sync/since`` pages through
live memories by ``updated_at`` with a ``next_since`` cursor. Members of
this cluster replicate with the op log on ``/peer/v1/*`` instead; these two
exist for tools that speak the upstream protocol.

They read and replace memories wholesale, so they are an operator's: in
keys mode a root key, or a request signed with the cluster secret like a
peer's (:mod:`daemon.peer.auth`); in anonymous mode loopback callers only.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

from aiohttp import web
from pydantic import Field

from common import limits
from common.errors import BadRequest, Forbidden, Unauthorized
from common.policy import ANONYMOUS, check
from daemon.http.appkeys import NODE
from daemon.http.auth import NOBODY, principal_of
from daemon.http.errors import Handler, decode_json, error_response, query_model, read_json
from daemon.http.jsonio import json_response
from daemon.lanes.hop import client_cert_member, client_remote
from daemon.peer.auth import BOOT_HEADER, BootMismatch
from daemon.runtime.tls import check_peer_member
from daemon.schemas.memories import MemoryFields, Source
from daemon.schemas.validation import AgentId, Lenient, Strict, text, validate
from daemon.services import sync

RecordId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9\-_.:]+$")]


class _PushedKey(Strict):
    id: RecordId


class PushedMemory(MemoryFields, _PushedKey):
    """The upstream ``Memory`` shape, held to the same field rules as a create
    (``id`` first; its content may be empty)."""

    content: text(limits.memory_content_max_chars)  # type: ignore[valid-type]
    source: Source = "sync"  # type: ignore[valid-type]
    created_at: str
    updated_at: str
    expires_at: str | None = None


class PushBody(Strict):
    sender_agent_id: AgentId
    memories: list[PushedMemory] = Field(default_factory=list,
                                         max_length=limits.bulk_create_max)
    deletions: list[RecordId] = Field(default_factory=list, max_length=limits.bulk_create_max)


class SinceQuery(Lenient):
    since: str | None = None
    limit: Annotated[int, Field(ge=1, le=limits.sync_since_limit_max)] = 500


def _from_loopback(request: web.Request) -> bool:
    """The client's address (the receiving lane's, for a request handed over) is loopback."""
    try:
        return ipaddress.ip_address(client_remote(request) or "").is_loopback
    except ValueError:
        return False


async def _operator(request: web.Request, action: str) -> bytes | None:
    """Refuse all but the operator (see the module docstring). A signed
    request's body is read here, after its headers passed, and returned."""
    node = request.app[NODE]
    principal = principal_of(request)
    if principal is NOBODY:  # no key, a signature instead: check it
        if not node.settings.cluster.secret:
            raise Unauthorized("this node has no cluster secret to check a signature with")
        length = request.content_length
        if length is None and request.method == "GET":
            length = 0  # a GET carries no body (the request guard saw to that)
        checked = node.verifier.verify_headers(request.headers, request.method, request.path,
                                               length, node.now_ms() / 1000)
        if checked.node in node.settings.cluster.member_ids:  # signed as a member: mutual TLS
            check_peer_member(node.settings, client_cert_member(request), checked.node)
        raw = await request.read()
        node.verifier.check_body(checked, raw)
        return raw
    if principal.mode == ANONYMOUS and not _from_loopback(request):
        raise Forbidden(f"{request.path} answers loopback callers only without keys")
    check(principal, action)  # keys mode: a root key
    return None


async def push(request: web.Request) -> web.Response:
    raw = await _operator(request, "sync.push")
    if raw is None:
        body = await read_json(request, PushBody)
    else:
        data = decode_json(raw)
        if not isinstance(data, dict):
            raise BadRequest("request body must be a JSON object")
        body = validate(PushBody, data)
    applied = await sync.push(request.app[NODE], body.memories, body.deletions)
    return json_response({"applied": applied,
                              "received": len(body.memories) + len(body.deletions),
                              "sender_agent_id": body.sender_agent_id})


async def since(request: web.Request) -> web.Response:
    await _operator(request, "sync.since")
    q = query_model(request, SinceQuery)
    return json_response(await sync.since(request.app[NODE], q.since, q.limit))


def _telling_boot(handler: Handler) -> Handler:
    """A signature for another boot of this node is refused with the boot id
    to sign for (as :mod:`daemon.api.backup` does)."""
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except BootMismatch as exc:
            refused = error_response(exc)
            refused.headers[BOOT_HEADER] = request.app[NODE].verifier.boot
            return refused
    wrapped.__name__ = wrapped.__qualname__ = handler.__name__
    return wrapped


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/sync/push", _telling_boot(push))
    app.router.add_get("/api/v1/sync/since", _telling_boot(since))
