"""Real clusters for tests: N ``ai-memory serve`` processes on loopback,
each reaching the others only through :class:`tests.cluster.proxy.ProxyNet`.

The harness can kill -9, pause (SIGSTOP) and resume (SIGCONT), restart a
node on its existing database, skew a node's clock, and wait until every
node holds the same version vector.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster.proxy import ProxyNet

ROOT = Path(__file__).resolve().parents[2]


_EPHEMERAL = (32768, 60999)


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return _EPHEMERAL


def free_port() -> int:
    """A free port below the kernel's ephemeral range, so that no socket
    bound to port 0 (a proxy, a client) can take it between our check and
    the daemon's bind."""
    lo, _ = _ephemeral_range()
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, lo - 12000), lo)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
         timeout: float = 10.0) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    ctype_json = raw[:1] in (b"{", b"[")
    return status, (json.loads(raw) if ctype_json else raw.decode())


@dataclass
class Proc:
    node_id: str
    port: int
    db: Path
    log: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Cluster:
    def __init__(self, tmp: Path, n: int = 3, *, write_quorum: int | None = None,
                 quorum_timeout_ms: int = 1000, catchup_interval_secs: float = 0.5,
                 secret: str | None = "test-cluster-secret") -> None:
        self.tmp = tmp
        self.ids = [f"node{i + 1}" for i in range(n)]
        self.procs = {nid: Proc(nid, free_port(), tmp / f"{nid}.db", tmp / f"{nid}.log")
                      for nid in self.ids}
        self.net = ProxyNet()
        for src in self.ids:
            for dst in self.ids:
                if src != dst:
                    self.net.add(src, dst, self.procs[dst].port)
        self.write_quorum = write_quorum
        self.quorum_timeout_ms = quorum_timeout_ms
        self.catchup_interval_secs = catchup_interval_secs
        self.secret = secret

    # -- processes ----------------------------------------------------------
    def _cmd(self, nid: str) -> list[str]:
        p = self.procs[nid]
        peers = ",".join(f"{dst}=http://127.0.0.1:{self.net.links[(nid, dst)].port}"
                         for dst in self.ids if dst != nid)
        cmd = [sys.executable, "-m", "cli", "serve", "--host", "127.0.0.1", "--port", str(p.port),
               "--db", str(p.db), "--node-id", nid, "--quorum-peers", peers,
               "--quorum-timeout-ms", str(self.quorum_timeout_ms),
               "--catchup-interval-secs", str(self.catchup_interval_secs)]
        if self.write_quorum is not None:
            cmd += ["--quorum-writes", str(self.write_quorum)]
        if self.secret:
            cmd += ["--cluster-secret", self.secret]
        return cmd

    def start(self, nid: str | None = None, wait: bool = True) -> None:
        for node in [nid] if nid else self.ids:
            p = self.procs[node]
            env = {**os.environ, "PYTHONPATH": str(ROOT), **p.extra_env}
            with open(p.log, "ab") as log:  # the child keeps its own copy of the fd
                p.popen = subprocess.Popen(self._cmd(node), cwd=ROOT, env=env, stdout=log,
                                           stderr=subprocess.STDOUT)
        if wait:
            for node in [nid] if nid else self.ids:
                self.wait_healthy(node)

    def wait_healthy(self, nid: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        p = self.procs[nid]
        while time.monotonic() < deadline:
            if p.popen is not None and p.popen.poll() is not None:
                raise RuntimeError(f"{nid} exited: {p.log.read_text()[-3000:]}")
            try:
                status, _ = http("GET", p.url + "/api/v1/health", timeout=1)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{nid} not healthy: {p.log.read_text()[-3000:]}")

    def wait_serving(self, nid: str, timeout: float = 20.0) -> None:
        """Block until ``nid``'s health says ``serving``: a member seeded at
        its first start (a peer held data already) refuses writes while it
        recovers, as ``cluster status`` shows an operator."""
        deadline = time.monotonic() + timeout
        body: Any = None
        while time.monotonic() < deadline:
            try:
                status, body = http("GET", self.url(nid) + "/api/v1/health", timeout=1)
                if status == 200 and body.get("state") == "serving":
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{nid} still not serving ({body}): "
                           f"{self.procs[nid].log.read_text()[-3000:]}")

    def kill9(self, nid: str) -> None:
        p = self.procs[nid]
        assert p.popen is not None
        p.popen.send_signal(signal.SIGKILL)
        p.popen.wait(timeout=10)

    def pause(self, nid: str) -> None:
        p = self.procs[nid]
        assert p.popen is not None
        p.popen.send_signal(signal.SIGSTOP)

    def resume(self, nid: str) -> None:
        p = self.procs[nid]
        assert p.popen is not None
        p.popen.send_signal(signal.SIGCONT)

    def restart(self, nid: str) -> None:
        self.start(nid)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.popen is not None and p.popen.poll() is None:
                try:
                    p.popen.send_signal(signal.SIGCONT)
                    p.popen.terminate()
                    p.popen.wait(timeout=10)
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    p.popen.kill()
                    p.popen.wait(timeout=5)
        self.net.close()

    # -- HTTP -----------------------------------------------------------------
    def url(self, nid: str) -> str:
        return self.procs[nid].url

    def call(self, nid: str, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[int, Any]:
        return http(method, self.url(nid) + path, body, headers, timeout)

    def status(self, nid: str) -> dict[str, Any]:
        code, body = self.call(nid, "GET", "/api/v1/cluster/status", timeout=3)
        assert code == 200, body
        return body  # type: ignore[no-any-return]

    def wait_converged(self, timeout: float = 30.0, nodes: list[str] | None = None) -> float:
        """Block until every node reports the same version vector; return
        the seconds it took."""
        nodes = nodes or self.ids
        start = time.monotonic()
        last: dict[str, Any] = {}
        while time.monotonic() - start < timeout:
            try:
                last = {nid: self.status(nid)["vv"] for nid in nodes}
            except (OSError, AssertionError):
                time.sleep(0.1)
                continue
            first = next(iter(last.values()))
            if all(v == first for v in last.values()):
                return time.monotonic() - start
            time.sleep(0.1)
        raise TimeoutError(f"no convergence in {timeout}s: {last}")

    def logs(self) -> str:
        return "\n".join(f"--- {nid}\n{p.log.read_text()[-4000:]}"
                         for nid, p in self.procs.items() if p.log.exists())
