"""`ai-memory notify` and `ai-memory inbox` against a stub daemon."""

from __future__ import annotations

import json
from collections.abc import Callable

from click.testing import Result

from tests.cli.stub import StubDaemon

Run = Callable[..., Result]

NOTIFY_REPLY = {
    "id": "n-1",
    "notification_id": "n-1",
    "from": "alice",
    "to": "bob",
    "delivered_to": "bob",
    "namespace": "_inbox/bob",
    "tier": "short",
    "delivered_at": "2026-11-30T00:00:00Z",
}


def test_notify_sends_fields_identity_and_idempotency_key(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/notify", NOTIFY_REPLY, status=201)
    result = run(
        "--agent-id",
        "alice",
        "notify",
        "bob",
        "--title",
        "OKR",
        "--priority",
        "7",
        "--tier",
        "short",
        "please review",
    )
    assert result.exit_code == 0, result.output
    sent = stub.last("POST", "/api/v1/notify")
    assert sent.body == {
        "target_agent_id": "bob",
        "title": "OKR",
        "payload": "please review",
        "priority": 7,
        "tier": "short",
    }
    assert sent.headers["X-Agent-Id"] == "alice"
    assert sent.headers["Idempotency-Key"]
    assert result.stdout == "notified bob: n-1\n"


def test_notify_reads_payload_from_stdin(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/notify", NOTIFY_REPLY, status=201)
    result = run("notify", "bob", "--title", "t", input="line one\nline two\n")
    assert result.exit_code == 0, result.output
    assert stub.last().body["payload"] == "line one\nline two"
    assert "priority" not in stub.last().body  # unset options leave server defaults


def test_notify_without_payload_is_a_usage_error(stub: StubDaemon, run: Run) -> None:
    result = run("notify", "bob", "--title", "t", input="")
    assert result.exit_code == 2
    assert "payload is empty" in result.stderr
    assert stub.requests == []


def test_notify_priority_out_of_range_is_rejected_locally(stub: StubDaemon, run: Run) -> None:
    result = run("notify", "bob", "--title", "t", "--priority", "11", "x")
    assert result.exit_code == 2
    assert stub.requests == []


def test_notify_retries_once_after_quorum_failure_with_the_same_key(
    stub: StubDaemon, run: Run
) -> None:
    stub.reply(
        "POST",
        "/api/v1/notify",
        {"error": "quorum_not_met", "got": 1, "needed": 2, "reason": "timeout"},
        status=503,
        headers={"Retry-After": "0"},
    )
    stub.reply("POST", "/api/v1/notify", NOTIFY_REPLY, status=201)
    result = run("notify", "bob", "--title", "t", "x")
    assert result.exit_code == 0, result.output
    keys = [r.headers["Idempotency-Key"] for r in stub.requests]
    assert len(keys) == 2 and keys[0] == keys[1]


def test_notify_quorum_failure_twice_exits_6_with_counts(stub: StubDaemon, run: Run) -> None:
    stub.reply(
        "POST",
        "/api/v1/notify",
        {"error": "quorum_not_met", "got": 1, "needed": 2, "reason": "peers down"},
        status=503,
        headers={"Retry-After": "0"},
    )
    result = run("notify", "bob", "--title", "t", "x")
    assert result.exit_code == 6
    assert "error: quorum_not_met (HTTP 503)" in result.stderr
    assert "got: 1" in result.stderr and "needed: 2" in result.stderr
    assert len(stub.requests) == 2


def test_notify_identity_mismatch_is_exit_2(stub: StubDaemon, run: Run) -> None:
    stub.reply(
        "POST",
        "/api/v1/notify",
        {"error": "agent_id does not match X-Agent-Id", "code": "forbidden"},
        status=403,
    )
    result = run("--agent-id", "mallory", "notify", "bob", "--title", "t", "x")
    assert result.exit_code == 2
    assert "agent_id does not match" in result.stderr


INBOX_REPLY = {
    "agent_id": "bob",
    "namespace": "_inbox/bob",
    "count": 1,
    "unread_only": True,
    "messages": [
        {
            "id": "n-1",
            "from": "alice",
            "to": "bob",
            "title": "OKR",
            "subject": "OKR",
            "payload": "please review\nby Friday",
            "body": "please review\nby Friday",
            "priority": 7,
            "tier": "short",
            "created_at": "2026-11-30T00:00:00Z",
            "received_at": "2026-11-30T00:00:00Z",
            "read": False,
        }
    ],
}


def test_inbox_passes_filters_and_prints_messages(stub: StubDaemon, run: Run) -> None:
    stub.reply("GET", "/api/v1/inbox", INBOX_REPLY)
    result = run(
        "inbox", "--agent-id", "bob", "--all", "--limit", "10", "--min-priority", "5", "--mark-read"
    )
    assert result.exit_code == 0, result.output
    sent = stub.last("GET", "/api/v1/inbox")
    assert sent.query == {
        "agent_id": "bob",
        "unread_only": "false",
        "limit": "10",
        "min_priority": "5",
        "mark_read": "true",
    }
    assert sent.headers["X-Agent-Id"] == "bob"
    assert "[unread] p7 short  from alice" in result.stdout
    assert "  OKR\n    please review\n    by Friday\n" in result.stdout
    assert "1 notification for bob, now marked read" in result.stderr


def test_inbox_json_is_the_raw_reply(stub: StubDaemon, run: Run) -> None:
    stub.reply("GET", "/api/v1/inbox", INBOX_REPLY)
    result = run("--agent-id", "bob", "inbox", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == INBOX_REPLY
    assert stub.last().query == {"agent_id": "bob", "unread_only": "true"}


def test_inbox_needs_an_agent(stub: StubDaemon, run: Run) -> None:
    result = run("inbox")
    assert result.exit_code == 2
    assert "--agent-id" in result.stderr
    assert stub.requests == []


def test_inbox_agent_from_environment(stub: StubDaemon, run: Run) -> None:
    stub.reply("GET", "/api/v1/inbox", INBOX_REPLY)
    result = run("inbox", env={"AI_MEMORY_AGENT_ID": "bob"})
    assert result.exit_code == 0, result.output
    assert stub.last().query["agent_id"] == "bob"


QUORUM_503 = {"error": "quorum_not_met", "code": "quorum_not_met", "got": 1, "needed": 2,
              "reason": "timeout"}


def test_a_write_left_in_doubt_names_the_idempotency_key_to_retry_with(
    stub: StubDaemon, run: Run
) -> None:
    creates = (
        ("/api/v1/notify", ("notify", "bob", "--title", "t", "x"), NOTIFY_REPLY),
        ("/api/v1/memories", ("memories", "store", "--title", "t", "x"), {"id": "m-1"}),
        ("/api/v1/messages",
         ("message", "send", "--to-workspace", "w", "--to-project", "p", "--from-workspace",
          "w", "--from-project", "q", "hello"), {"message_id": "m-1"}),
    )
    for path, args, ok in creates:
        stub.reply("POST", path, QUORUM_503, status=503, headers={"Retry-After": "0"})
        result = run(*args)
        assert result.exit_code == 6, result.output
        key = stub.last("POST", path).headers["Idempotency-Key"]
        assert "the write may still land" in result.stderr
        assert f"--idempotency-key {key}" in result.stderr
        # The retry the hint asks for sends the same key, so it is written once.
        stub.reply("POST", path, ok, status=201)
        again = run(*args, "--idempotency-key", key)
        assert again.exit_code == 0, again.output
        assert stub.last("POST", path).headers["Idempotency-Key"] == key


def test_notify_agent_id_names_the_sender(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/notify", NOTIFY_REPLY, status=201)
    result = run("--agent-id", "someone-else", "notify", "bob", "--agent-id", "alice",
                 "--title", "t", "x")
    assert result.exit_code == 0, result.output
    assert stub.last("POST", "/api/v1/notify").headers["X-Agent-Id"] == "alice"


def test_inbox_passes_since_and_tier(stub: StubDaemon, run: Run) -> None:
    stub.reply("GET", "/api/v1/inbox", {"agent_id": "bob", "messages": []})
    result = run("inbox", "--agent-id", "bob", "--since", "2026-05-01T12:00:00Z", "--tier",
                 "long")
    assert result.exit_code == 0, result.output
    query = stub.last("GET", "/api/v1/inbox").query
    assert query["since"] == "2026-05-01T12:00:00Z" and query["tier"] == "long"


def test_timeout_without_wait_is_a_usage_error(stub: StubDaemon, run: Run) -> None:
    for args in (("inbox", "--agent-id", "bob", "--timeout", "3"),
                 ("message", "pop", "--workspace", "w", "--project", "p", "--timeout", "3")):
        result = run(*args)
        assert result.exit_code == 2 and "--timeout goes with --wait" in result.output
    assert stub.requests == []


def test_url_forms(stub: StubDaemon) -> None:
    from click.testing import CliRunner

    from cli.client import normalize_url
    from cli.main import cli

    assert normalize_url("127.0.0.1:9077") == "http://127.0.0.1:9077"
    assert normalize_url("http://h:1/") == "http://h:1"
    assert normalize_url("https://h/prefix") == "https://h/prefix"
    for bad in ("http://h:1/api/v1", "h:1/api/v1/", "http://h:1/api"):
        result = CliRunner().invoke(cli, ["--url", bad, "health"])
        assert result.exit_code == 2, bad
        assert "without the API path" in result.stderr
    result = CliRunner().invoke(cli, ["--url", "ftp://h", "health"])
    assert result.exit_code == 2 and "not a daemon address" in result.stderr
    stub.reply("GET", "/api/v1/health", {"status": "ok"})
    result = CliRunner().invoke(cli, ["--url", stub.url.removeprefix("http://"), "health"])
    assert result.exit_code == 0, result.output


def test_inbox_wait_filter_since_is_exclusive() -> None:
    """``--since`` means after (as the API's ``since``): the stream filter of
    ``--wait`` leaves out a notification created at that very instant."""
    from datetime import UTC, datetime

    from cli.inbox import _passes

    since = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    at = {"created_at": "2026-05-01T12:00:00.000Z", "priority": 5, "tier": "mid"}
    after = {**at, "created_at": "2026-05-01T12:00:00.001Z"}
    assert not _passes(at, None, None, since)
    assert _passes(after, None, None, since)
