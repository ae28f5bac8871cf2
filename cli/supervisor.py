"""Runs a local cluster in the foreground: N child daemons, one terminal.

Flow:

1. Start every child in its own session (so a Ctrl-C at the terminal reaches
   only the supervisor) with stdout and stderr joined into one pipe; a pump
   task prefixes each line with the node id. On Linux the children also get
   a parent-death signal, so a supervisor killed with SIGKILL leaves no
   orphans behind.
2. Poll each child's ``/api/v1/health`` until it answers with its own node
   id (a different id means another daemon already holds that port), within
   ``limits.cluster_up_ready_timeout_secs``.
3. Print a summary and wait for SIGINT/SIGTERM or for a child to exit.
4. Ordered shutdown: SIGTERM to every child still running, wait up to
   ``limits.cluster_up_stop_grace_secs``, SIGKILL what is left, drain the
   output pumps. A second Ctrl-C skips the wait.

The exit status is 0 after a requested stop and 1 when a child failed to
start or died on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
    expected_exit: bool = False


@dataclass(slots=True)
class Supervisor:
    specs: Sequence[ChildSpec]
    env: Mapping[str, str]
    out: Callable[[str], None]
    ready_timeout: float = limits.cluster_up_ready_timeout_secs
    stop_grace: float = limits.cluster_up_stop_grace_secs
    children: list[Child] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _hurry: asyncio.Event = field(default_factory=asyncio.Event)

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
            if on_ready is not None:
                on_ready()
            return await self._watch()
        finally:
            await self._shutdown()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    def request_stop(self) -> None:
        """First call: stop in order. Second call: stop without waiting for grace."""
        if self._stop.is_set():
            self._hurry.set()
        self._stop.set()

    async def _start(self, spec: ChildSpec) -> None:
        proc = await asyncio.create_subprocess_exec(
            *spec.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=dict(self.env),
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()) if sys.platform.startswith("linux") else None,
        )
        pump = asyncio.create_task(self._pump(spec.node_id, proc))
        self.children.append(Child(spec, proc, pump))
        self.out(f"[cluster] started {spec.node_id} (pid {proc.pid}) for {spec.url}")

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

    async def _watch(self) -> int:
        stop = asyncio.create_task(self._stop.wait())
        exits = {asyncio.create_task(c.proc.wait()): c for c in self.children}
        try:
            done, _ = await asyncio.wait({stop, *exits}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stop, *exits):
                task.cancel()
        if stop in done:
            return 0
        for task in done:
            child = exits[task]
            self.out(
                f"[cluster] {child.spec.node_id} exited unexpectedly with status "
                f"{child.proc.returncode}; stopping the others"
            )
        return 1

    async def _shutdown(self) -> None:
        running = [c for c in self.children if c.proc.returncode is None]
        for child in running:
            child.expected_exit = True
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
        if running:
            self.out(f"[cluster] stopping {', '.join(c.spec.node_id for c in running)}")
        hurry = asyncio.create_task(self._hurry.wait())
        if running:
            all_down = asyncio.gather(*(c.proc.wait() for c in running))
            watched: list[asyncio.Future[Any]] = [all_down, hurry]
            await asyncio.wait(
                watched, timeout=self.stop_grace, return_when=asyncio.FIRST_COMPLETED
            )
        hurry.cancel()
        for child in running:
            if child.proc.returncode is None:
                self.out(f"[cluster] {child.spec.node_id} did not stop in time; killing it")
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
        for child in self.children:
            await child.proc.wait()
        await asyncio.gather(*(c.pump for c in self.children), return_exceptions=True)
        for child in running:
            self.out(f"[cluster] {child.spec.node_id} stopped (status {child.proc.returncode})")


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
