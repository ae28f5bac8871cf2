"""Upstream-shaped sync endpoints, for interoperability and harnesses.

``POST /api/v1/sync/push`` takes whole memories (the upstream daemon's
``Memory`` shape) and deletions from a peer or a tool, and applies each one
that is newer than what this node holds as an ordinary quorum write, so it
replicates like any other change. ``GET /api/v1/sync/since`` pages through
live memories by ``updated_at`` with a ``next_since`` cursor. Members of
this cluster replicate with the op log on ``/peer/v1/*`` instead; these two
exist for tools that speak the upstream protocol.
"""

from __future__ import annotations

from typing import Annotated, Any

from aiohttp import web
from pydantic import Field

from common import limits
from common.errors import BadRequest
from daemon.app import NODE
from daemon.http_errors import query_model, read_json
from daemon.schemas.memories import Confidence, Metadata, Source, Tags, Title, memory_json
from daemon.schemas.timefmt import parse_rfc3339, rfc3339
from daemon.validation import AgentId, Lenient, Namespace, Priority, Strict, Tier, text
from store.ops import MEM_DEL, MEM_PUT, mem_key

RecordId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9\-_.:]+$")]


class PushedMemory(Strict):
    """The upstream ``Memory`` shape, held to the same field rules as a create."""

    id: RecordId
    title: Title  # type: ignore[valid-type]
    content: text(limits.memory_content_max_chars)  # type: ignore[valid-type]
    tier: Tier = "mid"
    namespace: Namespace = "global"
    tags: Tags = Field(default_factory=list)
    priority: Priority = 5
    confidence: Confidence = 1.0
    source: Source = "sync"  # type: ignore[valid-type]
    metadata: Metadata = Field(default_factory=dict)
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


def _ms(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        raise BadRequest(f"{what} is not an RFC3339 time") from None


async def push(request: web.Request) -> web.Response:
    node = request.app[NODE]
    body = await read_json(request, PushBody)
    now = node.now_ms()
    items: list[tuple[str, str, dict[str, Any]]] = []
    for m in body.memories:
        updated = _ms(m.updated_at, "updated_at") or now
        current = await node.store.get_memory(m.id, now_ms=now)
        if current is not None and current["updated_at_ms"] >= updated:
            continue  # insert-if-newer, as upstream does
        agent = m.metadata.get("agent_id") if isinstance(m.metadata.get("agent_id"), str) else None
        items.append((MEM_PUT, mem_key(m.id), {
            "id": m.id, "title": m.title, "content": m.content, "tier": m.tier,
            "namespace": m.namespace, "tags": list(m.tags), "priority": m.priority,
            "confidence": m.confidence, "source": m.source, "metadata": dict(m.metadata),
            "agent_id": agent, "created_at_ms": _ms(m.created_at, "created_at"),
            "updated_at_ms": updated, "expires_at_ms": _ms(m.expires_at, "expires_at"),
        }))
    for mid in body.deletions:
        items.append((MEM_DEL, mem_key(mid), {"id": mid}))
    if items:
        await node.write(items)
    return web.json_response({"applied": len(items),
                              "received": len(body.memories) + len(body.deletions),
                              "sender_agent_id": body.sender_agent_id})


async def since(request: web.Request) -> web.Response:
    node = request.app[NODE]
    q = query_model(request, SinceQuery)
    since_ms = _ms(q.since, "since") or 0
    rows = await node.store.memories_since(since_ms, limit=q.limit, now_ms=node.now_ms())
    next_since = rfc3339(rows[-1]["updated_at_ms"]) if rows else q.since
    return web.json_response({"memories": [memory_json(r) for r in rows], "count": len(rows),
                              "next_since": next_since})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/sync/push", push)
    app.router.add_get("/api/v1/sync/since", since)
