"""Upstream-shaped /sync/push and /sync/since."""

from __future__ import annotations

MEM = {"id": "m-1", "title": "t", "content": "c", "tier": "long", "namespace": "ns",
       "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-02T00:00:00Z",
       "metadata": {"agent_id": "peer-agent"}}


async def test_push_then_since_round_trip(client) -> None:  # type: ignore[no-untyped-def]
    r = await client.post("/api/v1/sync/push", json={"sender_agent_id": "peer", "memories": [MEM]})
    assert r.status == 200, await r.text()
    assert (await r.json())["applied"] == 1
    got = await (await client.get("/api/v1/memories/m-1")).json()
    assert got["content"] == "c" and got["tier"] == "long"
    page = await (await client.get("/api/v1/sync/since",
                                   params={"since": "2026-01-01T00:00:00Z"})).json()
    assert [m["id"] for m in page["memories"]] == ["m-1"]
    assert page["next_since"] == "2026-01-02T00:00:00.000Z"


async def test_since_is_exclusive_and_a_page_never_splits_a_millisecond(client) -> None:  # type: ignore[no-untyped-def]
    def mem(i: int, updated: str) -> dict[str, object]:
        return {**MEM, "id": f"m-{i}", "updated_at": updated}
    same = "2026-01-02T00:00:00Z"
    pushed = [mem(1, "2026-01-01T00:00:00Z")] + [mem(i, same) for i in range(2, 6)] + [
        mem(6, "2026-01-03T00:00:00Z")]
    r = await client.post("/api/v1/sync/push", json={"sender_agent_id": "p", "memories": pushed})
    assert (await r.json())["applied"] == 6
    # As upstream: updated_at > since; the memory updated at that instant is not repeated.
    page = await (await client.get("/api/v1/sync/since",
                                   params={"since": "2026-01-01T00:00:00Z"})).json()
    assert [m["id"] for m in page["memories"]] == ["m-2", "m-3", "m-4", "m-5", "m-6"]
    # A page of 2 reaches into the millisecond m-2..m-5 share: it takes all four,
    # so the exclusive cursor it hands back skips none of them.
    page = await (await client.get("/api/v1/sync/since", params={
        "since": "2026-01-01T00:00:00Z", "limit": "2"})).json()
    assert [m["id"] for m in page["memories"]] == ["m-2", "m-3", "m-4", "m-5"]
    assert page["next_since"] == "2026-01-02T00:00:00.000Z"
    page = await (await client.get("/api/v1/sync/since", params={
        "since": page["next_since"], "limit": "2"})).json()
    assert [m["id"] for m in page["memories"]] == ["m-6"]
    # Without since: from the beginning.
    page = await (await client.get("/api/v1/sync/since", params={"limit": "1"})).json()
    assert [m["id"] for m in page["memories"]] == ["m-1"]


async def test_push_is_insert_if_newer_and_deletes_stay(client) -> None:  # type: ignore[no-untyped-def]
    await client.post("/api/v1/sync/push", json={"sender_agent_id": "peer", "memories": [MEM]})
    older = {**MEM, "content": "stale", "updated_at": "2026-01-01T12:00:00Z"}
    r = await client.post("/api/v1/sync/push", json={"sender_agent_id": "peer",
                                                     "memories": [older]})
    assert (await r.json())["applied"] == 0
    assert (await (await client.get("/api/v1/memories/m-1")).json())["content"] == "c"
    r = await client.post("/api/v1/sync/push", json={"sender_agent_id": "peer",
                                                     "deletions": ["m-1"]})
    assert (await r.json())["applied"] == 1
    newer = {**MEM, "content": "resurrect?", "updated_at": "2027-01-01T00:00:00Z"}
    await client.post("/api/v1/sync/push", json={"sender_agent_id": "peer", "memories": [newer]})
    assert (await client.get("/api/v1/memories/m-1")).status == 404


async def test_push_bad_input(client) -> None:  # type: ignore[no-untyped-def]
    for body in ({"memories": [MEM]}, {"sender_agent_id": "p", "memories": [{"id": "x"}]},
                 {"sender_agent_id": "p", "memories": [{**MEM, "updated_at": "yesterday"}]},
                 {"sender_agent_id": "p", "memories": [{**MEM, "tags": ["a,b"]}]},
                 {"sender_agent_id": "p", "memories": [{**MEM, "title": "t\x00"}]}):
        r = await client.post("/api/v1/sync/push", json=body)
        assert r.status == 400, body
    page = await (await client.get("/api/v1/sync/since")).json()
    assert page["count"] == 0


def test_webhook_settings_from_env_and_toml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from common.errors import BadRequest
    from daemon.settings import load_settings

    assert load_settings({}, env={}).webhooks.allow_loopback_webhooks is False
    s = load_settings({}, env={"AI_MEMORY_ALLOW_LOOPBACK_WEBHOOKS": "1"})
    assert s.webhooks.allow_loopback_webhooks is True
    conf = tmp_path / "n.toml"
    conf.write_text("[webhooks]\nallow_private_webhooks = true\nretry_max = 3\n")
    s = load_settings({}, env={}, config_path=conf)
    assert s.webhooks.allow_private_webhooks and s.webhooks.retry_max == 3
    conf.write_text("[webhooks]\nretry_max = 0\n")
    with pytest.raises(BadRequest):
        load_settings({}, env={}, config_path=conf)
