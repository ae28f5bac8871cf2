"""Runs a local cluster in the foreground: N child daemons, one terminal.

Flow:

1. Open the control channel (:mod:`cli.cluster_control`: ``DATA/cluster.json``
   and a Unix socket) at once, then start every child in its own session (so
   a Ctrl-C at the terminal reaches only the supervisor) with stdout and
   stderr joined into one pipe; a pump task prefixes each line with the node
   id and keeps the last ones for reports. On Linux the children also get a
   parent-death signal, so a supervisor killed with SIGKILL leaves no
   orphans behind. ``cluster.json`` lists every node's pid from its first
   start on.
2. One keeper task per node owns it for the whole run: it starts the node,
   polls its ``/api/v1/health`` until it answers with its own node id (a
   different id means another daemon holds that port: said once), and
   restarts the node whenever it exits unasked, at ANY moment (before it
   answers health, after, during the first start or long after), following
   :mod:`cli.restart_policy`: a capped, doubling backoff, and the tail of the
   node's output printed again once it keeps failing. A node dying never
   touches the others. A node that runs but is not healthy after
   ``limits.cluster_up_ready_timeout_secs`` is reported and left running (it
   may be waiting for its peers). The summary is printed the first time
   every node is healthy at once.
3. ``cluster stop NODE`` (SIGTERM, then SIGKILL after the grace) and
   ``cluster kill NODE`` (SIGKILL) take one node down and keep it down until
   ``cluster start NODE``, which answers once the node is healthy.
4. Ordered shutdown on SIGINT/SIGTERM: the keepers stop restarting, SIGTERM
   goes to every child still running, the supervisor waits up to
   ``limits.cluster_up_stop_grace_secs``, SIGKILLs what is left, and drains
   the output pumps. A second Ctrl-C skips the wait.

The only failure that ends the command by itself is one where the cluster
cannot have started at all: no node ever answered its health check and
every node failed its first starts in a row (a bad ``--exe``, an unusable
data directory, flags the daemon refuses). Restarting would repeat the same
error forever, so `cluster up` prints each node's last output and exits 1.
Anything else (one node that cannot bind its port, a node killed while
starting) is retried for as long as the command runs.

The exit status is 0 after a requested stop and 1 when it gave up.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli import cluster_control
from cli.client import ApiClient
from cli.restart_policy import NodeRecord, RestartPolicy, after_exit, give_up
from common import limits
from common.errors import AiMemoryError

HEALTH_POLL_SECS = 0.1
HEALTH_REQUEST_TIMEOUT_SECS = 1.0
PR_SET_PDEATHSIG = 1


@dataclass(slots=True)
class ChildSpec:
    node_id: str
    argv: list[str]
    url: str


@dataclass(slots=True)
class Child:
    spec: ChildSpec
    proc: asyncio.subprocess.Process | None = None
    pump: asyncio.Task[None] | None = None
    started_at: float = 0.0
    state: str = "starting"  # starting | running | restarting | stopped
    held: bool = False  # taken down by `cluster stop|kill`: not restarted until `cluster start`
    asked: bool = False  # the next start is a `cluster start`, not a restart
    failures: int = 0  # exits in a row, for the backoff
    starts: int = 0
    restarts: int = 0
    ever_healthy: bool = False
    last_status: int | None = None
    healthy: asyncio.Event = field(default_factory=asyncio.Event)  # this process answered
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # `cluster start|stop|kill`
    tail: deque[str] = field(
        default_factory=lambda: deque(maxlen=limits.cluster_up_log_tail_lines))

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.running and self.proc is not None else None


@dataclass(slots=True)
class Supervisor:
    specs: Sequence[ChildSpec]
    env: Mapping[str, str]
    out: Callable[[str], None]
    ready_timeout: float = limits.cluster_up_ready_timeout_secs
    stop_grace: float = limits.cluster_up_stop_grace_secs
    data_dir: Path | None = None  # where the control channel lives; None: no control channel
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    extra_state: Mapping[str, Any] = field(default_factory=dict)  # more for cluster.json
    children: list[Child] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _hurry: asyncio.Event = field(default_factory=asyncio.Event)
    _healthy_changed: asyncio.Event = field(default_factory=asyncio.Event)
    _control: asyncio.AbstractServer | None = None
    _ready: bool = False
    _exit_code: int = 0

    async def run(self, on_ready: Callable[[], None] | None = None) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.request_stop)
        self.children = [Child(spec) for spec in self.specs]
        tasks: list[asyncio.Task[None]] = []
        try:
            await self._open_control()
            self._save_state()
            tasks = [asyncio.create_task(self._keep(c)) for c in self.children]
            tasks.append(asyncio.create_task(self._announce(on_ready)))
            await self._stop.wait()
            return self._exit_code
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._close_control()
            await self._shutdown()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    def request_stop(self) -> None:
        """First call: stop in order. Second call: stop without waiting for grace."""
        if self._stop.is_set():
            self._hurry.set()
        self._stop.set()

    def child(self, node_id: str) -> Child | None:
        return next((c for c in self.children if c.spec.node_id == node_id), None)

    # -- one node's life ---------------------------------------------------------

    async def _spawn(self, child: Child) -> None:
        # The same command every time: a member whose database went missing
        # since finds its peers holding data and is seeded (daemon/replication/joining.py).
        child.tail.clear()
        child.healthy.clear()
        proc = await asyncio.create_subprocess_exec(
            *child.spec.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=dict(self.env),
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()) if sys.platform.startswith("linux") else None,
        )
        child.proc = proc
        child.pump = asyncio.create_task(self._pump(child, proc))
        child.started_at = _now()
        child.starts += 1
        child.state = "starting"
        self._save_state()

    async def _pump(self, child: Child, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            child.tail.append(line)
            self.out(f"[{child.spec.node_id}] {line}")

    async def _keep(self, child: Child) -> None:
        """Start ``child`` and restart it whenever it exits unasked, until the supervisor stops."""
        name = child.spec.node_id
        while not self._stop.is_set():
            if child.held:
                child.state = "stopped"
                self._save_state()
                child.wake.clear()
                await child.wake.wait()
                continue
            asked, child.asked = child.asked, False
            try:
                await self._spawn(child)
            except OSError as exc:
                self.out(f"[cluster] cannot start {name}: {exc}")
                child.tail.append(f"cannot start {name}: {exc}")
                status, answered = None, False
            else:
                assert child.proc is not None
                pid = child.proc.pid
                if child.starts == 1:
                    self.out(f"[cluster] started {name} (pid {pid}) for {child.spec.url}")
                elif asked:
                    self.out(f"[cluster] started {name} (pid {pid}) on request")
                else:
                    child.restarts += 1
                    self.out(f"[cluster] restarted {name} (pid {pid}, restart {child.restarts})")
                if child.held:  # `cluster stop|kill` came while it was being spawned
                    with contextlib.suppress(ProcessLookupError):
                        child.proc.kill()
                self._save_state()
                status, answered = await self._life(child)
            if self._stop.is_set():
                return
            child.last_status = status
            child.wake.clear()
            if child.held:
                continue  # `cluster stop|kill` asked for this exit
            await self._after_exit(child, status, answered)

    async def _life(self, child: Child) -> tuple[int, bool]:
        """Watch one process of ``child`` until it exits: its status, and whether it answered."""
        assert child.proc is not None and child.pump is not None
        health = asyncio.create_task(self._watch_health(child))
        try:
            status = await child.proc.wait()
        finally:
            health.cancel()
            await asyncio.gather(health, return_exceptions=True)
        await asyncio.gather(child.pump, return_exceptions=True)  # the whole output is in
        answered = child.healthy.is_set()
        child.healthy.clear()
        child.state = "restarting"
        self._save_state()
        return status, answered

    async def _after_exit(self, child: Child, status: int | None, answered: bool) -> None:
        name = child.spec.node_id
        decision = after_exit(self.policy, child.failures, _now() - child.started_at)
        child.failures = decision.failures
        self.out(f"[cluster] {name} exited unexpectedly with status {status}; "
                 f"restarting in {decision.delay:g}s (exit {decision.failures} in a row)"
                 + ("" if answered else "; it had not answered /api/v1/health yet"))
        if decision.report:
            self._report(child, f"keeps failing ({decision.failures} exits in a row); "
                                f"still restarting it, at most {self.policy.cap:g}s apart")
        records = [NodeRecord(c.ever_healthy, c.running, c.failures) for c in self.children]
        if give_up(self.policy, records):
            self.out("[cluster] no node could start: every one failed its first "
                     f"{self.policy.give_up_after} starts in a row; giving up "
                     "(a configuration problem: see the output above)")
            self._exit_code = 1
            self.request_stop()
            return
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._stop.wait()),
                                            asyncio.ensure_future(child.wake.wait())]
        try:
            await asyncio.wait(waits, timeout=decision.delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()

    def _report(self, child: Child, what: str) -> None:
        others = [c.spec.node_id for c in self.children if c is not child and c.running]
        serving = f"; {', '.join(others)} keep serving" if others else ""
        self.out(f"[cluster] {child.spec.node_id} {what}{serving}. Its last output:")
        for line in child.tail or ["(no output)"]:
            self.out(f"[cluster]   | {line}")

    async def _watch_health(self, child: Child) -> None:
        """Poll health until this process of ``child`` answers as itself."""
        name, url = child.spec.node_id, child.spec.url
        deadline = _now() + self.ready_timeout
        warned = mismatched = False
        while True:
            answer = await _health_node_id(url)
            if answer == name:
                child.healthy.set()
                self._healthy_changed.set()
                child.ever_healthy = True
                child.state = "running"
                self._save_state()
                return
            if answer is not None and not mismatched:
                mismatched = True
                self.out(f"[cluster] {url} answered as node {answer!r}, not {name!r}: "
                         "another daemon holds that port")
            if not warned and _now() > deadline:
                warned = True
                self._report(child, f"is running but not healthy after {self.ready_timeout:g}s;"
                                    " left running (it may be waiting for its peers)")
            await asyncio.sleep(HEALTH_POLL_SECS)

    async def _announce(self, on_ready: Callable[[], None] | None) -> None:
        """Call ``on_ready`` the first time every node is healthy at once."""
        while not all(c.healthy.is_set() and c.running for c in self.children):
            self._healthy_changed.clear()
            await self._healthy_changed.wait()
        self._ready = True
        self._save_state()
        if on_ready is not None:
            on_ready()

    # -- control channel ---------------------------------------------------------

    async def _open_control(self) -> None:
        if self.data_dir is None:
            return
        path = cluster_control.socket_path(self.data_dir)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by a supervisor that was killed
        self._control = await asyncio.start_unix_server(
            self._serve_control, path=str(path),
            limit=limits.cluster_control_request_max_bytes)
        os.chmod(path, 0o600)

    async def _close_control(self) -> None:
        if self._control is not None:
            self._control.close()
            with contextlib.suppress(Exception):
                await self._control.wait_closed()
            self._control = None
            with contextlib.suppress(FileNotFoundError):
                cluster_control.socket_path(self.data_dir or Path(".")).unlink()
        if self.data_dir is not None:
            with contextlib.suppress(FileNotFoundError):
                cluster_control.state_path(self.data_dir).unlink()

    async def _serve_control(self, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        await cluster_control.serve_one(reader, writer, self._command)

    async def _command(self, req: Mapping[str, Any]) -> dict[str, Any]:
        cmd, node = str(req.get("cmd")), str(req.get("node"))
        child = self.child(node)
        if child is None:
            return {"error": f"no node {node!r} in this cluster"}
        if self._stop.is_set():
            return {"error": "the cluster is stopping"}
        if cmd in ("stop", "kill"):
            return await self._take_down(child, cmd)
        if cmd == "start":
            wait = float(req.get("wait") or limits.cluster_up_start_wait_secs)
            return await self._bring_up(child, wait)
        return {"error": f"unknown command {cmd!r} (stop, start or kill)"}

    async def _take_down(self, child: Child, cmd: str) -> dict[str, Any]:
        node = child.spec.node_id
        child.held = True
        child.wake.set()
        reply: dict[str, Any] = {"node": node, "state": "stopped" if cmd == "stop" else "killed",
                                 "signal": "SIGTERM" if cmd == "stop" else "SIGKILL"}
        if child.running and child.proc is not None:
            reply["pid"] = child.proc.pid
            self.out(f"[cluster] {cmd} {node} requested")
            if cmd == "kill":
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
                await child.proc.wait()
            else:
                await self._terminate([child])
            reply["status"] = child.proc.returncode
        else:
            reply["note"] = "it was not running"
        self._save_state()
        self.out(f"[cluster] {node} is down (status {reply.get('status')}); "
                 f"`ai-memory cluster start {node}` brings it back")
        return reply

    async def _bring_up(self, child: Child, wait: float) -> dict[str, Any]:
        node = child.spec.node_id
        already = child.running and child.healthy.is_set()
        if child.held:
            child.held = False
            child.asked = True
            child.failures = 0
        child.wake.set()  # leave the hold, or skip what is left of a backoff
        deadline = _now() + wait
        while _now() < deadline and not self._stop.is_set():
            await asyncio.sleep(HEALTH_POLL_SECS / 2)
            if child.held:
                return {"error": f"{node} was taken down again meanwhile"}
            if child.running and child.healthy.is_set() and child.proc is not None:
                reply = {"node": node, "state": "running", "pid": child.proc.pid,
                         "url": child.spec.url}
                if already:
                    reply["note"] = "already running"
                return reply
        if self._stop.is_set():
            return {"error": "the cluster is stopping"}
        tail = " | ".join(list(child.tail)[-3:])
        return {"error": f"{node} does not answer {child.spec.url}/api/v1/health after {wait:g}s"
                         f" (state {child.state}); `cluster up` keeps trying"
                         + (f"; its last output: {tail}" if tail else ""),
                "code": "unavailable"}

    def _save_state(self) -> None:
        if self.data_dir is None:
            return
        nodes = {}
        for c in self.children:
            nodes[c.spec.node_id] = {
                "url": c.spec.url,
                "pid": c.pid,
                "state": "stopped" if c.held and not c.running else c.state,
                "restarts": c.restarts,
                "failures": c.failures,
                "last_status": None if c.running else c.last_status,
            }
        with contextlib.suppress(OSError):
            cluster_control.write_state(self.data_dir, {
                "supervisor_pid": os.getpid(),
                "control": str(cluster_control.socket_path(self.data_dir)),
                "ready": self._ready,
                **self.extra_state,
                "nodes": nodes,
            })

    # -- shutdown ----------------------------------------------------------------

    async def _terminate(self, children: list[Child]) -> None:
        """SIGTERM, wait the grace (or a second Ctrl-C), SIGKILL what is left."""
        procs = [(c, c.proc) for c in children if c.proc is not None]
        for _, proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        hurry = asyncio.create_task(self._hurry.wait())
        if procs:
            all_down = asyncio.gather(*(p.wait() for _, p in procs))
            watched: list[asyncio.Future[Any]] = [all_down, hurry]
            await asyncio.wait(
                watched, timeout=self.stop_grace, return_when=asyncio.FIRST_COMPLETED
            )
        hurry.cancel()
        for child, proc in procs:
            if proc.returncode is None:
                self.out(f"[cluster] {child.spec.node_id} did not stop in time; killing it")
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        for _, proc in procs:
            await proc.wait()

    async def _shutdown(self) -> None:
        running = [c for c in self.children if c.running]
        if running:
            self.out(f"[cluster] stopping {', '.join(c.spec.node_id for c in running)}")
        await self._terminate(running)
        await asyncio.gather(*(c.pump for c in self.children if c.pump is not None),
                             return_exceptions=True)
        for child in running:
            assert child.proc is not None
            self.out(f"[cluster] {child.spec.node_id} stopped (status {child.proc.returncode})")


def _now() -> float:
    return asyncio.get_running_loop().time()


async def _health_node_id(url: str) -> str | None:
    """The node id the daemon at ``url`` reports, or None if it does not answer yet."""
    client = ApiClient(url, timeout=HEALTH_REQUEST_TIMEOUT_SECS)
    try:
        reply = await asyncio.to_thread(client.get, "/api/v1/health")
    except AiMemoryError:
        return None
    if not isinstance(reply, dict):
        return None
    return str(reply.get("node_id", ""))


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A pre-exec hook asking Linux to SIGTERM the child when the supervisor dies."""

    def hook() -> None:  # runs in the child between fork and exec
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the supervisor died before prctl took effect
            os._exit(1)

    return hook
