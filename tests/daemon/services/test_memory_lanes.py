"""The memory services over lanes, in one process: each lane a real SQLite
store behind a fake node (``memory_lanes_fakes``), every service the real
one. What a review of the lanes' memory spread found, kept as tests: the
merged listing is the one-lane listing, a deep page is found from the lanes'
keys rather than read whole from every lane, a consolidation whose summary's lane fails
deletes nothing, a link kept by two lanes is exported once, a one-lane
brief takes no read barrier, and a revocation never grants what the latest
decision took away."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common import limits
from common.errors import Unavailable
from common.lanes import lane_of, memory_placement
from common.ops import LINK_PUT, MEM_DEL, MEM_PUT, Op, mem_key
from daemon.identity import admin as identity_admin
from daemon.node import Node
from daemon.schemas.memories import ListMemoriesQuery
from daemon.schemas.search import ConsolidateBody
from daemon.services import admin, handoff, memories, memory_lanes
from daemon.services.scope import EXPLICIT, Scope
from tests.daemon.services.memory_lanes_fakes import NOW, ids_on, open_lanes, put_memory


async def _close(*lanes: Any) -> None:
    for lane in lanes:
        await lane.store.close()


def test_a_listing_over_lanes_is_the_one_lane_listing_and_pages_join(tmp_path: Path) -> None:
    """The store lists by last change, newest first (then id): the lanes'
    answers merge into the same page one store gives, and pages of one
    through every offset list each memory once."""
    async def run() -> tuple[list[str], list[str], list[str]]:
        (tmp_path / "two").mkdir()
        (tmp_path / "one").mkdir()
        laned = await open_lanes(tmp_path / "two", 2)
        single = await open_lanes(tmp_path / "one", 1)
        a, = ids_on(0, 2, 1, "a")
        b, c, d = ids_on(1, 2, 3, "b")
        spec = {a: dict(priority=9, created_at_ms=10, updated_at_ms=50),
                b: dict(priority=1, created_at_ms=100, updated_at_ms=100),
                c: dict(priority=1, created_at_ms=90, updated_at_ms=90),
                d: dict(priority=9, created_at_ms=5, updated_at_ms=10)}
        for mid, fields in spec.items():
            await put_memory(laned, mid, **fields)
            await put_memory(single, mid, **fields)
        q = ListMemoriesQuery(limit=3)
        one = [m["id"] for m in (await memories.list_memories(single[0], q))["memories"]]
        two = [m["id"] for m in (await memories.list_memories(laned[1], q))["memories"]]
        paged: list[str] = []
        for offset in range(4):
            page = await memories.list_memories(laned[offset % 2],
                                                ListMemoriesQuery(limit=1, offset=offset))
            paged += [m["id"] for m in page["memories"]]
        await _close(*laned, *single)
        return one, two, paged
    one, two, paged = asyncio.run(run())
    assert two == one
    assert len(paged) == len(set(paged)) == 4


def test_deep_pages_over_lanes_are_the_one_lane_pages(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A page deeper than ``memory_list_fanout_max`` first finds the key it
    starts below from the lanes' keys, read a chunk at a time, then reads
    one page of rows from each lane: every offset gives the page one store
    gives (ties of ``updated_at_ms`` ordered by id), past the end an empty
    one, and no lane reads whole rows for the pages before it."""
    monkeypatch.setattr(limits, "memory_list_fanout_max", 4)
    monkeypatch.setattr(limits, "memory_list_keys_chunk", 3)

    async def run() -> tuple[dict[tuple[int, int], list[str]], dict[tuple[int, int], list[str]],
                             list[Any], str | None]:
        (tmp_path / "three").mkdir()
        (tmp_path / "one").mkdir()
        laned = await open_lanes(tmp_path / "three", 3)
        single = await open_lanes(tmp_path / "one", 1)
        ids = ids_on(0, 3, 9, "a") + ids_on(1, 3, 2, "b") + ids_on(2, 3, 13, "c")
        for i, mid in enumerate(ids):
            fields = dict(updated_at_ms=1000 + (i * 7) % 5, created_at_ms=1)  # many ties
            await put_memory(laned, mid, **fields)
            await put_memory(single, mid, **fields)
        one: dict[tuple[int, int], list[str]] = {}
        got: dict[tuple[int, int], list[str]] = {}
        for offset in range(len(ids) + 2):
            for limit in (1, 2, 5):
                q = ListMemoriesQuery(offset=offset, limit=limit)
                one[offset, limit] = [m["id"] for m in
                                      (await memories.list_memories(single[0], q))["memories"]]
                got[offset, limit] = [m["id"] for m in (await memories.list_memories(
                    laned[offset % 3], q))["memories"]]
        for lane in laned:
            lane.calls.clear()
        await memories.list_memories(laned[0], ListMemoriesQuery(offset=10, limit=2))
        calls = [c for lane in laned for c in lane.calls]
        nothing = await memory_lanes.key_at(laned[1], {"now_ms": NOW, "namespace": "none"}, 1)
        await _close(*laned, *single)
        return one, got, calls, None if nothing is None else str(nothing)
    one, got, calls, nothing = asyncio.run(run())
    assert got == one
    assert one[24, 5] == [] and len(one[20, 5]) == 4
    assert nothing is None
    # the rows the lanes read for offset 10: one page each, below the key found
    rows = [c for c in calls if not c[1]["kw"].get("keys_only")]
    assert rows and all(c[1]["kw"]["limit"] == 2 and c[1]["kw"]["below"] for c in rows)
    assert all(c[1]["kw"]["limit"] == 3 for c in calls if c[1]["kw"].get("keys_only"))


@settings(max_examples=200, deadline=None)
@given(lanes=st.lists(st.lists(st.tuples(st.integers(0, 6), st.text("abc", min_size=1,
                                                                         max_size=3)),
                               max_size=12), min_size=1, max_size=4),
       chunk=st.integers(1, 5), n=st.integers(1, 40))
def test_the_key_merge_finds_the_nth_key_of_the_merged_order(
        lanes: list[list[tuple[int, str]]], chunk: int, n: int) -> None:
    """KeyMerge, driven as key_at drives it over lists: the n-th key of the
    merged descending order, or None past the end."""
    seen: set[str] = set()
    keys: list[list[tuple[int, str]]] = []
    for i, lane in enumerate(lanes):  # ids are unique across lanes, as memory ids are
        mine = sorted({(at, f"{i}{mid}") for at, mid in lane if f"{i}{mid}" not in seen},
                      reverse=True)
        seen.update(mid for _, mid in mine)
        keys.append(mine)
    merged = sorted((k for lane in keys for k in lane), reverse=True)
    merge = memory_lanes.KeyMerge(len(keys))
    wanted, left, found = list(range(len(keys))), n, None
    while True:
        for lane in wanted:
            last = merge.last[lane]
            rest = [k for k in keys[lane] if last is None or k < last]
            merge.feed(lane, rest[:chunk], chunk)
        counted, found = merge.take(left)
        if found is not None or (not merge.needs() and not any(merge.buffers)):
            break
        left -= counted
        wanted = merge.needs()
        assert wanted  # each step empties a lane that still has keys to read
    assert found == (merged[n - 1] if n <= len(merged) else None)


class _SplitNode:
    """Node.write over two lanes, lane 1 down: each lane's share lands or
    fails on its own, as on a real node."""
    write = Node.write
    _write_shares = Node._write_shares
    ranked = Node.ranked

    def __init__(self) -> None:
        self.node_id = "n1"
        self.settings = SimpleNamespace(server=SimpleNamespace(lanes=2))
        self.committed: list[tuple[str, str, dict[str, Any]]] = []

        async def call(lane: int, name: str, payload: Any) -> Any:
            raise Unavailable(f"lane {lane} of this node is not answering; retry")
        self.siblings = SimpleNamespace(lanes=2, lane=0, call=call)

    def now_ms(self) -> int:
        return NOW

    def lane_elsewhere(self, key: str) -> int | None:
        lane = lane_of(key, 2)
        return None if lane == 0 else lane

    async def write_here(self, items: list[Any]) -> list[Op]:
        self.committed.extend(items)
        return [Op("n1", 1, 1, kind, key, body) for kind, key, body in items]


def test_a_consolidation_whose_summary_lane_fails_deletes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary goes to its namespace's lane (1, down here), the sources'
    deletes to theirs (0): written as one write, lane 0's share landed and
    the sources were gone without a summary. Now the summary is written
    first; its failure leaves the sources in place."""
    sources = ids_on(0, 2, 2, "s")
    namespace = next(f"ns{i}" for i in range(100) if lane_of(memory_placement(f"ns{i}"), 2) == 1)
    rows = {i: {"id": i, "namespace": namespace, "tags": [], "priority": 5, "confidence": 1.0,
                "expires_at_ms": None} for i in sources}

    async def found(node: Any, ids: Any, **_: Any) -> dict[str, Any]:
        return {i: rows[i] for i in ids if i in rows}
    monkeypatch.setattr(memory_lanes, "rows", found)
    node = _SplitNode()
    with pytest.raises(Unavailable):
        asyncio.run(admin.consolidate(
            node, ConsolidateBody(ids=sources, title="t", summary="s",  # type: ignore[arg-type]
                                  namespace=namespace), agent=None))
    assert [kind for kind, _, _ in node.committed if kind == MEM_DEL] == []
    assert [kind for kind, _, _ in node.committed if kind == MEM_PUT] == []  # (lane 1's)


def test_a_link_kept_by_two_lanes_is_exported_once(tmp_path: Path) -> None:
    """A link's copies on its two ends' lanes can keep different times (the
    target's share failed once, and the retry wrote a later time): the
    export lists it once, at the earliest."""
    async def run() -> list[dict[str, Any]]:
        lanes = await open_lanes(tmp_path, 2)
        s, = ids_on(0, 2, 1, "s")
        t, = ids_on(1, 2, 1, "t")
        await put_memory(lanes, s)
        await put_memory(lanes, t)
        first = {"source_id": s, "target_id": t, "relation": "related_to", "created_at_ms": 10}
        retry = {**first, "created_at_ms": 20}
        await lanes[0].store.apply_ops([Op("n1", 100, 100 << 16, LINK_PUT, mem_key(s), first),
                                        Op("n1", 101, 101 << 16, LINK_PUT, mem_key(s), retry)],
                                       NOW)
        await lanes[1].store.apply_ops([Op("n1", 102, 102 << 16, LINK_PUT, mem_key(t), retry)],
                                       NOW)
        out = await admin.export(lanes[0])  # type: ignore[arg-type]
        await _close(*lanes)
        return list(out["links"])
    links = asyncio.run(run())
    assert len(links) == 1 and links[0]["created_at"].startswith("1970-01-01T00:00:00.01"), links


def test_a_brief_on_one_lane_takes_no_read_barrier(tmp_path: Path) -> None:
    """As before lanes: the brief of a session start reads the local store."""
    async def run() -> list[tuple[str, str]]:
        node, = await open_lanes(tmp_path, 1)
        seen: list[tuple[str, str]] = []

        async def barrier(key: str, consistency: str = "quorum") -> None:
            seen.append((key, consistency))
        node.read_barrier = barrier  # type: ignore[method-assign]
        await handoff.brief(node, Scope("w", "p", EXPLICIT), 4000)  # type: ignore[arg-type]
        await node.store.close()
        return seen
    assert asyncio.run(run()) == []


def _grant(granted: bool, access: str, rank: int) -> dict[str, Any]:
    return {"user": "u", "workspace": "w", "project": None, "access": access,
            "granted": granted, "at_ms": rank, "rank": [rank, "n1/0", 0]}


@pytest.mark.parametrize(("lane0", "lane1", "access", "written"), [
    # the latest decision took everything away; lane 1 kept write (its share
    # failed): revoking write must not grant read again
    (_grant(False, "write", 200), _grant(True, "write", 100), "write", (False, "write")),
    # the latest is read, lane 1 kept an older write: narrowed to read everywhere
    (_grant(True, "read", 200), _grant(True, "write", 100), "write", (True, "read")),
    # every lane grants at most what is left: nothing to write
    (_grant(True, "read", 200), _grant(False, "read", 100), "write", None),
    (_grant(False, "read", 200), None, "read", None),
    # one lane, as before lanes
    (_grant(True, "write", 100), None, "write", (True, "read")),
    (_grant(True, "read", 100), None, "read", (False, "read")),
])
def test_a_revocation_leaves_at_most_the_latest_decision(
        monkeypatch: pytest.MonkeyPatch, lane0: Any, lane1: Any, access: str,
        written: tuple[bool, str] | None) -> None:
    wrote: list[Any] = []

    async def nothing(*_: Any, **__: Any) -> None:
        return None

    async def views(*_: Any, **__: Any) -> list[dict[str, Any]]:
        return [{"user": None, "keys": [], "grant": lane0},
                *([{"user": None, "keys": [], "grant": lane1}] if lane1 is not None else [])]

    async def write_refused(node: Any, items: Any) -> None:
        wrote.extend(items)
    monkeypatch.setattr(identity_admin, "_sync", nothing)
    monkeypatch.setattr(identity_admin, "_outwait", nothing)
    monkeypatch.setattr(identity_admin, "lane_views", views)
    monkeypatch.setattr(identity_admin, "_write_refused", write_refused)
    seen: list[int] = []
    node = SimpleNamespace(now_ms=lambda: 300, core=SimpleNamespace(
        observe_stamp=lambda stamp, now: seen.append(stamp)))
    answer = asyncio.run(identity_admin.revoke(node, "u", "w", None, access))  # type: ignore[arg-type]
    assert answer["changed"] is (written is not None)
    assert [(b["granted"], b["access"]) for _, _, b in wrote] == (
        [] if written is None else [written])
    # the clock moved past the latest decision it read, whichever clock made it
    assert seen == [max(r["rank"][0] for r in (lane0, lane1) if r is not None)]
