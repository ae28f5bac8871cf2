"""Memories over the lanes (``serve --lanes 2``, real processes): a memory
lives on the lane its id names, a new one's id names the lane of its
namespace, and every read that spans memories is asked of every lane and
merged (docs/lanes.md, "Memories over the lanes"). Each request here goes to
a chosen lane's port, so the lane that takes it is often not the one that
keeps the memory it names."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from common.lanes import lane_of, lane_of_id, memory_placement
from daemon.lanes.layout import lane_db_path
from tests.cluster.lanes_harness import LaneCluster, ok, started

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

AGENT = {"X-Agent-Id": "mem-agent"}


@pytest.fixture(scope="module")
def lanes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaneCluster]:
    with started(tmp_path_factory.mktemp("lanemem"), n=2) as c:
        yield c


def _namespaces(lane: int, count: int) -> list[str]:
    """``count`` namespaces whose new memories are made on ``lane`` (of 2)."""
    found = [f"ns{i}" for i in range(200) if lane_of(memory_placement(f"ns{i}"), 2) == lane]
    return found[:count]


def _held(c: LaneCluster, nid: str, lane: int) -> set[str]:
    """The live memory ids in lane ``lane``'s database of ``nid`` (read-only)."""
    path = lane_db_path(str(c.db(nid)), lane)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return {r[0] for r in db.execute("SELECT id FROM memories")}


def _store(c: LaneCluster, lane: int, ns: str, title: str, **extra: Any) -> dict[str, Any]:
    body = {"title": title, "content": f"{title} content about lanes", "namespace": ns, **extra}
    return ok(c.call("node1", "POST", "/api/v1/memories", body, lane=lane), 201)


def test_memories_spread_over_the_lanes_and_every_read_finds_them(lanes: LaneCluster) -> None:
    c = lanes
    ns0, ns1 = _namespaces(0, 1)[0], _namespaces(1, 1)[0]
    made: dict[str, int] = {}
    for i in range(6):  # each created through the lane that does NOT keep its namespace
        for ns, keeper in ((ns0, 0), (ns1, 1)):
            m = _store(c, 1 - keeper, ns, f"spread {ns} {i}", priority=1 + i % 3)
            assert lane_of_id(m["id"], 2) == keeper, m["id"]
            made[m["id"]] = keeper
    # each lane's database keeps exactly the memories its ids name
    for lane in (0, 1):
        mine = {m for m, keeper in made.items() if keeper == lane}
        assert mine <= _held(c, "node1", lane)
        assert not (set(made) - mine) & _held(c, "node1", lane)

    # one memory, through either lane: read, update, promote
    some = sorted(made)[0]
    for lane in (0, 1):
        assert ok(c.call("node2", "GET", f"/api/v1/memories/{some}", lane=lane))["id"] == some
    ok(c.call("node2", "PUT", f"/api/v1/memories/{some}", {"priority": 9}, lane=0))
    assert ok(c.call("node1", "GET", f"/api/v1/memories/{some}", lane=1))["priority"] == 9

    # listing: every lane's, merged in the store's order, paged consistently
    for ns in (ns0, ns1):
        whole = ok(c.call("node2", "GET", f"/api/v1/memories?namespace={ns}&limit=50", lane=0))
        assert len(whole["memories"]) == 6
    listed = ok(c.call("node2", "GET", "/api/v1/memories?limit=100", lane=1))["memories"]
    assert {m["id"] for m in listed} >= set(made)
    order = [(m["updated_at"], m["id"]) for m in listed]  # the store's: last change first
    assert order == sorted(order, reverse=True)
    pages = [ok(c.call("node1", "GET", f"/api/v1/memories?limit=5&offset={o}", lane=o % 2))
             ["memories"] for o in range(0, len(listed), 5)]
    assert [m["id"] for p in pages for m in p] == [m["id"] for m in listed]

    # search and recall find memories of both lanes
    found = ok(c.call("node2", "POST", "/api/v1/search", {"q": "lanes", "limit": 50}, lane=1))
    assert {m["id"] for m in found["memories"]} >= set(made)
    recalled = ok(c.call("node1", "POST", "/api/v1/recall",
                         {"context": "spread content", "limit": 50}, lane=0))
    assert {m["id"] for m in recalled["memories"]} >= set(made)

    # stats and namespaces: counts summed over the lanes
    stats = ok(c.call("node1", "GET", "/api/v1/stats", lane=1))
    per_ns = {r["namespace"]: r["count"] for r in stats["by_namespace"]}
    assert per_ns[ns0] == per_ns[ns1] == 6
    spaces = {r["namespace"]: r["count"]
              for r in ok(c.call("node2", "GET", "/api/v1/namespaces", lane=0))["namespaces"]}
    assert spaces[ns0] == spaces[ns1] == 6

    # sync since: every lane's changes, oldest first, paged without a gap
    seen: list[str] = []
    since = ""
    for _ in range(20):
        page = ok(c.call("node1", "GET", f"/api/v1/sync/since?limit=4{since}", lane=1))
        seen += [m["id"] for m in page["memories"]]
        if not page["memories"]:
            break
        since = f"&since={page['next_since']}"
    assert set(seen) >= set(made)

    # forget by namespace: tombstoned on the lane that keeps them
    gone = ok(c.call("node2", "POST", "/api/v1/forget", {"namespace": ns1}, lane=0))
    assert gone["deleted"] == 6
    left = ok(c.call("node1", "GET", f"/api/v1/memories?namespace={ns1}", lane=1))
    assert left["memories"] == []


def test_links_lineage_and_consolidation_across_lanes(lanes: LaneCluster) -> None:
    c = lanes
    a = _store(c, 0, _namespaces(0, 2)[1], "parent on lane 0")
    b = _store(c, 1, _namespaces(1, 2)[1], "child on lane 1")
    assert (lane_of_id(a["id"], 2), lane_of_id(b["id"], 2)) == (0, 1)
    ok(c.call("node2", "POST", "/api/v1/links",
              {"source_id": b["id"], "target_id": a["id"], "relation": "derived_from"},
              lane=0), 201)
    # each end's lane keeps the link: the links of either memory show it
    for mid in (a["id"], b["id"]):
        links = ok(c.call("node1", "GET", f"/api/v1/links/{mid}", lane=0))["links"]
        assert [(x["source_id"], x["target_id"]) for x in links] == [(b["id"], a["id"])]
    up = ok(c.call("node1", "GET", f"/api/v1/memories/{b['id']}/lineage", lane=0))
    assert [n["id"] for n in up["nodes"]] == [a["id"]]
    down = ok(c.call("node2", "GET",
                     f"/api/v1/memories/{a['id']}/lineage?direction=descendants", lane=1))
    assert [n["id"] for n in down["nodes"]] == [b["id"]]
    # the export lists a link between two lanes once; stats count it once
    dump = ok(c.call("node1", "GET", "/api/v1/export", lane=1))
    pair = [x for x in dump["links"] if x["source_id"] == b["id"]]
    assert len(pair) == 1
    assert ok(c.call("node2", "GET", "/api/v1/stats", lane=0))["links_count"] == len(dump["links"])

    # consolidate memories of both lanes into one, placed by its namespace
    target_ns = _namespaces(1, 3)[2]
    merged = ok(c.call("node2", "POST", "/api/v1/consolidate",
                       {"ids": [a["id"], b["id"]], "title": "merged", "summary": "both lanes",
                        "namespace": target_ns}, lane=0), 201)
    assert lane_of_id(merged["id"], 2) == 1
    for mid in (a["id"], b["id"]):
        assert c.call("node1", "GET", f"/api/v1/memories/{mid}", lane=0)[0] == 404
    tree = ok(c.call("node1", "GET", f"/api/v1/memories/{merged['id']}/lineage", lane=0))
    assert {n["id"] for n in tree["nodes"]} == {a["id"], b["id"]}
    assert all(n["tombstoned"] for n in tree["nodes"] if n["id"] in (a["id"], b["id"]))


def test_idempotent_bulk_and_import_land_on_their_lanes(lanes: LaneCluster) -> None:
    c = lanes
    ns = _namespaces(1, 4)[3]
    key = {"Idempotency-Key": "lanes-create-1", **AGENT}
    body = {"title": "once", "content": "made once", "namespace": ns}
    first = ok(c.call("node1", "POST", "/api/v1/memories", body, lane=0, headers=key), 201)
    again = ok(c.call("node2", "POST", "/api/v1/memories", body, lane=1, headers=key), 201)
    assert first["id"] == again["id"] and lane_of_id(first["id"], 2) == 1

    spaces = _namespaces(0, 5)[4:] + _namespaces(1, 5)[4:]
    items = [{"title": f"bulk {i}", "content": "bulk", "namespace": spaces[i % 2]}
             for i in range(8)]
    made = ok(c.call("node2", "POST", "/api/v1/memories/bulk", items, lane=0), 201)
    assert made["created"] == 8 and made["errors"] == []
    assert {lane_of_id(i, 2) for i in made["ids"]} == {0, 1}
    for mid in made["ids"]:
        assert ok(c.call("node1", "GET", f"/api/v1/memories/{mid}", lane=1))["id"] == mid

    # an import keeps each memory's id: it goes to the lane that id names
    foreign = [{"id": f"imported-{i}", "title": f"imp {i}", "content": "from elsewhere",
                "namespace": "imports", "created_at": "2026-01-02T03:04:05Z",
                "updated_at": "2026-01-02T03:04:05Z"} for i in range(6)]
    got = ok(c.call("node1", "POST", "/api/v1/import",
                    {"memories": foreign, "links": [{"source_id": "imported-0",
                                                     "target_id": "imported-1",
                                                     "relation": "related_to"}]}, lane=1))
    assert got["imported"] == 6 and got["errors"] == []
    assert {lane_of_id(m["id"], 2) for m in foreign} == {0, 1}
    again_imp = ok(c.call("node2", "POST", "/api/v1/import", {"memories": foreign}, lane=0))
    assert again_imp["imported"] == 0 and again_imp["unchanged"] == 6
    for m in foreign:
        assert m["id"] in _held(c, "node2", lane_of_id(m["id"], 2)) or \
            m["id"] in _held(c, "node1", lane_of_id(m["id"], 2))
