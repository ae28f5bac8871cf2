"""The MCP Inspector's CLI (npm ``@modelcontextprotocol/inspector``) lists the tools of ``/mcp``.

A second, independent client implementation (TypeScript SDK) against a real
node. Skipped when ``npx`` is not installed; npx fetches the pinned version
from the npm registry the first time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mcp.test_forwarding import ALL_TOOLS
from tests.mcp.test_stdio_e2e import Node

INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npx") is None, reason="npx (Node.js) is not installed"),
]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = Node(tmp_path_factory.mktemp("inspector-node"))
    n.start()
    try:
        yield n
    finally:
        n.stop()


def test_the_inspector_cli_lists_every_tool(node: Node, tmp_path: Path) -> None:
    npx = shutil.which("npx")
    assert npx is not None
    done = subprocess.run(
        [npx, "-y", INSPECTOR, "--cli", node.url + "/mcp", "--method", "tools/list"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    listed = json.loads(done.stdout)
    assert {t["name"] for t in listed["tools"]} == ALL_TOOLS
    notify = next(t for t in listed["tools"] if t["name"] == "memory_notify")
    assert notify["inputSchema"]["properties"]["priority"]["anyOf"][0]["maximum"] == 10
