"""A scripted fake daemon for client tests (MCP server, CLI): a real aiohttp
server on loopback, in the test's loop (:class:`FakeNode`) or on a thread of
its own for synchronous callers (``tests/cli/stub.py``).

Tests script replies per (method, path) with :meth:`FakeNode.reply`; each
scripted reply is used once except the last for a route, which keeps
answering. A ``str`` reply is sent as plain text. ``DROP`` as a reply closes the connection without an answer (a
transport failure as the client sees it). Every request is recorded so a
test can check exactly what the client sent. Unscripted routes
answer 404 in the node's error shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

DROP = object()


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


class FakeNode:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._routes: dict[tuple[str, str], list[Scripted]] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""

    def reply(
        self,
        method: str,
        path: str,
        body: Any = None,
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> FakeNode:
        self._routes.setdefault((method, path), []).append(Scripted(status, body, headers or {}))
        return self

    def made(self, method: str | None = None, path: str | None = None) -> list[Recorded]:
        return [r for r in self.requests
                if (method is None or r.method == method) and (path is None or r.path == path)]

    def last(self, method: str | None = None, path: str | None = None) -> Recorded:
        matching = self.made(method, path)
        assert matching, f"no {method} {path} request was made"
        return matching[-1]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append(
            Recorded(
                request.method,
                request.path,
                dict(request.query),
                CIMultiDict(request.headers),
                json.loads(raw) if raw else None,
            )
        )
        queue = self._routes.get((request.method, request.path))
        if not queue:
            return web.json_response(
                {"error": f"no route {request.path}", "code": "not_found"}, status=404
            )
        scripted = queue.pop(0) if len(queue) > 1 else queue[0]
        if scripted.body is DROP:
            assert request.transport is not None
            request.transport.abort()
            raise web.HTTPInternalServerError()  # never sent: the connection is gone
        if isinstance(scripted.body, str):
            return web.Response(
                text=scripted.body, status=scripted.status, headers=scripted.headers
            )
        return web.json_response(scripted.body, status=scripted.status, headers=scripted.headers)

    async def start(self) -> FakeNode:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
