"""Memories over HTTP on one real node: create, get, list, update, promote,
delete, bulk, idempotency, identity and expiry."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from ai_memory.models import BulkCreateResponse, Memory

from common import limits
from daemon.schemas.ids import RECORD_NAMESPACE, record_id
from daemon.schemas.memories import memory_json
from daemon.schemas.timefmt import parse_rfc3339, rfc3339
from tests.daemon._fixtures_handlers import clocked_fixture, headers, snapshot  # noqa: F401

BASE = "/api/v1/memories"


async def create(client: Any, agent: str | None = None, key: str | None = None,
                 **fields: Any) -> dict[str, Any]:
    body = {"title": "a title", "content": "some content", **fields}
    resp = await client.post(BASE, json=body, headers=headers(agent, key))
    assert resp.status == 201, await resp.text()
    return await resp.json()


# -- pure parts ----------------------------------------------------------------

def test_rfc3339_round_trip() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(1_800_000_000_123) == "2027-01-15T08:00:00.123Z"
    assert parse_rfc3339("2027-01-15T08:00:00.123Z") == 1_800_000_000_123
    assert parse_rfc3339("2027-01-15T10:00:00.123+02:00") == 1_800_000_000_123
    assert parse_rfc3339("2027-01-15T08:00:00") == 1_800_000_000_000  # naive means UTC
    assert rfc3339(None) is None
    with pytest.raises(ValueError):
        parse_rfc3339("yesterday")


def test_record_ids_derive_from_sender_and_key() -> None:
    a1 = record_id("mem", "alice", "k1")
    assert a1 == str(uuid.uuid5(RECORD_NAMESPACE, "mem:alice:k1"))
    assert a1 == record_id("mem", "alice", "k1")
    assert a1 != record_id("mem", "bob", "k1")
    assert a1 != record_id("note", "alice", "k1")
    assert record_id("mem", "alice", None) != record_id("mem", "alice", None)
    assert uuid.UUID(record_id("mem", None, None)).version == 7  # time-ordered (uuid7)


def test_memory_json_satisfies_the_sdk_model() -> None:
    row = {"id": "m1", "tier": "mid", "namespace": "global", "title": "t", "content": "c",
           "tags": ["a"], "priority": 5, "confidence": 0.5, "source": "api", "access_count": 0,
           "created_at_ms": 1000, "updated_at_ms": 2000, "expires_at_ms": None,
           "agent_id": None, "metadata": {}}
    out = memory_json(row)
    model = Memory.model_validate(out)
    assert model.created_at == "1970-01-01T00:00:01.000Z" and model.expires_at is None
    assert out["last_accessed_at"] is None


# -- create / get ----------------------------------------------------------------

async def test_create_applies_defaults_and_get_returns_it(client: Any, node: Any) -> None:
    before = node.now_ms()
    mem = await create(client)
    Memory.model_validate(mem)
    assert mem["tier"] == "mid" and mem["namespace"] == "global"
    assert mem["priority"] == 5 and mem["confidence"] == 1.0 and mem["source"] == "api"
    assert mem["tags"] == [] and mem["metadata"] == {}
    assert mem["created_at"].endswith("Z") and mem["created_at"] == mem["updated_at"]
    lifetime = parse_rfc3339(mem["expires_at"]) - parse_rfc3339(mem["created_at"])
    assert lifetime == limits.memory_tier_ttl_secs["mid"] * 1000
    assert parse_rfc3339(mem["created_at"]) >= before - 1
    uuid.UUID(mem["id"])
    got = await (await client.get(f"{BASE}/{mem['id']}")).json()
    # the memory's own fields at the top level, plus upstream's envelope
    assert got == {**mem, "memory": mem, "links": []}


async def test_create_with_every_field(client: Any) -> None:
    mem = await create(client, agent="alice", title="T", content="C", tier="long",
                       namespace="team/a", tags=["x", "y"], priority=9, confidence=0.25,
                       source="cli", metadata={"k": [1, 2], "agent_id": "forged"}, scope="team")
    assert mem["tier"] == "long" and mem["expires_at"] is None
    assert mem["namespace"] == "team/a" and mem["tags"] == ["x", "y"]
    assert mem["priority"] == 9 and mem["confidence"] == 0.25 and mem["source"] == "cli"
    assert mem["metadata"] == {"k": [1, 2], "agent_id": "alice", "scope": "team"}
    assert mem["agent_id"] == "alice"


async def test_ttl_secs_and_expires_at_set_the_expiry(client: Any) -> None:
    mem = await create(client, ttl_secs=120)
    assert parse_rfc3339(mem["expires_at"]) - parse_rfc3339(mem["created_at"]) == 120_000
    mem = await create(client, expires_at="2999-01-01T00:00:00Z")
    assert mem["expires_at"] == "2999-01-01T00:00:00.000Z"
    resp = await client.post(BASE, json={"title": "t", "content": "c",
                                         "expires_at": "2001-01-01T00:00:00Z"})
    assert resp.status == 400 and "past" in (await resp.json())["error"]


async def test_identity_is_stamped_and_checked(client: Any) -> None:
    mem = await create(client, agent="alice")
    assert mem["metadata"]["agent_id"] == "alice"
    mem = await create(client, agent_id="bob")
    assert mem["agent_id"] == "bob" and mem["metadata"]["agent_id"] == "bob"
    anon = await create(client, metadata={"agent_id": "someone-else"})
    assert anon["agent_id"] is None and "agent_id" not in anon["metadata"]
    resp = await client.post(BASE, json={"title": "t", "content": "c", "agent_id": "bob"},
                             headers=headers("alice"))
    assert resp.status == 403
    assert "bob" in (await resp.json())["error"]


async def test_get_unknown_is_404(client: Any) -> None:
    resp = await client.get(f"{BASE}/{uuid.uuid4()}")
    assert resp.status == 404
    assert (await resp.json())["code"] == "not_found"


# -- list ------------------------------------------------------------------------

async def test_list_filters_and_pages(client: Any) -> None:
    await create(client, agent="alice", namespace="ns1", tier="short", tags=["a", "b"], priority=2)
    await create(client, agent="alice", namespace="ns1", tier="long", tags=["a"], priority=8)
    await create(client, agent="bob", namespace="ns2", tier="mid", tags=["b"], priority=5)

    async def ids(**params: Any) -> list[str]:
        resp = await client.get(BASE, params=params)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        assert body["count"] == len(body["memories"])
        for m in body["memories"]:
            Memory.model_validate(m)
        return [m["namespace"] + ":" + m["tier"] for m in body["memories"]]

    assert len(await ids()) == 3
    assert sorted(await ids(namespace="ns1")) == ["ns1:long", "ns1:short"]
    assert await ids(tier="mid") == ["ns2:mid"]
    assert await ids(tags="a,b") == ["ns1:short"]
    assert sorted(await ids(tags="b")) == ["ns1:short", "ns2:mid"]
    assert sorted(await ids(min_priority="5")) == ["ns1:long", "ns2:mid"]
    assert await ids(agent_id="bob") == ["ns2:mid"]
    page1 = await ids(limit="2")
    page2 = await ids(limit="2", offset="2")
    assert len(page1) == 2 and len(page2) == 1 and not set(page1) & set(page2)


async def test_list_limit_is_bounded(client: Any) -> None:
    resp = await client.get(BASE, params={"limit": str(limits.memory_list_limit_max + 1)})
    assert resp.status == 400 and "limit" in (await resp.json())["error"]


# -- update / promote / delete -----------------------------------------------------

async def test_update_patches_only_given_fields(clocked: Any) -> None:
    c = clocked
    mem = await create(c.client, agent="alice", tags=["a"], priority=3)
    c.clock.advance(5)
    resp = await c.client.put(f"{BASE}/{mem['id']}", json={"title": "new title", "priority": 7},
                              headers=headers("alice"))
    assert resp.status == 200, await resp.text()
    upd = await resp.json()
    assert upd["title"] == "new title" and upd["priority"] == 7
    assert upd["content"] == mem["content"] and upd["tags"] == ["a"]
    assert upd["created_at"] == mem["created_at"] and upd["expires_at"] == mem["expires_at"]
    assert parse_rfc3339(upd["updated_at"]) == parse_rfc3339(mem["updated_at"]) + 5000
    assert upd["metadata"]["agent_id"] == "alice"
    got = await (await c.client.get(f"{BASE}/{mem['id']}")).json()
    assert got == {**upd, "memory": upd, "links": []}


async def test_update_expiry_rules(client: Any) -> None:
    mem = await create(client)
    upd = await (await client.put(f"{BASE}/{mem['id']}", json={"expires_at": None})).json()
    assert upd["expires_at"] is None
    upd = await (await client.put(f"{BASE}/{mem['id']}", json={"ttl_secs": 60})).json()
    assert parse_rfc3339(upd["expires_at"]) == parse_rfc3339(upd["updated_at"]) + 60_000
    upd = await (await client.put(f"{BASE}/{mem['id']}", json={"tier": "short"})).json()
    assert (parse_rfc3339(upd["expires_at"]) - parse_rfc3339(upd["updated_at"])
            == limits.memory_tier_ttl_secs["short"] * 1000)
    upd = await (await client.put(f"{BASE}/{mem['id']}", json={"metadata": {"x": 1}})).json()
    assert upd["metadata"] == {"x": 1}


async def test_update_refusals(client: Any) -> None:
    mem = await create(client, agent="alice")
    resp = await client.put(f"{BASE}/{mem['id']}", json={})
    assert resp.status == 400 and "nothing to update" in (await resp.json())["error"]
    resp = await client.put(f"{BASE}/{uuid.uuid4()}", json={"title": "x"})
    assert resp.status == 404
    resp = await client.put(f"{BASE}/{mem['id']}", json={"title": "x", "agent_id": "bob"},
                            headers=headers("alice"))
    assert resp.status == 403


async def test_promote_makes_long_and_permanent(client: Any) -> None:
    mem = await create(client, tier="short")
    assert mem["expires_at"] is not None
    resp = await client.post(f"{BASE}/{mem['id']}/promote")
    assert resp.status == 200
    out = await resp.json()
    assert out["promoted"] is True and out["tier"] == "long" and out["expires_at"] is None
    got = await (await client.get(f"{BASE}/{mem['id']}")).json()
    assert got["tier"] == "long" and got["expires_at"] is None
    assert (await client.post(f"{BASE}/{uuid.uuid4()}/promote")).status == 404


async def test_delete_is_final(client: Any) -> None:
    mem = await create(client)
    resp = await client.delete(f"{BASE}/{mem['id']}")
    assert resp.status == 200
    assert await resp.json() == {"deleted": True, "id": mem["id"]}
    assert (await client.get(f"{BASE}/{mem['id']}")).status == 404
    assert (await client.delete(f"{BASE}/{mem['id']}")).status == 404
    assert (await client.put(f"{BASE}/{mem['id']}", json={"title": "back?"})).status == 404
    assert (await client.post(f"{BASE}/{mem['id']}/promote")).status == 404
    listing = await (await client.get(BASE)).json()
    assert listing["count"] == 0


async def test_expired_memories_disappear(clocked: Any) -> None:
    c = clocked
    mem = await create(c.client, ttl_secs=10)
    assert (await c.client.get(f"{BASE}/{mem['id']}")).status == 200
    c.clock.advance(11)
    assert (await c.client.get(f"{BASE}/{mem['id']}")).status == 404
    assert (await (await c.client.get(BASE)).json())["count"] == 0


# -- idempotency -----------------------------------------------------------------

async def test_idempotency_key_makes_retries_safe(client: Any) -> None:
    first = await create(client, agent="alice", key="req-1")
    again = await create(client, agent="alice", key="req-1")
    assert again["id"] == first["id"] == record_id("mem", "alice", "req-1")
    assert again["created_at"] == first["created_at"]
    other = await create(client, agent="bob", key="req-1")
    assert other["id"] != first["id"]
    assert (await (await client.get(BASE)).json())["count"] == 2


async def test_idempotent_retry_after_change_or_delete(client: Any, node: Any) -> None:
    first = await create(client, agent="alice", key="req-2")
    await client.put(f"{BASE}/{first['id']}", json={"title": "edited"}, headers=headers("alice"))
    before = await snapshot(node)
    replay = await create(client, agent="alice", key="req-2")
    assert replay["title"] == "edited"  # the record as it now is; nothing rewritten
    assert await snapshot(node) == before
    await client.delete(f"{BASE}/{first['id']}")
    resp = await client.post(BASE, json={"title": "a title", "content": "some content"},
                             headers=headers("alice", "req-2"))
    assert resp.status == 409
    assert (await client.get(f"{BASE}/{first['id']}")).status == 404


# -- bulk ------------------------------------------------------------------------

async def test_bulk_writes_valid_items_in_one_write(client: Any, node: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real_write = node.write

    async def counting_write(items: list[Any]) -> Any:
        calls.append(len(items))
        return await real_write(items)

    monkeypatch.setattr(node, "write", counting_write)
    items = [
        {"title": "one", "content": "1"},
        {"title": "two", "content": "2", "tier": "long"},
        {"title": "", "content": "empty title"},
        {"title": "bad prio", "content": "x", "priority": "5"},
        "not an object",
        {"title": "three", "content": "3", "tags": ["t"]},
    ]
    resp = await client.post(f"{BASE}/bulk", json=items, headers=headers("alice"))
    assert resp.status == 201, await resp.text()
    out = BulkCreateResponse.model_validate(await resp.json())
    assert out.created == 3 and len(out.ids) == 3
    assert [e["index"] for e in out.errors] == [2, 3, 4]
    assert all(e["error"] for e in out.errors)
    assert calls == [3]
    for memory_id in out.ids:
        got = await (await client.get(f"{BASE}/{memory_id}")).json()
        assert got["agent_id"] == "alice"


async def test_bulk_accepts_wrapped_body_and_item_identity(client: Any) -> None:
    resp = await client.post(f"{BASE}/bulk", headers=headers("alice"), json={"memories": [
        {"title": "ok", "content": "x", "agent_id": "alice"},
        {"title": "spoof", "content": "x", "agent_id": "mallory"}]})
    out = await resp.json()
    assert out["created"] == 1 and out["errors"][0]["index"] == 1
    assert "mallory" in out["errors"][0]["error"]


async def test_bulk_nothing_valid_writes_nothing(client: Any, node: Any) -> None:
    before = await snapshot(node)
    resp = await client.post(f"{BASE}/bulk", json=[{"title": 1}], headers=headers("alice"))
    assert resp.status == 200
    assert (await resp.json())["created"] == 0
    assert await snapshot(node) == before


async def test_bulk_limit(client: Any, node: Any) -> None:
    before = await snapshot(node)
    items = [{"title": f"m{i}", "content": "x"} for i in range(limits.bulk_create_max + 1)]
    resp = await client.post(f"{BASE}/bulk", json=items)
    assert resp.status == 413
    assert "bulk_create_max" in (await resp.json())["error"]
    assert await snapshot(node) == before


async def test_bulk_idempotency_key(client: Any) -> None:
    items = [{"title": f"m{i}", "content": "x"} for i in range(3)]
    a = await (await client.post(f"{BASE}/bulk", json=items, headers=headers("al", "b1"))).json()
    b = await (await client.post(f"{BASE}/bulk", json=items, headers=headers("al", "b1"))).json()
    assert a["ids"] == b["ids"] and len(set(a["ids"])) == 3
    assert (await (await client.get(BASE)).json())["count"] == 3


async def test_bulk_of_the_maximum_size(client: Any) -> None:
    items = [{"title": f"m{i}", "content": "x" * 100} for i in range(limits.bulk_create_max)]
    resp = await client.post(f"{BASE}/bulk", json=items)
    out = await resp.json()
    assert out["created"] == limits.bulk_create_max and not out["errors"]
    listing = await (await client.get(BASE, params={"limit": str(limits.memory_list_limit_max)})).json()
    assert listing["count"] == limits.bulk_create_max


async def test_concurrent_creates_are_all_kept(client: Any) -> None:
    results = await asyncio.gather(*(create(client, title=f"c{i}") for i in range(50)))
    assert len({m["id"] for m in results}) == 50
    assert (await (await client.get(BASE, params={"limit": "100"})).json())["count"] == 50


async def test_a_change_in_the_creation_millisecond_still_moves_updated_at(clocked: Any) -> None:
    c = clocked  # the clock stands still: create and update share one millisecond
    mem = await create(c.client)
    upd = await (await c.client.put(f"{BASE}/{mem['id']}", json={"title": "x"})).json()
    assert parse_rfc3339(upd["updated_at"]) == parse_rfc3339(mem["created_at"]) + 1
    out = await (await c.client.post(f"{BASE}/{mem['id']}/promote")).json()
    assert parse_rfc3339(out["updated_at"]) > parse_rfc3339(mem["created_at"])
