"""Memories: create, read, list, update, delete, promote, bulk create.

Every change is one ``mem.put`` (the whole record, last writer wins by HLC)
or ``mem.del`` (a tombstone that no later put undoes), written through
``Node.write`` so it is acknowledged only once W members hold it. An update
reads the current record, patches it and writes the whole record again
with a fresh stamp; a promote is an update to tier ``long`` without expiry.

Identity: the acting agent (header and body agree, checked by the caller)
is stamped into ``agent_id`` and ``metadata.agent_id``; without one, a
caller-supplied ``metadata.agent_id`` is dropped rather than believed.

Idempotency: with an ``Idempotency-Key`` the id is derived from (agent,
key). A retry of a create whose record still says what the request says
re-asserts it (same id, same created_at and expiry, a new quorum write, so
the retry's 201 carries the full guarantee even when the first attempt got
a 503). If the record has changed since, the retry writes nothing and
returns the record as it now is; if it was deleted, the retry is a 409.

``updated_at`` equals ``created_at`` only until the first change, even one
in the same millisecond: webhooks tell a store from an update by that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common import limits
from common.errors import BadRequest, ClientError, Conflict, NotFound, PayloadTooLarge
from common.lanes import memory_placement
from common.ops import MEM_DEL, MEM_PUT, mem_key
from common.policy import Principal, check_author
from daemon.schemas.ids import check_record_id, record_id
from daemon.schemas.memories import CreateMemory, ListMemoriesQuery, UpdateMemory, memory_json
from daemon.schemas.timefmt import parse_rfc3339
from daemon.schemas.validation import validate
from daemon.services import memory_lanes
from daemon.services.links import link_json
from store import search as search_store

if TYPE_CHECKING:
    from daemon.ports import RecordPorts

# Fields that decide whether an idempotent retry asks for the same record.
_CONTENT_FIELDS = ("title", "content", "tier", "namespace", "tags", "priority", "confidence",
                   "source", "metadata", "agent_id")


def tier_expiry_ms(tier: str, now_ms: int) -> int | None:
    secs = limits.memory_tier_ttl_secs.get(tier)
    return None if secs is None else now_ms + secs * 1000


def _expiry_ms(tier: str, ttl_secs: int | None, expires_at: str | None, now_ms: int) -> int | None:
    if ttl_secs is not None:
        return now_ms + ttl_secs * 1000
    if expires_at is not None:
        at = parse_rfc3339(expires_at)
        if at <= now_ms:
            raise BadRequest("expires_at is in the past")
        return at
    return tier_expiry_ms(tier, now_ms)


def _stamp(metadata: dict[str, Any], agent: str | None, scope: str | None = None) -> dict[str, Any]:
    out = dict(metadata)
    if scope is not None:
        out["scope"] = scope
    if agent is not None:
        out["agent_id"] = agent
    else:
        out.pop("agent_id", None)
    return out


def _new_body(req: CreateMemory, memory_id: str, agent: str | None, now_ms: int) -> dict[str, Any]:
    return {
        "id": memory_id,
        "title": req.title,
        "content": req.content,
        "tier": req.tier,
        "namespace": req.namespace,
        "tags": list(req.tags),
        "priority": req.priority,
        "confidence": req.confidence,
        "source": req.source,
        "metadata": _stamp(req.metadata, agent, req.scope),
        "agent_id": agent,
        "created_at_ms": now_ms,
        "updated_at_ms": now_ms,
        "expires_at_ms": _expiry_ms(req.tier, req.ttl_secs, req.expires_at, now_ms),
    }


def _body_of(row: dict[str, Any]) -> dict[str, Any]:
    """A full ``mem.put`` body that re-states a stored memory."""
    return {
        "id": row["id"], "title": row["title"], "content": row["content"], "tier": row["tier"],
        "namespace": row["namespace"], "tags": list(row["tags"]), "priority": row["priority"],
        "confidence": row["confidence"], "source": row["source"],
        "metadata": dict(row["metadata"]), "agent_id": row.get("agent_id"),
        "created_at_ms": row["created_at_ms"], "updated_at_ms": row["updated_at_ms"],
        "expires_at_ms": row.get("expires_at_ms"),
    }


def _same_request(existing: dict[str, Any], body: dict[str, Any]) -> bool:
    return all(existing.get(f) == body.get(f) for f in _CONTENT_FIELDS)


def _later(row: dict[str, Any], now_ms: int) -> int:
    """``updated_at`` of a change: after the creation, even within its
    millisecond, so ``created_at == updated_at`` means "never changed"."""
    return max(now_ms, int(row["created_at_ms"]) + 1)


async def _load(node: RecordPorts, memory_id: str) -> dict[str, Any]:
    check_record_id(memory_id, "memory id")
    row = await _fresh(node, memory_id)
    if row is None:
        raise NotFound(f"memory {memory_id} not found")
    return row


async def _settle(node: RecordPorts, bodies: list[dict[str, Any]],
                  existing: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Bodies to write, after folding in idempotent replays: an unchanged
    record is re-asserted as first written; a changed one is left alone."""
    to_write: list[dict[str, Any]] = []
    untouched: list[str] = []
    for body in bodies:
        prior = existing.get(body["id"])
        if prior is None:
            to_write.append(body)
        elif _same_request(prior, body):
            body.update(created_at_ms=prior["created_at_ms"], updated_at_ms=prior["updated_at_ms"],
                        expires_at_ms=prior.get("expires_at_ms"))
            to_write.append(body)
        else:
            untouched.append(body["id"])
    return to_write, untouched


async def _existing(node: RecordPorts, ids: list[str], keyed: bool) -> dict[str, dict[str, Any]]:
    if not keyed:
        return {}
    return await memory_lanes.rows(node, ids, now_ms=node.now_ms())


async def _fresh(node: RecordPorts, memory_id: str) -> dict[str, Any] | None:
    """The memory as its lane holds it now (this lane's store, without lanes)."""
    if node.lane_elsewhere(mem_key(memory_id)) is None:
        row = await node.store.get_memory(memory_id, now_ms=node.now_ms())
        return None if row is None else dict(row)
    return (await memory_lanes.rows(node, [memory_id], now_ms=node.now_ms())).get(memory_id)


def _new_id(node: RecordPorts, agent: str | None, key: str | None, namespace: str) -> str:
    """A new memory's id: with lanes, one that names the lane of its namespace."""
    return record_id("mem", agent, key, key=memory_placement(namespace),
                     lanes=node.settings.server.lanes)


async def create(node: RecordPorts, req: CreateMemory, *, agent: str | None,
                 idempotency_key: str | None = None) -> dict[str, Any]:
    now = node.now_ms()
    memory_id = _new_id(node, agent, idempotency_key, req.namespace)
    body = _new_body(req, memory_id, agent, now)
    to_write, _ = await _settle(node, [body], await _existing(node, [memory_id], idempotency_key is not None))
    if to_write:
        await node.write([(MEM_PUT, mem_key(memory_id), to_write[0])])
    row = await _fresh(node, memory_id)
    if row is None:
        if idempotency_key is not None:
            raise Conflict(f"memory {memory_id} created with this Idempotency-Key has been deleted",
                           id=memory_id)
        row = {**body, "access_count": 0}
    return memory_json(row)


async def get(node: RecordPorts, memory_id: str) -> dict[str, Any]:
    """The memory's own fields at the top level (the SDK validates a
    ``Memory`` there) plus upstream's envelope ``{"memory", "links"}``."""
    memory = memory_json(await _load(node, memory_id))
    rows = await search_store.links_of(node.store.reads, memory_id,
                                       limit=limits.links_per_memory_max)
    return {**memory, "memory": memory, "links": [link_json(r) for r in rows]}


async def list_memories(node: RecordPorts, q: ListMemoriesQuery) -> dict[str, Any]:
    """The store's order (last change, then id; both descending). With lanes:
    each lane's first ``offset + limit``, merged and cut; for a deeper page,
    the key it starts below (:func:`memory_lanes.key_at`, from the lanes'
    keys alone), then each lane's first ``limit`` below it, merged and cut."""
    kw: dict[str, Any] = {"namespace": q.namespace, "tier": q.tier, "tags": q.tags,
          "min_priority": q.min_priority, "agent_id": q.agent_id, "now_ms": node.now_ms()}
    if node.settings.server.lanes == 1:
        rows = await node.store.list_memories(**kw, limit=q.limit, offset=q.offset)
    else:
        args: dict[str, Any] = {"kw": {**kw, "limit": q.offset + q.limit, "offset": 0}}
        skip = q.offset
        if q.offset and q.offset + q.limit > limits.memory_list_fanout_max:
            below = await memory_lanes.key_at(node, kw, q.offset)
            if below is None:
                return {"memories": [], "count": 0}
            args = {"kw": {**kw, "limit": q.limit, "offset": 0, "below": list(below)},
                    "consistency": "local"}  # the lanes took their barriers finding it
            skip = 0
        answers = await memory_lanes.every_lane(node, "list", args)
        rows = sorted((r for a in answers for r in a),
                      key=lambda r: (int(r["updated_at_ms"]), str(r["id"])),
                      reverse=True)[skip:skip + q.limit]
    memories = [memory_json(r) for r in rows]
    return {"memories": memories, "count": len(memories)}


async def update(node: RecordPorts, memory_id: str, req: UpdateMemory, *,
                 principal: Principal | None = None) -> dict[str, Any]:
    row = await _load(node, memory_id)
    if principal is not None:
        check_author(principal, row.get("agent_id"), "memory.update")
    now = node.now_ms()
    body = _body_of(row)
    given = req.model_fields_set
    for name in ("title", "content", "namespace", "priority", "confidence", "source"):
        value = getattr(req, name)
        if value is not None:
            body[name] = value
    if req.tags is not None:
        body["tags"] = list(req.tags)
    if req.metadata is not None:
        body["metadata"] = _stamp(req.metadata, body["agent_id"], row["metadata"].get("scope"))
    tier_changed = req.tier is not None and req.tier != body["tier"]
    if req.tier is not None:
        body["tier"] = req.tier
    if req.ttl_secs is not None:
        body["expires_at_ms"] = now + req.ttl_secs * 1000
    elif "expires_at" in given:
        body["expires_at_ms"] = None if req.expires_at is None else _expiry_ms(
            body["tier"], None, req.expires_at, now)
    elif tier_changed:
        body["expires_at_ms"] = tier_expiry_ms(body["tier"], now)
    body["updated_at_ms"] = _later(row, now)
    await node.write([(MEM_PUT, mem_key(memory_id), body)])
    fresh = await _fresh(node, memory_id)
    return memory_json(fresh if fresh is not None else {**body, "access_count": row["access_count"]})


async def promote(node: RecordPorts, memory_id: str) -> dict[str, Any]:
    row = await _load(node, memory_id)
    body = _body_of(row)
    body.update(tier="long", expires_at_ms=None, updated_at_ms=_later(row, node.now_ms()))
    await node.write([(MEM_PUT, mem_key(memory_id), body)])
    fresh = await _fresh(node, memory_id)
    out = memory_json(fresh if fresh is not None else {**body, "access_count": row["access_count"]})
    out["promoted"] = True
    return out


async def delete(node: RecordPorts, memory_id: str, *,
                 principal: Principal | None = None) -> dict[str, Any]:
    row = await _load(node, memory_id)
    if principal is not None:
        check_author(principal, row.get("agent_id"), "memory.delete")
    await node.write([(MEM_DEL, mem_key(memory_id), {"id": memory_id})])
    return {"deleted": True, "id": memory_id}


def _item_agent(identity_agent: str | None, claimed: Any) -> str | None:
    if claimed is not None and identity_agent is not None and claimed != identity_agent:
        raise BadRequest(f"agent_id {claimed!r} differs from the caller's identity {identity_agent!r}")
    return identity_agent if identity_agent is not None else claimed


async def bulk_create(node: RecordPorts, items: list[Any], *, agent: str | None,
                      idempotency_key: str | None = None) -> dict[str, Any]:
    """Validate each item on its own; write the valid ones in ONE quorum
    write; list the invalid ones in ``errors`` (``{index, error}``)."""
    if len(items) > limits.bulk_create_max:
        raise PayloadTooLarge(
            f"{len(items)} memories in one bulk request, over {limits.bulk_create_max} "
            "(limits.bulk_create_max)", limit="bulk_create_max")
    now = node.now_ms()
    bodies: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for index, raw in enumerate(items):
        try:
            if not isinstance(raw, dict):
                raise BadRequest("each memory must be a JSON object")
            req = validate(CreateMemory, raw)
            owner = _item_agent(agent, req.agent_id)
            key = None if idempotency_key is None else f"{idempotency_key}#{index}"
            bodies.append(_new_body(req, _new_id(node, owner, key, req.namespace), owner, now))
        except ClientError as exc:
            errors.append({"index": index, "error": exc.message})
    existing = await _existing(node, [b["id"] for b in bodies], idempotency_key is not None)
    to_write, _ = await _settle(node, bodies, existing)
    if to_write:
        await node.write([(MEM_PUT, mem_key(b["id"]), b) for b in to_write])
    return {"created": len(bodies), "ids": [b["id"] for b in bodies], "errors": errors}
