"""Search, recall, forget, links, lineage, gc, import, consolidate, grants on
one real node: shapes, rules, and bad input (a 4xx, nothing written)."""

from __future__ import annotations

from typing import Any

import pytest

from common import limits
from store import search as S
from tests.daemon._fixtures_handlers import (  # noqa: F401
    Bad,
    assert_refused,
    clocked_fixture,
    snapshot,
)

V1 = "/api/v1"
AGENT = {"X-Agent-Id": "alice"}


async def create(client: Any, **fields: Any) -> dict[str, Any]:
    body = {"title": "t", "content": "c", "namespace": "ns/search", **fields}
    resp = await client.post(f"{V1}/memories", json=body, headers=AGENT)
    assert resp.status == 201, await resp.text()
    out: dict[str, Any] = await resp.json()
    return out


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


# -- FTS query escaping -----------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("quorum reads", '"quorum" "reads"'),
    ('NEAR("a" b) OR c*', '"NEAR" "a" "b" "OR" "c"'),
    ("title:secret -x ^y", '"title" "secret" "x" "y"'),
    ("   ", None),
    ("«»!!", None),
    ("café Ärger", '"café" "Ärger"'),
])
def test_fts_query_is_only_quoted_words(text: str, expected: str | None) -> None:
    assert S.fts_query(text) == expected


def test_fts_query_bounds_words() -> None:
    from common.errors import BadRequest
    many = " ".join(f"w{i}" for i in range(limits.search_terms_max + 1))
    with pytest.raises(BadRequest):
        S.fts_query(many)
    assert S.fts_query(many, any_word=True).count(" OR ") == limits.search_terms_max - 1


async def test_search_ranks_and_filters(client: Any) -> None:
    title_hit = await create(client, title="raft election timeout", content="other words",
                             priority=3)
    body_hit = await create(client, title="notes", content="the raft paper describes it",
                            priority=9, tags=["paper"], tier="long")
    await create(client, title="unrelated", content="nothing to see")
    out = await ok(await client.get(f"{V1}/search", params={"q": "raft"}))
    assert [m["id"] for m in out["memories"]] == [title_hit["id"], body_hit["id"]]  # title weighs more
    assert out["results"] == out["memories"] and out["count"] == 2 and out["query"] == "raft"
    assert out["memories"][0]["score"] > out["memories"][1]["score"]
    for params, ids in [({"min_priority": "5"}, [body_hit["id"]]), ({"tier": "long"}, [body_hit["id"]]),
                        ({"tags": "paper"}, [body_hit["id"]]), ({"limit": "1"}, [title_hit["id"]]),
                        ({"namespace": "elsewhere"}, []), ({"agent_id": "bob"}, [])]:
        got = await ok(await client.get(f"{V1}/search", params={"q": "raft", **params}))
        assert [m["id"] for m in got["memories"]] == ids, params
    posted = await ok(await client.post(f"{V1}/search", json={"query": "raft paper"}))
    assert [m["id"] for m in posted["memories"]] == [body_hit["id"]]  # AND of words
    recall = await ok(await client.post(f"{V1}/recall", json={"context": "raft nothing"}))
    assert recall["count"] == 3  # OR of words
    budget = await ok(await client.post(f"{V1}/recall", json={"context": "raft", "budget_tokens": 1}))
    assert budget["count"] == 1
    # the index follows updates and deletes
    await ok(await client.put(f"{V1}/memories/{title_hit['id']}", json={"title": "leader lease"},
                              headers=AGENT))
    got = await ok(await client.get(f"{V1}/search", params={"q": "election"}))
    assert got["count"] == 0
    await ok(await client.delete(f"{V1}/memories/{body_hit['id']}", headers=AGENT))
    assert (await ok(await client.get(f"{V1}/search", params={"q": "paper"})))["count"] == 0


async def test_gc_tombstones_expired(clocked: Any) -> None:
    c = clocked
    short = await create(c.client, title="short lived", ttl_secs=5)
    keep = await create(c.client, title="kept")
    c.clock.advance(6)
    out = await ok(await c.client.post(f"{V1}/gc"))
    assert out == {"expired_deleted": 1}
    snap = await c.node.store.snapshot()
    assert short["id"] in snap["tombstones"] and keep["id"] in snap["memories"]
    assert await ok(await c.client.post(f"{V1}/gc")) == {"expired_deleted": 0}


async def test_consolidate_merges_and_tombstones(client: Any) -> None:
    a = await create(client, title="a", content="first part", tags=["x"], priority=4)
    b = await create(client, title="b", content="second part", tags=["y"], priority=7)
    out = await ok(await client.post(f"{V1}/consolidate", json={
        "ids": [a["id"], b["id"]], "title": "a+b", "summary": "both parts"}, headers=AGENT), 201)
    assert out["consolidated"] == 2
    merged = await ok(await client.get(f"{V1}/memories/{out['id']}"))
    assert merged["source"] == "consolidation" and merged["tier"] == "long"
    assert merged["tags"] == ["x", "y"] and merged["priority"] == 7
    assert merged["metadata"]["consolidated_from"] == [a["id"], b["id"]]
    assert {lk["target_id"] for lk in merged["links"]} == {a["id"], b["id"]}
    for src in (a, b):
        assert (await client.get(f"{V1}/memories/{src['id']}")).status == 404
    lineage = await ok(await client.get(f"{V1}/memories/{out['id']}/lineage"))
    assert {n["id"] for n in lineage["nodes"]} == {a["id"], b["id"]}
    assert all(n["tombstoned"] and n["depth"] == 1 for n in lineage["nodes"])


async def test_a_consolidation_retried_with_its_idempotency_key_makes_one_summary(
        client: Any) -> None:
    """With an Idempotency-Key the summary's id is derived from it: a retry
    after the whole consolidation answers as it did (its sources are gone),
    and none makes a second summary; without a key a source that is gone is
    a 404."""
    a = await create(client, title="a", content="first")
    b = await create(client, title="b", content="second")
    body = {"ids": [a["id"], b["id"]], "title": "a+b", "summary": "both"}
    key = {**AGENT, "Idempotency-Key": "merge-1"}
    first = await ok(await client.post(f"{V1}/consolidate", json=body, headers=key), 201)
    again = await ok(await client.post(f"{V1}/consolidate", json=body, headers=key), 201)
    assert again["id"] == first["id"] and again["sources"] == [a["id"], b["id"]]
    assert again["memory"]["content"] == "both"
    summaries = await ok(await client.get(f"{V1}/memories?limit=100"))
    assert [m["id"] for m in summaries["memories"] if m["title"] == "a+b"] == [first["id"]]
    resp = await client.post(f"{V1}/consolidate", json=body, headers=AGENT)
    assert resp.status == 404


async def test_grants_are_stored(client: Any) -> None:
    m = await create(client)
    await ok(await client.post(f"{V1}/memories/{m['id']}/grant", json={"agent_id": "bob"}))
    await ok(await client.post(f"{V1}/memories/{m['id']}/grant",
                               json={"agent_id": "carol", "permission": "write"}))
    got = await ok(await client.get(f"{V1}/memories/{m['id']}/grants"))
    assert [(g["agent_id"], g["permission"]) for g in got["grants"]] == [
        ("bob", "read"), ("carol", "write")]
    await ok(await client.post(f"{V1}/memories/{m['id']}/revoke", json={"agent_id": "bob"}))
    got = await ok(await client.get(f"{V1}/memories/{m['id']}/grants"))
    assert [g["agent_id"] for g in got["grants"]] == ["carol"]


async def test_forget_accepts_upstream_json_body(client: Any) -> None:
    await create(client, namespace="ns/forget", title="drop me")
    keep = await create(client, namespace="ns/forget", title="keep me", content="x")
    out = await ok(await client.post(f"{V1}/forget", json={"namespace": "ns/forget",
                                                           "pattern": "drop"}))
    assert out["deleted"] == 1
    listing = await ok(await client.get(f"{V1}/memories", params={"namespace": "ns/forget"}))
    assert [m["id"] for m in listing["memories"]] == [keep["id"]]
    # LIKE wildcards in a pattern are plain text
    assert (await ok(await client.post(f"{V1}/forget", params={"pattern": "%"})))["deleted"] == 0


async def test_import_keeps_newer_and_deleted(client: Any) -> None:
    m = await create(client, title="original")
    export = await ok(await client.get(f"{V1}/export"))
    await ok(await client.put(f"{V1}/memories/{m['id']}", json={"title": "newer"}, headers=AGENT))
    out = await ok(await client.post(f"{V1}/import", json=export))
    assert out["imported"] == 0 and out["unchanged"] == 1
    assert (await ok(await client.get(f"{V1}/memories/{m['id']}")))["title"] == "newer"
    await ok(await client.delete(f"{V1}/memories/{m['id']}", headers=AGENT))
    await ok(await client.post(f"{V1}/import", json=export))
    assert (await client.get(f"{V1}/memories/{m['id']}")).status == 404  # deletes stay
    partial = await ok(await client.post(f"{V1}/import", json={"memories": [
        {"id": "imp-1", "title": "ok", "content": "c"}, {"id": "bad id!", "title": "x",
                                                         "content": "c"}]}))
    assert partial["imported"] == 1 and len(partial["errors"]) == 1


async def test_cluster_answers_membership(client: Any) -> None:
    out = await ok(await client.post(f"{V1}/cluster", json={}))
    assert out["node_id"] == "node1" and [m["node_id"] for m in out["members"]] == ["node1"]
    out = await ok(await client.post(f"{V1}/cluster"))
    assert out["member_count"] == 1


BAD_CASES: list[tuple[str, str, Bad]] = [
    ("GET", "/search", Bad("no q", params={})),
    ("GET", "/search", Bad("empty q", params={"q": ""})),
    ("GET", "/search", Bad("limit too big", params={"q": "a", "limit": str(limits.search_limit_max + 1)})),
    ("GET", "/search", Bad("bad tier", params={"q": "a", "tier": "huge"})),
    ("GET", "/search", Bad("bad since", params={"q": "a", "since": "yesterday"})),
    ("GET", "/search", Bad("too many words", params={"q": " ".join(["w"] * 40)})),
    ("POST", "/search", Bad("no query", body={})),
    ("POST", "/search", Bad("q not text", body={"q": 5})),
    ("POST", "/recall", Bad("no context", body={})),
    ("POST", "/recall", Bad("limit over", body={"context": "a", "limit": 51})),
    ("POST", "/forget", Bad("no filter", body={})),
    ("POST", "/forget", Bad("bad tier", params={"tier": "x"})),
    ("POST", "/forget", Bad("malformed", raw=b"{nope")),
    ("POST", "/links", Bad("missing target", body={"source_id": "a"})),
    ("POST", "/links", Bad("self link", body={"source_id": "a", "target_id": "a"})),
    ("POST", "/links", Bad("bad relation", body={"source_id": "a", "target_id": "b",
                                                 "relation": "has space"})),
    ("POST", "/links", Bad("unknown memories", body={"source_id": "a", "target_id": "b"},
                           status=404)),
    ("GET", "/links/bad%20id", Bad("bad id")),
    ("GET", "/memories/x/lineage", Bad("bad direction", params={"direction": "sideways"})),
    ("GET", "/memories/x/lineage", Bad("depth over", params={"max_depth": "6"})),
    ("POST", "/import", Bad("not a list", body={"memories": "x"})),
    ("POST", "/import", Bad("too many", body={"memories": [{}] * (limits.import_memories_max + 1)})),
    ("POST", "/consolidate", Bad("one id", body={"ids": ["a"], "title": "t", "summary": "s"})),
    ("POST", "/consolidate", Bad("unknown ids", body={"ids": ["a", "b"], "title": "t",
                                                      "summary": "s"}, status=404)),
    ("POST", "/memories/nope/grant", Bad("unknown memory", body={"agent_id": "bob"}, status=404)),
    ("POST", "/memories/nope/grant", Bad("bad permission", body={"agent_id": "bob",
                                                                 "permission": "root"})),
    ("POST", "/memories/nope/revoke", Bad("no agent", body={})),
    ("POST", "/cluster", Bad("join", body={"action": "join", "url": "http://x"})),
]


@pytest.mark.parametrize(("method", "path", "bad"), BAD_CASES, ids=[b.name for _, _, b in BAD_CASES])
async def test_bad_input_writes_nothing(client: Any, node: Any, method: str, path: str,
                                        bad: Bad) -> None:
    await assert_refused(client, node, method, V1 + path, bad)


async def test_an_optional_body_with_a_too_long_integer_is_a_400(client: Any) -> None:
    # Found by the HTTP fuzz: /forget and /cluster read their optional body themselves.
    for path in ("/forget", "/cluster"):
        resp = await client.post(f"{V1}{path}", data=b'{"priority": ' + b"9" * 5000 + b"}",
                                 headers={"Content-Type": "application/json", **AGENT})
        assert resp.status == 400, await resp.text()
        assert (await resp.json())["error"] == "JSON number too long"
