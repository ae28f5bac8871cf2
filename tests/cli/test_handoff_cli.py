"""``ai-memory handoff write|accept`` and the SessionStart hook's handoff and brief,
against a real ``ai-memory serve`` process."""

from __future__ import annotations

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
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = Node(tmp_path_factory.mktemp("handoff-node"))
    n.start()
    try:
        yield n
    finally:
        n.stop()


def cli_in(node: Node, cwd: Path, *args: str, input: str | None = None) -> tuple[int, str, str]:
    """``ai-memory --url NODE ARGS`` run in ``cwd`` (where its .ai-memory.toml is)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        result = CliRunner().invoke(cli, ["--url", node.url, *args], input=input)
    return result.exit_code, result.stdout, result.stderr


def test_write_then_accept_once(node: Node, tmp_path: Path) -> None:
    proj = f"p-{uuid.uuid4().hex[:8]}"
    here = project_dir(tmp_path, proj)
    node.start_session("default", proj, "codex")
    code, out, err = cli_in(node, here, "handoff", "write", "--subject", "auth refactor",
                            "JWT rotation is broken; try session cookies.")
    assert code == 0, err
    assert f"left for the next session of default/{proj}" in out
    code, out, err = cli_in(node, here, "handoff", "write", input="the newer state\n")
    assert code == 0 and "(replaces 1 pending)" in out, (out, err)

    code, out, err = cli_in(node, here, "handoff", "accept", "--json")
    assert code == 0, err
    assert '"body": "the newer state"' in out
    code, out, err = cli_in(node, here, "handoff", "accept")
    assert code == 0 and out == "" and "no pending handoff" in err


def test_write_refuses_a_guessed_project(node: Node, tmp_path: Path) -> None:
    code, out, err = cli_in(node, tmp_path, "handoff", "write", "where am I?")
    assert code == 4, (out, err)
    assert "no project was named, so nothing was stored" in err


def test_the_session_start_hook_prints_the_handoff_once_and_the_brief(
        node: Node, tmp_path: Path) -> None:
    proj, other = f"p-{uuid.uuid4().hex[:8]}", f"o-{uuid.uuid4().hex[:8]}"
    here = project_dir(tmp_path, proj)
    node.start_session("default", proj, "claude-code")
    node.start_session("default", other, "kimi")
    status, reply = _http("POST", node.url + "/api/v1/memories", {
        "title": "Deploy rule", "content": "Never deploy on Fridays.", "tier": "long",
        "namespace": f"default/{proj}/_rules"})
    assert status == 201, reply
    code, _, err = cli_in(node, here, "handoff", "write", "Half-way through the export.")
    assert code == 0, err
    send(node, proj, other)
    event = {"session_id": str(uuid.uuid4()), "cwd": str(here),
             "hook_event_name": "SessionStart", "source": "startup"}

    first = run_hook(node.url, ["session-start", "--harness", "claude-code"], event,
                     tmp_path / "s")
    assert first.returncode == 0, first.stderr
    assert "Half-way through the export." in first.stdout
    assert "Never deploy" not in first.stdout  # the project has not opted in to the brief
    assert "1 cross-project message" in first.stdout

    with (here / ".ai-memory.toml").open("a") as toml:
        toml.write("[briefing]\ninject_on_session_start = true\n")
    again = run_hook(node.url, ["session-start", "--harness", "claude-code"],
                     {**event, "session_id": str(uuid.uuid4())}, tmp_path / "s")
    assert again.returncode == 0, again.stderr
    assert "Half-way" not in again.stdout  # claimed once, by the first session
    assert f"# Project brief: default/{proj}" in again.stdout
    assert "Never deploy on Fridays." in again.stdout
    assert again.stdout.index("Never deploy") < again.stdout.index("cross-project message")
