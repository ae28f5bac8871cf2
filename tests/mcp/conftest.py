"""Fixtures for MCP tests: a fake node, and an in-process MCP client bound to it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from mcp.client import Client
from mcp_types import CallToolResult, TextContent

from daemon.mcp.server import build_server
from daemon.mcp.settings import McpSettings
from tests.mcp.fake_node import FakeNode

Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
async def node() -> AsyncIterator[FakeNode]:
    fake = await FakeNode().start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
def connect(node: FakeNode) -> Connect:
    """``async with connect(agent_id=...) as client``: an MCP client of a server forwarding to ``node``."""

    @asynccontextmanager
    async def open_client(**overrides: Any) -> AsyncIterator[Client]:
        fields: dict[str, Any] = {"url": node.url, "agent_id": "alice", "retry_wait_max_secs": 0.0}
        fields.update(overrides)
        async with Client(build_server(McpSettings(**fields))) as client:
            yield client

    return open_client


def text_of(result: CallToolResult) -> str:
    assert result.content, result
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def ok(result: CallToolResult) -> dict[str, Any]:
    """The tool's JSON result; fails the test with the error text if the call failed."""
    assert not result.is_error, text_of(result)
    if result.structured_content is not None:
        return dict(result.structured_content)
    decoded = json.loads(text_of(result))
    assert isinstance(decoded, dict)
    return decoded


def tool_error(result: CallToolResult) -> dict[str, Any]:
    """The node's error body carried by a failed call."""
    assert result.is_error, f"expected a tool error, got {result.structured_content}"
    decoded = json.loads(text_of(result))
    assert isinstance(decoded, dict)
    return decoded
