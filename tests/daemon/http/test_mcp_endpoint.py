"""``/mcp`` in process: the route starts the SDK's transport on first use and the app's
cleanup stops it; what the HTTP boundary refuses never reaches the SDK."""

from __future__ import annotations

import asyncio
import json

ACCEPT = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


def rpc(method: str, params: dict[str, object] | None = None, id_: int = 1) -> dict[str, object]:
    body: dict[str, object] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        body["params"] = params
    return body


async def test_tools_answer_and_errors_keep_the_api_shape(client) -> None:  # type: ignore[no-untyped-def]
    listed = await client.post("/mcp", json=rpc("tools/list"), headers=ACCEPT)
    assert listed.status == 200 and listed.headers["Content-Type"].startswith("application/json")
    names = {t["name"] for t in (await listed.json())["result"]["tools"]}
    assert {"memory_notify", "memory_message_pop", "memory_briefing"} <= names

    sent = await client.post("/mcp", json=rpc("tools/call", {
        "name": "memory_notify",
        "arguments": {"target_agent_id": "bob", "title": "t", "payload": "p"}}),
        headers={**ACCEPT, "X-Agent-Id": "alice"})
    result = (await sent.json())["result"]
    assert result["isError"] is False and result["structuredContent"]["delivered_to"] == "bob"

    bad = await client.post("/mcp", json=rpc("tools/call", {
        "name": "memory_inbox", "arguments": {"limit": 0}}), headers={**ACCEPT, "X-Agent-Id": "bob"})
    error = json.loads((await bad.json())["result"]["content"][0]["text"])
    assert error["code"] == "bad_request" and error["error"].startswith("limit:")

    inbox = await client.get("/api/v1/inbox", params={"agent_id": "bob"})
    assert (await inbox.json())["count"] == 1  # the tool call wrote through the service


async def test_the_http_boundary_refuses_first(client) -> None:  # type: ignore[no-untyped-def]
    foreign = await client.post("/mcp", json=rpc("tools/list"),
                                headers={**ACCEPT, "Origin": "https://evil.example"})
    assert foreign.status == 403 and (await foreign.json())["code"] == "bad_origin"
    bad_agent = await client.post("/mcp", json=rpc("tools/list"),
                                  headers={**ACCEPT, "X-Agent-Id": "no spaces allowed"})
    assert bad_agent.status == 400 and (await bad_agent.json())["code"] == "bad_request"
    garbage = await client.post("/mcp", data=b"{not json", headers={
        **ACCEPT, "Content-Type": "application/json"})
    assert garbage.status == 400  # the SDK's JSON-RPC parse error, not a crash


async def test_an_mcp_call_refreshes_its_agents_last_seen(client, node) -> None:  # type: ignore[no-untyped-def]
    reg = await client.post("/api/v1/agents", json={"agent_id": "carol", "agent_type": "t"})
    assert reg.status == 201
    node.seen_throttle._last.clear()  # the registration's own refresh does not count
    before = (await (await client.get("/api/v1/agents")).json())["agents"][0]["last_seen_at"]
    await client.post("/mcp", json=rpc("tools/list"), headers={**ACCEPT, "X-Agent-Id": "carol"})
    for _ in range(100):
        after = (await (await client.get("/api/v1/agents")).json())["agents"][0]["last_seen_at"]
        if after > before:
            break
        await asyncio.sleep(0.02)
    assert after > before


async def test_memory_inbox_since_leaves_out_the_instant_itself(client) -> None:  # type: ignore[no-untyped-def]
    from daemon.schemas.timefmt import parse_rfc3339, rfc3339
    r = await client.post("/api/v1/notify", headers={"X-Agent-Id": "alice"},
                          json={"target_agent_id": "bob", "title": "t", "payload": "p"})
    at = (await r.json())["delivered_at"]

    async def ids(since: str) -> list[str]:
        got = await client.post("/mcp", json=rpc("tools/call", {
            "name": "memory_inbox", "arguments": {"since": since, "unread_only": False}}),
            headers={**ACCEPT, "X-Agent-Id": "bob"})
        result = (await got.json())["result"]
        assert result["isError"] is False, result
        return [n["id"] for n in result["structuredContent"]["notifications"]]

    assert await ids(at) == []  # "after" the instant: not at it
    assert len(await ids(rfc3339(parse_rfc3339(at) - 1))) == 1


async def test_the_standalone_stream_is_not_offered(client) -> None:  # type: ignore[no-untyped-def]
    """The transport is stateless, so the server never has a message of its
    own to push: ``GET /mcp`` (the optional SSE stream, which the MCP
    Inspector opens) is a 405, as the specification allows. Served, it was
    a stream that outlived its client and held the node's shutdown for its
    whole grace period; DELETE (ending a session) has no session to end."""
    for method in ("GET", "DELETE"):
        answer = await asyncio.wait_for(client.request(method, "/mcp", headers={
            **ACCEPT, "Accept": "text/event-stream"}), 5)
        assert answer.status == 405, method
        assert answer.headers["Allow"] == "POST"
        assert (await answer.json())["code"] == "method_not_allowed"
    listed = await client.post("/mcp", json=rpc("tools/list"), headers=ACCEPT)
    assert listed.status == 200
