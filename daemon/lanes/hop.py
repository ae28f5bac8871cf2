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
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any, Final

import aiohttp
import msgpack
from aiohttp import web
from multidict import CIMultiDict

from common import limits
from common.errors import AiMemoryError, Unavailable, from_body
from daemon.lanes.layout import socket_path
from daemon.replication.forwarding import decode_error

HOP_HEADER: Final = "X-AI-Memory-Lane-Hop"
SCHEME_HEADER: Final = "X-AI-Memory-Lane-Scheme"  # the scheme the client used (http, https)
RPC_PREFIX: Final = "/lane/v1/"
# The Host header travels as the client sent it: with the scheme, it is the
# request's origin, which the web inbox's checks compare with Origin.
_SKIP_REQUEST: Final = frozenset({"content-length", "transfer-encoding", "connection",
                                  "keep-alive", "upgrade", HOP_HEADER.lower(),
                                  SCHEME_HEADER.lower()})
_SKIP_RESPONSE: Final = frozenset({"content-length", "transfer-encoding", "connection",
                                   "keep-alive", "server", "date", "content-encoding"})


def arrived_by_hop(request: web.Request) -> bool:
    """True for a request that came over a lane's Unix socket (from a sibling)."""
    transport = request.transport
    return transport is not None and isinstance(transport.get_extra_info("sockname"), str)


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
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()

    async def forward(self, request: web.Request, lane: int, body: bytes) -> web.StreamResponse:
        """Serve ``request`` (whose body is ``body``) by lane ``lane``; its answer, as it came."""
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in _SKIP_REQUEST)
        headers[HOP_HEADER] = str(self.lane)
        headers[SCHEME_HEADER] = client_scheme(request)
        try:
            upstream = await self._session(lane).request(
                request.method, "http://lane" + request.path_qs, headers=headers,
                data=body if body else None, allow_redirects=False)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise Unavailable(f"lane {lane} of this node is not answering ({exc}); retry",
                              retry_after=1) from None
        try:
            answer_headers = CIMultiDict((k, v) for k, v in upstream.headers.items()
                                         if k.lower() not in _SKIP_RESPONSE)
            streamed = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
            if not streamed:
                data = await upstream.read()
                return web.Response(status=upstream.status, body=data, headers=answer_headers)
            response = web.StreamResponse(status=upstream.status, headers=answer_headers)
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
        finally:
            upstream.release()

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
        """Run ``/lane/v1/<name>`` on lane ``lane`` with ``payload``; its answer, or its error raised."""
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
