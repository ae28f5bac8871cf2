"""``ai-memory serve`` with more than one lane: start, watch and stop the lane processes.

The supervisor serves nothing itself. It makes a private directory (mode
0700) for the lanes' local sockets, starts one lane process per lane
(``python -m cli.lane_child``, which runs :func:`daemon.server.run` with
the same settings and its lane's index), and then:

* **readiness**: each lane reports to a datagram socket of its own in that
  directory, in systemd's ``sd_notify`` form (the lane runs the unchanged
  :class:`daemon.runtime.systemd.Notifier`). The supervisor says ``READY=1``
  to systemd once every lane did, passes on a lane's ``EXTEND_TIMEOUT_USEC``
  (a lane waiting to join the cluster) and pings the watchdog only while
  every lane pings it;
* **a lane that exits** before it was ever ready (a bad database, a port in
  use) stops the node with that lane's exit status: restarting it would fail
  the same way. A lane that exits later is restarted, after a backoff that
  doubles up to ``limits.lane_restart_backoff_max_secs`` and resets once it
  serves again; the other lanes keep serving meanwhile;
* **SIGTERM/SIGINT** is passed to every lane; a lane still running after the
  shutdown grace is killed. A supervisor that dies without passing it on
  (kill -9) takes its lanes along: each asked Linux for a SIGTERM when its
  parent goes (``cli/lane_child.py``).

The lanes inherit the supervisor's environment; their settings travel in
``AI_MEMORY_LANE_FLAGS`` (the command-line flags, as JSON), their index in
``AI_MEMORY_LANE_INDEX`` and the directory in ``AI_MEMORY_LANE_DIR``: never
on a command line, where a secret would be visible to every user.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import sqlite3
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import limits
from daemon.lanes.layout import check_layout
from daemon.runtime.systemd import Notifier
from daemon.settings import Settings

log = logging.getLogger("ai_memory.lanes")

FLAGS_ENV = "AI_MEMORY_LANE_FLAGS"
INDEX_ENV = "AI_MEMORY_LANE_INDEX"
DIR_ENV = "AI_MEMORY_LANE_DIR"
PARENT_ENV = "AI_MEMORY_LANE_SUPERVISOR"  # this pid: a lane exits when it is gone


@dataclass
class _Lane:
    index: int
    notify_path: str
    proc: asyncio.subprocess.Process | None = None
    ready: bool = False  # reported READY=1 since it was last started
    ever_ready: bool = False
    last_ping: float = 0.0
    restarts: int = 0
    sock: socket.socket | None = field(default=None, repr=False)


DIR_PREFIX = "ai-memory-lanes-"  # + the supervisor's pid + "-" + a random part


def sweep_stale_dirs(root: str) -> list[str]:
    """Remove the private directories (sockets only) that supervisors killed
    without their cleanup left in ``root``: ours (same uid), named after a
    pid that no longer runs. A live pid keeps its directory, even a reused
    one. Returns what was removed."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            name = entry.name
            if not name.startswith(DIR_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            pid_text = name[len(DIR_PREFIX):].partition("-")[0]
            if not pid_text.isdigit() or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            try:
                os.kill(int(pid_text), 0)
            except ProcessLookupError:
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
            except OSError:  # alive, another user's
                continue
    return removed


class Supervisor:
    def __init__(self, settings: Settings, flags: Mapping[str, Any], notifier: Notifier,
                 env: Mapping[str, str]) -> None:
        self.settings = settings
        self.flags = {k: v for k, v in flags.items() if v is not None}
        self.notifier = notifier
        self.env = dict(env)
        sweep_stale_dirs(tempfile.gettempdir())
        self.dir = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")  # mode 0700
        self.lanes = [_Lane(i, str(Path(self.dir) / f"notify{i}.sock"))
                      for i in range(settings.server.lanes)]
        self.stopping = asyncio.Event()
        self.exit_code = 0
        self._announced = False

    # -- the lanes' reports ------------------------------------------------
    def _open_reports(self) -> None:
        loop = asyncio.get_running_loop()
        for lane in self.lanes:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            sock.bind(lane.notify_path)
            sock.setblocking(False)
            lane.sock = sock
            loop.add_reader(sock.fileno(), self._on_report, lane)

    def _on_report(self, lane: _Lane) -> None:
        assert lane.sock is not None
        while True:
            try:
                data = lane.sock.recv(4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            for line in data.decode(errors="replace").splitlines():
                self._report(lane, line)

    def _report(self, lane: _Lane, line: str) -> None:
        key, _, value = line.partition("=")
        if key == "READY":
            lane.ready = lane.ever_ready = True
            lane.last_ping = time.monotonic()
            log.info("lane %s serves", lane.index)
            if not self._announced and all(x.ready for x in self.lanes):
                self._announced = True
                s = self.settings.server
                self.notifier.notify("READY=1", f"STATUS=serving on {s.host}:{s.port} with "
                                                f"{s.lanes} lanes")
        elif key == "WATCHDOG":
            lane.last_ping = time.monotonic()
        elif key == "EXTEND_TIMEOUT_USEC":
            self.notifier.notify(line)
        elif key == "STATUS" and not self._announced:
            self.notifier.notify(f"STATUS=lane {lane.index}: {value}")

    async def _watchdog(self) -> None:
        usec = self.notifier.watchdog_usec
        if usec is None:
            return
        interval = usec / 1_000_000 / 2
        while True:
            await asyncio.sleep(interval)
            fresh = time.monotonic() - 2 * interval
            if self._announced and all(x.last_ping >= fresh for x in self.lanes):
                self.notifier.notify("WATCHDOG=1")

    # -- the processes ---------------------------------------------------------
    def _child_env(self, lane: _Lane) -> dict[str, str]:
        env = dict(self.env)
        for name in ("NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", "LISTEN_FDS", "LISTEN_PID"):
            env.pop(name, None)
        env.update({FLAGS_ENV: json.dumps(self.flags), INDEX_ENV: str(lane.index),
                    DIR_ENV: self.dir, PARENT_ENV: str(os.getpid()),
                    "NOTIFY_SOCKET": lane.notify_path})
        if self.notifier.watchdog_usec is not None:
            env["WATCHDOG_USEC"] = str(self.notifier.watchdog_usec)
        return env

    async def _start(self, lane: _Lane) -> None:
        lane.ready = False
        lane.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cli.lane_child", env=self._child_env(lane),
            start_new_session=False)

    async def _keep(self, lane: _Lane) -> None:
        backoff = 0.5
        while True:
            await self._start(lane)
            assert lane.proc is not None
            code = await lane.proc.wait()
            if self.stopping.is_set():
                return
            if not lane.ever_ready:
                log.error("lane %s exited with status %s before it served: stopping the node",
                          lane.index, code)
                self.exit_code = code if code > 0 else 1
                self.stopping.set()
                return
            lane.restarts += 1
            if lane.ready:
                backoff = 0.5
            log.error("lane %s exited with status %s; restarting it in %.1f s",
                      lane.index, code, backoff)
            lane.ready = False
            try:
                await asyncio.wait_for(self.stopping.wait(), backoff)
                return
            except TimeoutError:
                pass
            backoff = min(backoff * 2, limits.lane_restart_backoff_max_secs)

    async def _stop_all(self) -> None:
        await self.notifier.stopping()
        procs = [x.proc for x in self.lanes if x.proc is not None and x.proc.returncode is None]
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        grace = self.settings.server.shutdown_grace_secs + 5.0
        waits = [asyncio.ensure_future(p.wait()) for p in procs]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=grace)
            for p in procs:
                if p.returncode is None:
                    log.error("lane process %s did not stop within %.0f s: killing it", p.pid, grace)
                    with contextlib.suppress(ProcessLookupError):
                        p.kill()
            if pending:
                await asyncio.wait(pending)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self.stopping.set)
        with contextlib.suppress(NotImplementedError):  # passed on: the lanes reload TLS files
            loop.add_signal_handler(signal.SIGHUP, self._pass_on, signal.SIGHUP)
        self._open_reports()
        keepers = [asyncio.ensure_future(self._keep(x)) for x in self.lanes]
        watchdog = asyncio.ensure_future(self._watchdog())
        s = self.settings.server
        log.info("ai-memory %s starting %s lanes on %s:%s (lane ports %s + %s x lane)",
                 self.settings.version, s.lanes, s.host, s.port, s.port, s.lane_port_offset)
        try:
            await self.stopping.wait()
        finally:
            watchdog.cancel()
            await self._stop_all()
            for k in keepers:
                k.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)
            for lane in self.lanes:
                if lane.sock is not None:
                    loop.remove_reader(lane.sock.fileno())
                    lane.sock.close()
            shutil.rmtree(self.dir, ignore_errors=True)
        return self.exit_code

    def _pass_on(self, sig: signal.Signals) -> None:
        for lane in self.lanes:
            if lane.proc is not None and lane.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    lane.proc.send_signal(sig)


def refuse_another_count(settings: Settings) -> None:
    """Before any lane starts: lane 0's database, recorded for another lane
    count (or a node's without lanes), stops the node here with lane 0's own
    refusal (:func:`daemon.lanes.layout.check_layout`), so that the lanes of
    the new count never create their files beside it. A file this cannot
    read is left to lane 0 to judge, as before."""
    path = settings.store.db_path
    if not os.path.exists(path):
        return
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute("SELECT value FROM store_meta WHERE name = 'lane_layout'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return
    check_layout("" if row is None else str(row[0]), 0, settings.server.lanes, path, fresh=False)


def run(settings: Settings, flags: Mapping[str, Any], notifier: Notifier) -> int:
    """Supervise ``settings.server.lanes`` lane processes until SIGTERM; the exit status."""
    from daemon.runtime.logs import configure as configure_logs

    configure_logs(settings.log_level, settings.log_format, settings.cluster.node_id)
    return asyncio.run(Supervisor(settings, flags, notifier, os.environ).run())
