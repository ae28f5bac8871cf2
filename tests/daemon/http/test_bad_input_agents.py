"""Bad input on agent registration: a 4xx with a clear error, never a 500,
and nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from common import limits
from tests.daemon._fixtures_handlers import Bad, assert_refused

OK = {"agent_id": "alice", "agent_type": "claude", "capabilities": ["notify"]}


def with_(**fields: Any) -> dict[str, Any]:
    return {**OK, **fields}


REGISTER = [
    Bad("malformed json", raw=b'{"agent_id": "alice"'),
    Bad("not utf-8", raw=b'{"agent_id": "\xc3\x28"}'),
    Bad("array body", body=[OK]),
    Bad("null body", body=None, raw=b"null"),
    Bad("missing agent_id", body={"agent_type": "claude"}),
    Bad("missing agent_type", body={"agent_id": "alice"}),
    Bad("empty agent_id", body=with_(agent_id="")),
    Bad("agent_id too long", body=with_(agent_id="a" * (limits.agent_id_max_chars + 1))),
    Bad("agent_id with space", body=with_(agent_id="alice smith")),
    Bad("agent_id SQL", body=with_(agent_id="x'); DROP TABLE agents;--")),
    Bad("agent_id script", body=with_(agent_id="<script>alert(1)</script>")),
    Bad("agent_id RTL override", body=with_(agent_id="\u202ealice")),
    Bad("agent_id number", body=with_(agent_id=42)),
    Bad("agent_type empty", body=with_(agent_type="")),
    Bad("agent_type too long", body=with_(agent_type="t" * (limits.agent_type_max_chars + 1))),
    Bad("agent_type newline", body=with_(agent_type="a\nb")),
    Bad("agent_type NUL", body=with_(agent_type="a\x00")),
    Bad("agent_type 10k unicode", body=with_(agent_type="\u00e9" * 10_000)),
    Bad("capabilities not a list", body=with_(capabilities="notify")),
    Bad("capability not a string", body=with_(capabilities=[1])),
    Bad("capability empty", body=with_(capabilities=[""])),
    Bad("capability control char", body=with_(capabilities=["a\x1b"])),
    Bad("too many capabilities",
        body=with_(capabilities=[f"c{i}" for i in range(limits.capabilities_max + 1)])),
    Bad("X-Agent-Id hostile", body=OK, headers={"X-Agent-Id": "a|b"}),
    Bad("oversized body", body=with_(agent_type="t" * (limits.request_body_max_bytes + 1)),
        status=413),
]


@pytest.mark.parametrize("bad", REGISTER, ids=lambda b: b.name)
async def test_register_refuses(client: Any, node: Any, bad: Bad) -> None:
    await assert_refused(client, node, "POST", "/api/v1/agents", bad)
    assert await node.store.list_agents() == []


async def test_hostile_but_legal_type_round_trips(client: Any) -> None:
    weird = "<b>'; DROP TABLE agents; --</b> \u202e"
    resp = await client.post("/api/v1/agents", json=with_(agent_type=weird, capabilities=[weird]))
    assert resp.status == 201
    listing = await (await client.get("/api/v1/agents")).json()
    assert listing["agents"][0]["agent_type"] == weird
    assert listing["agents"][0]["capabilities"] == [weird]
