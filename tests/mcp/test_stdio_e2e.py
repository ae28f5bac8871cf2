"""``ai-memory mcp`` end to end: a real node, the real MCP client, the server as a subprocess.

One daemon (``ai-memory serve`` on a free loopback port with its own SQLite
file) serves the module. Each test spawns the MCP server the way an agent's
harness would, over stdio, and drives it with the SDK's ``stdio_client`` and
``ClientSession``. The server is started as ``python -m cli mcp``, which
runs the same click command that ``ai-memory mcp`` registers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.cluster.harness import free_port as below_ephemeral
from tests.mcp.conftest import ok, tool_error
from tests.mcp.test_forwarding import ALL_TOOLS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
READY_SECS = 20.0


def _free_port() -> int:
    """A free port below the kernel's ephemeral range (tests.cluster.harness.free_port):
    a client polling a port of that range nobody listens on yet can connect
    to itself."""
    return below_ephemeral()


def _http(method: str, url: str, body: Any = None, agent: str | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if agent:
        headers["X-Agent-Id"] = agent
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"null")


class Node:
    """One ``ai-memory serve`` process for the module."""

    def __init__(self, tmp: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "node.log"
        self.db = tmp / "node.db"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cli",
                    "serve",
                    "--port",
                    str(self.port),
                    "--db",
                    str(self.db),
                ],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        deadline = time.monotonic() + READY_SECS
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if _http("GET", self.url + "/api/v1/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(self.log.read_text())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def start_session(self, workspace: str, project: str, harness: str) -> str:
        session_id = str(uuid.uuid4())
        status, body = _http(
            "POST",
            self.url + "/api/v1/sessions",
            {
                "workspace": workspace,
                "project": project,
                "harness": harness,
                "session_id": session_id,
            },
        )
        assert status == 201, body
        return session_id


@pytest.fixture(scope="module")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    node = Node(tmp_path_factory.mktemp("mcp-node"))
    node.start()
    try:
        yield node
    finally:
        node.stop()


def _errlog(cwd: Path) -> TextIO:
    """Where the server's stderr goes (the SDK needs a real file for the child's stderr)."""
    return open(cwd / "mcp-stderr.log", "a")  # the caller closes it


@asynccontextmanager
async def mcp_session(node: Node, cwd: Path, *args: str) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with ``ai-memory mcp --url NODE ARGS`` as a subprocess."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "cli", "mcp", "--url", node.url, *args],
        env={"PYTHONPATH": str(ROOT)},
        cwd=cwd,  # no .ai-memory.toml here or above: the scope comes from flags only
    )
    with _errlog(cwd) as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def project_names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"proj-a-{suffix}", f"proj-b-{suffix}"


async def test_lists_the_tools_over_stdio(real_node: Node, tmp_path: Path) -> None:
    async with mcp_session(real_node, tmp_path, "--agent-id", "alice") as session:
        tools = (await session.list_tools()).tools
    assert {t.name for t in tools} == ALL_TOOLS


async def test_notify_reaches_the_recipients_inbox(real_node: Node, tmp_path: Path) -> None:
    bob = f"bob-{uuid.uuid4().hex[:8]}"
    async with mcp_session(real_node, tmp_path, "--agent-id", "alice") as alice:
        sent = ok(await alice.call_tool("memory_notify", {
            "target_agent_id": bob, "title": "review", "payload": "please look at the draft",
            "priority": 7, "tier": "short"}))  # fmt: skip
    assert sent["delivered_to"] == bob and sent["notification_id"]

    async with mcp_session(real_node, tmp_path, "--agent-id", bob) as session:
        inbox = ok(await session.call_tool("memory_inbox", {"mark_read": True}))
        again = ok(await session.call_tool("memory_inbox", {}))
        everything = ok(await session.call_tool("memory_inbox", {"unread_only": False}))
        other = await session.call_tool("memory_inbox", {"as_agent": "alice"})
    assert inbox["count"] == 1
    [note] = inbox["notifications"]
    assert note["id"] == sent["notification_id"]
    assert (note["from"], note["title"], note["payload"], note["priority"]) == (
        "alice", "review", "please look at the draft", 7)  # fmt: skip
    assert note["received_at"]
    assert again == {"notifications": [], "count": 0}  # marked read by the first read
    assert everything["count"] == 1
    assert tool_error(other)["status"] == 403  # nobody reads another agent's inbox


async def test_mail_send_list_pop_cancel(real_node: Node, tmp_path: Path) -> None:
    proj_a, proj_b = project_names()
    session_a = real_node.start_session("default", proj_a, "kimi")
    real_node.start_session("default", proj_b, "claude-code")
    static_b = ("--workspace", "default", "--project", proj_b)

    # A is bound to its hook session, so its sender scope comes from the session header;
    # B is a static client started for its project.
    async with (
        mcp_session(real_node, tmp_path, "--session-id", session_a) as a,
        mcp_session(real_node, tmp_path, *static_b) as b,
    ):
        sent = ok(await a.call_tool("memory_message_send", {
            "to_workspace": "default", "to_project": proj_b, "subject": "export endpoint",
            "body": "Add /v1/export streaming NDJSON; keep the auth middleware."}))  # fmt: skip
        listed = ok(await b.call_tool("memory_message_list", {}))
        popped = ok(await b.call_tool("memory_message_pop", {}))
        again = ok(await b.call_tool("memory_message_pop", {}))
        by_id = await b.call_tool("memory_message_pop", {"message_id": sent["message_id"]})

        second = ok(await a.call_tool("memory_message_send", {
            "to_workspace": "default", "to_project": proj_b, "body": "never mind the CSV part"}))  # fmt: skip
        outbox = ok(await a.call_tool("memory_message_list", {
            "box": "outbox", "workspace": "default", "project": proj_a}))  # fmt: skip
        cancelled = ok(await a.call_tool("memory_message_cancel", {
            "workspace": "default", "project": proj_a, "all": True}))  # fmt: skip
        after_cancel = ok(await b.call_tool("memory_message_pop", {}))
        briefing = ok(await b.call_tool("memory_briefing", {}))

    assert sent["state"] == "pending" and sent["from_project"] == proj_a
    assert [m["id"] for m in listed["messages"]] == [sent["message_id"]]
    assert listed["messages"][0]["subject"] == "export endpoint"
    message = popped["message"]
    assert message["id"] == sent["message_id"] and message["state"] == "claimed"
    assert "Add /v1/export streaming NDJSON" in message["body"]
    assert popped["provenance"]["from_project"] == proj_a
    assert popped["security_notice"]
    assert again["message"] is None  # claimed once: the inbox is empty now
    assert tool_error(by_id)["status"] == 409  # and it cannot be claimed again by id
    assert [m["id"] for m in outbox["messages"]] == [second["message_id"]]
    assert cancelled["cancelled"] == [second["message_id"]]
    assert after_cancel["message"] is None
    assert briefing["pending_message_count"] == 0


async def test_unknown_recipient_is_a_tool_error(real_node: Node, tmp_path: Path) -> None:
    proj_a, _ = project_names()
    real_node.start_session("default", proj_a, "codex")
    async with mcp_session(real_node, tmp_path, "--workspace", "default", "--project", proj_a) as a:
        result = await a.call_tool("memory_message_send", {
            "to_workspace": "default", "to_project": "no-such-project", "body": "hello?"})  # fmt: skip
        guessed = await a.call_tool("memory_message_pop", {"workspace": "default"})
    error = tool_error(result)
    assert error["status"] == 404 and error["code"] == "not_found"
    assert "no-such-project" in error["error"]
    assert tool_error(guessed)["status"] in (400, 409)  # half a scope is never completed by a guess


async def test_memories_round_trip(real_node: Node, tmp_path: Path) -> None:
    namespace = f"team/mcp-{uuid.uuid4().hex[:8]}"
    async with mcp_session(real_node, tmp_path, "--agent-id", "alice") as session:
        stored = ok(await session.call_tool("memory_store", {
            "title": "deploy freeze", "content": "no deploys on Fridays", "tier": "long",
            "namespace": namespace, "tags": ["ops"], "priority": 8}))  # fmt: skip
        listed = ok(await session.call_tool("memory_list", {"namespace": namespace}))
    assert stored["id"]
    assert [m["id"] for m in listed["memories"]] == [stored["id"]]
    assert listed["memories"][0]["content"] == "no deploys on Fridays"
