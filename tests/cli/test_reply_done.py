"""`ai-memory message reply|done`, `message list --thread/--all`, `notify
--reply-to` and `inbox --thread` against one real daemon process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from cli.main import cli
from tests.daemon.procdaemon import daemon_process

A = ["--workspace", "default", "--project", "proj-a"]
B = ["--workspace", "default", "--project", "proj-b"]


def test_reply_done_and_threads_from_the_command_line(tmp_path: Path) -> None:
    with daemon_process(tmp_path / "d") as proc:
        def run(*args: str, agent: str | None = None, code: int = 0) -> str:
            head = ["--url", proc.url] + (["--agent-id", agent] if agent else [])
            result = CliRunner().invoke(cli, [*head, *args])
            assert result.exit_code == code, result.output
            return result.output

        def run_json(*args: str, agent: str | None = None) -> Any:
            return json.loads(run(*args, "--json", agent=agent))

        for scope, harness in ((A, "kimi"), (B, "claude-code")):
            run("session", "start", *scope, "--harness", harness)
        sent = run_json("message", "send", "--to-workspace", "default", "--to-project",
                        "proj-b", "--from-workspace", "default", "--from-project", "proj-a",
                        "--subject", "export", "add an NDJSON export")
        mid = sent["message_id"]
        popped = run_json("message", "pop", *B, agent="worker")
        assert popped["message"]["id"] == mid

        # only the claimer completes: another agent is refused
        run("message", "done", mid, "--result", "done", agent="intruder", code=2)  # 403
        out = run("message", "done", mid, "--result", "blocked", "--note", "needs a schema",
                  agent="worker")
        assert f"completed {mid}: blocked" in out
        run("message", "done", mid, "--result", "done", agent="worker", code=4)  # 409

        listed = run("message", "list", "--outbox", "--all", *A)
        assert f"[claimed] {mid}" in listed
        assert "completed: blocked" in listed and "needs a schema" in listed

        answer = run_json("message", "reply", mid, "which schema?")
        assert answer["to_project"] == "proj-a" and answer["thread_id"] == mid
        thread = run_json("message", "list", *A, "--thread", mid)
        assert [m["id"] for m in thread["messages"]] == [answer["message_id"]]
        assert thread["messages"][0]["subject"] == "Re: export"
        shown = run("message", "list", *A, "--thread", mid)
        assert f"in reply to {mid} (thread {mid})" in shown

        note = run_json("notify", "bob", "ping", "--title", "review?", agent="alice")
        back = run("notify", "--reply-to", note["id"], "pong", "--title", "re", agent="bob")
        assert "notified alice" in back and f"in reply to {note['id']}" in back
        inbox = run_json("inbox", "--thread", note["id"], agent="alice")
        assert [m["in_reply_to"] for m in inbox["messages"]] == [note["id"]]
