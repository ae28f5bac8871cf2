"""`ai-memory session start` against one real daemon process: what it prints
for a new session, in a new project and in one that already exists, and for
a session announced again."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from cli.main import cli
from tests.daemon.procdaemon import daemon_process


def test_a_new_session_in_an_existing_project_prints_started(tmp_path: Path) -> None:
    with daemon_process(tmp_path / "d") as proc:
        def start(session_id: str, harness: str) -> str:
            result = CliRunner().invoke(cli, [
                "--url", proc.url, "session", "start", "--workspace", "default",
                "--project", "proj", "--harness", harness, "--session-id", session_id])
            assert result.exit_code == 0, result.output
            return result.output

        assert "started session s-1 (kimi) in default/proj" in start("s-1", "kimi")
        # The project exists now: a second, new session in it is started, not resumed.
        assert "started session s-2 (codex) in default/proj" in start("s-2", "codex")
        assert "resumed session s-2 (codex) in default/proj" in start("s-2", "codex")
