"""``ai-memory mcp-bridge`` over stdio against a real 3-node cluster.

The bridge runs as a harness runs it: a subprocess speaking MCP on its
stdin/stdout, with the harness's session id in its environment
(``CLAUDE_CODE_SESSION_ID``), driven by the official SDK's ``stdio_client``
and ``ClientSession``. The nodes are real ``ai-memory serve`` processes.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.stdio import StdioServerParameters
from pydantic import BaseModel

from daemon.mcp.bridge import NoticeSchedule, session_from_env
from tests.cluster.harness import Cluster
from tests.mcp.conftest import ok, tool_error
from tests.mcp.test_forwarding import ALL_TOOLS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster3(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


def start_session(c: Cluster, workspace: str, project: str, harness: str) -> str:
    sid = str(uuid.uuid4())
    status, body = c.call("node1", "POST", "/api/v1/sessions", {
        "workspace": workspace, "project": project, "harness": harness, "session_id": sid})
    assert status == 201, body
    return sid


def send(c: Cluster, node: str, to: tuple[str, str], sender: tuple[str, str], body: str) -> str:
    status, reply = c.call(node, "POST", "/api/v1/messages", {
        "to_workspace": to[0], "to_project": to[1], "from_workspace": sender[0],
        "from_project": sender[1], "body": body})
    assert status == 201, reply
    return str(reply["message_id"])


class ChannelParams(BaseModel):
    content: str
    meta: dict[str, str] | None = None


class ChannelObserver(ClientExtension):
    """What Claude Code does with a channel: receive ``notifications/claude/channel``."""

    identifier = "com.example/claude-channel-observer"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def notifications(self) -> list[NotificationBinding[Any]]:
        async def seen(params: ChannelParams) -> None:
            self.texts.append(params.content)

        return [NotificationBinding(method="notifications/claude/channel",
                                    params_type=ChannelParams, handler=seen)]


@asynccontextmanager
async def bridge(cwd: Path, args: list[str], env: dict[str, str],
                 observer: ChannelObserver | None = None) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "cli", "mcp-bridge", *args],
        env={"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", ""), **env}, cwd=cwd)
    async with Client(params, mode="legacy", extensions=[observer] if observer else None,
                      read_timeout_seconds=60) as client:
        yield client


async def _until(pred: Any) -> None:
    with anyio.fail_after(15.0):
        for _ in range(1_000_000):  # until pred() holds; fail_after bounds it
            if pred():
                return
            await anyio.sleep(0.05)


@pytest.mark.slow
@pytest.mark.cluster
async def test_session_scope_failover_and_inbox_channel(cluster3: Cluster, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    proj_a, proj_b = ("default", f"a-{suffix}"), ("default", f"b-{suffix}")
    start_session(cluster3, *proj_a, "kimi")
    sid_b = start_session(cluster3, *proj_b, "claude-code")
    first = send(cluster3, "node3", proj_b, proj_a, "please add an export endpoint")

    urls = ",".join(cluster3.url(n) for n in ("node1", "node2"))
    seen = ChannelObserver()
    async with bridge(tmp_path, ["--url", urls, "--channel", "inbox", "--poll-fast-secs", "0.2",
                                 "--poll-slow-secs", "0.8"],
                      {"CLAUDE_CODE_SESSION_ID": sid_b}, seen) as b:
        assert "claude/channel" in (b.server_capabilities.experimental or {})
        assert {t.name for t in (await b.list_tools()).tools} == ALL_TOOLS

        # the inbox channel: the count-only notice, pushed once per new text
        await _until(lambda: len(seen.texts) >= 1)
        [notice] = seen.texts
        assert f"1 cross-project message waiting in the default/{proj_b[1]} inbox" in notice
        assert "export endpoint" not in notice
        send(cluster3, "node2", proj_b, proj_a, "and a second one")
        await _until(lambda: len(seen.texts) >= 2)
        assert "2 cross-project messages" in seen.texts[1]
        await anyio.sleep(2.0)  # several polls with nothing new: nothing more is pushed
        assert len(seen.texts) == 2

        # scope from the session: no workspace/project named, none guessed
        listed = ok(await b.call_tool("memory_message_list", {}))
        assert (listed["workspace"], listed["project"]) == proj_b
        assert "resolved_scope" not in listed and listed["count"] == 2
        popped = ok(await b.call_tool("memory_message_pop", {}))
        assert popped["message"]["id"] == first and popped["project"] == proj_b[1]

        # node1 dies mid-session: the next call goes to node2
        cluster3.kill9("node1")
        brief = ok(await b.call_tool("memory_briefing", {}))
        assert brief["scope"] == {"workspace": "default", "project": proj_b[1],
                                  "source": "session"}
        assert brief["pending_message_count"] == 1
        again = ok(await b.call_tool("memory_message_pop", {}))
        assert again["message"]["body"].count("and a second one") == 1
        # argument errors come back as the node's error body, through the bridge
        bad = tool_error(await b.call_tool("memory_message_send", {"to_workspace": "default"}))
        assert bad["code"] == "bad_request" and bad["status"] == 400


@pytest.mark.slow
async def test_every_node_down_is_a_clear_tool_error(tmp_path: Path) -> None:
    async with bridge(tmp_path, ["--url", "http://127.0.0.1:9,http://127.0.0.1:10"],
                      {"CODEX_THREAD_ID": "t-1"}) as b:
        assert "claude/channel" not in (b.server_capabilities.experimental or {})
        err = tool_error(await b.call_tool("memory_agent_list", {}))
    assert err["code"] == "cannot_connect" and "127.0.0.1:10" in err["error"]


def test_session_variables_in_order() -> None:
    assert session_from_env({}) == (None, None)
    assert session_from_env({"CODEX_THREAD_ID": "t"}) == ("t", "codex")
    assert session_from_env({"CLAUDE_SESSION_ID": "old", "CLAUDE_CODE_SESSION_ID": "new"}) == (
        "new", "claude-code")
    assert session_from_env({"AI_MEMORY_SESSION_ID": "x", "KIMI_SESSION_ID": "k"}) == ("x", None)
    assert session_from_env({"KIMI_SESSION_ID": " "}) == (None, None)


def test_notice_schedule_backs_off_and_sends_only_new_text() -> None:
    s = NoticeSchedule(5.0, 60.0)
    assert s.observe(None) is False and s.delay == 10.0  # nothing yet: backing off
    assert [s.observe(None) for _ in range(4)] == [False] * 4
    assert s.delay == 60.0  # 20, 40, 60, 60
    assert s.observe("2 waiting") is True and s.delay == 5.0
    assert s.observe("2 waiting") is False and s.delay == 10.0
    assert s.observe("3 waiting") is True and s.delay == 5.0
    assert s.observe(None) is False and s.delay == 5.0  # drained: a change, but nothing to say
    assert s.observe("3 waiting") is True  # the same text again after a gap is news
    s.failed()
    assert s.delay == 10.0


@pytest.mark.slow
async def test_the_channel_asks_an_older_server_for_the_notice_only(tmp_path: Path) -> None:
    """PM-115: the bridge's notice poll also sends ``handoff=0``,
    ``recovery=0`` and ``profile_digest=0`` (for a server that ignores
    ``inbox_only``). The node is the recording fake, which shows the query."""
    from tests.fakes import FakeNode

    fake = await FakeNode().start()
    fake.reply("GET", "/handoff", {"notice": "1 cross-project message waiting",
                                   "pending_message_count": 1})
    seen = ChannelObserver()
    try:
        async with bridge(tmp_path, ["--url", fake.url, "--channel", "inbox",
                                     "--poll-fast-secs", "0.2", "--poll-slow-secs", "0.8"],
                          {"CLAUDE_CODE_SESSION_ID": "s-115"}, seen):
            await _until(lambda: len(seen.texts) >= 1)
    finally:
        await fake.stop()
    assert seen.texts == ["1 cross-project message waiting"]
    polls = fake.made("GET", "/handoff")
    assert polls
    for poll in polls:
        assert {k: poll.query.get(k) for k in ("inbox_only", "handoff", "recovery",
                                               "profile_digest")} == {
            "inbox_only": "1", "handoff": "0", "recovery": "0", "profile_digest": "0"}
        assert poll.query.get("harness") == "claude-code"
