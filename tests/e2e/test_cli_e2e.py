"""The ``ai-memory`` CLI end to end against a real spawned daemon, and the
durability promise: what was acknowledged survives kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import ROOT, free_port, http

pytestmark = pytest.mark.slow

EXE = [sys.executable, "-m", "cli"]


class Daemon:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.db = tmp / "solo.db"
        self.log = tmp / "solo.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as log:  # the child keeps its own copy of the fd
            self.proc = subprocess.Popen(
                [*EXE, "serve", "--port", str(self.port), "--db", str(self.db)],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if http("GET", self.url + "/api/v1/health", timeout=1)[0] == 200:
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(self.log.read_text())

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path)
    d.start()
    try:
        yield d
    finally:
        d.stop()


def cli(d: Daemon, *args: str, stdin: str | None = None, agent: str | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AI_MEMORY_URL": d.url}
    env.pop("AI_MEMORY_WORKSPACE", None)
    env.pop("AI_MEMORY_PROJECT", None)
    if agent:
        env["AI_MEMORY_AGENT_ID"] = agent
    return subprocess.run([*EXE, *args], input=stdin, capture_output=True, text=True,
                          env=env, cwd=cwd or ROOT, timeout=60)


def test_cli_notify_inbox_and_mail_round_trip(daemon: Daemon, tmp_path: Path) -> None:
    r = cli(daemon, "notify", "bob", "--title", "hello", "ship it", agent="alice")
    assert r.returncode == 0, r.stderr
    r = cli(daemon, "inbox", "--json", agent="bob")
    assert r.returncode == 0, r.stderr
    box = json.loads(r.stdout)
    assert box["count"] == 1 and box["messages"][0]["from"] == "alice"

    for ws, proj, harness in (("default", "proj-a", "kimi"), ("default", "proj-b", "claude")):
        r = cli(daemon, "session", "start", "--workspace", ws, "--project", proj,
                "--harness", harness)
        assert r.returncode == 0, r.stderr
    proj_a = tmp_path / "a"
    proj_a.mkdir()
    (proj_a / ".ai-memory.toml").write_text('[project]\nworkspace = "default"\nname = "proj-a"\n')
    r = cli(daemon, "message", "send", "--to-workspace", "default", "--to-project", "proj-b",
            "--subject", "export", stdin="please add /v1/export\n", cwd=proj_a)
    assert r.returncode == 0, r.stderr
    r = cli(daemon, "message", "list", "--outbox", "--json", cwd=proj_a)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["count"] == 1

    proj_b = tmp_path / "b"
    proj_b.mkdir()
    (proj_b / ".ai-memory.toml").write_text('[project]\nworkspace = "default"\nname = "proj-b"\n')
    r = cli(daemon, "message", "pop", "--json", cwd=proj_b)
    assert r.returncode == 0, r.stderr
    popped = json.loads(r.stdout)
    assert "please add /v1/export" in popped["message"]["body"]
    r = cli(daemon, "message", "pop", "--json", cwd=proj_b)
    assert r.returncode == 0 and json.loads(r.stdout)["message"] is None

    # Unknown recipient: fails closed with the not-found exit code.
    r = cli(daemon, "message", "send", "--to-workspace", "default", "--to-project", "nope",
            "hi", cwd=proj_a)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "nope" in r.stderr


def test_acknowledged_writes_survive_kill9(daemon: Daemon) -> None:
    acked = []
    for i in range(60):
        code, body = http("POST", daemon.url + "/api/v1/notify",
                          {"target_agent_id": "bob", "title": f"n{i}", "payload": "p"},
                          {"X-Agent-Id": "alice"})
        assert code == 201, body
        acked.append(body["id"])
    r = cli(daemon, "notify", "bob", "--title", "via cli", "last one", agent="alice")
    assert r.returncode == 0, r.stderr
    daemon.kill9()
    daemon.start()
    r = cli(daemon, "inbox", "--json", "--all", "--limit", "500", agent="bob")
    assert r.returncode == 0, r.stderr
    ids = {m["id"] for m in json.loads(r.stdout)["messages"]}
    assert set(acked) <= ids
    assert len(ids) == 61
