"""``memory_handoff`` through the official MCP client, against a real node: over
the node's own ``/mcp`` (streamable HTTP) and through the stdio server's tool
table (``ai-memory mcp``), which forwards to the node over HTTP. The next
``GET /handoff`` returns what the tool stored, once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from daemon.mcp.server import build_server
from daemon.mcp.settings import McpSettings
from tests.daemon.services.test_mail import B, start
from tests.mcp.conftest import ok, tool_error


@asynccontextmanager
async def over_http(url: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"X-Agent-Id": "alice"}, timeout=30.0) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as session:
            yield session


async def _take(client: Any) -> Any:
    resp = await client.get("/handoff", params=B)
    assert resp.status == 200, await resp.text()
    return (await resp.json())["handoff"]


async def test_memory_handoff_over_the_nodes_mcp(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, B, "claude-code", "sess-b")
    url = str(client.make_url("")).rstrip("/")
    async with over_http(url) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert "next session" in (tools["memory_handoff"].description or "")
        stored = ok(await mcp.call_tool("memory_handoff", {
            **B, "body": "Tests pass; the CLI part is next.", "subject": "handoffs",
            "from_agent": "claude-code"}))
        assert stored["state"] == "pending" and stored["from_agent"] == "claude-code"
        guessed = tool_error(await mcp.call_tool("memory_handoff", {"body": "where am I?"}))
        assert guessed["status"] == 409 and guessed["scope_source"] == "shared_slot"
    got = await _take(client)
    assert got["id"] == stored["handoff_id"] and got["body"] == "Tests pass; the CLI part is next."
    assert await _take(client) is None


async def test_memory_handoff_through_the_stdio_server(client) -> None:  # type: ignore[no-untyped-def]
    await start(client, B, "codex", "sess-b")
    url = str(client.make_url("")).rstrip("/")
    settings = McpSettings(url=url, agent_id="alice", retry_wait_max_secs=0.0,
                           workspace=B["workspace"], project=B["project"])
    async with Client(build_server(settings)) as mcp:
        first = ok(await mcp.call_tool("memory_handoff", {"body": "first draft"}))
        second = ok(await mcp.call_tool("memory_handoff", {"body": "final word"}))
    assert second["replaced"] == 1 and first["handoff_id"] != second["handoff_id"]
    assert (await _take(client))["body"] == "final word"
