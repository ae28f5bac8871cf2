"""Links between memories and the lineage walk over them.

A link is a ``link.put`` op (source, target, relation), replicated like any
write and merged as a grow-only set (store/ops.py); with lanes it is written
under both ends' keys, so each end's lane keeps it. Both ends must be live
memories when the link is made; a link survives a later delete of either
end, so lineage still shows a tombstoned ancestor (marked ``tombstoned``).

Lineage follows the provenance relations only (:data:`PROVENANCE`):
``A derived_from B`` makes B an ancestor of A. The walk is breadth-first,
each memory at its smallest depth, up to ``max_depth`` (at most
``limits.lineage_depth_max``) and ``limits.lineage_nodes_max`` nodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common import limits
from common.errors import NotFound
from common.ops import ALL_KEYS
from common.vocab import CONSISTENCY_DEFAULT, Consistency
from daemon.schemas.ids import check_record_id
from daemon.schemas.search import LineageQuery, LinkBody
from daemon.schemas.timefmt import rfc3339
from daemon.services import memory_lanes
from store import search as S

if TYPE_CHECKING:
    from daemon.ports import RecordPorts

PROVENANCE = ("derived_from", "reflects_on", "derives_from")


def link_json(row: dict[str, Any]) -> dict[str, Any]:
    return {"source_id": row["source_id"], "target_id": row["target_id"],
            "relation": row["relation"], "created_at": rfc3339(row["created_at_ms"])}


async def link(node: RecordPorts, req: LinkBody) -> dict[str, Any]:
    live = await memory_lanes.rows(node, [req.source_id, req.target_id], now_ms=node.now_ms(),
                                   barrier=True)
    for memory_id in (req.source_id, req.target_id):
        if memory_id not in live:
            raise NotFound(f"memory {memory_id} not found")
    body = {"source_id": req.source_id, "target_id": req.target_id, "relation": req.relation,
            "created_at_ms": node.now_ms()}
    await node.write(memory_lanes.link_items(node, body))
    return {"linked": True, **link_json(body)}


async def links_of(node: RecordPorts, memory_id: str, consistency: Consistency = CONSISTENCY_DEFAULT) -> list[dict[str, Any]]:
    check_record_id(memory_id, "memory id")
    await node.read_barrier(ALL_KEYS, consistency)
    rows = await S.links_of(node.store.reads, memory_id, limit=limits.links_per_memory_max)
    return [link_json(r) for r in rows]


async def get_links(node: RecordPorts, memory_id: str) -> dict[str, Any]:
    links = await links_of(node, memory_id)
    return {"id": memory_id, "links": links, "count": len(links)}


async def _edges(node: RecordPorts, frontier: list[str], outgoing: bool) -> list[dict[str, Any]]:
    """The provenance links leaving (``outgoing``) or entering ``frontier``:
    with lanes each memory's lane keeps its links, so each lane is asked for
    its own memories' (a link between two lanes comes from both: once here)."""
    if node.settings.server.lanes == 1:
        return await S.link_edges(node.store.reads, frontier, outgoing=outgoing,
                                  relations=PROVENANCE)
    found = await memory_lanes.by_lane(node, "edges", frontier,
                                       {"outgoing": outgoing, "relations": list(PROVENANCE)})
    unique = {(e["source_id"], e["target_id"], e["relation"]): e for a in found for e in a}
    return [unique[k] for k in sorted(unique)]


async def lineage(node: RecordPorts, memory_id: str, q: LineageQuery) -> dict[str, Any]:
    check_record_id(memory_id, "memory id")
    await node.read_barrier(ALL_KEYS)
    outgoing = q.direction == "ancestors"
    seen = {memory_id}
    frontier = [memory_id]
    nodes: list[dict[str, Any]] = []
    for depth in range(1, q.max_depth + 1):
        edges = await _edges(node, frontier, outgoing)
        nxt: list[str] = []
        for e in edges:
            other = e["target_id"] if outgoing else e["source_id"]
            if other in seen or len(nodes) >= limits.lineage_nodes_max:
                continue
            seen.add(other)
            nxt.append(other)
            nodes.append({"id": other, "cid": None, "relation": e["relation"], "depth": depth})
        if not nxt:
            break
        frontier = nxt
    gone = await memory_lanes.tombstoned(node, [n["id"] for n in nodes],
                                         barrier=node.settings.server.lanes > 1)
    for n in nodes:
        n["tombstoned"] = n["id"] in gone
    return {"id": memory_id, "direction": q.direction, "nodes": nodes, "count": len(nodes)}
