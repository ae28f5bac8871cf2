"""Operation frames between the lanes of one node: the hand-off of an API operation.

A request for another lane's key whose route is an operation
(:mod:`daemon.api.call`) is not handed over whole: the receiving lane has
parsed, authenticated and read it, so it sends the owning lane one frame
(:func:`daemon.api.call.frame_of`: the operation, its query, path, the
headers an operation reads, the decoded body, the caller's ``Principal``
and the time left) on a persistent link, and the owner runs the operation
and answers its JSON and status, or its refusal encoded as
:func:`daemon.replication.forwarding.encode_error`. Streams, the web inbox,
routes that are no operation and the fan-outs keep the whole-HTTP hop
(:mod:`daemon.lanes.hop`). The lanes' own calls to each other (a write's
share, a memory query, a user's records: ``Siblings.call``) go on the same
link as ``[CALL_FRAME, name, payload]``.

The link is one Unix stream socket per pair of lanes (``lane<i>.ops.sock``
in the supervisor's private directory, served by each lane), carrying
length-prefixed msgpack frames, pipelined: ``[id, frame]`` out, ``[id, ok,
payload]`` back, matched by id. Frames queued in one pass of the event
loop go out in one write. A link that closes fails the calls waiting on it;
a lane that is down or restarting fails the call at once with a retryable
503, as the HTTP hop does.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, Final, cast

import msgpack
from aiohttp import web

from common.errors import AiMemoryError, ServerError, Unavailable
from common.policy import Principal, ProjectGrant
from daemon.replication.forwarding import decode_error, encode_error
from daemon.schemas.headers import SESSION_HEADER

log = logging.getLogger("ai_memory.lanes")

OPS_SOCKET_NAME: Final = "lane{}.ops.sock"
_LEN: Final = struct.Struct(">I")
_FRAME_MAX: Final = 64 * 1024 * 1024
# A sibling's call (``Siblings.call``, the lanes' own reads and writes) as a
# frame: ``[CALL_FRAME, name, payload]``, answered (200, its answer as
# msgpack). An answer over CALL_FRAME_MAX is refused with TOO_BIG_CODE and
# the caller asks again over the lanes' HTTP socket, which has no such bound.
CALL_FRAME: Final = "call"
CALL_FRAME_MAX: Final = _FRAME_MAX // 2
TOO_BIG_CODE: Final = "too_big_for_a_frame"
_CONNECT_TIMEOUT_S: Final = 5.0

Runner = Callable[[Any], Awaitable[tuple[int, bytes]]]


# Set by the lanes' router on a request whose operation another lane runs:
# (that lane's index, the decoded body or None when the request has none).
HANDOFF: Final = web.RequestKey("lane_handoff", tuple)
# The headers an operation (or a service it calls) reads from its request.
FRAME_HEADERS: Final = ("Idempotency-Key", SESSION_HEADER, "X-Agent-Id", "X-Request-Id")
# The operation route (daemon.api.call.Route) each operation handler serves.
_ROUTE_OF: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def register_operation(handler: Any, route: Any) -> None:
    _ROUTE_OF[handler] = route


def route_of(handler: Any) -> Any:
    """The operation route ``handler`` (a request's ``match_info.handler``) serves, or None."""
    try:
        return _ROUTE_OF.get(handler)
    except TypeError:  # not weakly referable: no operation
        return None


def _pick(headers: Mapping[str, str]) -> dict[str, str]:
    return {h: headers[h] for h in FRAME_HEADERS if h in headers}


def encode_principal(p: Principal) -> dict[str, Any]:
    out = {f.name: getattr(p, f.name) for f in fields(Principal)}
    out["grants"] = [[g.workspace, g.project, g.access] for g in p.grants]
    return out


def decode_principal(raw: Mapping[str, Any]) -> Principal:
    values = dict(raw)
    values["grants"] = tuple(ProjectGrant(str(w), None if pr is None else str(pr), a)
                             for w, pr, a in values.get("grants", ()))
    return Principal(**values)


def frame_of(method: str, pattern: str, query: list[tuple[str, Any]], path: Mapping[str, str],
             request_headers: Mapping[str, str], call_headers: Mapping[str, str] | None,
             body: Any, has_body: bool, principal: Principal, time_left: float) -> list[Any]:
    """One operation (the route ``method pattern``) as a frame for the lane
    that runs it (:func:`daemon.api.call.frame_runner`). ``call_headers``
    None: the call's headers are its request's (an HTTP request)."""
    return [method, pattern, [[k, v] for k, v in query], dict(path), _pick(request_headers),
            None if call_headers is None else _pick(call_headers), body, has_body,
            encode_principal(principal), time_left]


def ops_socket_path(lane_dir: str, lane: int) -> str:
    return str(Path(lane_dir) / OPS_SOCKET_NAME.format(lane))


class LinkClosed(Exception):
    """The link closed, or carried bytes that are no frame."""


class Framed(asyncio.Protocol):
    """A byte stream cut into msgpack frames, each after its 4-byte big-endian length."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buf = bytearray()
        self._out: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        try:
            while len(buf) - pos >= 4:
                (n,) = _LEN.unpack_from(buf, pos)
                if n > _FRAME_MAX:
                    raise LinkClosed("frame too large")
                if len(buf) - pos - 4 < n:
                    break
                obj = msgpack.unpackb(bytes(buf[pos + 4:pos + 4 + n]), raw=False)
                pos += 4 + n
                self.frame(obj)
        except (LinkClosed, ValueError, TypeError, msgpack.UnpackException) as exc:
            log.warning("lane frame link: %r; closing it", exc)
            self._buf.clear()
            if self.transport is not None:
                self.transport.close()
            return
        if pos:
            del buf[:pos]

    def send(self, obj: Any) -> None:
        """Queue one frame: the frames queued in one pass of the loop go out in one write."""
        payload = msgpack.packb(obj, use_bin_type=True)
        self._out.append(_LEN.pack(len(payload)))
        self._out.append(payload)
        if len(self._out) == 2:
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))

    def frame(self, obj: Any) -> None:
        raise NotImplementedError


class _Client(Framed):
    """This lane's end of a link: frames out, answers matched by id."""

    def __init__(self) -> None:
        super().__init__()
        self._next = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}

    def frame(self, obj: Any) -> None:
        rid, ok, payload = obj
        fut = self._waiting.pop(int(rid), None)
        if fut is not None and not fut.done():
            fut.set_result((bool(ok), payload))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(LinkClosed("the link closed"))

    def call(self, frame: Any) -> asyncio.Future[Any]:
        if self.closed:
            raise LinkClosed("the link closed")
        self._next += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = fut
        self.send([self._next, frame])
        return fut

    def forget(self, fut: asyncio.Future[Any]) -> None:
        for rid, waiting in list(self._waiting.items()):
            if waiting is fut:
                del self._waiting[rid]


class FrameLinks:
    """This lane's links to its siblings' frame sockets; connected on first use."""

    def __init__(self, lane_dir: str, lane: int, lanes: int) -> None:
        self.lane = lane
        self._paths = {i: ops_socket_path(lane_dir, i) for i in range(lanes) if i != lane}
        self._links: dict[int, _Client] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def _link(self, lane: int) -> _Client:
        link = self._links.get(lane)
        if link is not None and not link.closed:
            return link
        lock = self._locks.setdefault(lane, asyncio.Lock())
        async with lock:
            link = self._links.get(lane)
            if link is None or link.closed:
                async with asyncio.timeout(_CONNECT_TIMEOUT_S):
                    _, link = await asyncio.get_running_loop().create_unix_connection(
                        _Client, self._paths[lane])
                self._links[lane] = link
            return link

    async def call(self, lane: int, frame: Any, time_left: float) -> tuple[int, bytes]:
        """Run ``frame`` on lane ``lane``: the operation's status and JSON, or its refusal raised."""
        fut: asyncio.Future[Any] | None = None
        link: _Client | None = None
        try:
            async with asyncio.timeout(time_left + 1.0):
                link = await self._link(lane)
                fut = link.call(frame)
                ok, payload = await fut
        except (TimeoutError, LinkClosed, OSError) as exc:
            if link is not None and fut is not None:
                link.forget(fut)
            raise Unavailable(f"lane {lane} of this node is not answering ({exc!r}); retry",
                              retry_after=1) from None
        if not ok:
            raise decode_error(payload)
        status, body = payload
        return int(status), bytes(body)

    def close(self) -> None:
        for link in self._links.values():
            if link.transport is not None:
                link.transport.close()
        self._links.clear()


class _Server(Framed):
    """The owning lane's end: runs each frame as a task, answers in any order."""

    def __init__(self, run: Runner, tasks: set[asyncio.Task[None]],
                 conns: set[_Server]) -> None:
        super().__init__()
        self._run_frame = run
        self._tasks = tasks
        self._conns = conns

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._conns.add(self)

    def frame(self, obj: Any) -> None:
        rid, frame = obj
        task = asyncio.get_running_loop().create_task(self._run(int(rid), frame))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, rid: int, frame: Any) -> None:
        try:
            status, body = await self._run_frame(frame)
        except AiMemoryError as exc:
            answer: list[Any] = [rid, False, encode_error(exc)]
        except Exception as exc:
            log.exception("lane frame failed")
            answer = [rid, False, encode_error(ServerError(f"lane hand-off failed: {exc!r}"))]
        else:
            answer = [rid, True, [status, body]]
        if self.transport is not None and not self.transport.is_closing():
            self.send(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._conns.discard(self)


def _remove(path: str) -> None:
    Path(path).unlink(missing_ok=True)  # a socket left by a lane that died


class FrameServer:
    """A lane's frame socket: its siblings' operations run here."""

    def __init__(self, path: str, run: Runner) -> None:
        self.path = path
        self._run = run
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._conns: set[_Server] = set()

    async def start(self) -> None:
        _remove(self.path)
        self._server = await asyncio.get_running_loop().create_unix_server(
            lambda: _Server(self._run, self._tasks, self._conns), self.path)

    async def stop(self, grace_s: float = 0.0) -> None:
        """Take no more links; let the frames that run finish and answer for
        up to ``grace_s`` (a write's share in flight lands and says so), then
        cancel what is left and close the links, so that their callers fail
        at once (a retryable 503) instead of waiting out their timeout."""
        if self._server is not None:
            self._server.close()
            self._server = None
        _remove(self.path)
        if self._tasks and grace_s > 0:
            await asyncio.wait(list(self._tasks), timeout=grace_s)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.sleep(0)  # the answers just queued go out in this pass's write
        for conn in list(self._conns):
            if conn.transport is not None:
                conn.transport.close()

