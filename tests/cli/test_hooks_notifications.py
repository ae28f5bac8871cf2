"""The session-start and prompt hooks count the agent's unread notifications
too, against a real node process: how many and from whom, never a title or
a body, and only the hook's own agent's (``AI_MEMORY_AGENT_ID``)."""

from __future__ import annotations

import json
import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from tests.cli.test_hooks import project_dir, run_hook, send
from tests.mcp.test_stdio_e2e import Node, _http

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = Node(tmp_path_factory.mktemp("hook-notify-node"))
    n.start()
    try:
        yield n
    finally:
        n.stop()


def notify(node: Node, to: str, sender: str, title: str = "TITLE WORDS",
           body: str = "SECRET NOTE BODY") -> str:
    status, reply = _http("POST", node.url + "/api/v1/notify",
                          {"target_agent_id": to, "title": title, "payload": body}, agent=sender)
    assert status == 201, reply
    return str(reply["id"])


def mark_read(node: Node, agent: str, ids: list[str]) -> None:
    status, reply = _http("POST", node.url + "/api/v1/inbox/read", {"ids": ids}, agent=agent)
    assert status == 200, reply


def test_session_start_counts_the_agents_unread_notifications(served: Node,
                                                               tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    bob, proj = f"bob-{suffix}", f"p-{suffix}"
    here = project_dir(tmp_path, proj)
    event = {"session_id": str(uuid.uuid4()), "cwd": str(here),
             "hook_event_name": "SessionStart", "source": "startup"}
    as_bob = {"AI_MEMORY_AGENT_ID": bob}

    def start(env: dict[str, str] | None = as_bob) -> str:
        done = run_hook(served.url, ["session-start", "--harness", "claude-code"], event,
                        tmp_path / "s", env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert start() == ""  # nothing unread, no mail
    notify(served, bob, "alice")
    notify(served, bob, "carol")
    notify(served, bob, "alice")
    notify(served, f"dave-{suffix}", "alice")  # someone else's inbox
    out = start()
    assert f"3 unread notifications for agent {bob} (from alice, carol)" in out
    assert "memory_inbox" in out and "untrusted input" in out
    assert "SECRET NOTE BODY" not in out and "TITLE WORDS" not in out
    assert "cross-project" not in out  # no mail: only the notifications line
    assert start(env={}) == ""  # no agent named: no inbox is counted

    other = f"o-{suffix}"
    served.start_session("default", other, "kimi")
    send(served, proj, other)  # mail and notifications: both lines
    both = start()
    assert f"1 cross-project message waiting in the default/{proj} inbox" in both
    assert f"3 unread notifications for agent {bob}" in both


def test_prompt_speaks_again_when_the_notification_count_changes(served: Node,
                                                                 tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    bob, proj = f"bob-{suffix}", f"q-{suffix}"
    here = project_dir(tmp_path, proj, on_prompt=True)
    sid = str(uuid.uuid4())
    state = tmp_path / "state"
    as_bob = {"AI_MEMORY_AGENT_ID": bob}
    assert run_hook(served.url, ["session-start", "--harness", "claude-code"],
                    {"session_id": sid, "cwd": str(here)}, state, env=as_bob).returncode == 0

    def prompt() -> str:
        done = run_hook(served.url, ["prompt", "--harness", "claude-code"],
                        {"session_id": sid, "cwd": str(here), "prompt": "go on",
                         "hook_event_name": "UserPromptSubmit"}, state, env=as_bob)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert prompt() == ""
    first = notify(served, bob, "alice")
    assert f"1 unread notification for agent {bob} (from alice)" in prompt()
    assert prompt() == ""  # same count: not repeated
    second = notify(served, bob, "erin")
    said = prompt()
    assert "2 unread notifications" in said and "(from alice, erin)" in said
    assert "SECRET NOTE BODY" not in said
    mark_read(served, bob, [first, second])
    assert prompt() == ""  # all read: nothing to say
    notify(served, bob, "alice")
    assert "1 unread notification for agent" in prompt()


def test_install_hooks_names_the_agent_in_every_entry(tmp_path: Path) -> None:
    """``ai-memory --agent-id bob install-hooks``: hooks and bridge count bob's notifications
    whatever the harness's environment holds."""
    done = CliRunner().invoke(cli, ["--agent-id", "bob", "install-hooks", "--harness",
                                    "claude-code", "--dir", str(tmp_path), "--write", "--exe",
                                    "aim", "--url", "http://127.0.0.1:9077"],
                              env={"AI_MEMORY_CA_CERT": ""})
    assert done.exit_code == 0, done.output
    hooks = json.loads((tmp_path / ".claude" / "settings.json").read_text())["hooks"]
    for event in ("SessionStart", "UserPromptSubmit"):
        [command] = [h["command"] for g in hooks[event] for h in g["hooks"]]
        assert shlex.split(command)[:4] == ["aim", "--agent-id", "bob", "hook"], command
    bridge = json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]["ai-memory"]
    assert bridge["args"] == ["mcp-bridge", "--url", "http://127.0.0.1:9077", "--agent-id", "bob"]
