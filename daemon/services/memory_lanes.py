"""Memories over the lanes: the reads that span them (docs/lanes.md,
"Memories over the lanes").

A memory lives on the lane its id names (:func:`common.lanes.lane_of_id`),
and a new one's id is minted for the lane of its namespace. A request that
names one memory is served by that lane (``daemon/lanes/table.py``); a read
that spans memories (list, search, recall, stats, namespaces, export,
forget, gc, sync, a purge's scan, a project brief, the memories a bulk
create, an import, a consolidation or a link names) runs here: each lane
answers a named query (:data:`QUERIES`) over its own store, after its own
read barrier where the read it replaces took one (this lane directly, the
others by the lanes' call ``mem``, a frame: ``Siblings.call``), and the
caller merges. A link is kept by both ends' lanes (:func:`link_items`), so
the links of one memory are read on its lane.

Without lanes every function here is the one local read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from common.errors import NotFound
from common.ops import ALL_KEYS, LINK_PUT, mem_key
from store import brief as brief_store
from store import search as S

Row = dict[str, Any]
Query = Callable[[Any, dict[str, Any]], Awaitable[Any]]


async def _barrier(node: Any, a: dict[str, Any]) -> None:
    await node.read_barrier(ALL_KEYS, a.get("consistency", "quorum"))


async def _rows(node: Any, a: dict[str, Any]) -> dict[str, Row]:
    ids = [str(i) for i in a["ids"]]
    if a.get("barrier") and len(ids) == 1:
        await node.read_barrier(mem_key(ids[0]))
    elif a.get("barrier"):
        await _barrier(node, a)
    out = {}
    for memory_id in ids:
        row = await node.store.get_memory(memory_id, now_ms=a["now"])
        if row is not None:
            out[memory_id] = dict(row)
    return out


async def _tombstoned(node: Any, a: dict[str, Any]) -> list[str]:
    if a.get("barrier"):
        await _barrier(node, a)
    return sorted(await S.tombstoned(node.store.reads, [str(i) for i in a["ids"]]))


async def _search(node: Any, a: dict[str, Any]) -> list[Row]:
    await _barrier(node, a)
    return await S.search(node.store.reads, a["match"], **a["kw"])


async def _list(node: Any, a: dict[str, Any]) -> list[Row]:
    await _barrier(node, a)
    return [dict(r) for r in await node.store.list_memories(**a["kw"])]


async def _stats(node: Any, a: dict[str, Any]) -> Row:
    await _barrier(node, a)
    out: Row = await S.stats(node.store.reads, now_ms=a["now"], soon_ms=a["soon"])
    out["db_size_bytes"] = (await node.store.stats())["db_bytes"]
    if a.get("lanes", 1) > 1:  # a link between two lanes is kept by both: count it at its source's
        out["links_count"] = sum(1 for link in await S.all_links(node.store.reads)
                                 if node.lane_elsewhere(mem_key(link["source_id"])) is None)
    return out


async def _namespaces(node: Any, a: dict[str, Any]) -> list[Row]:
    await _barrier(node, a)
    return await S.namespaces(node.store.reads, now_ms=a["now"])


async def _export(node: Any, a: dict[str, Any]) -> Row:
    await _barrier(node, a)
    return {"memories": await S.all_memories(node.store.reads, now_ms=a["now"], limit=a["limit"]),
            "links": await S.all_links(node.store.reads)}


async def _matching(node: Any, a: dict[str, Any]) -> list[str]:
    await _barrier(node, a)
    return await S.matching_ids(node.store.reads, **a["kw"])


async def _expired(node: Any, a: dict[str, Any]) -> list[str]:
    return await S.expired_ids(node.store.reads, now_ms=a["now"], limit=a["limit"])


async def _since(node: Any, a: dict[str, Any]) -> list[Row]:
    return [dict(r) for r in await node.store.memories_since(a["since"], limit=a["limit"],
                                                               now_ms=a["now"])]


async def _under(node: Any, a: dict[str, Any]) -> list[str]:
    if a.get("barrier"):
        await _barrier(node, a)
    return list(await node.store.memory_ids_under(a["namespace"], limit=a["limit"]))


async def _edges(node: Any, a: dict[str, Any]) -> list[Row]:
    await _barrier(node, a)
    return await S.link_edges(node.store.reads, [str(i) for i in a["ids"]],
                              outgoing=bool(a["outgoing"]), relations=tuple(a["relations"]))


async def _brief(node: Any, a: dict[str, Any]) -> Row:
    ws, proj, now = a["workspace"], a["project"], a["now"]
    return {"pages": await brief_store.project_pages(node.store.reads, ws, proj, now_ms=now,
                                                     limit=a["pages"]),
            "recent": await brief_store.recent_memories(node.store.reads, ws, proj, now_ms=now,
                                                        limit=a["recent"])}


QUERIES: Final[dict[str, Query]] = {
    "rows": _rows, "tombstoned": _tombstoned, "search": _search, "list": _list,
    "stats": _stats, "namespaces": _namespaces, "export": _export, "matching": _matching,
    "expired": _expired, "since": _since, "under": _under, "edges": _edges, "brief": _brief,
}


async def here(node: Any, name: str, args: dict[str, Any]) -> Any:
    """Query ``name`` on this lane (and a sibling's call ``mem``)."""
    query = QUERIES.get(name)
    if query is None:
        raise NotFound(f"no memory query {name!r}")
    return await query(node, args)


async def every_lane(node: Any, name: str, args: dict[str, Any]) -> list[Any]:
    """Query ``name`` on every lane at once: this lane's answer first."""
    mine, others = await asyncio.gather(here(node, name, args),
                                        node.every_other_lane("mem", [name, args]))
    return [mine, *others]


async def by_lane(node: Any, name: str, ids: Iterable[str], args: dict[str, Any]) -> list[Any]:
    """Query ``name`` for ``ids`` (under ``args["ids"]``) on the lanes their
    ids name, each lane asked only for its own: the answers, in no order."""
    shares: dict[int | None, list[str]] = {}
    for memory_id in dict.fromkeys(ids):
        shares.setdefault(node.lane_elsewhere(mem_key(memory_id)), []).append(memory_id)

    async def ask(lane: int | None, share: list[str]) -> Any:
        part = {**args, "ids": share}
        if lane is None:
            return await here(node, name, part)
        return await node.lane_call(lane, "mem", [name, part])
    return list(await asyncio.gather(*(ask(lane, share) for lane, share in shares.items())))


async def rows(node: Any, ids: Iterable[str], *, now_ms: int,
               barrier: bool = False) -> dict[str, Row]:
    """The live memories of ``ids`` that exist, by id, wherever their lanes
    are; with ``barrier``, each lane reads after its read barrier."""
    out: dict[str, Row] = {}
    for found in await by_lane(node, "rows", ids, {"now": now_ms, "barrier": barrier}):
        out.update(found)
    return out


async def tombstoned(node: Any, ids: Iterable[str], *, barrier: bool = False) -> set[str]:
    """Which of ``ids`` were deleted (their lanes hold a tombstone)."""
    return {str(i) for found in await by_lane(node, "tombstoned", ids, {"barrier": barrier})
            for i in found}


def link_items(node: Any, body: Row) -> list[tuple[str, str, Row]]:
    """The write items of one link: under its source's key and, where the
    target's lane is another, under the target's too (each end's lane keeps
    the links from and to its memories; only the source's copy is an event)."""
    items = [(LINK_PUT, mem_key(body["source_id"]), body)]
    source_lane = node.lane_elsewhere(mem_key(body["source_id"]))
    target_lane = node.lane_elsewhere(mem_key(body["target_id"]))
    if source_lane != target_lane:
        items.append((LINK_PUT, mem_key(body["target_id"]), body))
    return items
