"""agents, session, memories, health and --version against a stub daemon."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from click.testing import CliRunner, Result

from cli.main import cli
from common import __version__
from tests.cli.stub import StubDaemon

Run = Callable[..., Result]


def test_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"ai-memory {__version__}"


def test_help_does_not_need_a_daemon() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for command in ("notify", "inbox", "message", "cluster", "agents", "session", "memories"):
        assert command in result.stdout


def test_health(stub: StubDaemon, run: Run) -> None:
    stub.reply(
        "GET",
        "/api/v1/health",
        {
            "status": "ok",
            "service": "ai-memory",
            "version": "0.1.0",
            "node_id": "node1",
            "federation_enabled": True,
        },
    )
    result = run("health")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: ai-memory 0.1.0 node node1 (federated)")


def test_agents_register_and_list(stub: StubDaemon, run: Run) -> None:
    stub.reply(
        "POST",
        "/api/v1/agents",
        {"agent_id": "codex-1", "agent_type": "codex", "capabilities": ["rust", "review"]},
        status=201,
    )
    result = run(
        "agents",
        "register",
        "codex-1",
        "--type",
        "codex",
        "--capability",
        "rust",
        "--capability",
        "review",
    )
    assert result.exit_code == 0, result.output
    assert stub.last().body == {
        "agent_id": "codex-1",
        "agent_type": "codex",
        "capabilities": ["rust", "review"],
    }
    assert stub.last().headers["X-Agent-Id"] == "codex-1"
    stub.reply(
        "GET",
        "/api/v1/agents",
        {
            "count": 1,
            "agents": [
                {
                    "agent_id": "codex-1",
                    "agent_type": "codex",
                    "capabilities": ["rust", "review"],
                    "registered_at": "2026-11-30T00:00:00Z",
                    "last_seen_at": None,
                }
            ],
        },
    )
    result = run("agents", "list")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["AGENT", "TYPE", "CAPABILITIES", "REGISTERED", "LAST", "SEEN"]
    assert lines[1].split() == ["codex-1", "codex", "rust,review", "2026-11-30T00:00:00Z", "-"]


def test_session_start_defaults_session_id_and_uses_scope(stub: StubDaemon, run: Run) -> None:
    stub.reply(
        "POST",
        "/api/v1/sessions",
        {
            "workspace": "default",
            "project": "b",
            "harness": "codex",
            "session_id": "s",
            "created": True,
        },
        status=201,
    )
    result = run(
        "session",
        "start",
        "--harness",
        "codex",
        env={"AI_MEMORY_WORKSPACE": "default", "AI_MEMORY_PROJECT": "b"},
    )
    assert result.exit_code == 0, result.output
    body = stub.last().body
    assert body["workspace"] == "default" and body["project"] == "b" and body["harness"] == "codex"
    assert len(body["session_id"]) == 36
    assert "started session s (codex) in default/b" in result.stdout


def test_session_start_without_project_is_a_usage_error(stub: StubDaemon, run: Run) -> None:
    result = run("session", "start", "--harness", "codex")
    assert result.exit_code == 2
    assert stub.requests == []


MEMORY = {
    "id": "mem-1",
    "tier": "mid",
    "namespace": "notes",
    "title": "Deploy steps",
    "content": "1. build\n2. ship",
    "tags": ["ops"],
    "priority": 6,
    "confidence": 1.0,
    "source": "cli",
    "access_count": 0,
    "created_at": "2026-11-30T00:00:00Z",
    "updated_at": "2026-11-30T00:00:00Z",
    "last_accessed_at": None,
    "expires_at": None,
    "metadata": {},
}


def test_memories_store_sends_fields(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/memories", MEMORY, status=201)
    result = run(
        "--agent-id",
        "alice",
        "memories",
        "store",
        "--title",
        "Deploy steps",
        "--tier",
        "mid",
        "--namespace",
        "notes",
        "--tag",
        "ops",
        "--priority",
        "6",
        "--metadata",
        '{"k": 1}',
        input="1. build\n2. ship\n",
    )
    assert result.exit_code == 0, result.output
    assert stub.last().body == {
        "title": "Deploy steps",
        "content": "1. build\n2. ship",
        "tier": "mid",
        "namespace": "notes",
        "tags": ["ops"],
        "priority": 6,
        "metadata": {"k": 1},
        "agent_id": "alice",
    }
    assert result.stdout == "stored mem-1 (mid, notes)\n"


def test_memories_store_rejects_bad_metadata(stub: StubDaemon, run: Run) -> None:
    result = run("memories", "store", "--title", "t", "--metadata", "[1]", "x")
    assert result.exit_code == 2
    assert stub.requests == []


def test_memories_list_get_promote_delete(stub: StubDaemon, run: Run) -> None:
    stub.reply("GET", "/api/v1/memories", {"memories": [MEMORY], "count": 1})
    result = run("memories", "list", "--tier", "mid", "--tag", "a", "--tag", "b", "--limit", "3")
    assert result.exit_code == 0, result.output
    assert stub.last().query == {"tier": "mid", "tags": "a,b", "limit": "3"}
    assert "mem-1" in result.stdout and "Deploy steps" in result.stdout

    stub.reply("GET", "/api/v1/memories/mem-1", MEMORY)
    result = run("memories", "get", "mem-1")
    assert "    1. build\n    2. ship" in result.stdout

    stub.reply("POST", "/api/v1/memories/mem-1/promote", {**MEMORY, "tier": "long"})
    assert run("memories", "promote", "mem-1").stdout == "promoted mem-1\n"

    stub.reply("DELETE", "/api/v1/memories/mem-1", {"deleted": True})
    result = run("memories", "delete", "mem-1", "--json")
    assert json.loads(result.stdout) == {"deleted": True}


def test_memories_get_missing_exits_3(stub: StubDaemon, run: Run) -> None:
    stub.reply(
        "GET", "/api/v1/memories/nope", {"error": "no memory nope", "code": "not_found"}, status=404
    )
    result = run("memories", "get", "nope")
    assert result.exit_code == 3
    assert result.stderr == "error: no memory nope (not_found, HTTP 404)\n"
