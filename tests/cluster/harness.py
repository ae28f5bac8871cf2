"""Real clusters for tests: N ``ai-memory serve`` processes on loopback,
each reaching the others only through :class:`tests.cluster.proxy.ProxyNet`.

The harness can kill -9, pause (SIGSTOP) and resume (SIGCONT), restart a
node on its existing database, skew a node's clock, and wait until every
node holds the same version vector.

``Cluster(..., lanes=N)`` starts every node with ``--lanes N``, as a user
would: each node is then a supervisor and N lane processes (one process
group, as a shell job is), lane i listening for its peers on
``port + LANE_PORT_OFFSET * (i + 1)`` and reaching lane i of the other
members at their proxy's port moved the same way. The proxy of a link
listens on every lane's port too, so cutting a link cuts every lane's;
kill -9, pause and resume signal the whole group; the status, health and
convergence waits ask every lane on its own port.
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

import pytest

from bench.procs import port_window
from common.lanes import lane_of
from tests.cluster.proxy import ProxyNet

ROOT = Path(__file__).resolve().parents[2]


_EPHEMERAL = (32768, 60999)


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return _EPHEMERAL


LANES = pytest.mark.parametrize("cluster", [1, 2], indirect=True, ids=["1lane", "2lanes"])
"""Run a test taking the ``cluster`` fixture on one lane and on two lanes per node."""

LANE_PORT_OFFSET = 100  # the daemon's default [server] lane_port_offset


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


_HANDED_OUT: set[int] = set()  # every port free_port gave this process


def free_port(offsets: tuple[int, ...] = (0,)) -> int:
    """A port P below the kernel's ephemeral range with P + o free for every
    ``o`` of ``offsets`` (a node's lane ports), so that no socket bound to
    port 0 (a proxy, a client) can take one between our check and the
    daemon's bind. A port is handed out once per process: a node's port is
    chosen before the node binds it, so a later choice (the proxies of a
    cluster with lanes bind theirs at once) could otherwise take it first
    ("address already in use", 1 cluster start in about 100)."""
    start, end = port_window(_ephemeral_range()[0])  # this process's slice
    top = end - max(offsets)
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(start - min(0, *offsets), top)
        ports = {port + o for o in offsets}
        if not ports & _HANDED_OUT and all(_is_free(p) for p in ports):
            _HANDED_OUT.update(ports)
            return port
    raise RuntimeError("no free port below the ephemeral range")


def _group_alive(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that still run (zombies left out)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry.name))
    return alive


def lane_offsets(lanes: int) -> tuple[int, ...]:
    """The client port's offset (0) and every lane port's, for ``lanes`` lanes."""
    if lanes == 1:
        return (0,)
    return (0, *(LANE_PORT_OFFSET * (i + 1) for i in range(lanes)))


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
    lanes: int = 1
    extra_args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lane_url(self, lane: int) -> str:
        """Lane ``lane``'s own port (the client port without lanes)."""
        if self.lanes == 1:
            return self.url
        return f"http://127.0.0.1:{self.port + LANE_PORT_OFFSET * (lane + 1)}"

    def signal(self, sig: signal.Signals) -> None:
        """``sig`` to the node: its process group (the supervisor and its lanes).
        Once the supervisor was reaped and its group is empty, the group's id
        may be another process's: nothing is sent then."""
        assert self.popen is not None
        if self.popen.poll() is not None and not _group_alive(self.popen.pid):
            return
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def lane_pids(self) -> dict[int, int]:
        """The running lane processes of this node: lane index -> pid."""
        assert self.popen is not None
        found: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                if ppid != self.popen.pid:
                    continue
                env = (entry / "environ").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            for var in env:
                if var.startswith(b"AI_MEMORY_LANE_INDEX="):
                    found[int(var.split(b"=", 1)[1])] = int(entry.name)
        return found


class Cluster:
    def __init__(self, tmp: Path, n: int = 3, *, write_quorum: int | None = None,
                 quorum_timeout_ms: int = 1000, catchup_interval_secs: float = 0.5,
                 secret: str | None = "test-cluster-secret", lanes: int = 1) -> None:
        self.tmp = tmp
        self.lanes = lanes
        self.ids = [f"node{i + 1}" for i in range(n)]
        offsets = lane_offsets(lanes)
        self.procs = {nid: Proc(nid, free_port(offsets), tmp / f"{nid}.db", tmp / f"{nid}.log",
                                lanes=lanes)
                      for nid in self.ids}
        self.net = ProxyNet()
        try:
            for src in self.ids:
                for dst in self.ids:
                    if src != dst:
                        self._add_link(src, dst, offsets)
        except BaseException:
            self.net.close()
            raise
        self.write_quorum = write_quorum
        self.quorum_timeout_ms = quorum_timeout_ms
        self.catchup_interval_secs = catchup_interval_secs
        self.secret = secret

    def _add_link(self, src: str, dst: str, offsets: tuple[int, ...]) -> None:
        target = self.procs[dst].port
        if offsets == (0,):
            self.net.add(src, dst, target)
            return
        for _ in range(20):  # a port found free may be taken before the proxy binds it
            port = free_port(offsets)
            try:
                self.net.add(src, dst, target, port=port,
                             extra=[(port + o, target + o) for o in offsets[1:]])
                return
            except OSError:
                continue
        raise RuntimeError(f"no free ports for the proxy {src} -> {dst}")

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
        if p.lanes != 1:
            cmd += ["--lanes", str(p.lanes)]
        return cmd + p.extra_args

    def start(self, nid: str | None = None, wait: bool = True) -> None:
        for node in [nid] if nid else self.ids:
            p = self.procs[node]
            env = {**os.environ, "PYTHONPATH": str(ROOT), **p.extra_env}
            with open(p.log, "ab") as log:  # the child keeps its own copy of the fd
                # A process group of its own, as a shell job: the node's lanes
                # are in it, and kill9/pause/resume signal all of them.
                p.popen = subprocess.Popen(self._cmd(node), cwd=ROOT, env=env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            for node in [nid] if nid else self.ids:
                self.wait_healthy(node)

    def wait_healthy(self, nid: str, timeout: float = 20.0) -> None:
        """Block until every lane of ``nid`` answers its health (the node's
        one port without lanes)."""
        deadline = time.monotonic() + timeout
        p = self.procs[nid]
        pending = list(range(p.lanes))
        while time.monotonic() < deadline:
            if p.popen is not None and p.popen.poll() is not None:
                raise RuntimeError(f"{nid} exited: {p.log.read_text()[-3000:]}")
            try:
                status, _ = http("GET", p.lane_url(pending[0]) + "/api/v1/health", timeout=1)
                if status == 200:
                    pending.pop(0)
                    if not pending:
                        return
                    continue
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{nid} not healthy (lanes {pending} not yet): "
                           f"{p.log.read_text()[-3000:]}")

    def wait_serving(self, nid: str, timeout: float = 20.0) -> None:
        """Block until ``nid``'s health says ``serving``: a member seeded at
        its first start (a peer held data already) refuses writes while it
        recovers, as ``cluster status`` shows an operator."""
        deadline = time.monotonic() + timeout
        body: Any = None
        p = self.procs[nid]
        pending = list(range(p.lanes))
        while time.monotonic() < deadline:
            try:
                status, body = http("GET", p.lane_url(pending[0]) + "/api/v1/health", timeout=1)
                if status == 200 and body.get("state") == "serving":
                    pending.pop(0)
                    if not pending:
                        return
                    continue
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{nid} still not serving ({body}): "
                           f"{self.procs[nid].log.read_text()[-3000:]}")

    def kill9(self, nid: str) -> None:
        """kill -9 of the whole node (its supervisor and every lane), as a crash."""
        p = self.procs[nid]
        assert p.popen is not None
        p.signal(signal.SIGKILL)
        p.popen.wait(timeout=10)
        self.wait_group_gone(nid)

    def wait_group_gone(self, nid: str, timeout: float = 10.0) -> None:
        """Until no process of ``nid``'s group is left (its supervisor and lanes)."""
        p = self.procs[nid]
        assert p.popen is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _group_alive(p.popen.pid):
                return
            time.sleep(0.02)
        raise TimeoutError(f"{p.node_id}: processes of its group still run after {timeout} s")

    def pause(self, nid: str) -> None:
        """SIGSTOP to the node: the supervisor and every lane."""
        self.procs[nid].signal(signal.SIGSTOP)

    def resume(self, nid: str) -> None:
        self.procs[nid].signal(signal.SIGCONT)

    def kill_lane(self, nid: str, lane: int, sig: signal.Signals = signal.SIGKILL) -> int:
        """``sig`` to lane ``lane`` of ``nid`` only; its pid."""
        pid = self.procs[nid].lane_pids()[lane]
        os.kill(pid, sig)
        return pid

    def restart(self, nid: str) -> None:
        self.start(nid)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.popen is None:
                continue
            if p.popen.poll() is None:
                try:
                    p.signal(signal.SIGCONT)
                    p.popen.terminate()
                    p.popen.wait(timeout=15)
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    p.signal(signal.SIGKILL)
                    p.popen.wait(timeout=5)
            p.signal(signal.SIGKILL)  # a lane left behind by its supervisor
        self.net.close()

    # -- HTTP -----------------------------------------------------------------
    def url(self, nid: str) -> str:
        return self.procs[nid].url

    def call(self, nid: str, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[int, Any]:
        return http(method, self.url(nid) + path, body, headers, timeout)

    def db_files(self, nid: str) -> list[Path]:
        """Every lane's database file of ``nid`` (lane 0's is the configured one)."""
        db = self.procs[nid].db
        return [db] + [db.with_name(f"{db.stem}.lane{i}{db.suffix}")
                       for i in range(1, self.procs[nid].lanes)]

    def lane_of(self, key: str) -> int:
        """The lane that keeps ``key`` on every node (0 without lanes)."""
        return lane_of(key, self.lanes)

    def status(self, nid: str, lane: int = 0) -> dict[str, Any]:
        """``nid``'s cluster status; with lanes, lane ``lane``'s (the node's status
        lists every lane's under ``lanes``)."""
        code, body = http("GET", self.procs[nid].lane_url(lane) + "/api/v1/cluster/status",
                          timeout=3)
        assert code == 200, body
        if "lanes" in body:
            found = body["lanes"][lane]
            assert found["lane"] == lane, found
            return found  # type: ignore[no-any-return]
        return body  # type: ignore[no-any-return]

    def wait_converged(self, timeout: float = 30.0, nodes: list[str] | None = None) -> float:
        """Block until every node reports the same version vector (with
        lanes: lane by lane); return the seconds it took."""
        nodes = nodes or self.ids
        start = time.monotonic()
        last: dict[str, Any] = {}
        while time.monotonic() - start < timeout:
            try:
                last = {f"{nid}/lane{lane}": self.status(nid, lane)["vv"]
                        for lane in range(self.lanes) for nid in nodes}
            except (OSError, AssertionError):
                time.sleep(0.1)
                continue
            by_lane = [[last[f"{nid}/lane{lane}"] for nid in nodes] for lane in range(self.lanes)]
            if all(all(v == vvs[0] for v in vvs) for vvs in by_lane):
                return time.monotonic() - start
            time.sleep(0.1)
        raise TimeoutError(f"no convergence in {timeout}s: {last}; {self.diagnosis(nodes)}")

    def diagnosis(self, nodes: list[str] | None = None) -> str:
        """A short account of each node for a failure message (CI shows the
        summary line whole, a node's log only in part): whether it
        recovers and from whom it waits, how it sees its peers, its
        writer's failures, and its last warnings."""
        parts = []
        for nid in nodes or self.ids:
            for lane in range(self.lanes):
                try:
                    st = self.status(nid, lane)
                except Exception as exc:  # a diagnosis never hides the failure it explains
                    parts.append(f"{nid}/lane{lane}: no status ({exc!r})")
                    continue
                peers = {p: "".join(f for f, on in (("A", v.get("alive")),
                                                    ("R", v.get("reachable")),
                                                    ("r", v.get("recovering")),
                                                    ("s", v.get("reseeding")),
                                                    ("M", v.get("membership_mismatch"))) if on)
                         for p, v in (st.get("peers") or {}).items()}
                writer = (st.get("oplog") or {}).get("writer") or {}
                parts.append(f"{nid}/lane{lane}: recovering={st.get('recovering')} "
                             f"waiting_for={st.get('recovery_waiting_for')} peers={peers} "
                             f"failed_batches={writer.get('failed_batches')}")
            log = self.procs[nid].log
            warned = [line for line in (log.read_text(errors="replace").splitlines()
                                        if log.exists() else [])
                      if " WARNING " in line or " ERROR " in line]
            if warned:
                parts.append(f"{nid} last warnings: {[w[-240:] for w in warned[-3:]]}")
        return "; ".join(parts)

    def logs(self) -> str:
        return "\n".join(f"--- {nid}\n{p.log.read_text()[-4000:]}"
                         for nid, p in self.procs.items() if p.log.exists())
