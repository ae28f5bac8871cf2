"""``ai-memory project purge|cleanup`` and ``workspace purge`` against the stub
daemon: what is sent, the confirmation, what is printed, and the exit code
of a refusal."""

from __future__ import annotations

from collections.abc import Callable

from click.testing import Result

from tests.cli.stub import StubDaemon

Run = Callable[..., Result]

ANSWER = {"purge_id": "p1", "scope": "project", "workspace": "ws", "project": "alpha",
          "projects": ["alpha"], "messages_removed": 3, "memories_removed": 1,
          "memories_left": False, "audit_id": "a1"}
PATH = "/api/v1/projects/ws/alpha/purge"


def test_project_purge_asks_first_and_sends_nothing_when_declined(stub: StubDaemon,
                                                                  run: Run) -> None:
    stub.reply("POST", PATH, ANSWER)
    result = run("project", "purge", "ws/alpha", input="n\n")
    assert result.exit_code == 1 and "Purge project ws/alpha?" in result.output
    assert not [r for r in stub.requests if r.path == PATH]


def test_project_purge_confirmed_or_with_yes_sends_the_reason_and_a_key(stub: StubDaemon,
                                                                        run: Run) -> None:
    stub.reply("POST", PATH, ANSWER)
    result = run("project", "purge", "ws/alpha", "--reason", "archived", input="y\n")
    assert result.exit_code == 0, result.output
    assert "purged ws/alpha: 3 messages, 1 memories removed; audit record a1" in result.output
    sent = stub.last("POST", PATH)
    assert sent.body == {"reason": "archived"}
    assert sent.headers["Idempotency-Key"].startswith("cli-")
    result = run("project", "purge", "ws/alpha", "--yes", "--idempotency-key", "k1", "--json")
    assert result.exit_code == 0 and '"purge_id": "p1"' in result.output
    assert stub.last("POST", PATH).headers["Idempotency-Key"] == "k1"
    assert stub.last("POST", PATH).body == {}


def test_a_refused_purge_exits_with_the_errors_code(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", PATH, {"error": "project.purge needs write on all of workspace ws",
                              "code": "forbidden"}, status=403)
    result = run("project", "purge", "ws/alpha", "--yes")
    assert result.exit_code != 0 and "needs write on all of workspace ws" in result.output


def test_bad_targets_are_refused_before_anything_is_sent(stub: StubDaemon, run: Run) -> None:
    for bad in ("alpha", "ws/", "/alpha", "ws/a/b"):
        result = run("project", "purge", bad, "--yes")
        assert result.exit_code == 2, (bad, result.output)
    assert not stub.requests


def test_workspace_purge_and_cleanup(stub: StubDaemon, run: Run) -> None:
    stub.reply("POST", "/api/v1/workspaces/ws/purge",
               {**ANSWER, "scope": "workspace", "project": None, "projects": ["a", "b"]})
    result = run("workspace", "purge", "ws", input="y\n")
    assert result.exit_code == 0 and "Purge workspace ws and every project" in result.output
    assert "purged ws: 3 messages" in result.output
    stub.reply("POST", "/api/v1/projects/cleanup",
               {"removed": ["ws/gamma"], "kept": [], "idle_before_ms": 1})
    result = run("project", "cleanup", "--idle-days", "0")
    assert result.exit_code == 0 and "removed: ws/gamma" in result.output
    assert stub.last("POST", "/api/v1/projects/cleanup").body == {"idle_secs": 0}
