"""Notify and inbox over HTTP on one real node: records, identity, ordering,
filters, read marks, idempotency, expiry and concurrency."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ai_memory.models import InboxMessage

from common import limits
from daemon.api.app import build_app
from daemon.schemas.ids import record_id
from daemon.schemas.timefmt import parse_rfc3339, rfc3339
from daemon.settings import Member
from daemon.wiring import build_node
from tests.daemon._fixtures_handlers import clocked_fixture, free_port, headers, snapshot  # noqa: F401
from tests.daemon.conftest import make_settings


async def notify(client: Any, sender: str = "alice", to: str = "bob", key: str | None = None,
                 **fields: Any) -> dict[str, Any]:
    body = {"target_agent_id": to, "title": "hello", "payload": "the payload", **fields}
    resp = await client.post("/api/v1/notify", json=body, headers=headers(sender, key))
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def inbox(client: Any, agent: str = "bob", **params: Any) -> dict[str, Any]:
    resp = await client.get("/api/v1/inbox", params={k: str(v) for k, v in params.items()},
                            headers=headers(agent))
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_notify_answers_the_contract(client: Any) -> None:
    out = await notify(client, priority=7, tier="short")
    assert set(out) >= {"id", "notification_id", "from", "to", "delivered_to", "namespace",
                        "tier", "delivered_at"}
    assert out["id"] == out["notification_id"]
    assert out["from"] == "alice" and out["to"] == out["delivered_to"] == "bob"
    assert out["namespace"] == "_inbox/bob" and out["tier"] == "short"
    lifetime = parse_rfc3339(out["expires_at"]) - parse_rfc3339(out["delivered_at"])
    assert lifetime == limits.tier_ttl_secs["short"] * 1000


async def test_tier_lifetimes_and_defaults(client: Any) -> None:
    mid = await notify(client)
    assert mid["tier"] == "mid"
    assert (parse_rfc3339(mid["expires_at"]) - parse_rfc3339(mid["delivered_at"])
            == limits.tier_ttl_secs["mid"] * 1000)
    long = await notify(client, tier="long")
    assert long["expires_at"] is None
    msgs = (await inbox(client))["messages"]
    assert {m["priority"] for m in msgs} == {limits.notify_priority_default}


async def test_sdk_spelling_is_accepted(client: Any) -> None:
    resp = await client.post("/api/v1/notify", headers=headers("alice"),
                             json={"to": "bob", "subject": "S", "body": "B", "metadata": {}})
    assert resp.status == 201
    resp = await client.post("/api/v1/notify", headers=headers("alice"),
                             json={"to": "bob", "title": "T", "content": "C"})
    assert resp.status == 201
    msgs = (await inbox(client))["messages"]
    by_title = {m["title"]: m for m in msgs}
    assert by_title["S"]["payload"] == by_title["S"]["body"] == "B"
    assert by_title["T"]["subject"] == "T" and by_title["T"]["body"] == "C"
    for m in msgs:
        model = InboxMessage.model_validate(m)
        assert model.from_ == "alice" and model.to == "bob"


async def test_sender_identity(client: Any) -> None:
    out = await notify(client, sender=None, agent_id="carol")  # type: ignore[arg-type]
    assert out["from"] == "carol"
    resp = await client.post("/api/v1/notify", json={"to": "bob", "title": "x", "agent_id": "eve"},
                             headers=headers("alice"))
    assert resp.status == 403
    resp = await client.post("/api/v1/notify", json={"to": "bob", "title": "x"})
    assert resp.status == 400 and "X-Agent-Id" in (await resp.json())["error"]


async def test_every_notify_is_its_own_record(client: Any) -> None:
    ids = {(await notify(client, title="same title", payload=f"p{i}"))["id"] for i in range(5)}
    assert len(ids) == 5
    msgs = (await inbox(client))["messages"]
    assert len(msgs) == 5 and {m["from"] for m in msgs} == {"alice"}


async def test_idempotency_key(client: Any, node: Any) -> None:
    first = await notify(client, key="n-1")
    again = await notify(client, key="n-1")
    assert first == again and first["id"] == record_id("note", "alice", "n-1")
    assert (await inbox(client))["count"] == 1
    other_sender = await notify(client, sender="carol", key="n-1")
    assert other_sender["id"] != first["id"]
    before = await snapshot(node)
    resp = await client.post("/api/v1/notify", json={"to": "bob", "title": "different"},
                             headers=headers("alice", "n-1"))
    assert resp.status == 409
    assert await snapshot(node) == before


async def test_inbox_shape_and_order(clocked: Any) -> None:
    c = clocked
    for title, prio in (("low-old", 2), ("high-old", 9), ("low-new", 2), ("high-new", 9)):
        await notify(c.client, title=title, priority=prio)
        c.clock.advance(1)
    body = await inbox(c.client)
    assert body["agent_id"] == "bob" and body["namespace"] == "_inbox/bob"
    assert body["unread_only"] is True and body["count"] == 4
    assert [m["title"] for m in body["messages"]] == ["high-new", "high-old", "low-new", "low-old"]
    m = body["messages"][0]
    for field in ("id", "from", "to", "title", "subject", "payload", "body", "priority", "tier",
                  "created_at", "received_at", "read"):
        assert field in m
    assert m["read"] is False and m["received_at"] == m["created_at"]
    assert m["created_at"] == rfc3339(int((c.clock.now - 1) * 1000))


async def test_filters_apply_before_limit(clocked: Any) -> None:
    c = clocked
    first = [await notify(c.client, title=f"old{i}", priority=9) for i in range(5)]
    since = rfc3339(int(c.clock.now * 1000))  # "after" the old ones' instant
    c.clock.advance(10)
    for i in range(3):
        await notify(c.client, title=f"new{i}", priority=3)
    # the five old ones are read and outrank the new ones: unread_only must skip them first
    r = await c.client.post("/api/v1/inbox/read", json={"ids": [n["id"] for n in first]},
                            headers=headers("bob"))
    assert await r.json() == {"marked": 5}
    body = await inbox(c.client, limit=2)
    assert [m["title"][:3] for m in body["messages"]] == ["new", "new"]
    assert (await inbox(c.client, unread_only="false", limit=10))["count"] == 8
    assert (await inbox(c.client, unread_only="false", min_priority=5))["count"] == 5
    assert (await inbox(c.client, unread_only="false", since=since))["count"] == 3
    assert (await inbox(c.client, unread_only="false", limit=1))["count"] == 1


async def test_since_is_exclusive_as_the_docs_say_after(clocked: Any) -> None:
    c = clocked
    at = await notify(c.client, title="at the instant")
    c.clock.advance(1)
    later = await notify(c.client, title="a second later")
    instant = at["delivered_at"]
    got = await inbox(c.client, unread_only="false", since=instant)
    assert [m["id"] for m in got["messages"]] == [later["id"]]
    just_before = rfc3339(parse_rfc3339(instant) - 1)
    got = await inbox(c.client, unread_only="false", since=just_before)
    assert {m["id"] for m in got["messages"]} == {at["id"], later["id"]}


async def test_mark_read_on_read(client: Any) -> None:
    for i in range(3):
        await notify(client, title=f"m{i}")
    body = await inbox(client, mark_read="true", limit=2)
    assert body["count"] == 2 and all(m["read"] for m in body["messages"])
    rest = await inbox(client)
    assert rest["count"] == 1 and rest["messages"][0]["read"] is False
    everything = await inbox(client, unread_only="false")
    assert sorted(m["read"] for m in everything["messages"]) == [False, True, True]


async def test_an_agent_reads_only_its_own_inbox(client: Any) -> None:
    await notify(client)
    resp = await client.get("/api/v1/inbox", params={"agent_id": "bob"}, headers=headers("eve"))
    assert resp.status == 403
    resp = await client.get("/api/v1/inbox")
    assert resp.status == 400
    resp = await client.get("/api/v1/inbox", params={"agent_id": "bob"})  # no header: param names it
    assert (await resp.json())["count"] == 1
    resp = await client.get("/api/v1/inbox", params={"as_agent": "bob", "consistency": "local"})
    assert (await resp.json())["count"] == 1
    assert (await inbox(client, agent="eve"))["count"] == 0


async def test_mark_read_endpoint_only_marks_own(client: Any) -> None:
    to_bob = await notify(client, to="bob")
    to_carol = await notify(client, to="carol")
    r = await client.post("/api/v1/inbox/read", headers=headers("bob"),
                          json={"ids": [to_bob["id"], to_carol["id"], "unknown-id"]})
    assert r.status == 200 and await r.json() == {"marked": 1}
    assert (await inbox(client, agent="carol"))["count"] == 1
    assert (await inbox(client, agent="bob"))["count"] == 0
    r = await client.post("/api/v1/inbox/read", json={"agent_id": "bob", "ids": []})
    assert await r.json() == {"marked": 0}
    r = await client.post("/api/v1/inbox/read", json={"agent_id": "bob", "ids": [to_bob["id"]]},
                          headers=headers("carol"))
    assert r.status == 403


async def test_mark_read_id_limit(client: Any, node: Any) -> None:
    before = await snapshot(node)
    ids = [f"id-{i}" for i in range(limits.mark_read_ids_max + 1)]
    r = await client.post("/api/v1/inbox/read", json={"ids": ids}, headers=headers("bob"))
    assert r.status == 400 and "ids" in (await r.json())["error"]
    assert await snapshot(node) == before


async def test_expired_messages_never_show(clocked: Any) -> None:
    c = clocked
    short = await notify(c.client, tier="short", title="short")
    await notify(c.client, tier="mid", title="mid")
    c.clock.advance(limits.tier_ttl_secs["short"] + 1)
    body = await inbox(c.client, unread_only="false")
    assert [m["title"] for m in body["messages"]] == ["mid"]
    r = await c.client.post("/api/v1/inbox/read", json={"ids": [short["id"]]},
                            headers=headers("bob"))
    assert r.status == 200


@pytest.mark.timeout(60)
async def test_concurrent_notifies_to_one_agent(client: Any) -> None:
    outs = await asyncio.gather(*(notify(client, sender=f"s{i % 7}", title="ping", payload=str(i))
                                  for i in range(100)))
    assert len({o["id"] for o in outs}) == 100
    body = await inbox(client, limit=500)
    assert body["count"] == 100
    assert sorted(int(m["payload"]) for m in body["messages"]) == list(range(100))
    assert all(m["from"] == f"s{int(m['payload']) % 7}" for m in body["messages"])


async def test_concurrent_mark_read(client: Any) -> None:
    ids = [(await notify(client, title=f"m{i}"))["id"] for i in range(20)]

    async def mark(chunk: list[str]) -> int:
        r = await client.post("/api/v1/inbox/read", json={"ids": chunk}, headers=headers("bob"))
        assert r.status == 200
        return int((await r.json())["marked"])

    async def drain() -> int:
        return int((await inbox(client, mark_read="true", limit=500))["count"])

    results = await asyncio.gather(mark(ids[:15]), mark(ids[5:]), mark(ids), drain(), drain())
    assert results[:3] == [15, 15, 20]
    assert (await inbox(client))["count"] == 0
    everything = await inbox(client, unread_only="false", limit=500)
    assert everything["count"] == 20 and all(m["read"] for m in everything["messages"])


async def test_quorum_not_met_is_a_503_and_retries_never_duplicate(
        tmp_path: Any, aiohttp_client: Any) -> None:
    dead = tuple(Member(f"node{i}", f"http://127.0.0.1:{free_port()}") for i in (2, 3))
    node = await build_node(make_settings(tmp_path / "w2.db", peers=dead, quorum_timeout_ms=200))  # W=2 of 3
    await node.start()
    try:
        client = await aiohttp_client(build_app(node))
        for _ in range(2):
            resp = await client.post("/api/v1/notify", json={"to": "bob", "title": "t"},
                                     headers=headers("alice", "retry-1"))
            assert resp.status == 503
            assert int(resp.headers["Retry-After"]) >= 1
            body = await resp.json()
            assert body["error"] == "quorum_not_met" and body["needed"] == 2 and body["got"] == 1
        resp = await client.get("/api/v1/inbox", headers=headers("bob"))
        assert resp.status == 503  # R = 2: the read barrier needs a peer too
        local = await client.get("/api/v1/inbox", params={"consistency": "local"},
                                 headers=headers("bob"))
        msgs = (await local.json())["messages"]
        assert [m["id"] for m in msgs] == [record_id("note", "alice", "retry-1")]
    finally:
        await node.stop()
