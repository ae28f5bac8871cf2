"""Broadcast notify: a list of recipients, "*" or "prefix*"; one record per
recipient, all in one quorum write; bounded by limits.notify_broadcast_max."""

from __future__ import annotations

from typing import Any

import pytest

from common import limits
from common.ops import NOTE_NEW
from tests.daemon._fixtures_handlers import Bad, assert_refused

V1 = "/api/v1"


async def register(client: Any, agent: str) -> None:
    r = await client.post(f"{V1}/agents", json={"agent_id": agent, "agent_type": "ai"},
                          headers={"X-Agent-Id": agent})
    assert r.status in (200, 201), await r.text()


async def inbox(client: Any, agent: str) -> list[dict[str, Any]]:
    r = await client.get(f"{V1}/inbox", headers={"X-Agent-Id": agent})
    assert r.status == 200, await r.text()
    return list((await r.json())["messages"])


@pytest.fixture
def writes(node: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The notification count of every quorum write of notifications (other
    writes, such as a background last-seen refresh, are not counted)."""
    calls: list[int] = []
    real = node.write

    async def counted(items: Any) -> Any:
        notes = sum(1 for kind, _, _ in items if kind == NOTE_NEW)
        if notes:
            calls.append(notes)
        return await real(items)

    monkeypatch.setattr(node, "write", counted)
    return calls


async def test_list_of_recipients(client: Any, writes: list[int]) -> None:
    r = await client.post(f"{V1}/notify", json={
        "target_agent_id": ["bob", "carol", "bob"], "title": "standup", "payload": "in 5"},
        headers={"X-Agent-Id": "alice"})
    assert r.status == 201, await r.text()
    out = await r.json()
    assert out["delivered_to"] == ["bob", "carol"] and out["count"] == 2
    assert writes == [2]  # one quorum round for both
    ids = {n["to"]: n["id"] for n in out["notifications"]}
    for agent in ("bob", "carol"):
        rows = await inbox(client, agent)
        assert [(m["id"], m["from"], m["title"]) for m in rows] == [(ids[agent], "alice", "standup")]


async def test_star_and_prefix(client: Any, writes: list[int]) -> None:
    for a in ("team-a/bob", "team-a/carol", "team-b/dan", "alice"):
        await register(client, a)
    writes.clear()
    r = await client.post(f"{V1}/notify", json={"to": "*", "subject": "all hands", "body": "now"},
                          headers={"X-Agent-Id": "alice"})
    out = await r.json()
    assert r.status == 201 and out["delivered_to"] == ["team-a/bob", "team-a/carol", "team-b/dan"]
    assert writes == [3]
    r = await client.post(f"{V1}/notify", json={"to": "team-a/*", "subject": "team", "body": "x"},
                          headers={"X-Agent-Id": "alice"})
    assert (await r.json())["delivered_to"] == ["team-a/bob", "team-a/carol"]
    r = await client.post(f"{V1}/notify", json={"to": "*", "target_prefix": "team-b/",
                                                "subject": "b", "body": "x"},
                          headers={"X-Agent-Id": "alice"})
    assert (await r.json())["delivered_to"] == ["team-b/dan"]
    assert [m["title"] for m in await inbox(client, "team-b/dan")] == ["b", "all hands"]
    assert await inbox(client, "alice") == []  # the sender is left out


async def test_broadcast_retry_is_idempotent(client: Any) -> None:
    body = {"target_agent_id": ["bob", "carol"], "title": "once", "payload": "p"}
    hdrs = {"X-Agent-Id": "alice", "Idempotency-Key": "bc-1"}
    first = await (await client.post(f"{V1}/notify", json=body, headers=hdrs)).json()
    second = await (await client.post(f"{V1}/notify", json=body, headers=hdrs)).json()
    assert first["notifications"] == second["notifications"]
    assert len(await inbox(client, "bob")) == 1


BAD = [
    Bad("too many", body={"target_agent_id": [f"a{i}" for i in range(limits.notify_broadcast_max + 1)],
                          "title": "t"}),
    Bad("empty list", body={"target_agent_id": [], "title": "t"}),
    Bad("bad id in list", body={"target_agent_id": ["ok", "bad id"], "title": "t"}),
    Bad("star in middle", body={"target_agent_id": "a*b", "title": "t"}),
    Bad("nobody matches", body={"target_agent_id": "nobody/*", "title": "t"}, status=404),
]


@pytest.mark.parametrize("bad", BAD, ids=[b.name for b in BAD])
async def test_bad_broadcast_writes_nothing(client: Any, node: Any, bad: Bad) -> None:
    await assert_refused(client, node, "POST", f"{V1}/notify",
                         Bad(bad.name, body=bad.body, status=bad.status,
                             headers={"X-Agent-Id": "alice"}))
