"""Starting, watching and always stopping the servers under test.

Every server is a child process on 127.0.0.1 with its own free port, its
log in the run's temp dir, and its own process group. :class:`ServerProc`
starts one command and waits until ``GET /api/v1/health`` answers;
:class:`Cluster` starts N ``ai-memory serve`` nodes that list each other as
quorum peers (W=2 for three nodes, no peers for one) and can stop and
restart one node on the same port and database, which the catch-up phase
needs. :class:`Reaper` remembers every process started and stops them all
(SIGTERM, then SIGKILL after a grace period) on exit, on Ctrl-C and on
SIGTERM, so a failed run leaves nothing listening.

RSS is read from ``/proc/<pid>/status`` (VmRSS) so the harness needs no
extra dependency.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

HOST = "127.0.0.1"
HEALTH_PATH = "/api/v1/health"
START_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0
LANE_PORT_OFFSET = 100  # the daemon's default [server] lane_port_offset


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_window(low: int) -> tuple[int, int]:
    """Where to look for free ports: the 12,000 below ``low`` (the start of
    the kernel's ephemeral range), or this process's own slice of them when
    several test processes pick ports at once (pytest-xdist names each
    worker ``gwK`` of ``PYTEST_XDIST_WORKER_COUNT``). Each picker hands a
    port out once, but two processes could otherwise both pick a port the
    first has not bound yet."""
    start = max(1024, low - 12000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return start, low
    k, n = int(worker[2:]), max(1, int(count))
    size = (low - start) // n
    return start + (k % n) * size, start + (k % n + 1) * size


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports that were free on loopback a moment ago, below the
    kernel's ephemeral range, so that no client's outgoing connection takes
    one between this check and the node's bind."""
    low = _ephemeral_low()
    rng = random.Random()
    found: list[int] = []
    for _ in range(2000):
        if len(found) == n:
            return found
        port = rng.randrange(*port_window(low))
        if port not in found and _all_free([port]):
            found.append(port)
    raise RuntimeError(f"no {n} free ports below {low}")


def free_lane_ports(n: int, lanes: int, offset: int = LANE_PORT_OFFSET) -> list[int]:
    """``n`` distinct ports, each free on loopback a moment ago together with
    the lane ports a node with ``lanes`` lanes derives from it
    (``port + offset * (lane + 1)``, daemon/lanes/layout.py)."""
    if lanes <= 1:
        return free_ports(n)
    end = port_window(_ephemeral_low())[1]  # lane ports stay in this process's slice too
    for _ in range(50):
        base = free_ports(n)
        wanted = [p + offset * (i + 1) for p in base for i in range(lanes)]
        if (max(wanted) < end and _all_free(wanted)
                and len(set(wanted) | set(base)) == n * (lanes + 1)):
            return base
    raise RuntimeError(f"no {n} ports with {lanes} free lane ports each")


def _all_free(ports: list[int]) -> bool:
    socks = []
    try:
        for port in ports:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((HOST, port))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


def child_pids(pid: int) -> list[int]:
    """The live children of a process (every thread's), from /proc."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return sorted(set(out))


def lane_index(pid: int) -> int | None:
    """The lane a lane process serves (its ``AI_MEMORY_LANE_INDEX``), None for another process."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"AI_MEMORY_LANE_INDEX="):
            value = item.split(b"=", 1)[1]
            return int(value) if value.isdigit() else None
    return None


def node_pids(name: str, pid: int) -> list[tuple[str, int]]:
    """(name, pid) of every process of a node: the process started (the
    supervisor, with lanes; the node itself without) and, as
    ``<name>.lane<i>``, each lane process, found as its children."""
    out = [(name, pid)]
    lanes = [(lane_index(c), c) for c in child_pids(pid)]
    out += sorted((f"{name}.lane{i}", c) for i, c in lanes if i is not None)
    return out


def _wait_answers(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            http_json(url, timeout=1.0)
            return
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} not answering after {timeout_s}s") from None
            time.sleep(0.05)


def rss_bytes(pid: int) -> int:
    """Resident set size of a live process, from /proc."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for pid {pid}")


def ai_memory_bin() -> str:
    """The ``ai-memory`` entry point beside this interpreter, else on PATH."""
    beside = Path(sys.executable).with_name("ai-memory")
    if beside.exists():
        return str(beside)
    found = shutil.which("ai-memory")
    if found is None:
        raise FileNotFoundError("ai-memory is not installed in this environment")
    return found


def http_json(url: str, timeout: float = 5.0) -> Any:
    """GET a JSON document (stdlib only; used for control, never for load)."""
    import json

    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        exc.close()  # its response holds the connection (a node's 503 while a lane starts)
        raise


def post_json(url: str, body: Any, headers: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[int, Any]:
    import json

    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


class Reaper:
    """Stops every registered process when the harness exits, however it exits."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []
        self._installed = False

    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        atexit.register(self.stop_all)
        previous = signal.getsignal(signal.SIGTERM)

        def on_term(signum: int, frame: FrameType | None) -> None:
            self.stop_all()
            if callable(previous):
                previous(signum, frame)
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, on_term)

    def add(self, proc: subprocess.Popen[bytes]) -> None:
        self._procs.append(proc)

    def forget(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ValueError):
            self._procs.remove(proc)

    def stop_all(self) -> None:
        procs, self._procs = self._procs, []
        for p in procs:
            stop_process(p, STOP_GRACE_S)


REAPER = Reaper()


def stop_process(proc: subprocess.Popen[bytes], grace_s: float) -> int | None:
    """SIGTERM the process group, then SIGKILL it if it is still there."""
    if proc.poll() is not None:
        return proc.returncode
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=grace_s)


@dataclass
class ServerProc:
    """One server process on loopback."""

    name: str
    argv: list[str]
    port: int
    log_path: Path
    env: dict[str, str] | None = None
    health_path: str = HEALTH_PATH
    health_port: int | None = None  # when health is served on another port
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.proc.pid

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        self.launch()
        self.wait_healthy(timeout_s)

    def launch(self) -> None:
        """Start the process without waiting for it to answer."""
        REAPER.install()
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, start_new_session=True,
            )
        finally:
            log.close()
        REAPER.add(self.proc)

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                http_json(f"http://{HOST}:{self.health_port or self.port}{self.health_path}", timeout=1.0)
                return
            except (OSError, ValueError) as e:
                last = e
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"{self.name} not healthy after {timeout_s}s ({last}); log:\n{self.log_tail()}")

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        if self.proc is None:
            return
        stop_process(self.proc, grace_s)
        REAPER.forget(self.proc)
        self.proc = None

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def echo_server(workdir: Path) -> ServerProc:
    port = free_ports(1)[0]
    return ServerProc(
        name="echo",
        argv=[sys.executable, "-m", "bench.echo", "--host", HOST, "--port", str(port)],
        port=port,
        log_path=workdir / "echo.log",
        env={**os.environ, "PYTHONPATH": _repo_root() + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )


def _repo_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


@dataclass
class Cluster:
    """N ``ai-memory serve`` nodes on loopback that know each other."""

    workdir: Path
    size: int
    write_quorum: int
    nodes: list[ServerProc] = field(default_factory=list)
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] | None = None  # the nodes' environment (None: this process's)
    lanes: int = 0  # 0: plain ``serve``; N >= 1: ``serve --lanes N``
    name: str | None = None  # the label, when not the default

    @property
    def label(self) -> str:
        if self.name:
            return self.name  # the run's meta says the lane count of the others
        return "1 node" if self.size == 1 else f"{self.size} nodes W={self.write_quorum}"

    def lane_urls(self, node: int = 0) -> tuple[str, ...]:
        """The lane ports of node ``node`` (a client may go straight to the owning lane)."""
        port = self.nodes[node].port
        return tuple(f"http://{HOST}:{port + LANE_PORT_OFFSET * (i + 1)}" for i in range(self.lanes))

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(n.url for n in self.nodes)

    def start(self) -> Cluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        ports = free_lane_ports(self.size, self.lanes)
        ids = [f"node{i + 1}" for i in range(self.size)]
        binary = ai_memory_bin()
        for i, (node_id, port) in enumerate(zip(ids, ports, strict=True)):
            argv = [
                binary, "serve", "--host", HOST, "--port", str(port),
                "--db", str(self.workdir / f"{node_id}.db"), "--node-id", node_id,
            ]
            peers = [f"{pid}=http://{HOST}:{pp}" for j, (pid, pp) in enumerate(zip(ids, ports, strict=True)) if j != i]
            if peers:
                argv += ["--quorum-peers", ",".join(peers), "--quorum-writes", str(self.write_quorum)]
            if self.lanes >= 1:
                argv += ["--lanes", str(self.lanes)]
            argv += list(self.extra_args)  # a fresh cluster decides so itself (daemon/replication/joining.py)
            self.nodes.append(ServerProc(node_id, argv, port, self.workdir / f"{node_id}.log", env=self.env))
        try:
            # All at once, as members of a new cluster start: each waits for
            # the others before it serves (daemon/replication/joining.py).
            for n in self.nodes:
                n.launch()
            for n in self.nodes:
                n.wait_healthy(START_TIMEOUT_S)
            for i in range(self.size):  # the node's port answers once any one lane does
                for url in self.lane_urls(i):
                    _wait_answers(url + HEALTH_PATH, START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def status(self, i: int) -> Any:
        return http_json(self.nodes[i].url + "/api/v1/cluster/status")

    def rss(self) -> dict[str, int]:
        return {n.name: n.rss() for n in self.nodes if n.proc is not None}

    def pids(self) -> tuple[tuple[str, int], ...]:
        """(name, pid) of every process of every running node, for CPU
        accounting: with lanes, the supervisor and each lane process
        (``node1``, ``node1.lane0``, ...), read afresh (a restarted lane
        has a new pid)."""
        return tuple(p for n in self.nodes if n.proc is not None for p in node_pids(n.name, n.pid))

    def logs(self) -> dict[str, str]:
        return {n.name: n.log_tail() for n in self.nodes}


@contextlib.contextmanager
def running(server: ServerProc | Cluster) -> Iterator[Any]:
    """Start a server or cluster and stop it whatever happens inside."""
    try:
        server.start()
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def running_all(servers: list[ServerProc]) -> Iterator[list[ServerProc]]:
    """Start several servers together (waiting for each only after all
    were launched, since clustered servers need their peers to become
    healthy) and stop them all whatever happens inside."""
    try:
        for s in servers:
            s.launch()
        for s in servers:
            s.wait_healthy(START_TIMEOUT_S)
        yield servers
    finally:
        for s in servers:
            s.stop()
