"""Failover under `ai-memory cluster up` with real daemons: the README walk-through.

Three real ``ai-memory serve`` processes under the supervisor. ``cluster kill
node3`` takes one down (SIGKILL) and keeps it down; writes to the other two
still reach their quorum; ``cluster start node3`` brings it back and it
converges. A node killed behind the supervisor's back (kill -9 of its pid) is
restarted by the supervisor and converges too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cluster_up import free_base_port
from tests.cluster.harness import http

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(180)]


class Up:
    """`cluster up` with real nodes; its output is read on a thread so the pipe never fills."""

    def __init__(self, tmp_path: Path, data: Path | None = None, base: int | None = None) -> None:
        self.base = base or free_base_port(3)
        self.data = data or tmp_path / "data"
        self.urls = [f"http://127.0.0.1:{self.base + i}" for i in range(3)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "cluster", "up", "--nodes", "3",
             "--base-port", str(self.base), "--data", str(self.data)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, needle: str, timeout: float = 60) -> None:
        wait(lambda: any(needle in line for line in self.lines), timeout,
             lambda: f"{needle!r} never appeared in:\n" + "\n".join(self.lines[-60:]))

    def control(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "cli", "cluster", *args, "--data",
                               str(self.data)], capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 0, (done.stdout, done.stderr)
        return done.stdout

    def state(self) -> dict[str, Any]:
        return json.loads((self.data / "cluster.json").read_text())  # type: ignore[no-any-return]


def wait(check: Callable[[], bool], timeout: float, why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, why()
        time.sleep(0.1)


def notify(url: str, title: str) -> int:
    code, _ = http("POST", f"{url}/api/v1/notify",
                   {"target_agent_id": "bob", "title": title, "payload": title},
                   headers={"X-Agent-Id": "alice"})
    return code


def inbox(url: str, consistency: str) -> set[str]:
    code, body = http("GET", f"{url}/api/v1/inbox?agent_id=bob&unread_only=false&limit=500"
                      f"&consistency={consistency}", headers={"X-Agent-Id": "bob"}, timeout=5)
    assert code == 200, body
    return {m["title"] for m in body["messages"]}


def vv(url: str) -> dict[str, int] | None:
    try:
        code, body = http("GET", f"{url}/api/v1/cluster/status", timeout=3)
    except OSError:
        return None
    return body.get("vv") if code == 200 else None


def converged(urls: list[str]) -> bool:
    views = [vv(u) for u in urls]
    return all(v is not None and v == views[0] for v in views)


def test_kill_a_node_keep_writing_bring_it_back_and_it_converges(tmp_path: Path) -> None:
    up = Up(tmp_path)
    try:
        up.wait_for("Ctrl-C stops every node.")
        n1, n2, n3 = up.urls
        sent = {f"before-{i}" for i in range(5)}
        assert all(notify(n1, t) in (200, 201) for t in sorted(sent))

        assert "node3: killed (SIGKILL" in up.control("kill", "node3")
        assert up.state()["nodes"]["node3"]["state"] == "stopped"
        during = {f"during-{i}" for i in range(20)}
        codes = [notify(n1 if i % 2 else n2, t) for i, t in enumerate(sorted(during))]
        assert all(c in (200, 201) for c in codes), codes  # W=2 of node1 + node2
        sent |= during
        assert inbox(n2, "quorum") == sent
        time.sleep(1.0)
        assert up.state()["nodes"]["node3"]["state"] == "stopped"  # not restarted behind our back

        assert "node3: running" in up.control("start", "node3")
        wait(lambda: converged(up.urls), 60, lambda: f"no convergence: {[vv(u) for u in up.urls]}")
        assert inbox(n3, "local") == sent

        # A crash the supervisor did not ask for: it restarts the node by itself.
        pid = up.state()["nodes"]["node2"]["pid"]
        os.kill(pid, signal.SIGKILL)
        up.wait_for("node2 exited unexpectedly with status -9; restarting in 0.5s")
        up.wait_for("restarted node2 (pid")
        after = {f"after-{i}" for i in range(5)}
        assert all(notify(n3, t) in (200, 201) for t in sorted(after))
        sent |= after
        wait(lambda: converged(up.urls), 60, lambda: f"no convergence: {[vv(u) for u in up.urls]}")
        assert inbox(n2, "local") == sent
        assert up.state()["nodes"]["node2"]["restarts"] == 1
    finally:
        up.proc.send_signal(signal.SIGINT)
        code = up.proc.wait(60)
        up._reader.join(10)
        assert up.proc.stdout is not None
        up.proc.stdout.close()
    assert code == 0, "\n".join(up.lines[-60:])
    assert not (up.data / "cluster.json").exists()
