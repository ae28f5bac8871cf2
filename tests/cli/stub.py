"""A stub daemon for CLI tests: the shared scripted daemon
(:class:`tests.fakes.FakeNode`) served from a thread of its own, because the
CLI under test is synchronous.

Tests script replies per (method, path) with :meth:`StubDaemon.reply`; each
scripted reply is used once, except the last one for a route, which keeps
answering. Every request is recorded so a test can check exactly what the
CLI sent. Unscripted routes answer 404 with the daemon's error shape.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tests.fakes import FakeNode, Recorded, Scripted


class StubDaemon:
    def __init__(self) -> None:
        self._node = FakeNode()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.url = ""

    @property
    def requests(self) -> list[Recorded]:
        return self._node.requests

    def reply(self, method: str, path: str, body: Any = None, status: int = 200,
              headers: dict[str, str] | None = None) -> StubDaemon:
        self._node.reply(method, path, body, status, headers)
        return self

    def last(self, method: str | None = None, path: str | None = None) -> Recorded:
        return self._node.last(method, path)

    def start(self) -> StubDaemon:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._node.start(), self._loop).result(10)
        self.url = self._node.url
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._node.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


__all__ = ["Recorded", "Scripted", "StubDaemon"]
