"""Peer forgeries against a real ``ai-memory serve`` process: a replay after
the receiver restarted, and oversized unsigned or forged bodies, which must
be refused from their headers without being buffered (peak RSS measured)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from pathlib import Path

import msgpack
import pytest

from daemon.peer.auth import BOOT_HEADER, sign
from federation.messages import SyncOffer
from tests.daemon.procdaemon import Proc, daemon_process

SECRET = "forgery-test-secret"
PATH = "/peer/v1/msgs"
ARGS = ("--cluster-secret", SECRET, "--initial-cluster-state", "new", "--quorum-peers",
        "node2=http://127.0.0.1:9,node3=http://127.0.0.1:9")
pytestmark = pytest.mark.slow


def body() -> bytes:
    return msgpack.packb([SyncOffer({}, "x").to_wire()], use_bin_type=True)


def post(proc: Proc, headers: dict[str, str], data: bytes) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(proc.url + PATH, data=data, method="POST", headers={
        "Content-Type": "application/msgpack", **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def learn_boot(proc: Proc) -> str:
    status, headers, raw = post(proc, sign(SECRET, "node2", "node1", "POST", PATH, body(),
                                           time.time()), body())
    assert status == 401 and json.loads(raw)["code"] == "peer_boot_mismatch", raw
    return headers[BOOT_HEADER]


def test_replay_after_restart_is_refused(tmp_path: Path) -> None:
    with daemon_process(tmp_path, *ARGS) as proc:
        boot = learn_boot(proc)
        captured = sign(SECRET, "node2", "node1", "POST", PATH, body(), time.time(), boot)
        assert post(proc, captured, body())[0] == 200
        assert post(proc, captured, body())[0] == 401  # replay within one boot
        port = proc.port
    with daemon_process(tmp_path, *ARGS, port=port) as proc:
        status, _, raw = post(proc, captured, body())  # well inside the clock-skew window
        assert status == 401 and json.loads(raw)["code"] == "peer_boot_mismatch", raw
        new_boot = learn_boot(proc)
        assert new_boot != boot
        fresh = sign(SECRET, "node2", "node1", "POST", PATH, body(), time.time(), new_boot)
        assert post(proc, fresh, body())[0] == 200


def flood(proc: Proc, headers: dict[str, str], size: int, n: int) -> list[tuple[int, int]]:
    """n concurrent POSTs declaring `size` bytes, streamed until the server
    stops reading; (bytes sent, status) per connection."""
    head = (f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            + f"Content-Length: {size}\r\n\r\n").encode()
    chunk = b"\0" * (1 << 20)
    out: list[tuple[int, int]] = []

    def one() -> None:
        sent, status = 0, 0
        with socket.create_connection(("127.0.0.1", proc.port)) as s:
            s.settimeout(10)
            s.sendall(head)
            try:
                while sent < size:
                    s.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass  # the server answered and closed
            try:
                line = s.recv(200).split(b"\r\n", 1)[0]
                status = int(line.split()[1]) if line else 0
            except (OSError, IndexError, ValueError):
                status = 0
        out.append((sent, status))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


@pytest.mark.parametrize("forgery", ["unsigned", "wrong-secret", "wrong-receiver"])
def test_oversized_forged_bodies_are_not_buffered(tmp_path: Path, forgery: str) -> None:
    size, n = 60 * 1024 * 1024, 8
    with daemon_process(tmp_path, *ARGS) as proc:
        boot = learn_boot(proc)
        before = proc.rss_kib("VmHWM")
        if forgery == "unsigned":
            headers = {"X-AIM-Node": "node2"}
        else:
            fake = b"\0" * size  # signed over a body of the declared length
            headers = sign("guess" if forgery == "wrong-secret" else SECRET, "node2",
                           "node3" if forgery == "wrong-receiver" else "node1",
                           "POST", PATH, fake, time.time(), boot)
            del fake
        results = flood(proc, headers, size, n)
        peak = proc.rss_kib("VmHWM")
        assert len(results) == n
        # 401 seen by the client whenever it could still read the answer
        assert all(status in (0, 401) for _, status in results), results
        assert any(status == 401 for _, status in results), results
        assert all(sent < size for sent, _ in results), results  # the server stopped reading
        growth_mib = (peak - before) / 1024
        print(f"{forgery}: peak RSS {before / 1024:.0f} -> {peak / 1024:.0f} MiB "
              f"({n} x {size >> 20} MiB declared)")
        assert growth_mib < 32, f"peak RSS grew by {growth_mib:.0f} MiB"
        # the daemon still serves
        with urllib.request.urlopen(proc.url + "/api/v1/health", timeout=5) as r:
            assert r.status == 200


def test_oversized_signed_body_is_refused_before_reading(tmp_path: Path) -> None:
    with daemon_process(tmp_path, *ARGS) as proc:
        boot = learn_boot(proc)
        size = 65 * 1024 * 1024  # over limits.peer_body_max_bytes
        before = proc.rss_kib("VmHWM")
        headers = sign(SECRET, "node2", "node1", "POST", PATH, b"", time.time(), boot)
        [(sent, status)] = flood(proc, headers, size, 1)
        assert status in (0, 413) and sent < size
        assert (proc.rss_kib("VmHWM") - before) / 1024 < 16
