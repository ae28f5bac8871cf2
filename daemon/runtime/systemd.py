"""systemd readiness and watchdog (``sd_notify``), written by hand.

Under ``Type=notify`` systemd passes ``NOTIFY_SOCKET``: a Unix datagram
socket (a path, or an abstract name written ``@name``). The daemon sends
newline-separated ``KEY=VALUE`` lines to it:

- ``READY=1`` once the node has opened its store and its HTTP site listens,
  so ``systemctl start`` returns only when the node can serve and units
  ordered ``After=`` it start after that;
- ``STOPPING=1`` when the ordered shutdown begins;
- ``WATCHDOG=1`` every half of ``WATCHDOG_USEC`` (when the unit sets
  ``WatchdogSec=``), from a task on the event loop: a loop that is blocked
  or dead stops pinging and systemd restarts the node.
- ``STATUS=...`` a one-line human summary shown by ``systemctl status``.

Without ``NOTIFY_SOCKET`` every call does nothing, so the same binary runs
in a terminal, under ``cluster up`` and under systemd. A failed send is
logged and never stops the daemon. The environment is read once, at the
CLI boundary (:meth:`Notifier.from_env`); nothing below reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger("ai_memory.systemd")


class Notifier:
    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec if watchdog_usec and watchdog_usec > 0 else None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str], pid: int | None = None) -> Notifier:
        """The notifier systemd asked for in ``env`` (``NOTIFY_SOCKET``,
        ``WATCHDOG_USEC``, ``WATCHDOG_PID``); a silent one when absent."""
        address = env.get("NOTIFY_SOCKET") or None
        usec: int | None = None
        raw = env.get("WATCHDOG_USEC")
        if raw:
            try:
                usec = int(raw)
            except ValueError:
                log.warning("ignoring WATCHDOG_USEC=%r: not an integer", raw)
        watchdog_pid = env.get("WATCHDOG_PID")
        if watchdog_pid and watchdog_pid != str(pid if pid is not None else os.getpid()):
            usec = None  # the watchdog is meant for another process
        return cls(address, usec)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def _sockaddr(self) -> str | bytes:
        assert self.address is not None
        if self.address.startswith("@"):
            return b"\0" + self.address[1:].encode()
        return self.address

    def notify(self, *lines: str) -> bool:
        """Send ``lines`` as one datagram; True if it was sent."""
        if self.address is None:
            return False
        data = "\n".join(lines).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(data, self._sockaddr())
        except OSError as exc:
            log.warning("sd_notify to %s failed: %s", self.address, exc)
            return False
        return True

    def ready(self, status: str) -> None:
        self.notify("READY=1", f"STATUS={status}")
        if self.watchdog_usec is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watchdog())

    async def stopping(self, status: str = "shutting down") -> None:
        await self.close()
        self.notify("STOPPING=1", f"STATUS={status}")

    async def _watchdog(self) -> None:
        assert self.watchdog_usec is not None
        interval = self.watchdog_usec / 1_000_000 / 2
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(interval)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
