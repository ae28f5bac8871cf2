"""`ai-memory cluster up` keeps every node running, whatever moment one dies at.

Real `cluster up` processes; the nodes are stand-ins (tests/cli/fake_node.py)
except in the test marked ``cluster``, which runs real `ai-memory serve`
children. A node is killed with SIGKILL through the pid the supervisor
records in ``DATA/cluster.json``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.cli.test_cluster_up import UpProcess

# Every test runs `cluster up` over several node processes (fake_node.py, or
# real daemons where marked cluster).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def node_id_at(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url + "/api/v1/health", timeout=1) as resp:
            return str(json.loads(resp.read()).get("node_id"))
    except (OSError, ValueError):
        return None


def recorded_pid(data: Path, node: str) -> int | None:
    """The pid of ``node`` as the supervisor records it in DATA/cluster.json."""
    try:
        pid = json.loads((data / "cluster.json").read_text())["nodes"][node]["pid"]
    except (OSError, ValueError, KeyError):
        return None
    return int(pid) if pid else None


def started_pid(lines: list[str], node: str) -> int:
    """The pid of the latest start of ``node`` the supervisor printed."""
    found = re.findall(rf"\[cluster\] (?:re)?started {node} \(pid (\d+)", "\n".join(lines))
    assert found, f"{node} was never started:\n" + "\n".join(lines)
    return int(found[-1])


class Lines:
    """Every line of a process's output, read by a thread (the test never blocks on it)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        stream = proc.stdout
        self.thread = threading.Thread(target=lambda: self.lines.extend(
            line.rstrip("\n") for line in stream), daemon=True)
        self.thread.start()

    def text(self) -> str:
        return "\n".join(self.lines)


def wait_for(check, timeout: float = 20, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def url(up: UpProcess, i: int) -> str:
    return f"http://127.0.0.1:{up.base + i - 1}"


def stop(up: UpProcess) -> int:
    up.proc.send_signal(signal.SIGINT)
    return up.finish()


def test_a_node_killed_after_health_while_another_still_starts_is_restarted(
    tmp_path: Path,
) -> None:
    up = UpProcess(tmp_path, 3, mode="slow:node3")  # node3 listens only after 3 s
    try:
        up.read_until("[cluster] started node3 (pid")
        wait_for(lambda: node_id_at(url(up, 2)) == "node2", what="node2's health")
        pid = started_pid(up.lines, "node2")
        os.kill(pid, signal.SIGKILL)
        up.read_until("node2 exited unexpectedly with status -9")
        up.read_until("Ctrl-C stops every node.")
        wait_for(lambda: node_id_at(url(up, 2)) == "node2", what="node2 back")
        assert up.proc.poll() is None
        assert node_id_at(url(up, 1)) == "node1" and node_id_at(url(up, 3)) == "node3"
    finally:
        code = stop(up)
    out = up.output()
    assert code == 0, out
    assert "while starting" not in out
    for i in (1, 2, 3):
        assert out.count(f"[node{i}] stopped cleanly") == 1, out  # only at Ctrl-C


@pytest.mark.cluster
def test_real_nodes_survive_a_kill_right_after_all_answer_health(tmp_path: Path) -> None:
    """The issue's case: real `serve` children, node2 SIGKILLed as soon as all three answer."""
    from tests.cli.test_cluster_up import free_base_port

    base = free_base_port(3)
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "cluster", "up", "--nodes", "3", "--base-port", str(base),
         "--data", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    urls = [f"http://127.0.0.1:{base + i}" for i in range(3)]
    out = Lines(proc)
    try:
        wait_for(lambda: all(node_id_at(u) == f"node{i}" for i, u in enumerate(urls, 1)),
                 timeout=60, what="three healthy nodes")
        pid = started_pid(out.lines, "node2")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: started_pid(out.lines, "node2") != pid, timeout=60,
                 what="the supervisor restarting node2")
        wait_for(lambda: all(node_id_at(u) == f"node{i}" for i, u in enumerate(urls, 1)),
                 timeout=60, what="node2 restarted")
        assert proc.poll() is None
        status = subprocess.run(
            [sys.executable, "-m", "cli", "--url", urls[0], "cluster", "status", "--json"],
            capture_output=True, text=True, timeout=30, check=False)
        members = json.loads(status.stdout)["members"]
        assert [m["reachable"] for m in members] == [True, True, True], status.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        out.thread.join(10)
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == 0, out.text()
    assert "node2 exited unexpectedly with status -9" in out.text()
    assert "while starting" not in out.text()


def pid_in_state(up: UpProcess, node: str) -> int:
    found: list[int] = []

    def recorded() -> bool:
        pid = recorded_pid(up.data, node)
        found[:] = [pid] if pid else []
        return bool(pid)

    wait_for(recorded, what=f"{node}'s pid in cluster.json")
    return found[0]


def test_a_node_killed_before_it_answers_health_is_restarted(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, 3, mode="slow:node2", extra_env={"FAKE_NODE_DELAY": "2"})
    try:
        up.read_until("[node2] opening database slowly")
        pid = pid_in_state(up, "node2")  # recorded from the start, before any health
        assert pid == started_pid(up.lines, "node2")
        os.kill(pid, signal.SIGKILL)
        up.read_until("node2 exited unexpectedly with status -9; restarting in 0.5s "
                      "(exit 1 in a row); it had not answered /api/v1/health yet")
        up.read_until("restarted node2 (pid")
        up.read_until("Ctrl-C stops every node.")
        assert pid_in_state(up, "node2") != pid
        state = json.loads((up.data / "cluster.json").read_text())
        assert state["ready"] is True
        assert {n: v["state"] for n, v in state["nodes"].items()} == dict.fromkeys(
            ("node1", "node2", "node3"), "running")
    finally:
        code = stop(up)
    assert code == 0, up.output()
    assert up.output().count("stopped cleanly") == 3


def test_a_node_that_always_fails_is_reported_with_its_log_tail_and_others_serve(
    tmp_path: Path,
) -> None:
    up = UpProcess(tmp_path, 3, mode="crash:node2")  # node2 exits 5 at every start
    try:
        up.read_until("node2 keeps failing (3 exits in a row); still restarting it, at most 8s "
                      "apart; node1, node3 keep serving. Its last output:")
        up.read_until("[cluster]   | cannot open database")
        assert node_id_at(url(up, 1)) == "node1" and node_id_at(url(up, 3)) == "node3"
        up.read_until("restarted node2 (pid")  # and it is still retried
        assert up.proc.poll() is None
        state = json.loads((up.data / "cluster.json").read_text())
        assert state["nodes"]["node2"]["failures"] >= 3
        assert state["nodes"]["node1"]["state"] == "running"
        assert state["ready"] is False
    finally:
        code = stop(up)
    assert code == 0, up.output()
    assert "Ctrl-C stops every node." not in up.output()  # never all healthy: no summary


def test_a_node_whose_port_is_taken_keeps_failing_then_comes_back(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, 3)
    held = socket.socket()
    try:
        up.read_until("Ctrl-C stops every node.")
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        os.kill(pid_in_state(up, "node2"), signal.SIGKILL)
        wait_for(lambda: _try_listen(held, up.base + 1), what="node2's port")
        up.read_until("node2 keeps failing (3 exits in a row)")
        up.read_until("Address already in use")
        assert node_id_at(url(up, 1)) == "node1" and node_id_at(url(up, 3)) == "node3"
        held.close()
        wait_for(lambda: node_id_at(url(up, 2)) == "node2", timeout=30, what="node2 back")
    finally:
        held.close()
        code = stop(up)
    assert code == 0, up.output()
    out = up.output()
    assert out.count("[node1] stopped cleanly") == 1 and out.count("[node3] stopped cleanly") == 1


def _try_listen(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    sock.listen()
    return True


def test_every_node_failing_its_first_starts_ends_the_command(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, 2, mode="crash:*")
    assert up.finish() == 1
    out = up.output()
    assert "node1 keeps failing (3 exits in a row)" in out
    assert "node2 keeps failing (3 exits in a row)" in out
    assert "[cluster]   | cannot open database" in out
    assert "no node could start: every one failed its first 3 starts in a row; giving up" in out
    assert "ready" not in out
    assert not (up.data / "cluster.json").exists()


def test_ctrl_c_during_the_start_stops_every_node_in_order(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, 3, mode="slow:node3", extra_env={"FAKE_NODE_DELAY": "30"})
    up.read_until("[node3] opening database slowly")
    # node1 and node2 are up (their SIGTERM handlers installed); node3 is
    # still opening its database, and its default SIGTERM kills it.
    wait_for(lambda: node_id_at(url(up, 1)) == "node1", what="node1")
    wait_for(lambda: node_id_at(url(up, 2)) == "node2", what="node2")
    code = stop(up)
    out = up.output()
    assert code == 0, out
    assert "[cluster] stopping node1, node2, node3" in out
    assert "[node1] stopped cleanly" in out and "[node2] stopped cleanly" in out
    assert "[cluster] node3 stopped (status -15)" in out
    assert "restart" not in out.split("[cluster] stopping")[1]


def test_cluster_start_answers_once_the_node_is_healthy(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, 2, mode="slow:node2", extra_env={"FAKE_NODE_DELAY": "1.5"})

    def control(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", "cluster", *args, "--data",
                               str(up.data)], capture_output=True, text=True, timeout=60,
                              check=False)

    try:
        up.read_until("Ctrl-C stops every node.")
        killed = control("kill", "node2")
        assert killed.returncode == 0, killed
        assert killed.stdout.startswith("node2: killed (SIGKILL, pid "), killed.stdout
        assert node_id_at(url(up, 2)) is None
        began = time.monotonic()
        started = control("start", "node2")
        assert started.returncode == 0, started
        assert time.monotonic() - began >= 1.4  # it waited for the slow start
        assert started.stdout.startswith("node2: running (pid "), started.stdout
        assert f"answers {url(up, 2)}/api/v1/health" in started.stdout
        assert node_id_at(url(up, 2)) == "node2"  # listening when `start` returned
        assert control("stop", "node2").stdout.startswith("node2: stopped (SIGTERM, pid ")
        late = control("start", "node2", "--timeout", "0.3")
        assert late.returncode == 6, late
        assert "node2 does not answer" in late.stderr and "keeps trying" in late.stderr
        wait_for(lambda: node_id_at(url(up, 2)) == "node2", what="node2 after the late start")
    finally:
        code = stop(up)
    assert code == 0, up.output()
