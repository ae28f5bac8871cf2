"""Real members with lanes for tests: N ``ai-memory serve --lanes L``
processes on loopback in keys mode (a root key given at start, members
reaching each other directly: each lane's peers are the same lane of the
others, on the lane ports derived from the member URLs).

``lane_url(nid, i)`` is lane ``i``'s own port of member ``nid``: a request
sent there is served by that lane, the way a request on the shared client
port is served by whichever lane accepted it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.cluster.harness import ROOT, free_port, http

ROOT_KEY = "aim_" + "r00tKeyForLaneTests" * 3
OFFSET = 100


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def lane_free_port(lanes: int) -> int:
    return free_port((0, *(OFFSET * (i + 1) for i in range(lanes))))


class LaneCluster:
    def __init__(self, tmp: Path, n: int = 2, lanes: int = 2,
                 secret: str | None = "lane-test-secret") -> None:
        self.tmp = tmp
        self.lanes = lanes
        self.secret = secret
        self.ids = [f"node{i + 1}" for i in range(n)]
        self.ports = {nid: lane_free_port(lanes) for nid in self.ids}
        self.popen: dict[str, subprocess.Popen[bytes]] = {}
        self.conf = tmp / "keys.toml"
        self.conf.write_text('[auth]\nmode = "keys"\nroot_username = "root"\n')

    def db(self, nid: str) -> Path:
        return self.tmp / f"{nid}.db"

    def log(self, nid: str) -> Path:
        return self.tmp / f"{nid}.log"

    def url(self, nid: str) -> str:
        return f"http://127.0.0.1:{self.ports[nid]}"

    def lane_url(self, nid: str, lane: int) -> str:
        return f"http://127.0.0.1:{self.ports[nid] + OFFSET * (lane + 1)}"

    def _cmd(self, nid: str) -> list[str]:
        peers = ",".join(f"{d}={self.url(d)}" for d in self.ids if d != nid)
        cmd = [sys.executable, "-m", "cli", "serve", "--host", "127.0.0.1",
               "--port", str(self.ports[nid]), "--db", str(self.db(nid)), "--node-id", nid,
               "--lanes", str(self.lanes), "--quorum-timeout-ms", "1500",
               "--catchup-interval-secs", "0.5"]
        if len(self.ids) > 1:
            cmd += ["--quorum-peers", peers]
        if self.secret:
            cmd += ["--cluster-secret", self.secret]
        return cmd

    def start(self, nid: str | None = None) -> None:
        for node in [nid] if nid else self.ids:
            env = {**os.environ, "PYTHONPATH": str(ROOT), "AI_MEMORY_CONFIG": str(self.conf),
                   "AI_MEMORY_ROOT_KEY": ROOT_KEY}
            with open(self.log(node), "ab") as log:
                self.popen[node] = subprocess.Popen(self._cmd(node), cwd=ROOT, env=env,
                                                    stdout=log, stderr=subprocess.STDOUT)
        for node in [nid] if nid else self.ids:
            self.wait_serving(node)

    def wait_serving(self, nid: str, timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        urls = [self.lane_url(nid, i) for i in range(self.lanes)]
        while time.monotonic() < deadline:
            if self.popen[nid].poll() is not None:
                raise RuntimeError(f"{nid} exited: {self.log(nid).read_text()[-3000:]}")
            try:
                if all(http("GET", u + "/api/v1/health", timeout=1)[1].get("state") == "serving"
                       for u in urls):
                    return
            except (OSError, AttributeError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{nid} not serving: {self.log(nid).read_text()[-3000:]}")

    def stop(self, nid: str | None = None) -> None:
        for node in [nid] if nid else self.ids:
            p = self.popen.get(node)
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)

    def call(self, nid: str, method: str, path: str, body: Any = None, *,
             lane: int | None = None, key: str = ROOT_KEY, timeout: float = 15.0,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        base = self.url(nid) if lane is None else self.lane_url(nid, lane)
        return http(method, base + path, body,
                    {**(bearer(key) if key else {}), **(headers or {})}, timeout)

    def everywhere(self) -> list[tuple[str, int]]:
        """Every (member, lane)."""
        return [(nid, i) for nid in self.ids for i in range(self.lanes)]

    def logs(self) -> str:
        return "\n".join(f"--- {nid}\n{self.log(nid).read_text()[-4000:]}"
                         for nid in self.ids if self.log(nid).exists())


def lane_pid(c: LaneCluster, nid: str, lane: int) -> int:
    """The process id of lane ``lane`` of ``nid`` (a child of its supervisor)."""
    sup = c.popen[nid].pid
    children = Path(f"/proc/{sup}/task/{sup}/children").read_text().split()
    for pid in children:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"AI_MEMORY_LANE_INDEX={lane}".encode() in env:
            return int(pid)
    raise LookupError(f"no lane {lane} under {nid}'s supervisor ({children})")


def pause_lane(c: LaneCluster, nid: str, lane: int) -> int:
    pid = lane_pid(c, nid, lane)
    os.kill(pid, signal.SIGSTOP)
    return pid


def resume(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


@contextmanager
def started(tmp_path: Path, n: int) -> Iterator[LaneCluster]:
    """``n`` members with two lanes each, stopped after (their logs printed on a failure)."""
    c = LaneCluster(tmp_path, n=n)
    try:
        c.start()
        yield c
    except Exception:
        print(c.logs())
        raise
    finally:
        c.stop()


def ok(result: tuple[int, Any], status: int = 200) -> Any:
    code, body = result
    assert code == status, body
    return body
