"""A lean HTTP/1.1 keep-alive client for the load generator.

The load generator shares the machine's two cores with the servers it
measures, so what it burns per request is taken from them. aiohttp's
``ClientSession`` costs 138-149 us of CPU per notify request on this
machine, more than the echo server spends answering it (about 110 us):
driving the echo server, the client was the bottleneck, at 6,700-7,100
requests/s. This client does only what the benchmark needs: one request at a
time per keep-alive connection, a request line and headers written as one
buffer, responses framed by ``Content-Length``. It measured 45-61 us per
request and let the same echo server answer 9,500-15,000 requests/s.
``python -m bench --client raw`` uses it; aiohttp stays the default (see
docs/performance.md, sixth session).

It refuses what it does not implement instead of guessing: a chunked or
unframed response, or one whose status line does not parse, fails that
request with :class:`aiohttp.ClientPayloadError`; a connection that closes
mid-response fails with :class:`aiohttp.ServerDisconnectedError`. Both are
``aiohttp.ClientError``, which the load generator counts as transport
errors, as it does for aiohttp's own client.
"""

from __future__ import annotations

import asyncio
import json as jsonlib
from collections import deque
from typing import Any, cast
from urllib.parse import urlencode, urlsplit

import aiohttp

_MAX_HEAD = 64 * 1024


class _Conn(asyncio.Protocol):
    """One keep-alive connection; at most one request in flight."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        # The parsed head of the response being read: (status, where its
        # body starts and ends in the buffer, close after it).
        self._need: tuple[int, int, int, bool] | None = None
        self.closed = False
        self.reusable = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def send(self, data: bytes, loop: asyncio.AbstractEventLoop) -> asyncio.Future[tuple[int, bytes]]:
        if self.closed or self.transport is None:
            raise aiohttp.ServerDisconnectedError("connection closed")
        self._waiter = loop.create_future()
        self.transport.write(data)
        return self._waiter

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._waiter is None:
            self.reusable = False  # bytes nobody asked for: never credit them to a request
            return
        try:
            done = self._parse()
        except aiohttp.ClientPayloadError as exc:
            self._fail(exc)
            return
        if done is not None:
            waiter, self._waiter = self._waiter, None
            if not waiter.done():
                waiter.set_result(done)

    def _parse(self) -> tuple[int, bytes] | None:
        buf = self._buf
        if self._need is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise aiohttp.ClientPayloadError("response head too large")
                return None
            lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise aiohttp.ClientPayloadError(f"bad status line {lines[0][:80]!r}")
            length = None
            close = parts[0] == "HTTP/1.0"
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    if not value.strip().isdigit():
                        raise aiohttp.ClientPayloadError(f"bad Content-Length {value.strip()[:40]!r}")
                    length = int(value)
                elif name == "transfer-encoding":
                    raise aiohttp.ClientPayloadError("chunked responses are not supported")
                elif name == "connection":
                    close = value.strip().lower() == "close"
            if length is None:
                raise aiohttp.ClientPayloadError("response without Content-Length")
            self._need = (int(parts[1]), end + 4, end + 4 + length, close)
        status, start, stop, close = self._need
        if len(buf) < stop:
            return None
        body = bytes(buf[start:stop])
        del buf[:stop]
        self._need = None
        if close or buf:
            self.reusable = False  # asked to close, or bytes past the answer: do not reuse
        return status, body

    def _fail(self, exc: BaseException) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        self._fail(aiohttp.ServerDisconnectedError("connection closed mid-response"))


class RawSession:
    """Keep-alive connections to the base URLs ``targets``: ``limit`` shared
    out evenly between them, rounded up (requests go round robin)."""

    def __init__(self, targets: tuple[str, ...], limit: int, timeout_s: float) -> None:
        self._per_host = max(1, -(-max(1, limit) // max(1, len(targets))))
        self._timeout_s = timeout_s
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._open: dict[tuple[str, int], int] = {}
        self._waiters: dict[tuple[str, int], deque[asyncio.Future[_Conn | None]]] = {}
        self._all: set[_Conn] = set()

    async def __aenter__(self) -> RawSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for conn in list(self._all):
            if conn.transport is not None:
                conn.transport.close()
        self._all.clear()
        self._idle.clear()

    async def _acquire(self, host: str, port: int) -> _Conn:
        key = (host, port)
        loop = asyncio.get_running_loop()
        self._open.setdefault(key, 0)
        idle = self._idle.setdefault(key, [])
        waiters = self._waiters.setdefault(key, deque())
        while True:
            while idle:
                conn = idle.pop()
                if conn.reusable and not conn.closed:
                    return conn
                self._drop(key, conn)
            if self._open[key] < self._per_host:
                self._open[key] += 1
                try:
                    _, proto = await loop.create_connection(_Conn, host, port)
                except BaseException as exc:  # a refusal, or a timeout cancelling the connect
                    self._open[key] -= 1
                    self._wake(key)
                    if isinstance(exc, OSError):
                        raise aiohttp.ClientConnectionError(str(exc)) from exc
                    raise
                self._all.add(proto)
                return proto
            fut: asyncio.Future[_Conn | None] = loop.create_future()
            waiters.append(fut)
            try:
                got = await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():  # handed over, then cancelled: pass it on
                    handed = fut.result()
                    if handed is not None:
                        self._release(key, handed)
                    else:
                        self._wake(key)
                raise
            if got is not None:
                return got
            # None: a connection was dropped, so there is room to open one.

    def _drop(self, key: tuple[str, int], conn: _Conn) -> None:
        if conn.transport is not None:
            conn.transport.close()
        if conn in self._all:
            self._all.discard(conn)
            self._open[key] -= 1

    def _wake(self, key: tuple[str, int]) -> None:
        """Tell the first live waiter that it may open a connection."""
        waiters = self._waiters.get(key)
        while waiters:
            w = waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    def _release(self, key: tuple[str, int], conn: _Conn) -> None:
        if not (conn.reusable and not conn.closed):
            self._drop(key, conn)
            self._wake(key)
            return
        waiters = self._waiters.get(key)
        while waiters:
            w = waiters.popleft()
            if not w.done():
                w.set_result(conn)
                return
        self._idle[key].append(conn)

    async def request(self, method: str, url: str, *, json: Any = None,
                      params: dict[str, str] | None = None,
                      headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        u = urlsplit(url)
        host, port = u.hostname or "127.0.0.1", u.port or 80
        target = u.path or "/"
        if params:
            target += "?" + urlencode(params)
        body = b"" if json is None else jsonlib.dumps(json).encode()
        head = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}"]
        if json is not None:
            head.append("Content-Type: application/json")
        if body or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body)}")
        for name, value in (headers or {}).items():
            head.append(f"{name}: {value}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        key = (host, port)
        async with asyncio.timeout(self._timeout_s):  # the wait for a connection included
            conn = await self._acquire(host, port)
            try:
                status, raw = await conn.send(data, asyncio.get_running_loop())
            except BaseException:
                conn.reusable = False  # an answer may still come: never reuse it
                raise
            finally:
                self._release(key, conn)
        return status, raw


def decode_json(raw: bytes) -> Any:
    """The body as JSON, ``None`` when empty (as aiohttp's ``resp.json()``)."""
    return jsonlib.loads(raw) if raw.strip() else None
