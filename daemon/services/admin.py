"""The rest of the upstream SDK's memory surface: forget, gc, stats,
namespaces, export / import, consolidate, per-memory grants, cluster.

Every change is an ordinary replicated write through ``Node.write``:

* forget and gc tombstone the memories they select (``mem.del``), in rounds
  of at most ``limits.bulk_create_max`` ops; forget refuses (413, nothing
  deleted) a filter that selects more than ``limits.forget_max``;
* import re-creates each memory under its own id with its own timestamps
  (``mem.put``) and each link (``link.put``). A memory already held with the
  same or a newer ``updated_at`` is left alone and one deleted here stays
  deleted, so importing the same export twice changes nothing;
* consolidate writes the merged memory, a ``derived_from`` link to each
  source and a tombstone for each source in one quorum round; webhooks see
  it as ``memory_consolidate``;
* grant / revoke write ``grant.put`` (last writer wins per memory and
  agent). They are stored and replicated; reads do not consult them yet
  (enforcement in keys mode arrives with per-agent identities).

Reads that span records pass the cluster-wide read barrier first, as search
does, so what was acknowledged anywhere is counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common import limits
from common.errors import BadRequest, ClientError, NotFound, PayloadTooLarge
from common.lanes import memory_placement
from common.ops import GRANT_PUT, MEM_DEL, MEM_PUT, mem_key
from daemon.schemas.ids import check_record_id, record_id
from daemon.schemas.memories import memory_json
from daemon.schemas.search import (
    ConsolidateBody,
    ForgetFilter,
    GrantBody,
    ImportBody,
    ImportLink,
    ImportMemory,
    RevokeBody,
)
from daemon.schemas.timefmt import parse_rfc3339, rfc3339
from daemon.schemas.validation import validate
from daemon.services import memory_lanes
from daemon.services.links import link_json
from store import search as S

if TYPE_CHECKING:
    from daemon.ports import AdminPorts


async def _write_chunked(node: AdminPorts, items: list[tuple[str, str, dict[str, Any]]]) -> None:
    step = limits.bulk_create_max
    for i in range(0, len(items), step):
        await node.write(items[i:i + step])


async def _tombstone(node: AdminPorts, ids: list[str]) -> None:
    await _write_chunked(node, [(MEM_DEL, mem_key(i), {"id": i}) for i in ids])


# -- forget / gc -------------------------------------------------------------------

async def forget(node: AdminPorts, f: ForgetFilter) -> dict[str, Any]:
    kw = {"now_ms": node.now_ms(), "limit": limits.forget_max + 1, "namespace": f.namespace,
          "tier": f.tier, "pattern": f.pattern}
    ids = sorted(i for found in await memory_lanes.every_lane(node, "matching", {"kw": kw})
                 for i in found)
    if len(ids) > limits.forget_max:
        raise PayloadTooLarge(f"the filter selects more than {limits.forget_max} memories "
                              "(limits.forget_max); narrow it", limit="forget_max")
    await _tombstone(node, ids)
    return {"deleted": len(ids), "ids": ids}


async def gc(node: AdminPorts) -> dict[str, Any]:
    """Tombstone expired memories cluster-wide (they are already invisible)."""
    found = await memory_lanes.every_lane(node, "expired", {"now": node.now_ms(),
                                                             "limit": limits.gc_batch_max})
    ids = [i for lane in found for i in lane][:limits.gc_batch_max]
    await _tombstone(node, ids)
    return {"expired_deleted": len(ids)}


# -- stats / namespaces --------------------------------------------------------------

def _merge_counts(rows: list[dict[str, Any]], field: str) -> list[dict[str, Any]]:
    """Rows of ``{field, count}`` from every lane, one per ``field`` value, counts summed."""
    counts: dict[Any, int] = {}
    for r in rows:
        counts[r[field]] = counts.get(r[field], 0) + int(r["count"])
    return [{field: k, "count": counts[k]} for k in sorted(counts)]


async def stats(node: AdminPorts) -> dict[str, Any]:
    now = node.now_ms()
    lanes = await memory_lanes.every_lane(node, "stats", {
        "now": now, "soon": now + limits.expiring_soon_secs * 1000,
        "lanes": node.settings.server.lanes})
    out = dict(lanes[0])
    for field in ("total", "expiring_soon", "links_count", "db_size_bytes"):
        out[field] = sum(int(s[field]) for s in lanes)
    out["by_tier"] = _merge_counts([r for s in lanes for r in s["by_tier"]], "tier")
    out["by_namespace"] = _merge_counts([r for s in lanes for r in s["by_namespace"]],
                                        "namespace")
    out["node_id"] = node.node_id
    return out


async def namespaces(node: AdminPorts) -> dict[str, Any]:
    found = await memory_lanes.every_lane(node, "namespaces", {"now": node.now_ms()})
    ns = _merge_counts([r for lane in found for r in lane], "namespace")
    return {"namespaces": ns, "count": len(ns)}


# -- export / import -----------------------------------------------------------------

async def export(node: AdminPorts) -> dict[str, Any]:
    now = node.now_ms()
    found = await memory_lanes.every_lane(node, "export", {
        "now": now, "limit": limits.export_memories_max + 1})
    rows = sorted((r for lane in found for r in lane["memories"]),
                  key=lambda r: (int(r["created_at_ms"]), str(r["id"])))
    if len(rows) > limits.export_memories_max:
        raise PayloadTooLarge(f"more than {limits.export_memories_max} memories to export "
                              "(limits.export_memories_max)", limit="export_memories_max")
    # A link between two lanes comes from both, each copy with the time its
    # lane kept (the earliest of its writes): once, at the earliest.
    unique: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in (r for lane in found for r in lane["links"]):
        k = (r["source_id"], r["target_id"], r["relation"])
        if k not in unique or r["created_at_ms"] < unique[k]["created_at_ms"]:
            unique[k] = r
    links = [link_json(r) for r in sorted(unique.values(), key=lambda r: (
        r["created_at_ms"], r["source_id"], r["target_id"], r["relation"]))]
    return {"memories": [memory_json(r) for r in rows], "links": links, "count": len(rows),
            "exported_at": rfc3339(now)}


def _import_body(m: ImportMemory, now_ms: int) -> dict[str, Any]:
    created = parse_rfc3339(m.created_at) if m.created_at else now_ms
    updated = parse_rfc3339(m.updated_at) if m.updated_at else created
    meta = dict(m.metadata)
    agent = m.agent_id or (meta.get("agent_id") if isinstance(meta.get("agent_id"), str) else None)
    return {
        "id": m.id, "title": m.title, "content": m.content, "tier": m.tier,
        "namespace": m.namespace, "tags": list(m.tags), "priority": m.priority,
        "confidence": m.confidence, "source": m.source, "metadata": meta, "agent_id": agent,
        "access_count": m.access_count, "created_at_ms": created,
        "updated_at_ms": max(updated, created),
        "expires_at_ms": parse_rfc3339(m.expires_at) if m.expires_at else None,
    }


async def import_(node: AdminPorts, body: ImportBody) -> dict[str, Any]:
    now = node.now_ms()
    errors: list[str] = []
    bodies: list[dict[str, Any]] = []
    for index, raw in enumerate(body.memories):
        try:
            if not isinstance(raw, dict):
                raise BadRequest("each memory must be a JSON object")
            m = validate(ImportMemory, raw)
            bodies.append(_import_body(m, now))
        except ClientError as exc:
            label = raw.get("id") if isinstance(raw, dict) else None
            errors.append(f"{label or f'#{index}'}: {exc.message}")
    links: list[dict[str, Any]] = []
    for raw in body.links or []:
        try:
            if not isinstance(raw, dict):
                raise BadRequest("each link must be a JSON object")
            link = validate(ImportLink, raw)
        except ClientError as exc:
            errors.append(f"link: {exc.message}")
            continue
        links.append({"source_id": link.source_id, "target_id": link.target_id,
                      "relation": link.relation,
                      "created_at_ms": parse_rfc3339(link.created_at) if link.created_at else now})
    gone = await memory_lanes.tombstoned(node, [b["id"] for b in bodies], barrier=True)
    live = await memory_lanes.rows(node, [b["id"] for b in bodies], now_ms=now)
    to_write: list[tuple[str, str, dict[str, Any]]] = []
    unchanged = 0
    for b in bodies:
        held = live.get(b["id"])
        if b["id"] in gone or (held is not None and held["updated_at_ms"] >= b["updated_at_ms"]):
            unchanged += 1
            continue
        to_write.append((MEM_PUT, mem_key(b["id"]), b))
    imported = len(to_write)
    to_write += [item for lk in links for item in memory_lanes.link_items(node, lk)]
    await _write_chunked(node, to_write)
    return {"imported": imported, "unchanged": unchanged, "links": len(links), "errors": errors}


# -- consolidate --------------------------------------------------------------------

async def _done_before(node: AdminPorts, new_id: str, ids: list[str],
                       now: int) -> dict[str, Any] | None:
    """The answer of a consolidation that already happened under this
    Idempotency-Key (its summary stands, every source is deleted), or None."""
    summary = (await memory_lanes.rows(node, [new_id], now_ms=now, barrier=True)).get(new_id)
    if summary is None or await memory_lanes.tombstoned(node, ids, barrier=True) != set(ids):
        return None
    return {"id": new_id, "consolidated": len(ids), "sources": ids,
            "memory": memory_json(summary)}


async def consolidate(node: AdminPorts, req: ConsolidateBody, *, agent: str | None,
                      idempotency_key: str | None = None) -> dict[str, Any]:
    """One summary memory of ``req.ids``, linked to each (``derived_from``),
    which are deleted. With an Idempotency-Key the summary's id is derived
    from it, so a retry writes the same summary (never a second one) and one
    after the whole consolidation answers as it did."""
    ids = list(dict.fromkeys(req.ids))
    if len(ids) < 2:
        raise BadRequest("consolidate needs at least two distinct memory ids")
    now = node.now_ms()
    # placed by the namespace asked for (the sources' may be gone at a retry)
    new_id = record_id("mem", agent, idempotency_key, key=memory_placement(req.namespace or ""),
                       lanes=node.settings.server.lanes)
    live = await memory_lanes.rows(node, ids, now_ms=now, barrier=True)
    sources = []
    for i in ids:
        if i not in live:
            done = (None if idempotency_key is None
                    else await _done_before(node, new_id, ids, now))
            if done is not None:
                return done
            raise NotFound(f"memory {i} not found")
        sources.append(live[i])
    tags = list(req.tags) if req.tags is not None else list(
        dict.fromkeys(t for s in sources for t in s["tags"]))[:limits.tags_max]
    namespace = req.namespace or sources[0]["namespace"]
    meta: dict[str, Any] = {"consolidated_from": ids}
    if agent is not None:
        meta["agent_id"] = agent
    body = {
        "id": new_id, "title": req.title, "content": req.summary, "tier": req.tier,
        "namespace": namespace, "tags": tags,
        "priority": max(int(s["priority"]) for s in sources),
        "confidence": min(float(s["confidence"]) for s in sources),
        "source": "consolidation", "metadata": meta, "agent_id": agent,
        "created_at_ms": now, "updated_at_ms": now,
        "expires_at_ms": None if req.tier == "long" else min(
            (s["expires_at_ms"] for s in sources if s.get("expires_at_ms")), default=None),
    }
    items: list[tuple[str, str, dict[str, Any]]] = [(MEM_PUT, mem_key(new_id), body)]
    items += [item for i in ids for item in memory_lanes.link_items(node, {
        "source_id": new_id, "target_id": i, "relation": "derived_from", "created_at_ms": now})]
    deletes = [(MEM_DEL, mem_key(i), {"id": i}) for i in ids]
    if len({node.lane_elsewhere(key) for _, key, _ in items + deletes}) == 1:
        await node.write(items + deletes)  # one lane: one quorum write, all or nothing
    else:
        # The lanes' shares of one write land independently: the summary
        # and its links first, so a failure leaves the sources in place
        # (never deleted without their summary), then the sources' deletes.
        await node.write(items)
        await node.write(deletes)
    return {"id": new_id, "consolidated": len(ids), "sources": ids,
            "memory": memory_json({**body, "access_count": 0})}


# -- grants -------------------------------------------------------------------------

async def _held(node: AdminPorts, memory_id: str) -> None:
    check_record_id(memory_id, "memory id")
    await node.read_barrier(mem_key(memory_id))
    if await node.store.get_memory(memory_id, now_ms=node.now_ms()) is None:
        raise NotFound(f"memory {memory_id} not found")


async def grant(node: AdminPorts, memory_id: str, req: GrantBody) -> dict[str, Any]:
    await _held(node, memory_id)
    body = {"memory_id": memory_id, "agent_id": req.agent_id, "permission": req.permission,
            "granted": True, "at_ms": node.now_ms()}
    await node.write([(GRANT_PUT, mem_key(memory_id), body)])
    return {"granted": True, "memory_id": memory_id, "agent_id": req.agent_id,
            "permission": req.permission}


async def revoke(node: AdminPorts, memory_id: str, req: RevokeBody) -> dict[str, Any]:
    await _held(node, memory_id)
    body = {"memory_id": memory_id, "agent_id": req.agent_id, "permission": None,
            "granted": False, "at_ms": node.now_ms()}
    await node.write([(GRANT_PUT, mem_key(memory_id), body)])
    return {"revoked": True, "memory_id": memory_id, "agent_id": req.agent_id}


async def grants(node: AdminPorts, memory_id: str) -> dict[str, Any]:
    await _held(node, memory_id)
    rows = await S.grants_of(node.store.reads, memory_id)
    out = [{"agent_id": r["agent_id"], "permission": r["permission"],
            "granted_at": rfc3339(r["at_ms"])} for r in rows]
    return {"memory_id": memory_id, "grants": out, "count": len(out)}


# -- cluster -------------------------------------------------------------------------

_CLUSTER_READ_ACTIONS = (None, "", "status", "health", "members", "list")


def cluster(node: AdminPorts, request: dict[str, Any]) -> dict[str, Any]:
    """The SDK's ``cluster`` call. Membership here is static (``--quorum-peers``
    on every node), so only reading it is supported."""
    action = request.get("action")
    if action not in _CLUSTER_READ_ACTIONS:
        raise BadRequest(f"cluster action {action!r} is not supported: membership is set by "
                         "each node's --quorum-peers; send {} or {\"action\": \"status\"}")
    status = node.status()
    c = node.settings.cluster
    peers = status.get("peers", {})
    members = [{"node_id": node.node_id, "url": status.get("url"), "self": True, "alive": True}]
    members += [{"node_id": p.node_id, "url": p.url, "self": False,
                 "alive": bool(peers.get(p.node_id, {}).get("alive"))} for p in c.peers]
    return {
        "node_id": node.node_id,
        "members": members,
        "member_count": len(members),
        "write_quorum": c.w,
        "quorum_healthy": status.get("quorum_healthy"),
        "healthy": bool(status.get("quorum_healthy")),
        "status": status,
    }
