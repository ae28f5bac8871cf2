"""``listen --exec``'s runs of a command: stdin, environment, timeout, retries."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from cli.listen_exec import DeadLetters, RunSettings, run_command

EVENT = {"event": "notify", "id": "n1", "stream": "inbox:bob", "cursor": "v1.x",
         "data": {"agent_id": "bob", "notification": {"id": "n1", "from": "alice",
                                                     "title": "hello", "priority": 5}}}


def test_the_command_gets_the_event_on_stdin_and_no_key_in_its_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AI_MEMORY_KEY", "aim_secret")
    monkeypatch.setenv("AI_MEMORY_API_KEY", "secret")
    out = tmp_path / "out"
    cmd = f'cat > {out}.json; env | grep ^AI_MEMORY_ | sort > {out}.env'
    outcome = run_command(RunSettings(cmd), EVENT, stop=threading.Event(), note=print)
    assert outcome.ok and outcome.attempts == 1
    assert json.loads(Path(f"{out}.json").read_text()) == EVENT
    env = dict(line.split("=", 1) for line in Path(f"{out}.env").read_text().splitlines())
    assert env["AI_MEMORY_EVENT"] == "notify" and env["AI_MEMORY_FROM"] == "alice"
    assert env["AI_MEMORY_SUBJECT"] == "hello" and env["AI_MEMORY_ATTEMPT"] == "1"
    assert "AI_MEMORY_KEY" not in env and "AI_MEMORY_API_KEY" not in env


def test_a_command_over_its_timeout_is_killed_and_retried(tmp_path: Path) -> None:
    notes: list[str] = []
    started = time.monotonic()
    outcome = run_command(RunSettings("sleep 30", timeout=0.3, retries=1), EVENT,
                          stop=threading.Event(), note=notes.append)
    took = time.monotonic() - started
    assert not outcome.ok and outcome.attempts == 2
    assert outcome.status == "timed out after 0.3s"
    assert 1.5 < took < 5, took  # two runs of 0.3 s and a 1 s backoff
    assert "running it again in 1s" in notes[0]
    dead = DeadLetters(tmp_path / "dead.jsonl")
    dead.add(EVENT, outcome)
    [line] = (tmp_path / "dead.jsonl").read_text().splitlines()
    assert json.loads(line)["event"] == EVENT and json.loads(line)["attempts"] == 2


def test_a_stop_cuts_the_backoff_short() -> None:
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    outcome = run_command(RunSettings("exit 2", retries=5), EVENT, stop=stop, note=print)
    assert not outcome.ok and outcome.attempts == 1
    assert outcome.status == "exit 2; listener stopping"


@pytest.mark.parametrize(("args", "says"), [
    (["listen", "--exec", "true"], "whose inbox?"),
    (["--agent-id", "bob", "listen"], "--exec CMD and/or --json"),
    (["--agent-id", "bob", "listen", "--json", "--claim"], "--claim pops mail"),
])
def test_listen_says_what_is_missing(args: list[str], says: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from cli.main import cli

    monkeypatch.delenv("AI_MEMORY_AGENT_ID", raising=False)
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 2 and says in done.output, done.output
