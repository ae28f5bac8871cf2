"""The local link between the lanes of one node: HTTP over their Unix sockets.

Each lane listens on a Unix socket in the supervisor's private directory
(mode 0700: only the node's own user reaches it). Over it a lane

* **hands a whole request** to the lane that owns its key (:meth:`Siblings.forward`):
  method, path, query, headers and body as the client sent them, marked
  with :data:`HOP_HEADER`; the owner serves it as if the client had asked it
  (authentication included: identity records are on every lane) and the
  answer, streamed, goes back unchanged, so a push stream works through a
  hop too;
* **asks a sibling** for part of a node's work (:meth:`Siblings.call`): a
  quorum write of items its own lane does not hold, the lane's status;
  msgpack in and out (``/lane/v1/*``, served only on the socket).

A request that arrives on the socket is never handed on again
(:func:`arrived_by_hop`). Connections are kept open and reused, so a hop
costs one local round trip and one parse of the request on each side.

A handed request travels on a lean HTTP/1.1 client of this module
(:class:`_LinkConn`), not aiohttp's: the request head is the client's own
header bytes (less the hop-by-hop ones) written with the body in one
write, and the answer's head is parsed once; an answer framed by
``Content-Length`` comes back whole, a chunked one (a push stream) is
relayed chunk by chunk. aiohttp's client cost about as much CPU as the
owning lane's whole notify (docs/performance.md, "Lanes v1 measured").
The lanes' own calls (:meth:`Siblings.call`) go as frames on the
operations' link (:data:`daemon.lanes.frames.CALL_FRAME`); a read whose
answer is too large for a frame comes again as ``/lane/v1/<name>`` here,
through aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any, Final, cast

import aiohttp
import msgpack
from aiohttp import web
from multidict import CIMultiDict

from common import limits
from common.certs import member_of
from common.errors import AiMemoryError, PayloadTooLarge, Unavailable, from_body
from daemon.lanes.frames import CALL_FRAME, TOO_BIG_CODE, FrameLinks
from daemon.lanes.layout import socket_path
from daemon.replication.forwarding import decode_error

HOP_HEADER: Final = "X-AI-Memory-Lane-Hop"
SCHEME_HEADER: Final = "X-AI-Memory-Lane-Scheme"  # the scheme the client used (http, https)
REMOTE_HEADER: Final = "X-AI-Memory-Lane-Remote"  # the client's address (loopback checks)
# The member the client's TLS certificate names ("" for none): the receiving
# lane's handshake checked it against the cluster CA (mutual TLS of member-signed calls).
CERT_HEADER: Final = "X-AI-Memory-Lane-Client-Cert"
RPC_PREFIX: Final = "/lane/v1/"
# The Host header travels as the client sent it: with the scheme, it is the
# request's origin, which the web inbox's checks compare with Origin.
# (Expect: the receiving lane answered the client's 100-continue and read the body.)
_SKIP_REQUEST: Final = frozenset({"content-length", "transfer-encoding", "connection",
                                  "keep-alive", "upgrade", "expect", HOP_HEADER.lower(),
                                  SCHEME_HEADER.lower(), REMOTE_HEADER.lower(),
                                  CERT_HEADER.lower()})
_SKIP_RESPONSE: Final = frozenset({"content-length", "transfer-encoding", "connection",
                                   "keep-alive", "server", "date", "content-encoding"})
_SKIP_REQUEST_RAW: Final = frozenset(h.encode() for h in _SKIP_REQUEST)
_MAX_HEAD: Final = 64 * 1024
_CONNECT_TIMEOUT_S: Final = 5.0
_IDLE_S: Final = 30.0  # an idle link connection older than this is closed, not reused
# (the lanes' server keeps an idle connection 75 s: aiohttp's default)


class LinkError(Exception):
    """The sibling's answer could not be read: the connection closed or the
    bytes are not an HTTP/1.1 answer this client reads."""


class _LinkConn(asyncio.Protocol):
    """One keep-alive connection to a sibling's socket; one request at a time.

    :meth:`send` resolves once the answer's head is read: with the whole
    body for an answer framed by ``Content-Length`` (or without a body),
    else with ``None``, the body then coming through :meth:`chunk`
    (chunked transfer coding, or until the connection closes)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = True
        self.idle_since = 0.0
        self._buf = bytearray()
        self._head: asyncio.Future[tuple[int, list[tuple[str, str]], bytes | None]] | None = None
        self._mode = ""  # "", "length", "chunked", "eof" (the body being read)
        self._meta: tuple[int, list[tuple[str, str]]] = (0, [])
        self._length = 0
        self._chunks: asyncio.Queue[bytes | BaseException | None] | None = None
        self._bodiless = False  # the answer to a HEAD: its Content-Length frames no body

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def send(self, data: bytes, *, bodiless: bool = False,
             ) -> asyncio.Future[tuple[int, list[tuple[str, str]], bytes | None]]:
        if self.closed or self.transport is None:
            raise LinkError("connection closed")
        self._head = asyncio.get_running_loop().create_future()
        self._mode, self._chunks, self._bodiless = "", None, bodiless
        self.transport.write(data)
        return self._head

    async def chunk(self) -> bytes | None:
        """The next piece of a streamed body; None at its end."""
        assert self._chunks is not None
        got = await self._chunks.get()
        if isinstance(got, BaseException):
            raise got
        return got

    def data_received(self, data: bytes) -> None:
        self._buf += data
        try:
            self._advance()
        except LinkError as exc:
            self._fail(exc)

    def _advance(self) -> None:
        if self._head is None and not self._mode:
            self.reusable = False  # bytes nobody asked for
            return
        if not self._mode:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > _MAX_HEAD:
                    raise LinkError("answer head too large")
                return
            self._parse_head(bytes(self._buf[:end]))
            del self._buf[:end + 4]
        if self._mode == "length":
            if len(self._buf) < self._length:
                return
            body = bytes(self._buf[:self._length])
            del self._buf[:self._length]
            self._mode = ""
            if self._buf:
                self.reusable = False
            self._resolve(body)
        elif self._mode == "chunked":
            self._dechunk()
        elif self._mode == "eof" and self._buf and self._chunks is not None:
            self._chunks.put_nowait(bytes(self._buf))
            self._buf.clear()

    def _parse_head(self, raw: bytes) -> None:
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise LinkError(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        headers: list[tuple[str, str]] = []
        length: int | None = None
        chunked = False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name, value = name.strip(), value.strip()
            low = name.lower()
            if low == "content-length":
                if not value.isdigit():
                    raise LinkError(f"bad Content-Length {value[:40]!r}")
                length = int(value)
            elif low == "transfer-encoding":
                chunked = value.lower().endswith("chunked")
            elif low == "connection" and value.lower() == "close":
                self.reusable = False
            headers.append((name, value))
        self._meta = (status, headers)
        if self._bodiless:
            self._mode, self._length = "length", 0
        elif chunked or (length is None and status >= 200 and status not in (204, 304)):
            self._mode = "chunked" if chunked else "eof"
            if not chunked:
                self.reusable = False
            self._chunks = asyncio.Queue()
            self._resolve(None)
        else:
            self._mode, self._length = "length", length or 0

    def _dechunk(self) -> None:
        assert self._chunks is not None
        while True:
            eol = self._buf.find(b"\r\n")
            if eol < 0:
                return
            size_text = bytes(self._buf[:eol]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise LinkError(f"bad chunk size {size_text[:20]!r}") from None
            if size == 0:
                end = self._buf.find(b"\r\n\r\n", eol)  # trailers, then the blank line
                if end < 0:
                    return
                del self._buf[:end + 4]
                self._mode = ""
                if self._buf:
                    self.reusable = False
                self._chunks.put_nowait(None)
                return
            if len(self._buf) < eol + 2 + size + 2:
                return
            self._chunks.put_nowait(bytes(self._buf[eol + 2:eol + 2 + size]))
            del self._buf[:eol + 2 + size + 2]

    def _resolve(self, body: bytes | None) -> None:
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_result((*self._meta, body))

    def _fail(self, exc: BaseException) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_exception(exc)
        if self._chunks is not None and self._mode:
            self._chunks.put_nowait(exc)
            self._mode = ""

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._mode == "eof" and self._chunks is not None:
            self._mode = ""
            self._chunks.put_nowait(None)  # a body framed by the close: complete
        self._fail(LinkError("connection closed mid-answer"))


def arrived_by_hop(request: web.Request) -> bool:
    """True for a request that came over a lane's Unix socket (from a sibling)."""
    transport = request.transport
    return transport is not None and isinstance(transport.get_extra_info("sockname"), str)


def client_remote(request: web.Request) -> str | None:
    """The client's address: a request handed over arrives over a Unix
    socket, with the receiving lane's client address in a header."""
    if arrived_by_hop(request):
        return request.headers.get(REMOTE_HEADER) or None
    return request.remote


def client_cert_member(request: web.Request) -> str | None:
    """The member the client's TLS certificate names (one of the cluster CA:
    the handshake checked it), or None. A request handed over arrives over
    a Unix socket, with what the receiving lane's handshake found in a
    header (a client's own such header is dropped before the hop)."""
    if arrived_by_hop(request):
        return request.headers.get(CERT_HEADER) or None
    transport = request.transport
    return member_of(transport.get_extra_info("peercert") if transport is not None else None)


def client_scheme(request: web.Request) -> str:
    """The scheme the client used: a request handed over arrives over a
    Unix socket (plain HTTP), with the receiving lane's scheme in a header."""
    if arrived_by_hop(request):
        return request.headers.get(SCHEME_HEADER, request.scheme)
    return request.scheme


class Siblings:
    """This lane's clients to its sibling lanes."""

    def __init__(self, lane_dir: str, lane: int, lanes: int) -> None:
        self.lane = lane
        self.lanes = lanes
        self._paths = {i: socket_path(lane_dir, i) for i in range(lanes) if i != lane}
        self._sessions: dict[int, aiohttp.ClientSession] = {}
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=5,
                                              sock_read=limits.lane_hop_timeout_secs)
        self._idle: dict[int, list[_LinkConn]] = {i: [] for i in self._paths}
        self._links: set[_LinkConn] = set()
        self.frames = FrameLinks(lane_dir, lane, lanes)  # operations handed over (frames.py)

    @staticmethod
    def frame_time_left() -> float:
        """How long an operation handed to a sibling may run: the hop's limit."""
        return float(limits.lane_hop_timeout_secs)

    @property
    def others(self) -> list[int]:
        return sorted(self._paths)

    def _session(self, lane: int) -> aiohttp.ClientSession:
        session = self._sessions.get(lane)
        if session is None or session.closed:
            connector = aiohttp.UnixConnector(path=self._paths[lane], limit=0,
                                              keepalive_timeout=60)
            session = aiohttp.ClientSession(connector=connector, timeout=self._timeout,
                                            auto_decompress=False, skip_auto_headers=("User-Agent",))
            self._sessions[lane] = session
        return session

    async def close(self) -> None:
        self.frames.close()
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
        for conn in self._links:
            if conn.transport is not None:
                conn.transport.close()
        self._links.clear()
        for idle in self._idle.values():
            idle.clear()

    async def _acquire(self, lane: int) -> _LinkConn:
        idle = self._idle[lane]
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.reusable and not conn.closed and now - conn.idle_since < _IDLE_S:
                return conn
            self._drop(conn)
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(_CONNECT_TIMEOUT_S):
            _, conn = await loop.create_unix_connection(_LinkConn, self._paths[lane])
        self._links.add(conn)
        return conn

    def _release(self, lane: int, conn: _LinkConn) -> None:
        if conn.reusable and not conn.closed:
            conn.idle_since = time.monotonic()
            self._idle[lane].append(conn)
        else:
            self._drop(conn)

    def _drop(self, conn: _LinkConn) -> None:
        if conn.transport is not None:
            conn.transport.close()
        self._links.discard(conn)

    def _request_head(self, request: web.Request, body: bytes) -> bytes:
        head = [f"{request.method} {request.raw_path} HTTP/1.1\r\n".encode("latin-1")]
        if "Host" not in request.headers:
            head.append(b"Host: lane\r\n")
        for name, value in request.raw_headers:  # Host as the client sent it (its origin)
            if name.lower() not in _SKIP_REQUEST_RAW:
                head.append(name + b": " + value + b"\r\n")
        head.append(f"{HOP_HEADER}: {self.lane}\r\n{SCHEME_HEADER}: "
                    f"{client_scheme(request)}\r\n{REMOTE_HEADER}: "
                    f"{request.remote or ''}\r\n{CERT_HEADER}: "
                    f"{client_cert_member(request) or ''}\r\n".encode())
        if body or request.method not in ("GET", "HEAD", "OPTIONS"):
            head.append(b"Content-Length: %d\r\n" % len(body))
        head.append(b"\r\n")
        return b"".join(head)

    async def forward(self, request: web.Request, lane: int, body: bytes) -> web.StreamResponse:
        """Serve ``request`` (whose body is ``body``) by lane ``lane``; its answer, as it came."""
        data = self._request_head(request, body) + body
        conn: _LinkConn | None = None
        try:
            async with asyncio.timeout(limits.lane_hop_timeout_secs):
                conn = await self._acquire(lane)
                status, raw_headers, answer = await conn.send(
                    data, bodiless=request.method == "HEAD")
        except (TimeoutError, LinkError, OSError) as exc:
            if conn is not None:
                self._drop(conn)
            raise Unavailable(f"lane {lane} of this node is not answering ({exc!r}); retry",
                              retry_after=1) from None
        headers = CIMultiDict((k, v) for k, v in raw_headers if k.lower() not in _SKIP_RESPONSE)
        if answer is not None:
            self._release(lane, conn)
            return web.Response(status=status, body=answer, headers=headers)
        done = False
        try:
            response = web.StreamResponse(status=status, headers=headers)
            await response.prepare(request)
            while True:
                async with asyncio.timeout(limits.lane_hop_timeout_secs):
                    chunk = await conn.chunk()
                if chunk is None:
                    break
                await response.write(chunk)
            await response.write_eof()
            done = True
            return response
        finally:
            if done:
                self._release(lane, conn)
            else:
                self._drop(conn)

    async def request_json(self, lane: int, method: str, path: str, *,
                           query: Mapping[str, Any], headers: Mapping[str, str],
                           body: Any = None) -> Any:
        """An API request served by lane ``lane`` (an ``/mcp`` tool's); its
        JSON answer, or its refusal raised as the error it was."""
        sent = {k: v for k, v in headers.items() if k.lower() not in _SKIP_REQUEST}
        sent[HOP_HEADER] = str(self.lane)
        try:
            async with self._session(lane).request(
                    method, "http://lane" + path, params={k: str(v) for k, v in query.items()},
                    headers=sent, json=body if method in ("POST", "PUT", "PATCH") else None,
                    allow_redirects=False) as resp:
                status, data = resp.status, await resp.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise Unavailable(f"lane {lane} of this node is not answering ({exc}); retry",
                              retry_after=1) from None
        answer = json.loads(data) if data else None
        if status >= 400:
            raise from_body(status, answer if isinstance(answer, dict) else {}, 1.0)
        return answer

    async def call(self, lane: int, name: str, payload: Any) -> Any:
        """Run the lanes' call ``name`` on lane ``lane`` with ``payload``: its
        answer, or its error raised. It goes as a frame on the lanes' link
        (:data:`daemon.lanes.frames.CALL_FRAME`); an answer too large for a
        frame is asked for again as ``/lane/v1/<name>`` on the HTTP socket
        (only a call that reads: ``daemon.lanes.router.READ_CALLS``)."""
        try:
            _, data = await self.frames.call(lane, [CALL_FRAME, name, payload],
                                             self.frame_time_left())
        except PayloadTooLarge as exc:
            if exc.code != TOO_BIG_CODE:
                raise
            return await self.http_call(lane, name, payload)
        return msgpack.unpackb(data, raw=False)

    async def http_call(self, lane: int, name: str, payload: Any) -> Any:
        """``/lane/v1/<name>`` on lane ``lane`` over the HTTP socket."""
        try:
            async with self._session(lane).post(
                    "http://lane" + RPC_PREFIX + name, data=msgpack.packb(payload),
                    headers={HOP_HEADER: str(self.lane),
                             "Content-Type": "application/msgpack"}) as resp:
                data = await resp.read()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise Unavailable(f"lane {lane} of this node is not answering ({exc}); retry",
                              retry_after=1) from None
        answer = msgpack.unpackb(data, raw=False) if data else None
        if status != 200:
            if isinstance(answer, Mapping) and "error" in answer:
                raise decode_error(answer["error"])
            raise Unavailable(f"lane {lane} answered {status}", retry_after=1)
        return answer

    async def call_all(self, name: str, payload: Any) -> dict[int, Any | AiMemoryError]:
        """``call`` on every sibling at once; each answer or its error, by lane."""
        async def one(lane: int) -> Any:
            try:
                return await self.call(lane, name, payload)
            except AiMemoryError as exc:
                return exc
        lanes = self.others
        answers = await asyncio.gather(*(one(i) for i in lanes))
        return dict(zip(lanes, answers, strict=True))
