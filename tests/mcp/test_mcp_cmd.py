"""``ai-memory mcp`` option handling: flags, environment, root-group state, project file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import daemon.mcp.server
from cli.mcp_cmd import mcp
from cli.state import CliState
from daemon.mcp.settings import McpSettings

ENV_VARS = (
    "AI_MEMORY_URL", "AI_MEMORY_AGENT_ID", "AI_MEMORY_API_KEY", "AI_MEMORY_SESSION_ID",
    "AI_MEMORY_WORKSPACE", "AI_MEMORY_PROJECT",
)  # fmt: skip


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[McpSettings]:
    """Settings the command would serve with (the stdio loop itself is not run)."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    runs: list[McpSettings] = []
    monkeypatch.setattr(daemon.mcp.server, "run_stdio", runs.append)
    return runs


def test_flags_become_settings(started: list[McpSettings]) -> None:
    result = CliRunner().invoke(mcp, [
        "--url", "http://127.0.0.1:9100", "--agent-id", "alice", "--api-key", "k",
        "--session-id", "s-1", "--workspace", "default", "--project", "b"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output == ""  # stdout belongs to the protocol
    assert started == [McpSettings(url="http://127.0.0.1:9100", agent_id="alice", api_key="k",
                                   session_id="s-1", workspace="default", project="b")]  # fmt: skip


def test_environment_and_root_state_fill_the_gaps(
    started: list[McpSettings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AI_MEMORY_SESSION_ID", "s-env")
    monkeypatch.setenv("AI_MEMORY_WORKSPACE", "ws")
    monkeypatch.setenv("AI_MEMORY_PROJECT", "pr")
    state = CliState(url="http://127.0.0.1:9200", agent_id="root-agent", api_key="rk")
    result = CliRunner().invoke(mcp, [], obj=state)
    assert result.exit_code == 0, result.output
    [settings] = started
    assert (settings.url, settings.agent_id, settings.api_key) == (
        "http://127.0.0.1:9200", "root-agent", "rk")  # fmt: skip
    assert (settings.session_id, settings.workspace, settings.project) == ("s-env", "ws", "pr")


def test_project_file_names_the_project(started: list[McpSettings], tmp_path: Path) -> None:
    (tmp_path / ".ai-memory.toml").write_text('[project]\nworkspace = "default"\nname = "repo"\n')
    result = CliRunner().invoke(mcp, ["--url", "http://127.0.0.1:9300"])
    assert result.exit_code == 0, result.output
    assert (started[0].workspace, started[0].project) == ("default", "repo")


def test_no_project_anywhere_leaves_the_scope_to_the_node(started: list[McpSettings]) -> None:
    result = CliRunner().invoke(mcp, [])
    assert result.exit_code == 0, result.output
    assert started[0].workspace is None and started[0].project is None
    assert started[0].url == "http://127.0.0.1:9077"


def test_half_a_project_is_a_usage_error(started: list[McpSettings]) -> None:
    result = CliRunner().invoke(mcp, ["--workspace", "default"])
    assert result.exit_code == 2
    assert "--project" in result.output
    assert started == []
