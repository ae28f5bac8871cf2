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
import bisect
import heapq
import itertools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from common import limits
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


async def on_lane(node: Any, lane: int, name: str, args: dict[str, Any]) -> Any:
    """Query ``name`` on lane ``lane`` (this one or a sibling)."""
    if lane == node.settings.server.lane:
        return await here(node, name, args)
    return await node.lane_call(lane, "mem", [name, args])


Key = tuple[int, str]  # (updated_at_ms, id): the listing's order, descending


def _key(row: Row) -> Key:
    return int(row["updated_at_ms"]), str(row["id"])


class KeyMerge:
    """The merged order of every lane's listing, read a chunk of keys at a
    time from each lane (descending ``(updated_at_ms, id)``), to find the key
    a deep page starts below without any lane reading whole rows for the
    pages before it. Pure: :func:`key_at` does the reads.

    A lane's buffered keys are kept ascending (its next key last). Every key
    not yet read from a lane is below the last key read from it, so the
    buffered keys at or above the highest of those last keys (``floor``:
    over the lanes not yet exhausted) come before anything unread, in any
    lane: they can be counted off without sorting, and the lane whose last
    key is that floor is emptied each time, so every step reads on."""

    def __init__(self, lanes: int) -> None:
        self.buffers: list[list[Key]] = [[] for _ in range(lanes)]
        self.last: list[Key | None] = [None] * lanes  # the last key read from each lane
        self.done = [False] * lanes

    def feed(self, lane: int, keys: list[Key], chunk: int) -> None:
        """The next ``keys`` of ``lane`` (descending), asked ``chunk`` at a time."""
        self.buffers[lane] = list(reversed(keys)) + self.buffers[lane]
        if keys:
            self.last[lane] = keys[-1]
        self.done[lane] = len(keys) < chunk

    def needs(self) -> list[int]:
        """The lanes to read next: emptied and not exhausted."""
        return [i for i, b in enumerate(self.buffers) if not b and not self.done[i]]

    def take(self, n: int) -> tuple[int, Key | None]:
        """Count off up to ``n`` keys from the top of the merge: (how many,
        and the key of the ``n``-th when it was among them)."""
        live = [k for i, k in enumerate(self.last) if not self.done[i] and k is not None]
        floor = max(live) if live else None
        safe = [(i, len(b) if floor is None else len(b) - bisect.bisect_left(b, floor))
                for i, b in enumerate(self.buffers)]
        count = sum(c for _, c in safe)
        if count >= n:
            top = heapq.nlargest(n, itertools.chain.from_iterable(
                self.buffers[i][len(self.buffers[i]) - c:] for i, c in safe if c))
            return n, top[-1]
        for i, c in safe:
            if c:
                del self.buffers[i][len(self.buffers[i]) - c:]
        return count, None


async def key_at(node: Any, kw: dict[str, Any], n: int, *,
                 chunk: int | None = None) -> Key | None:
    """The key of the ``n``-th memory (from 1) of the listing ``kw`` merged
    over every lane; None if there are fewer. Each lane reads after its read
    barrier once, then on from where it stopped."""
    if n < 1:
        raise ValueError(f"key_at counts from 1, not {n}")
    chunk = chunk or limits.memory_list_keys_chunk
    merge = KeyMerge(node.settings.server.lanes)
    first = True
    while True:
        wanted = merge.needs() if not first else list(range(len(merge.buffers)))

        async def read(lane: int, below: Key | None, consistency: str) -> tuple[int, list[Key]]:
            rows = await on_lane(node, lane, "list", {
                "kw": {**kw, "limit": chunk, "offset": 0, "keys_only": True,
                       "below": None if below is None else list(below)},
                "consistency": consistency})
            return lane, [_key(r) for r in rows]
        got = await asyncio.gather(*(read(i, merge.last[i], "quorum" if first else "local")
                                     for i in wanted))
        first = False
        for lane, keys in got:
            merge.feed(lane, keys, chunk)
        counted, found = merge.take(n)
        if found is not None:
            return found
        n -= counted
        if not merge.needs() and not any(merge.buffers):
            return None


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
