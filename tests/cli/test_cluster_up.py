"""`ai-memory cluster up` as a real process, with stand-in nodes (tests/cli/fake_node.py).

Covers the supervisor's contract: each node gets its own flags, output lines
carry the node id, the summary appears once every node is healthy, Ctrl-C is
forwarded and the nodes stop in order, a node that dies is restarted with a
capped backoff while the others keep running, ``cluster stop|start|kill``
act on one node. Deaths at other moments, nodes that keep failing and the
give-up rule: tests/cli/test_cluster_supervision.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.harness import free_port

FAKE_NODE = Path(__file__).with_name("fake_node.py")
pytestmark = pytest.mark.timeout(60)


def free_base_port(count: int) -> int:
    """A base port B with B-1 .. B+count-1 free, below the kernel's ephemeral
    range (a port there can be taken by any outgoing connection between the
    check and its use: a full run found B-1, which a test uses as
    another cluster's first port, held so)."""
    return free_port(tuple(range(-1, count)))


class UpProcess:
    def __init__(
        self, tmp_path: Path, nodes: int, mode: str = "", extra_env: dict[str, str] | None = None
    ):
        self.base = free_base_port(nodes)
        self.data = tmp_path / "data"
        env = {**os.environ, "FAKE_NODE_MODE": mode, **(extra_env or {})}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cli",
                "cluster",
                "up",
                "--nodes",
                str(nodes),
                "--base-port",
                str(self.base),
                "--data",
                str(self.data),
                "--exe",
                f"{sys.executable} {FAKE_NODE}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: list[str] = []

    def read_until(self, needle: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if needle in line:
                return
        raise AssertionError(f"{needle!r} never appeared in:\n" + "\n".join(self.lines))

    def finish(self, timeout: float = 30) -> int:
        out, _ = self.proc.communicate(timeout=timeout)
        self.lines += out.splitlines()
        return self.proc.returncode

    def output(self) -> str:
        return "\n".join(self.lines)


@pytest.mark.slow  # `cluster up` over several node processes
def test_up_starts_nodes_with_their_flags_and_stops_them_on_ctrl_c(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, 3)
    up.read_until("Ctrl-C stops every node.")
    assert f"[node2] listening on 127.0.0.1:{up.base + 1}" in up.output()
    node2 = json.loads((up.data / "node2.db.args.json").read_text())
    assert node2["argv"] == [
        "serve",
        "--node-id",
        "node2",
        "--host",
        "127.0.0.1",
        "--port",
        str(up.base + 1),
        "--db",
        str((up.data / "node2.db").resolve()),
        "--quorum-writes",
        "2",
        "--quorum-peers",
        f"node1=http://127.0.0.1:{up.base},node3=http://127.0.0.1:{up.base + 2}",
    ]  # no bootstrap flag: the members find out together that the cluster is new
    secrets = {
        json.loads((up.data / f"node{i}.db.args.json").read_text())["secret"] for i in (1, 2, 3)
    }
    assert len(secrets) == 1 and len(secrets.pop()) == 64  # one generated secret shared by all
    up.proc.send_signal(signal.SIGINT)
    assert up.finish() == 0, up.output()
    for i in (1, 2, 3):
        assert f"[node{i}] stopped cleanly" in up.output()
        assert f"[cluster] node{i} stopped (status 0)" in up.output()


def test_up_passes_a_given_secret(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, 1, extra_env={"AI_MEMORY_CLUSTER_SECRET": "s3cret"})
    up.read_until("Ctrl-C stops every node.")
    args = json.loads((up.data / "node1.db.args.json").read_text())
    assert args["secret"] == "s3cret"
    assert "--quorum-peers" not in args["argv"]
    up.proc.send_signal(signal.SIGTERM)
    assert up.finish() == 0


@pytest.mark.slow  # `cluster up` over several node processes
def test_a_node_dying_is_restarted_with_backoff_and_the_others_keep_running(
    tmp_path: Path,
) -> None:
    up = UpProcess(tmp_path, 3, mode="die:node3")  # node3 exits 0.5 s after every start
    up.read_until("Ctrl-C stops every node.")
    up.read_until("node3 exited unexpectedly with status 3; restarting in 0.5s (exit 1 in a row)")
    first_exit = time.monotonic()
    up.read_until("restarted node3 (pid")
    up.read_until("node3 exited unexpectedly with status 3; restarting in 1s (exit 2 in a row)")
    second_exit = time.monotonic()
    up.read_until("restarted node3 (pid")
    assert time.monotonic() - second_exit >= 0.9  # the backoff was waited, and it doubled
    assert second_exit - first_exit >= 0.9  # 0.5 s backoff + 0.5 s of life
    state = json.loads((up.data / "cluster.json").read_text())
    assert state["nodes"]["node1"]["state"] == "running"
    assert state["nodes"]["node3"]["restarts"] >= 1
    assert "[node1] stopped cleanly" not in up.output()  # nobody else was touched
    up.proc.send_signal(signal.SIGINT)
    assert up.finish() == 0, up.output()
    out = up.output()
    assert "[node1] stopped cleanly" in out and "[node2] stopped cleanly" in out
    assert not (up.data / "cluster.json").exists()


def test_restart_backoff_doubles_up_to_its_cap() -> None:
    from cli.restart_policy import restart_delay

    assert [restart_delay(n, 0.5, 8.0) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 8, 8]
    assert restart_delay(0) == 0.0


@pytest.mark.slow  # `cluster up` over several node processes
def test_stop_start_and_kill_act_on_one_node(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, 2)
    up.read_until("Ctrl-C stops every node.")

    def control(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", "cluster", *args, "--data",
                               str(up.data)], capture_output=True, text=True, timeout=30,
                              check=False)

    try:
        stopped = control("stop", "node2")
        assert stopped.returncode == 0 and "node2: stopped" in stopped.stdout, stopped
        state = json.loads((up.data / "cluster.json").read_text())
        assert state["nodes"]["node2"] == {**state["nodes"]["node2"], "state": "stopped",
                                           "pid": None, "last_status": 0}
        assert state["nodes"]["node1"]["state"] == "running"
        time.sleep(1.0)  # a stopped node is not restarted
        assert json.loads((up.data / "cluster.json").read_text())["nodes"]["node2"][
            "state"] == "stopped"
        started = control("start", "node2")
        assert started.returncode == 0 and "node2: running (pid" in started.stdout, started
        again = control("start", "node2")
        assert "already running" in again.stdout
        killed = control("kill", "node2")
        assert killed.returncode == 0, killed
        assert killed.stdout.startswith("node2: killed (SIGKILL, pid "), killed
        state = json.loads((up.data / "cluster.json").read_text())
        assert state["nodes"]["node2"]["last_status"] == -9
        unknown = control("stop", "node9")
        assert unknown.returncode != 0 and "no node 'node9'" in unknown.stderr
        assert control("start", "node2").returncode == 0
    finally:
        up.proc.send_signal(signal.SIGINT)
        code = up.finish()
    assert code == 0, up.output()
    out = up.output()
    assert "[cluster] stop node2 requested" in out and "[cluster] kill node2 requested" in out
    assert "exited unexpectedly" not in out  # asked-for exits are not crashes
    missing = control("stop", "node1")
    assert missing.returncode != 0 and "no running `cluster up`" in missing.stderr


@pytest.mark.slow  # `cluster up` over several node processes
def test_a_node_ignoring_sigterm_is_killed_on_second_ctrl_c(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, 2, mode="stubborn:node2")
    up.read_until("Ctrl-C stops every node.")
    up.proc.send_signal(signal.SIGINT)
    up.read_until("[node2] ignoring SIGTERM")
    up.proc.send_signal(signal.SIGINT)
    assert up.finish() == 0
    assert "node2 did not stop in time; killing it" in up.output()
    assert "[cluster] node2 stopped (status -9)" in up.output()


def test_a_port_held_by_another_daemon_is_detected(tmp_path: Path) -> None:
    up = UpProcess(tmp_path, 1)
    up.read_until("Ctrl-C stops every node.")
    try:
        clash = subprocess.run(
            [
                sys.executable,
                "-m",
                "cli",
                "cluster",
                "up",
                "--nodes",
                "2",
                "--base-port",
                str(up.base - 1),
                "--data",
                str(tmp_path / "other"),
                "--exe",
                f"{sys.executable} {FAKE_NODE}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        up.proc.send_signal(signal.SIGTERM)
        up.finish()
    # The ports are checked before anything starts: a clear message, no traceback.
    assert clash.returncode == 2, clash.stdout + clash.stderr
    assert f"port {up.base} (node2) on 127.0.0.1 already in use" in clash.stderr
    assert "--base-port" in clash.stderr and "nothing was started" in clash.stderr
    assert "Traceback" not in clash.stdout + clash.stderr
    assert "[cluster] started" not in clash.stdout


def test_ports_in_use_are_named_before_anything_starts(tmp_path: Path) -> None:
    base = free_base_port(3)
    with socket.socket() as held:
        held.bind(("127.0.0.1", base + 2))
        held.listen()
        result = subprocess.run(
            [sys.executable, "-m", "cli", "cluster", "up", "--nodes", "3", "--base-port",
             str(base), "--data", str(tmp_path / "d"), "--exe", f"{sys.executable} {FAKE_NODE}"],
            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"error: cannot start the cluster: port {base + 2} (node3) on 127.0.0.1 already in use")
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "d").exists()


def test_serve_on_a_port_in_use_says_so_without_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "cli", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--db", str(tmp_path / "n.db")],
            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "address already in use" in result.stderr.lower()
    assert "Traceback" not in result.stderr


