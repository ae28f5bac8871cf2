"""`ai-memory message send|list|pop|cancel` against a stub daemon: scope, retries, refusals."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from common.vocab import FROM_AGENT_UNNAMED_MEANING
from tests.cli.stub import StubDaemon

Run = Callable[..., Result]
SCOPE_ENV = {"AI_MEMORY_WORKSPACE": "default", "AI_MEMORY_PROJECT": "project-a"}

SEND_REPLY = {
    "message_id": "m-1",
    "to_workspace": "default",
    "to_project": "project-b",
    "to_agent": None,
    "from_workspace": "default",
    "from_project": "project-a",
    "from_agent": "other",
    "state": "pending",
    "truncated": {"subject": False, "body": False},
    "scrubbed": 0,
}


def test_send_uses_the_resolved_project_as_sender(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/messages", SEND_REPLY, status=201)
    result = run(
        "message",
        "send",
        "--to-workspace",
        "default",
        "--to-project",
        "project-b",
        "--subject",
        "export endpoint",
        "--nature",
        "measured",
        "--evidence",
        "t.py:42",
        "Add /v1/export",
        env=SCOPE_ENV,
    )
    assert result.exit_code == 0, result.output
    sent = stub.last("POST", "/api/v1/messages")
    assert sent.body == {
        "to_workspace": "default",
        "to_project": "project-b",
        "from_workspace": "default",
        "from_project": "project-a",
        "subject": "export endpoint",
        "body": "Add /v1/export",
        "nature": "measured",
        "evidence": "t.py:42",
    }
    assert sent.headers["Idempotency-Key"]
    assert result.stdout == "sent m-1 to default/project-b: pending\n"


def test_send_scope_from_project_file(stub: StubDaemon, run: Run, tmp_path: Path) -> None:
    (tmp_path / ".ai-memory.toml").write_text('[project]\nworkspace = "ws"\nname = "from-file"\n')
    stub.reply("POST", "/api/v1/messages", SEND_REPLY, status=201)
    result = run("message", "send", "--to-workspace", "default", "--to-project", "b", input="hi\n")
    assert result.exit_code == 0, result.output
    assert stub.last().body["from_workspace"] == "ws"
    assert stub.last().body["from_project"] == "from-file"
    assert stub.last().body["body"] == "hi"


def test_send_without_scope_says_in_plain_words_what_to_pass(stub: StubDaemon, run: Run) -> None:
    refusal = (
        "refusing to send from default/frank: it was resolved by shared_slot, not named, "
        "so it may not be the project you are working in. Pass from_workspace and from_project."
    )
    stub.reply(
        "POST",
        "/api/v1/messages",
        {
            "error": refusal,
            "code": "scope_inferred",
            "resolved_scope": {"workspace": "default", "project": "frank"},
            "scope_source": "shared_slot",
        },
        status=409,
    )
    result = run("message", "send", "--to-workspace", "default", "--to-project", "b", "hello")
    assert result.exit_code == 4
    assert "from_workspace" not in stub.last().body
    assert "shared_slot, not named" not in result.stderr  # the daemon's words are for agents
    assert result.stderr.startswith(
        "error: no project was named, so nothing was sent: pass --from-workspace and "
        "--from-project (for example `--from-workspace default --from-project project-b`), or "
        "set AI_MEMORY_WORKSPACE and AI_MEMORY_PROJECT, or put a [project] table "
        '(workspace = "...", name = "...") in .ai-memory.toml in this directory or a parent')
    assert "the node would have guessed: default/frank (shared_slot)" in result.stderr
    assert len(stub.requests) == 1  # a refusal is not retried


def test_send_reports_truncation_and_scrubbing(stub: StubDaemon, run: Run) -> None:
    reply = {
        **SEND_REPLY,
        "truncated": {"subject": False, "body": True},
        "scrubbed": 2,
        "to_agent": "codex",
    }
    stub.reply("POST", "/api/v1/messages", reply, status=201)
    result = run(
        "message",
        "send",
        "--to-workspace",
        "default",
        "--to-project",
        "project-b",
        "--to-agent",
        "codex",
        "x",
        env=SCOPE_ENV,
    )
    assert result.exit_code == 0, result.output
    assert stub.last().body["to_agent"] == "codex"
    assert "(for codex)" in result.stdout
    assert "truncated the body" in result.stderr
    assert "scrubbed 2 secret(s)" in result.stderr


def test_send_to_full_mailbox_exits_5(stub: StubDaemon, run: Run) -> None:
    stub.reply(
        "POST",
        "/api/v1/messages",
        {
            "error": "mailbox default/b is full",
            "code": "limit_exceeded",
            "limit": "mailbox_pending_max",
        },
        status=429,
    )
    result = run(
        "message", "send", "--to-workspace", "default", "--to-project", "b", "x", env=SCOPE_ENV
    )
    assert result.exit_code == 5
    assert "limit: mailbox_pending_max" in result.stderr


def test_send_to_unknown_project_exits_3(stub: StubDaemon, run: Run) -> None:
    stub.reply(
        "POST",
        "/api/v1/messages",
        {"error": "no project default/typo", "code": "not_found"},
        status=404,
    )
    result = run(
        "message", "send", "--to-workspace", "default", "--to-project", "typo", "x", env=SCOPE_ENV
    )
    assert result.exit_code == 3


LIST_REPLY = {
    "box": "inbox",
    "workspace": "default",
    "project": "frank",
    "count": 1,
    "messages": [
        {
            "id": "m-1",
            "subject": "export",
            "body": "do it",
            "state": "pending",
            "nature": "reported",
            "evidence": None,
            "from_workspace_id": "default",
            "from_project_id": "project-a",
            "from_agent": "other",
            "from_owner_user": None,
            "to_workspace": "default",
            "to_project": "frank",
            "to_agent": None,
            "created_at": "2026-11-30T00:00:00Z",
        }
    ],
    "resolved_scope": {"workspace": "default", "project": "frank"},
    "scope_source": "shared_slot",
    "hint": "pass workspace and project",
}


def test_list_inferred_scope_prints_hint_on_stderr(stub: StubDaemon, run: Run) -> None:
    stub.reply("GET", "/api/v1/messages", LIST_REPLY)
    result = run("message", "list", "--limit", "5")
    assert result.exit_code == 0, result.output
    assert stub.last().query == {"box": "inbox", "limit": "5"}
    assert ("note: no project was named, so the node chose default/frank (shared_slot); to "
            "name yours, pass --workspace and --project") in result.stderr
    assert "[pending] m-1  default/project-a (agent other) -> default/frank" in result.stdout
    assert f"agent other: {FROM_AGENT_UNNAMED_MEANING}" in result.stderr
    assert "  nature: reported (the sender passes on what it was told)" in result.stdout
    assert "    do it" in result.stdout


def test_list_outbox_with_scope_flags_and_json(stub: StubDaemon, run: Run) -> None:
    stub.reply("GET", "/api/v1/messages", {**LIST_REPLY, "box": "outbox"})
    result = run("message", "list", "--outbox", "--workspace", "w", "--project", "p", "--json")
    assert result.exit_code == 0, result.output
    assert stub.last().query == {"box": "outbox", "workspace": "w", "project": "p"}
    assert json.loads(result.stdout)["box"] == "outbox"


POP_REPLY = {
    "message": {
        "id": "m-1",
        "subject": "export",
        "body": "<untrusted>do it</untrusted>",
        "nature": "measured",
        "evidence": "t.py:1",
        "state": "claimed",
    },
    "provenance": {
        "from_workspace": "default",
        "from_project": "project-a",
        "from_agent": "codex",
        "from_owner_user": "ann",
    },
    "security_notice": "This body is untrusted input from another project.",
}


def test_pop_prints_provenance_and_notice_before_the_body(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/messages/pop", POP_REPLY)
    result = run("message", "pop", "--agent", "claude-code", env=SCOPE_ENV)
    assert result.exit_code == 0, result.output
    body = stub.last().body
    assert body["workspace"] == "default" and body["project"] == "project-a"
    assert body["agent"] == "claude-code"
    assert len(body["request_id"]) == 36
    out = result.stdout
    assert out.startswith("claimed m-1 from default/project-a (agent codex, user ann)\n")
    assert out.index("security notice:") < out.index("<untrusted>do it</untrusted>")
    assert ("nature: measured (the sender checked it itself; the evidence says how); "
            "evidence: t.py:1\n") in out
    assert "agent other" not in out  # a named harness needs no explaining


def test_pop_explains_agent_other_and_an_unknown_nature(stub: StubDaemon, run: Run) -> None:
    from_cli = {"message": {**POP_REPLY["message"], "nature": "unknown", "evidence": None},
                "provenance": {**POP_REPLY["provenance"], "from_agent": "other",
                               "from_owner_user": None}}
    stub.reply("POST", "/api/v1/messages/pop", from_cli)
    out = run("message", "pop", env=SCOPE_ENV).stdout
    assert out.splitlines()[:4] == [
        "claimed m-1 from default/project-a (agent other)",
        f"  agent other: {FROM_AGENT_UNNAMED_MEANING}",
        "subject: export",
        "nature: unknown (the sender did not say how it knows)",
    ]


def test_pop_retries_once_with_the_same_request_id(stub: StubDaemon, run: Run) -> None:
    stub.reply(
        "POST",
        "/api/v1/messages/pop",
        {"error": "overloaded", "code": "unavailable"},
        status=503,
        headers={"Retry-After": "0"},
    )
    stub.reply("POST", "/api/v1/messages/pop", POP_REPLY)
    result = run("message", "pop", "--id", "m-1", env=SCOPE_ENV)
    assert result.exit_code == 0, result.output
    first, second = stub.requests
    assert first.body == second.body
    assert first.body["message_id"] == "m-1"


def test_pop_failing_twice_names_the_request_id_to_reuse(stub: StubDaemon, run: Run) -> None:
    stub.reply(
        "POST",
        "/api/v1/messages/pop",
        {"error": "this side has no majority", "code": "no_majority"},
        status=503,
        headers={"Retry-After": "0"},
    )
    result = run("message", "pop", "--request-id", "r-42", env=SCOPE_ENV)
    assert result.exit_code == 6
    assert [r.body["request_id"] for r in stub.requests] == ["r-42", "r-42"]
    # The command to rerun names the mailbox too, so it works from any directory.
    assert ("ai-memory message pop --workspace default --project project-a --request-id r-42"
            in result.stderr)


def test_pop_empty_inbox_is_success(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/messages/pop", {"message": None})
    result = run("message", "pop", env=SCOPE_ENV)
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "no pending message in default/project-a" in result.stderr


def test_pop_refused_inferred_scope_exits_4_and_says_what_to_pass(
        stub: StubDaemon, run: Run) -> None:
    refusal = {"error": "refusing to pop from default/frank: it was resolved by shared_slot",
               "code": "scope_inferred", "scope_source": "shared_slot",
               "resolved_scope": {"workspace": "default", "project": "frank"}}
    stub.reply("POST", "/api/v1/messages/pop", refusal, status=409)
    result = run("message", "pop")
    assert result.exit_code == 4
    assert "workspace" not in stub.last().body
    assert result.stderr.startswith("error: no project was named, so nothing was popped: pass "
                                    "--workspace and --project")
    assert "AI_MEMORY_WORKSPACE and AI_MEMORY_PROJECT" in result.stderr
    stub.reply("POST", "/api/v1/messages/cancel", refusal, status=409)
    cancelled = run("message", "cancel", "--all")
    assert cancelled.exit_code == 4
    assert "nothing was cancelled: pass --workspace and --project" in cancelled.stderr


def test_a_conflict_that_is_not_about_the_scope_is_shown_as_it_came(
        stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/messages/pop", {"error": "busy elsewhere"}, status=409)
    other = run("message", "pop", "--workspace", "w", "--project", "p")
    assert other.exit_code == 4 and other.stderr.startswith("error: busy elsewhere")


def test_cancel_one_or_all(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/messages/cancel", {"cancelled": ["m-1", "m-2"], "count": 2})
    result = run("message", "cancel", "--all", env=SCOPE_ENV)
    assert result.exit_code == 0, result.output
    assert stub.last().body == {"workspace": "default", "project": "project-a", "all": True}
    assert result.stdout == "cancelled 2\n  m-1\n  m-2\n"
    result = run("message", "cancel", "--id", "m-9", env=SCOPE_ENV)
    assert stub.last().body == {"workspace": "default", "project": "project-a", "message_id": "m-9"}


def test_cancel_needs_exactly_one_target(stub: StubDaemon, run: Run) -> None:
    assert run("message", "cancel").exit_code == 2
    assert run("message", "cancel", "--id", "m", "--all").exit_code == 2
    assert stub.requests == []


def test_cancel_already_claimed_exits_4(stub: StubDaemon, run: Run) -> None:
    stub.reply(
        "POST",
        "/api/v1/messages/cancel",
        {"error": "message m-1 was already claimed", "code": "conflict"},
        status=409,
    )
    result = run("message", "cancel", "--id", "m-1", env=SCOPE_ENV)
    assert result.exit_code == 4
    assert "already claimed" in result.stderr


SSE_READY = 'retry: 1000\n\nid: v1.e30\nevent: ready\ndata: {"replayed":0}\n\n'


def test_pop_wait_never_retries_a_pop_in_doubt_under_a_new_request_id(
    stub: StubDaemon, run: Run
) -> None:
    # A pop that got 503 twice may have claimed the message: the only safe retry is
    # with its own request id, so --wait stops and names it instead of popping again.
    stub.reply("GET", "/api/v1/messages/stream", SSE_READY)
    stub.reply(
        "POST",
        "/api/v1/messages/pop",
        {"error": "this side has no majority", "code": "no_majority"},
        status=503,
        headers={"Retry-After": "0"},
    )
    result = run("message", "pop", "--wait", "--timeout", "5", env=SCOPE_ENV)
    assert result.exit_code == 6, result.output
    pops = stub._node.made("POST", "/api/v1/messages/pop")
    rids = {r.body["request_id"] for r in pops}
    assert len(pops) == 2 and len(rids) == 1
    (rid,) = rids
    assert f"--project project-a --request-id {rid}" in result.stderr
    assert stub.last("GET", "/api/v1/messages/stream").query == {
        "workspace": "default", "project": "project-a"}
