"""Agent registry over HTTP and the throttled last-seen refresh."""

from __future__ import annotations

from typing import Any

from ai_memory.models import AgentRegistration

from common import limits
from daemon.schemas.timefmt import rfc3339
from daemon.services.agents import SeenThrottle
from tests.daemon._fixtures_handlers import clocked_fixture, eventually, headers, snapshot  # noqa: F401


async def register(client: Any, agent: str = "alice", agent_type: str = "claude",
                   capabilities: list[str] | None = None, as_: str | None = None) -> Any:
    return await client.post("/api/v1/agents", headers=headers(as_), json={
        "agent_id": agent, "agent_type": agent_type, "capabilities": capabilities or []})


def test_throttle_lets_one_refresh_through_per_interval() -> None:
    t = SeenThrottle(interval_ms=1000, max_tracked=3)
    assert t.due("a", 0) and not t.due("a", 999) and t.due("a", 1000)
    assert t.due("b", 0) and t.due("c", 0)
    assert t.due("d", 0)  # evicts "a", the least recently refreshed
    assert len(t) == 3 and t.due("a", 1001)
    assert not t.due("d", 10)


async def test_register_and_list(client: Any) -> None:
    resp = await register(client, "alice", "claude", ["notify", "inbox", "notify"])
    assert resp.status == 201, await resp.text()
    agent = await resp.json()
    AgentRegistration.model_validate(agent)
    assert agent["agent_id"] == "alice" and agent["agent_type"] == "claude"
    assert agent["capabilities"] == ["notify", "inbox"]
    assert agent["registered_at"].endswith("Z") and agent["last_seen_at"] == agent["registered_at"]
    await register(client, "org/team:bob@host.x", "codex")
    listing = await (await client.get("/api/v1/agents")).json()
    assert listing["count"] == 2
    assert [a["agent_id"] for a in listing["agents"]] == ["alice", "org/team:bob@host.x"]
    for a in listing["agents"]:
        AgentRegistration.model_validate(a)


async def test_reregistration_updates_type_keeps_registered_at(clocked: Any) -> None:
    c = clocked
    first = await (await register(c.client, "alice", "claude", ["a"])).json()
    c.clock.advance(30)
    second = await (await register(c.client, "alice", "codex", ["b"])).json()
    assert second["registered_at"] == first["registered_at"]
    assert second["agent_type"] == "codex" and second["capabilities"] == ["b"]
    assert second["last_seen_at"] == rfc3339(int(c.clock.now * 1000))


async def test_anonymous_mode_registers_any_agent(client: Any, node: Any) -> None:
    """As upstream: registering names an agent, it does not act as one."""
    resp = await register(client, "alice", as_="supervisor")
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["agent_id"] == "alice"
    assert (await register(client, "alice", as_="alice")).status == 201


async def test_last_seen_refresh_is_throttled(clocked: Any) -> None:
    c = clocked
    await register(c.client, "alice")
    interval = limits.agent_seen_refresh_secs

    async def last_seen() -> str:
        return str((await c.node.store.get_agent("alice"))["last_seen_at_ms"])

    async def touch() -> None:
        resp = await c.client.get("/api/v1/agents", headers=headers("alice"))
        assert resp.status == 200

    async def refreshed(expected: str, since: dict[str, int]) -> bool:
        # The refresh is done once it is acknowledged, not merely visible: a
        # read connection sees the commit a moment before the writer counts
        # it in the version vector (store/writer.py), so wait for both.
        return await last_seen() == expected and await snapshot(c.node) != since

    registered = await snapshot(c.node)
    c.clock.advance(interval + 1)
    await touch()
    expected = str(int(c.clock.now * 1000))
    await eventually(lambda: refreshed(expected, registered))
    before = await snapshot(c.node)
    c.clock.advance(interval / 2)
    await touch()  # inside the interval: no write
    await touch()
    assert await snapshot(c.node) == before
    assert await last_seen() == expected
    c.clock.advance(interval / 2 + 1)
    await touch()
    expected = str(int(c.clock.now * 1000))
    await eventually(lambda: refreshed(expected, before))


async def test_unregistered_callers_create_nothing(clocked: Any) -> None:
    c = clocked
    before = await snapshot(c.node)
    for _ in range(3):
        await c.client.get("/api/v1/agents", headers=headers("stranger"))
        c.clock.advance(limits.agent_seen_refresh_secs + 1)
    await c.client.get("/api/v1/memories", headers={"X-Agent-Id": "bad id!"})
    assert await snapshot(c.node) == before
    assert (await (await c.client.get("/api/v1/agents")).json())["count"] == 0
