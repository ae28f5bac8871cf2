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


def test_a_leased_pop_renews_lapses_and_is_popped_again(tmp_path: Path) -> None:
    import time
    with daemon_process(tmp_path / "d") as proc:
        def run(*args: str, agent: str | None = None, code: int = 0) -> str:
            head = ["--url", proc.url] + (["--agent-id", agent] if agent else [])
            result = CliRunner().invoke(cli, [*head, *args])
            assert result.exit_code == code, result.output
            return result.output

        for scope, harness in ((A, "kimi"), (B, "claude-code")):
            run("session", "start", *scope, "--harness", harness)
        sent = json.loads(run("message", "send", "--to-workspace", "default", "--to-project",
                              "proj-b", "--from-workspace", "default", "--from-project",
                              "proj-a", "--subject", "job", "run the job", "--json"))
        mid = sent["message_id"]
        out = run("message", "pop", *B, "--lease", "2", agent="worker")
        assert f"claimed {mid}" in out and "claim token" in out
        token = out.split("claim token ")[1].split()[0]
        assert f"ai-memory message done {mid} --token {token}" in out
        # done without the token of a leased claim: a clear 400
        refused = run("message", "done", mid, "--result", "done", agent="worker", code=2)
        assert "claim_token" in refused
        assert "lease until" in run("message", "renew", mid, "--token", token, "--lease", "1")
        time.sleep(2.6)  # lapsed: the owner put it back in the queue
        lost = run("message", "renew", mid, "--token", token, code=4)
        assert "lease_lost" in lost or "lease on message" in lost
        again = json.loads(run("message", "pop", *B, "--lease", "60", "--json", agent="w2"))
        assert again["message"]["id"] == mid and again["message"]["delivery"] == 2
        second = again["message"]["claim_token"]
        run("message", "done", mid, "--result", "done", "--token", token, code=4)
        assert f"completed {mid}: done" in run("message", "done", mid, "--result", "done",
                                                "--token", second, "--note", "ok")
        listed = run("message", "list", "--outbox", "--all", *A)
        assert f"[claimed] {mid}" in listed and "completed: done" in listed
