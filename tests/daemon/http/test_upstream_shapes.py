"""Upstream's HTTP shapes, sent the way upstream tools send them (plain JSON
over HTTP, no SDK): the GET envelope, registering any agent, namespace
subscriptions, inbox filters, route errors and 503 codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.api.app import build_app
from daemon.settings import AuthSettings, ClusterSettings, Member, Settings, StoreSettings
from daemon.wiring import build_node
from tests.daemon._fixtures_handlers import clocked_fixture, free_port, snapshot  # noqa: F401
from tests.daemon.conftest import make_settings

V1 = "/api/v1"


async def test_get_memory_envelope(client: Any) -> None:
    a = await (await client.post(f"{V1}/memories", json={"title": "a", "content": "x"})).json()
    b = await (await client.post(f"{V1}/memories", json={"title": "b", "content": "y"})).json()
    r = await client.post(f"{V1}/links", json={"source_id": a["id"], "target_id": b["id"]})
    assert r.status == 201
    body = await (await client.get(f"{V1}/memories/{b['id']}")).json()
    assert body["memory"]["id"] == b["id"] and body["memory"]["title"] == "b"  # upstream reads this
    assert body["id"] == b["id"] and body["title"] == "b"  # the SDK reads this
    assert [(lk["source_id"], lk["relation"]) for lk in body["links"]] == [(a["id"], "related_to")]


async def test_register_any_agent_anonymously(client: Any) -> None:
    # an upstream supervisor registering its workers: no X-Agent-Id, or its own
    for hdrs in ({}, {"X-Agent-Id": "supervisor"}):
        r = await client.post(f"{V1}/agents", json={"agent_id": "worker-1", "agent_type": "ai",
                                                    "capabilities": ["code"]}, headers=hdrs)
        assert r.status == 201, await r.text()
    agents = (await (await client.get(f"{V1}/agents")).json())["agents"]
    assert [a["agent_id"] for a in agents] == ["worker-1"]


async def test_keys_mode_registers_only_itself(tmp_path: Path, aiohttp_client: Any) -> None:
    settings = Settings(store=StoreSettings(db_path=str(tmp_path / "k.db")),
                        cluster=ClusterSettings(node_id="node1"),
                        auth=AuthSettings(api_keys={"key-alice": "alice"}))
    node = await build_node(settings)
    await node.start()
    try:
        client = await aiohttp_client(build_app(node))
        before = await snapshot(node)
        r = await client.post(f"{V1}/agents", json={"agent_id": "bob", "agent_type": "ai"},
                              headers={"X-API-Key": "key-alice"})
        assert r.status == 403 and (await r.json())["code"] == "forbidden"
        assert await snapshot(node) == before
        r = await client.post(f"{V1}/agents", json={"agent_id": "alice", "agent_type": "ai"},
                              headers={"X-API-Key": "key-alice"})
        assert r.status == 201
    finally:
        await node.stop()


async def test_namespace_subscriptions(client: Any) -> None:
    r = await client.post(f"{V1}/subscriptions", json={"agent_id": "bob", "namespace": "team/a"})
    assert r.status == 201, await r.text()
    await client.post(f"{V1}/subscriptions", json={"agent_id": "bob", "namespace": "team/b"})
    listed = await (await client.get(f"{V1}/subscriptions", params={"agent_id": "bob"})).json()
    assert listed["namespaces"] == ["team/a", "team/b"] and listed["count"] == 2
    assert [s["namespace"] for s in listed["subscriptions"]] == ["team/a", "team/b"]
    r = await client.delete(f"{V1}/subscriptions", params={"agent_id": "bob", "namespace": "team/a"})
    assert r.status == 200 and (await r.json())["unsubscribed"] is True
    listed = await (await client.get(f"{V1}/subscriptions", params={"agent_id": "bob"})).json()
    assert listed["namespaces"] == ["team/b"]
    # the webhook shape still lists webhooks only
    hooks = await (await client.get(f"{V1}/subscriptions")).json()
    assert hooks["subscriptions"] == []
    # another agent may not act for bob
    r = await client.post(f"{V1}/subscriptions", json={"agent_id": "bob", "namespace": "x"},
                          headers={"X-Agent-Id": "mallory"})
    assert r.status == 403
    r = await client.delete(f"{V1}/subscriptions", params={"agent_id": "bob"})
    assert r.status == 400 and (await r.json())["code"] == "bad_request"


async def test_inbox_honours_tier_and_since(clocked: Any) -> None:
    c = clocked
    send = {"X-Agent-Id": "alice"}
    await c.client.post(f"{V1}/notify", json={"to": "bob", "title": "old", "tier": "long"},
                        headers=send)
    c.clock.advance(10)
    mark = "2027-01-15T08:00:05Z"  # T0 + 5 s (T0 = 1.8e9 s)
    await c.client.post(f"{V1}/notify", json={"to": "bob", "title": "new-short", "tier": "short"},
                        headers=send)
    await c.client.post(f"{V1}/notify", json={"to": "bob", "title": "new-long", "tier": "long"},
                        headers=send)

    async def titles(**params: str) -> list[str]:
        r = await c.client.get(f"{V1}/inbox", params={"agent_id": "bob", **params},
                               headers={"X-Agent-Id": "bob"})
        assert r.status == 200, await r.text()
        return sorted(m["title"] for m in (await r.json())["messages"])

    assert await titles(tier="long") == ["new-long", "old"]
    assert await titles(since=mark) == ["new-long", "new-short"]
    assert await titles(since=mark, tier="short") == ["new-short"]
    r = await c.client.get(f"{V1}/inbox", params={"agent_id": "bob", "tier": "huge"},
                           headers={"X-Agent-Id": "bob"})
    assert r.status == 400


async def test_route_errors_have_codes(client: Any) -> None:
    for method, path, status, code in [("GET", "/nope", 404, "not_found"),
                                       ("GET", f"{V1}/nope", 404, "not_found"),
                                       ("DELETE", f"{V1}/health", 405, "method_not_allowed"),
                                       ("PATCH", f"{V1}/memories", 405, "method_not_allowed")]:
        r = await client.request(method, path)
        body = await r.json()
        assert r.status == status and body["code"] == code and body["error"], (method, path, body)
        if status == 405:
            assert "GET" in body["allowed"] and "GET" in r.headers["Allow"]
    # a handler's own 404 keeps its message
    r = await client.get(f"{V1}/memories/unknown-id")
    assert r.status == 404 and "not found" in (await r.json())["error"]


async def test_every_503_has_a_code(tmp_path: Path, aiohttp_client: Any) -> None:
    dead = tuple(Member(f"node{i}", f"http://127.0.0.1:{free_port()}") for i in (2, 3))
    node = await build_node(make_settings(tmp_path / "q.db", peers=dead, quorum_timeout_ms=200))
    await node.start()
    try:
        client = await aiohttp_client(build_app(node))
        for method, path, body in [("POST", f"{V1}/memories", {"title": "t", "content": "c"}),
                                   ("GET", f"{V1}/search?q=t", None),
                                   ("POST", f"{V1}/notify", {"to": "bob", "title": "t"})]:
            r = await client.request(method, path, json=body, headers={"X-Agent-Id": "alice"})
            assert r.status == 503, (path, await r.text())
            out = await r.json()
            assert out["code"] == "quorum_not_met" and out["error"] == "quorum_not_met"
            assert int(r.headers["Retry-After"]) >= 1
    finally:
        await node.stop()
