"""A refused request writes nothing, not even the caller's last-seen
refresh: the middleware notes an agent as seen only after a success."""

from __future__ import annotations

import asyncio
from typing import Any

from common import limits
from tests.daemon._fixtures_handlers import clocked_fixture, headers, snapshot  # noqa: F401


async def settled(node: Any) -> None:
    last = await snapshot(node)
    for _ in range(20):
        await asyncio.sleep(0.02)
        now = await snapshot(node)
        if now == last:
            return
        last = now


async def test_refused_request_from_a_registered_agent_refreshes_nothing(clocked: Any) -> None:
    c = clocked
    resp = await c.client.post("/api/v1/agents", headers=headers("alice"), json={
        "agent_id": "alice", "agent_type": "claude"})
    assert resp.status == 201
    await settled(c.node)  # the registration's own refresh, if any, has landed
    for bad in (
        lambda: c.client.post("/api/v1/notify", headers=headers("alice"), data=b"{not json"),
        lambda: c.client.post("/api/v1/notify", headers=headers("alice"), json={"to": "bob"}),
        lambda: c.client.get("/api/v1/inbox", headers=headers("alice"), params={"limit": "-1"}),
        lambda: c.client.get("/api/v1/memories/no-such-id", headers=headers("alice")),
    ):
        c.clock.advance(limits.agent_seen_refresh_secs + 1)  # a refresh would be due
        before = await snapshot(c.node)
        resp = await bad()
        assert 400 <= resp.status < 500
        await asyncio.sleep(0.05)  # the refresh runs in the background when it runs
        assert await snapshot(c.node) == before
    c.clock.advance(limits.agent_seen_refresh_secs + 1)
    before = await snapshot(c.node)
    assert (await c.client.get("/api/v1/agents", headers=headers("alice"))).status == 200
    for _ in range(100):  # and a success still refreshes it
        if await snapshot(c.node) != before:
            break
        await asyncio.sleep(0.02)
    assert await snapshot(c.node) != before
