"""``memory_briefing`` and the mcp-bridge inbox channel count the caller's
unread notifications beside project mail, on a real 3-node cluster with
static API keys (each bound to an agent, so the key decides whose inbox is
counted): how many and from whom, never a title or a body, never another
agent's. ``memory_briefing`` is driven by the official MCP client over
streamable HTTP; the channel by the bridge harness of ``test_bridge.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client.extension import ClientExtension, NotificationBinding

from tests.cluster.harness import Cluster
from tests.mcp.conftest import ok
from tests.mcp.test_bridge import ChannelParams, _until, bridge
from tests.mcp.test_http_cluster import mcp

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

KEYS = {"key-alice": "alice", "key-bob": "bob", "key-carol": "carol", "key-erin": "erin"}
TITLE, BODY = "TITLE WORDS", "SECRET NOTE BODY"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("notices-cluster")
    config = tmp / "auth.toml"
    config.write_text("[auth]\nrequire_api_key = true\n[auth.api_keys]\n"
                      + "".join(f'"{k}" = "{v}"\n' for k, v in KEYS.items()))
    c = Cluster(tmp)
    for p in c.procs.values():
        p.extra_env["AI_MEMORY_CONFIG"] = str(config)
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


def start_session(c: Cluster, project: str) -> str:
    sid = str(uuid.uuid4())
    status, body = c.call("node1", "POST", "/api/v1/sessions",
                          {"workspace": "default", "project": project, "harness": "claude-code",
                           "session_id": sid}, headers={"X-API-Key": "key-alice"})
    assert status == 201, body
    return sid


def notify(c: Cluster, node: str, key: str, to: str) -> str:
    status, body = c.call(node, "POST", "/api/v1/notify",
                          {"target_agent_id": to, "title": TITLE, "payload": BODY},
                          headers={"X-API-Key": key})
    assert status == 201, body
    return str(body["id"])


async def test_memory_briefing_counts_the_callers_unread_notifications(keyed: Cluster) -> None:
    project = f"brief-{uuid.uuid4().hex[:8]}"
    start_session(keyed, project)
    scope = {"workspace": "default", "project": project}
    async with mcp(keyed.url("node2"), **{"X-API-Key": "key-carol"}) as client:
        before = ok(await client.call_tool("memory_briefing", scope))
    assert before["unread_notification_count"] == 0 and before["notification_senders"] == []
    notify(keyed, "node1", "key-alice", "carol")  # acknowledged by node1 and one other
    notify(keyed, "node3", "key-erin", "carol")
    notify(keyed, "node1", "key-alice", "carol")
    notify(keyed, "node1", "key-alice", "bob")
    async with mcp(keyed.url("node2"), **{"X-API-Key": "key-carol"}) as client:
        brief = ok(await client.call_tool("memory_briefing", scope))
    assert brief["scope"] == {**scope, "source": "explicit"}
    assert brief["pending_message_count"] == 0
    assert brief["unread_notification_count"] == 3
    assert brief["notification_agent"] == "carol"
    assert brief["notification_senders"] == ["alice", "erin"]
    assert TITLE not in json.dumps(brief) and BODY not in json.dumps(brief)
    # The key decides whose inbox: bob's key counts bob's one, and names bob.
    async with mcp(keyed.url("node3"), **{"X-API-Key": "key-bob"}) as client:
        theirs = ok(await client.call_tool("memory_briefing", scope))
    assert (theirs["unread_notification_count"], theirs["notification_agent"]) == (1, "bob")


class Channel(ClientExtension):
    """Claude Code's side of the channel: the pushed texts and their meta."""

    identifier = "com.example/claude-channel-notices"

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []

    def notifications(self) -> list[NotificationBinding[Any]]:
        async def seen(params: ChannelParams) -> None:
            self.seen.append((params.content, dict(params.meta or {})))

        return [NotificationBinding(method="notifications/claude/channel",
                                    params_type=ChannelParams, handler=seen)]


async def test_the_bridge_channel_pushes_the_agents_notification_count(
        keyed: Cluster, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    bob = "bob"
    sid = start_session(keyed, f"chan-{suffix}")
    # bob's inbox as it stands (the module's other test may have written to it)
    status, inbox = keyed.call("node1", "GET", "/api/v1/inbox?agent_id=bob",
                               headers={"X-API-Key": "key-bob"})
    assert status == 200, inbox
    ids = [m["id"] for m in inbox["messages"]]
    if ids:
        status, body = keyed.call("node1", "POST", "/api/v1/inbox/read", {"ids": ids},
                                  headers={"X-API-Key": "key-bob"})
        assert status == 200, body
    channel = Channel()
    urls = ",".join(keyed.url(n) for n in ("node1", "node2"))
    async with bridge(tmp_path, ["--url", urls, "--api-key", "key-bob", "--channel", "inbox",
                                 "--poll-fast-secs", "0.2", "--poll-slow-secs", "0.8"],
                      {"CLAUDE_CODE_SESSION_ID": sid}, channel) as b:
        await b.list_tools()  # the channel starts once the harness has spoken
        notify(keyed, "node3", "key-alice", bob)
        await _until(lambda: len(channel.seen) >= 1)
        text, meta = channel.seen[0]
        assert f"1 unread notification for agent {bob} (from alice)" in text
        assert meta["notifications"] == "1" and meta["count"] == "0"
        notify(keyed, "node1", "key-alice", "carol")  # not bob's: nothing new for bob
        notify(keyed, "node2", "key-erin", bob)
        await _until(lambda: len(channel.seen) >= 2)
        text, meta = channel.seen[1]
        assert "2 unread notifications" in text and "(from alice, erin)" in text
        assert meta["notifications"] == "2"
    assert all(TITLE not in t and BODY not in t for t, _ in channel.seen)
    assert all("carol" not in t for t, _ in channel.seen)
