"""sd_notify readiness from a real daemon process to a NOTIFY_SOCKET the test holds."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.runtime.systemd import Notifier
from tests.cluster.harness import free_port, http

pytestmark = pytest.mark.timeout(60)


def listen(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(0.2)
    return sock


def messages(sock: socket.socket, until: float) -> list[str]:
    out = []
    while time.monotonic() < until:
        try:
            out.append(sock.recv(4096).decode())
        except TimeoutError:
            continue
    return out


def first(sock: socket.socket, needle: str, timeout: float, seen: list[str]) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = sock.recv(4096).decode()
        except TimeoutError:
            continue
        seen.append(msg)
        if needle in msg.split("\n"):
            return msg
    raise AssertionError(f"{needle} never arrived; got {seen}")


@pytest.mark.slow  # a real daemon process
def test_a_real_daemon_reports_ready_watchdog_and_stopping(tmp_path: Path) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = listen(sock_path)
    port = free_port()
    env = {**os.environ, "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "200000"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve", "--port", str(port), "--node-id", "node1",
         "--db", str(tmp_path / "node.db")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: list[str] = []
    try:
        ready = first(sock, "READY=1", 30, seen)
        ready_at = time.monotonic()
        # Readiness means serving: health answers the moment READY=1 arrived.
        code, body = http("GET", f"http://127.0.0.1:{port}/api/v1/health", timeout=5)
        assert code == 200 and body["node_id"] == "node1"
        assert f"STATUS=serving on 127.0.0.1:{port} as node1" in ready.split("\n")
        assert not any("READY=1" in m for m in seen[:-1])  # nothing claimed ready earlier
        pings = [m for m in messages(sock, time.monotonic() + 1.0) if m == "WATCHDOG=1"]
        # One ping at READY, then one every 0.1 s (half of WATCHDOG_USEC): never faster,
        # and on a loaded machine at least half as often.
        expected = (time.monotonic() - ready_at) / 0.1
        assert expected / 2 <= len(pings) <= expected + 2, (len(pings), expected)
        proc.send_signal(signal.SIGTERM)
        stopping = first(sock, "STOPPING=1", 20, seen)
        assert "STATUS=shutting down" in stopping.split("\n")
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        sock.close()


def test_an_abstract_socket_name_and_a_foreign_watchdog_pid() -> None:
    name = f"ai-memory-test-{os.getpid()}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(2)
    try:
        n = Notifier.from_env({"NOTIFY_SOCKET": f"@{name}", "WATCHDOG_USEC": "1000",
                               "WATCHDOG_PID": "1"}, pid=4242)
        assert n.enabled and n.watchdog_usec is None  # the watchdog is for pid 1, not us
        assert n.notify("READY=1", "STATUS=x")
        assert sock.recv(100) == b"READY=1\nSTATUS=x"
    finally:
        sock.close()
    assert Notifier.from_env({"WATCHDOG_USEC": "1000"}, pid=1).notify("READY=1") is False
    assert Notifier.from_env({"NOTIFY_SOCKET": "/nonexistent/x.sock"}).notify("READY=1") is False
    mine = Notifier.from_env({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "5000000",
                              "WATCHDOG_PID": "77"}, pid=77)
    assert mine.watchdog_usec == 5_000_000
