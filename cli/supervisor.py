"""Runs a local cluster in the foreground: N child daemons, one terminal.

Flow:

1. Start every child in its own session (so a Ctrl-C at the terminal reaches
   only the supervisor) with stdout and stderr joined into one pipe; a pump
   task prefixes each line with the node id. On Linux the children also get
   a parent-death signal, so a supervisor killed with SIGKILL leaves no
   orphans behind.
2. Poll each child's ``/api/v1/health`` until it answers with its own node
   id (a different id means another daemon already holds that port), within
   ``limits.cluster_up_ready_timeout_secs``. A child that exits here fails
   the whole command: that is a configuration problem, not a crash.
3. Print a summary, open the control channel (:mod:`cli.cluster_control`)
   and keep every node running until SIGINT/SIGTERM. A node that exits on
   its own is reported and restarted after a capped backoff (0.5 s, doubling
   up to ``limits.cluster_up_restart_backoff_max_secs``; a node that stayed up
   ``limits.cluster_up_restart_reset_secs`` starts over), while the others keep
   serving. ``cluster stop NODE`` (SIGTERM, then SIGKILL after the grace) and
   ``cluster kill NODE`` (SIGKILL) take one node down and keep it down until
   ``cluster start NODE``.
4. Ordered shutdown: SIGTERM to every child still running, wait up to
   ``limits.cluster_up_stop_grace_secs``, SIGKILL what is left, drain the
   output pumps. A second Ctrl-C skips the wait.

The exit status is 0 after a requested stop and 1 when a child failed to
start.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli import cluster_control
from cli.client import ApiClient
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
    proc: asyncio.subprocess.Process
    pump: asyncio.Task[None]
    started_at: float = 0.0
    held: bool = False  # taken down by `cluster stop|kill`: not restarted until `cluster start`
    failures: int = 0  # exits in a row, for the backoff
    restarts: int = 0
    resume: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(slots=True)
class Supervisor:
    specs: Sequence[ChildSpec]
    env: Mapping[str, str]
    out: Callable[[str], None]
    ready_timeout: float = limits.cluster_up_ready_timeout_secs
    stop_grace: float = limits.cluster_up_stop_grace_secs
    data_dir: Path | None = None  # where the control channel lives; None: no control channel
    backoff_first: float = limits.cluster_up_restart_backoff_first_secs
    backoff_max: float = limits.cluster_up_restart_backoff_max_secs
    backoff_reset: float = limits.cluster_up_restart_reset_secs
    children: list[Child] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _hurry: asyncio.Event = field(default_factory=asyncio.Event)
    _control: asyncio.AbstractServer | None = None

    async def run(self, on_ready: Callable[[], None] | None = None) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.request_stop)
        try:
            try:
                for spec in self.specs:
                    await self._start(spec)
                ready = await self._until_ready()
            except OSError as exc:
                self.out(f"[cluster] cannot start a node: {exc}")
                ready = False
            if not ready:
                return 1
            await self._open_control()
            if on_ready is not None:
                on_ready()
            return await self._watch()
        finally:
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

    async def _spawn(self, spec: ChildSpec) -> tuple[asyncio.subprocess.Process, asyncio.Task[None]]:
        proc = await asyncio.create_subprocess_exec(
            *spec.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=dict(self.env),
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()) if sys.platform.startswith("linux") else None,
        )
        return proc, asyncio.create_task(self._pump(spec.node_id, proc))

    async def _start(self, spec: ChildSpec) -> None:
        proc, pump = await self._spawn(spec)
        self.children.append(Child(spec, proc, pump, started_at=_now()))
        self.out(f"[cluster] started {spec.node_id} (pid {proc.pid}) for {spec.url}")

    async def _restart(self, child: Child) -> None:
        # The same command: a member whose database went missing since finds
        # its peers holding data, and is seeded from one (daemon/joining.py).
        child.proc, child.pump = await self._spawn(child.spec)
        child.started_at = _now()
        self._save_state()

    async def _pump(self, node_id: str, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            self.out(f"[{node_id}] {raw.decode('utf-8', 'replace').rstrip()}")

    async def _until_ready(self) -> bool:
        """True once every child answers health as itself; False on stop, death or timeout."""
        deadline = asyncio.get_running_loop().time() + self.ready_timeout
        pending = list(self.children)
        while pending:
            if self._stop.is_set():
                return False
            for child in self.children:
                if child.proc.returncode is not None:
                    self.out(
                        f"[cluster] {child.spec.node_id} exited with status "
                        f"{child.proc.returncode} while starting"
                    )
                    return False
            for child in list(pending):
                answer = await _health_node_id(child.spec.url)
                if answer is None:
                    continue
                if answer != child.spec.node_id:
                    self.out(
                        f"[cluster] {child.spec.url} answered as node {answer!r}, not "
                        f"{child.spec.node_id!r}: another daemon holds that port"
                    )
                    return False
                pending.remove(child)
            if not pending:
                return True
            if asyncio.get_running_loop().time() > deadline:
                names = ", ".join(c.spec.node_id for c in pending)
                self.out(f"[cluster] {names} not healthy after {self.ready_timeout:g}s; giving up")
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), HEALTH_POLL_SECS)
        return True

    # -- keeping nodes up --------------------------------------------------------

    async def _watch(self) -> int:
        keepers = [asyncio.create_task(self._keep(c)) for c in self.children]
        self._save_state()
        try:
            await self._stop.wait()
        finally:
            for task in keepers:
                task.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)
        return 0

    async def _keep(self, child: Child) -> None:
        """Restart ``child`` whenever it exits unasked, until the supervisor stops."""
        name = child.spec.node_id
        while not self._stop.is_set():
            status = await child.proc.wait()
            await asyncio.gather(child.pump, return_exceptions=True)
            if self._stop.is_set():
                return
            if child.proc.returncode is None:
                continue  # `cluster start` already replaced it
            self._save_state()
            if child.held:
                child.resume.clear()
                if child.proc.returncode is not None:
                    await child.resume.wait()  # `cluster start` spawned it again
                continue
            if _now() - child.started_at >= self.backoff_reset:
                child.failures = 0
            child.failures += 1
            delay = cluster_control.restart_delay(child.failures, self.backoff_first,
                                                  self.backoff_max)
            self.out(f"[cluster] {name} exited unexpectedly with status {status}; "
                     f"restarting in {delay:g}s (exit {child.failures} in a row)")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            if self._stop.is_set() or child.held or child.proc.returncode is None:
                continue  # stopping, taken down meanwhile, or already started by hand
            try:
                await self._restart(child)
            except OSError as exc:
                self.out(f"[cluster] cannot restart {name}: {exc}")
                continue
            child.restarts += 1
            self._save_state()
            self.out(f"[cluster] restarted {name} (pid {child.proc.pid}, "
                     f"restart {child.restarts})")

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
        try:
            try:
                line = await reader.readline()
                req = json.loads(line)
                if not isinstance(req, dict):
                    raise ValueError("not an object")
                reply = await self._command(str(req.get("cmd")), str(req.get("node")))
            except (ValueError, asyncio.LimitOverrunError) as exc:
                reply = {"error": f"bad control request: {exc}"}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _command(self, cmd: str, node: str) -> dict[str, Any]:
        child = self.child(node)
        if child is None:
            return {"error": f"no node {node!r} in this cluster"}
        if self._stop.is_set():
            return {"error": "the cluster is stopping"}
        running = child.proc.returncode is None
        if cmd in ("stop", "kill"):
            child.held = True
            if running:
                self.out(f"[cluster] {cmd} {node} requested")
                if cmd == "kill":
                    with contextlib.suppress(ProcessLookupError):
                        child.proc.kill()
                    await child.proc.wait()
                else:
                    await self._terminate([child])
            self._save_state()
            self.out(f"[cluster] {node} is down (status {child.proc.returncode}); "
                     f"`ai-memory cluster start {node}` brings it back")
            return {"node": node, "state": "stopped", "status": child.proc.returncode}
        if cmd == "start":
            if running:
                return {"node": node, "state": "running", "pid": child.proc.pid,
                        "note": "already running"}
            child.held = False
            child.failures = 0
            await self._restart(child)
            child.resume.set()
            self.out(f"[cluster] started {node} (pid {child.proc.pid}) on request")
            return {"node": node, "state": "running", "pid": child.proc.pid}
        return {"error": f"unknown command {cmd!r} (stop, start or kill)"}

    def _save_state(self) -> None:
        if self.data_dir is None:
            return
        nodes = {}
        for c in self.children:
            up = c.proc.returncode is None
            nodes[c.spec.node_id] = {
                "url": c.spec.url,
                "pid": c.proc.pid if up else None,
                "state": "running" if up else ("stopped" if c.held else "restarting"),
                "restarts": c.restarts,
                "last_status": None if up else c.proc.returncode,
            }
        with contextlib.suppress(OSError):
            cluster_control.write_state(self.data_dir, {
                "supervisor_pid": os.getpid(),
                "control": str(cluster_control.socket_path(self.data_dir)),
                "nodes": nodes,
            })

    # -- shutdown ----------------------------------------------------------------

    async def _terminate(self, children: list[Child]) -> None:
        """SIGTERM, wait the grace (or a second Ctrl-C), SIGKILL what is left."""
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
        hurry = asyncio.create_task(self._hurry.wait())
        if children:
            all_down = asyncio.gather(*(c.proc.wait() for c in children))
            watched: list[asyncio.Future[Any]] = [all_down, hurry]
            await asyncio.wait(
                watched, timeout=self.stop_grace, return_when=asyncio.FIRST_COMPLETED
            )
        hurry.cancel()
        for child in children:
            if child.proc.returncode is None:
                self.out(f"[cluster] {child.spec.node_id} did not stop in time; killing it")
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
        for child in children:
            await child.proc.wait()

    async def _shutdown(self) -> None:
        running = [c for c in self.children if c.proc.returncode is None]
        if running:
            self.out(f"[cluster] stopping {', '.join(c.spec.node_id for c in running)}")
        await self._terminate(running)
        for child in self.children:
            await child.proc.wait()
        await asyncio.gather(*(c.pump for c in self.children), return_exceptions=True)
        for child in running:
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
