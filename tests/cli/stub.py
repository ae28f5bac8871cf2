"""A stub daemon for CLI tests: a real aiohttp server on loopback, in a thread.

Tests script replies per (method, path) with :meth:`StubDaemon.reply`; each
scripted reply is used once, except the last one for a route, which keeps
answering. Every request is recorded (method, path, query, headers, JSON
body) so a test can check exactly what the CLI sent. Unscripted routes
answer 404 with the daemon's error shape.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: CIMultiDict[str]
    body: Any


@dataclass
class Scripted:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class StubDaemon:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._routes: dict[tuple[str, str], list[Scripted]] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def reply(
        self,
        method: str,
        path: str,
        body: Any = None,
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> StubDaemon:
        self._routes.setdefault((method, path), []).append(Scripted(status, body, headers or {}))
        return self

    def last(self, method: str | None = None, path: str | None = None) -> Recorded:
        matching = [
            r
            for r in self.requests
            if (method is None or r.method == method) and (path is None or r.path == path)
        ]
        assert matching, f"no {method} {path} request was made"
        return matching[-1]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.requests.append(
            Recorded(
                request.method,
                request.path,
                dict(request.query),
                CIMultiDict(request.headers),
                body,
            )
        )
        queue = self._routes.get((request.method, request.path))
        if not queue:
            return web.json_response({"error": "no such route", "code": "not_found"}, status=404)
        scripted = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(scripted.body, str):
            return web.Response(
                text=scripted.body,
                status=scripted.status,
                headers=scripted.headers,
                content_type="text/plain",
            )
        return web.json_response(scripted.body, status=scripted.status, headers=scripted.headers)

    async def _start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return f"http://127.0.0.1:{port}"

    def start(self) -> StubDaemon:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
