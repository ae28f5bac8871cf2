"""The memory services over lanes, in one process: each lane a real SQLite
store behind a fake node (``memory_lanes_fakes``), every service the real
one. What a review of the lanes' memory spread found, kept as tests: the
merged listing is the one-lane listing, a deep page is refused rather than
read whole from every lane, a consolidation whose summary's lane fails
deletes nothing, a link kept by two lanes is exported once, a one-lane
brief takes no read barrier, and a revocation never grants what the latest
decision took away."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from common import limits
from common.errors import BadRequest, Unavailable
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


def test_a_deep_page_with_lanes_is_refused_before_any_lane_reads(tmp_path: Path) -> None:
    async def run() -> list[Any]:
        lanes = await open_lanes(tmp_path, 2)
        with pytest.raises(BadRequest, match="memory_list_fanout_max"):
            await memories.list_memories(lanes[0], ListMemoriesQuery(offset=10**9, limit=10))
        last = ListMemoriesQuery(offset=limits.memory_list_fanout_max - 10, limit=10)
        await memories.list_memories(lanes[0], last)  # the deepest page still served
        await _close(*lanes)
        return lanes[1].calls
    calls = asyncio.run(run())
    assert [c[1]["kw"]["limit"] for c in calls] == [limits.memory_list_fanout_max]


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
