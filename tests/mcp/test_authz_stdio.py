"""Who may do what, over MCP: ``ai-memory mcp --key`` against a real node in
keys mode, driven by the official MCP client over stdio.

The node is ``ai-memory serve --config`` with the keys of
:mod:`tests.daemon.authz_fixtures` as ``[[auth.static_keys]]``. For every
grant set one MCP server process is started with that key
(``AI_MEMORY_KEY`` for one of them, ``--key`` for the rest) and every
policy row that has a tool is called; each answer must be what
:func:`common.policy.check` says for the key: a result where it is allowed,
a tool error carrying the node's 403 where it is not. A server without a
key gets the node's 401 on every tool; in anonymous mode the same calls
succeed once the project is named and are refused when it is guessed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.cluster.harness import free_port
from tests.daemon.authz_fixtures import (
    ALPHA,
    BETA,
    GRANT_SETS,
    ROOT_KEY,
    WS,
    allowed,
    key_of,
    toml_keys,
)
from tests.mcp.conftest import ok, tool_error

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# policy row -> (tool, arguments)
TOOL_ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "message.send": ("memory_message_send", {
        "to_workspace": WS, "to_project": BETA, "from_workspace": WS, "from_project": ALPHA,
        "body": "a request over MCP"}),
    "message.list_inbox": ("memory_message_list", {"box": "inbox", "workspace": WS,
                                                   "project": ALPHA}),
    "message.list_outbox": ("memory_message_list", {"box": "outbox", "workspace": WS,
                                                    "project": ALPHA}),
    "message.pop": ("memory_message_pop", {"workspace": WS, "project": ALPHA}),
    "message.cancel": ("memory_message_cancel", {"workspace": WS, "project": ALPHA,
                                                 "all": True}),
    "briefing.read": ("memory_briefing", {"workspace": WS, "project": ALPHA}),
    "handoff.write": ("memory_handoff", {"workspace": WS, "project": ALPHA,
                                         "body": "for the next session"}),
}


def _http(method: str, url: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"null")


class Daemon:
    def __init__(self, tmp: Path, config: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = tmp
        (tmp / "node.toml").write_text(config)
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Daemon:
        log = open(self.tmp / "node.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--port", str(self.port), "--db",
             str(self.tmp / "node.db"), "--config", str(self.tmp / "node.toml")],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        log.close()
        deadline = time.monotonic() + 20
        while True:
            assert self.proc.poll() is None, (self.tmp / "node.log").read_text()
            try:
                if _http("GET", self.url + "/api/v1/health")[0] == 200:
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def start_projects(self, key: str | None) -> None:
        for project, harness in ((ALPHA, "kimi"), (BETA, "claude-code")):
            status, body = _http("POST", self.url + "/api/v1/sessions",
                                 {"workspace": WS, "project": project, "harness": harness}, key)
            assert status == 201, body


@pytest.fixture(scope="module")
def keyed_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with Daemon(tmp_path_factory.mktemp("mcp-keys"), toml_keys()) as d:
        d.start_projects(ROOT_KEY)
        yield d


def _errlog(cwd: Path) -> TextIO:
    """Where the server's stderr goes (the SDK needs a real file for the child's stderr)."""
    return open(cwd / "mcp-stderr.log", "a")  # the caller closes it


@asynccontextmanager
async def mcp_session(url: str, cwd: Path, *args: str,
                      env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "cli", "mcp", "--url", url, *args],
        env={"PYTHONPATH": str(ROOT), **(env or {})}, cwd=cwd)
    with _errlog(cwd) as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


# Five of the grant sets already allow and refuse every row that has a tool
# (each MCP server is a process of its own, so fewer is faster).
MCP_SETS = ("both-write", "both-read", "alpha-write", "beta-write", "none")


def test_every_row_with_a_tool_is_driven_both_ways() -> None:
    assert set(MCP_SETS) <= set(GRANT_SETS)
    for action in TOOL_ROWS:
        assert {allowed(name, action) for name in MCP_SETS} == {True, False}, action


@pytest.mark.parametrize("name", MCP_SETS)
async def test_every_tool_row_over_mcp_in_keys_mode(keyed_node: Daemon, tmp_path: Path,
                                                    name: str) -> None:
    # One key comes from the environment, the others from the flag.
    by_env = name == "none"
    args = () if by_env else ("--key", key_of(name))
    env = {"AI_MEMORY_KEY": key_of(name)} if by_env else None
    async with mcp_session(keyed_node.url, tmp_path, *args, env=env) as session:
        for action, (tool, arguments) in TOOL_ROWS.items():
            result = await session.call_tool(tool, arguments)
            if allowed(name, action):
                ok(result)
            else:
                error = tool_error(result)
                assert (error["status"], error["code"]) == (403, "forbidden"), (action, error)


async def test_root_key_over_mcp_may_do_everything(keyed_node: Daemon, tmp_path: Path) -> None:
    async with mcp_session(keyed_node.url, tmp_path, "--key", ROOT_KEY) as session:
        for tool, arguments in TOOL_ROWS.values():
            ok(await session.call_tool(tool, arguments))


async def test_no_key_over_mcp_is_refused_by_the_node(keyed_node: Daemon, tmp_path: Path) -> None:
    async with mcp_session(keyed_node.url, tmp_path, "--agent-id", "alice") as session:
        for tool, arguments in TOOL_ROWS.values():
            error = tool_error(await session.call_tool(tool, arguments))
            assert (error["status"], error["code"]) == (401, "key_required")
        error = tool_error(await session.call_tool("memory_inbox", {}))
        assert error["status"] == 401
    async with mcp_session(keyed_node.url, tmp_path, "--key", "k-revoked") as session:
        error = tool_error(await session.call_tool(*TOOL_ROWS["message.pop"]))
        assert (error["status"], error["code"]) == (401, "unknown_key")


async def test_anonymous_mode_over_mcp(tmp_path_factory: pytest.TempPathFactory,
                                       tmp_path: Path) -> None:
    with Daemon(tmp_path_factory.mktemp("mcp-anon"), "") as node:
        node.start_projects(None)
        async with mcp_session(node.url, tmp_path, "--agent-id", "alice") as session:
            for tool, arguments in TOOL_ROWS.values():
                ok(await session.call_tool(tool, arguments))
            # A guessed project is refused for every change.
            for tool, arguments in (
                    ("memory_message_pop", {}), ("memory_message_cancel", {"all": True}),
                    ("memory_message_send", {"to_workspace": WS, "to_project": BETA,
                                             "body": "guess"})):
                error = tool_error(await session.call_tool(tool, arguments))
                assert error["status"] == 409, (tool, error)
        async with mcp_session(node.url, tmp_path) as nobody:
            error = tool_error(await nobody.call_tool("memory_inbox", {}))
            assert error["code"] == "bad_request" and "whose inbox" in error["error"]
            # and the node says the same when asked directly: no named agent, no read
            status, body = _http("GET", node.url + "/api/v1/inbox")
            assert status == 400 and "agent identity required" in body["error"]
