"""The peer channel: one long-lived WebSocket per peer for batched messages.

Every batch of peer messages (replication, claim rounds, forwarded mailbox
requests and their answers, anti-entropy pushes) goes to ``/peer/v1/msgs``.
As its own signed HTTP request, a batch costs both ends about 0.37 ms of CPU
on loopback (aiohttp's client and server machinery, the middlewares, the
signature); as a frame on an open WebSocket it costs about 0.11 ms
(``docs/performance.md``). So each node keeps one channel to each peer and
sends those batches as frames; every other peer call (pulls, recovery,
seeding, the legacy mailbox route) stays plain HTTP.

**Opening.** ``GET /peer/v1/link`` upgrades to a WebSocket. It is signed
like any peer request (:mod:`daemon.peer.auth`, empty body): the signature
names both members and the receiver's boot id, and its nonce is accepted
once, so an upgrade cannot be replayed and a channel never outlives the
receiver's process. A receiver that restarted answers 401 with its new boot
id and the sender opens again, once, signed afresh.

**Frames.** Binary, msgpack: ``[id, messages]`` from the opener (built
from the batch its sender packed once, :func:`frame`) and
``[id, replies]`` (or ``[id, None, status]`` for a refused batch) back. With
a cluster secret every frame ends with a 16-byte HMAC-SHA256 tag under a
key derived from the upgrade's signature, over the direction, the frame's
number on the channel and its bytes: a frame altered, dropped, replayed or
reordered fails its tag and the channel closes.

**Semantics are those of the HTTP request it replaces.** The receiver
serves each frame in its own task, as it would concurrent requests, and
answers it by id. An exchange whose answer does not come within its timeout
closes the channel; every exchange waiting on it then fails with
:class:`daemon.peer.client.PeerUnreachable`, as a failed request does, and
the next call opens a new channel. A peer that does not serve the route (an
older version: 404 or 405) is sent plain HTTP for
``limits.peer_channel_retry_secs`` before the upgrade is tried again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import msgpack

from common import limits

log = logging.getLogger("ai_memory.peer")

LINK_PATH = "/peer/v1/link"
TAG_BYTES = 16
TO_SERVER, TO_CLIENT = b"q", b"r"


def frame(fid: int, body: bytes) -> bytes:
    """The msgpack of ``[fid, payload]`` from ``payload`` already packed
    (``body``): a two-element array is its header byte, then its elements."""
    head: bytes = msgpack.packb(fid)
    return b"\x92" + head + body


class ChannelError(Exception):
    """The channel is closed, or a frame failed its check."""


def channel_key(secret: str | None, signature: str) -> bytes | None:
    """The frame key of a channel opened with upgrade signature ``signature``."""
    if not secret:
        return None
    return hmac.digest(secret.encode(), b"aim-link-v1\n" + signature.encode(), hashlib.sha256)


class FrameSeal:
    """Numbers, tags and checks the frames of one direction of a channel."""

    __slots__ = ("_count", "_direction", "_key")

    def __init__(self, key: bytes | None, direction: bytes) -> None:
        self._key = key
        self._direction = direction
        self._count = 0

    def seal(self, body: bytes) -> bytes:
        if self._key is None:
            return body
        n = self._count
        self._count += 1
        tag = hmac.digest(self._key, self._direction + n.to_bytes(8, "big") + body,
                          hashlib.sha256)[:TAG_BYTES]
        return body + tag

    def open(self, frame: bytes) -> bytes:
        if self._key is None:
            return frame
        if len(frame) < TAG_BYTES:
            raise ChannelError("peer frame too short for its tag")
        body, tag = frame[:-TAG_BYTES], frame[-TAG_BYTES:]
        n = self._count
        self._count += 1
        expected = hmac.digest(self._key, self._direction + n.to_bytes(8, "big") + body,
                               hashlib.sha256)[:TAG_BYTES]
        if not hmac.compare_digest(tag, expected):
            raise ChannelError("peer frame failed its tag (altered, replayed or out of order)")
        return body


class ClientChannel:
    """The opener's end: exchanges batches for their replies, matched by id."""

    def __init__(self, peer: str, ws: aiohttp.ClientWebSocketResponse, key: bytes | None,
                 incarnation: str = "") -> None:
        self.peer = peer
        self.incarnation = incarnation  # of the process serving the other end ("": not said)
        self._ws = ws
        self._out = FrameSeal(key, TO_SERVER)
        self._in = FrameSeal(key, TO_CLIENT)
        self._ids = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._send_lock = asyncio.Lock()
        self.closed = False
        self._reader = asyncio.get_running_loop().create_task(
            self._read(), name=f"peer-channel-{peer}")

    async def exchange(self, body: bytes, timeout_s: float) -> Any:
        """The replies to ``body`` (a packed batch); ChannelError if the
        channel fails first, TimeoutError (the channel then closes) if they
        do not come in time."""
        if self.closed:
            raise ChannelError("channel closed")
        fid = self._ids
        self._ids += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[fid] = fut
        try:
            async with asyncio.timeout(timeout_s):
                async with self._send_lock:  # frame numbers follow the order on the wire
                    await self._ws.send_bytes(self._out.seal(frame(fid, body)))
                return await fut
        except TimeoutError:
            self.close()
            raise
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
            self.close()
            raise ChannelError(f"send failed: {exc}") from None
        finally:
            self._pending.pop(fid, None)
            if fut.done() and not fut.cancelled():
                fut.exception()  # failed by the close while this exchange left another way

    async def _read(self) -> None:
        reason = "closed by the peer"
        try:
            async for msg in self._ws:
                if msg.type != aiohttp.WSMsgType.BINARY:
                    reason = f"unexpected {msg.type.name} frame"
                    break
                answer = msgpack.unpackb(self._in.open(msg.data), raw=False)
                if not isinstance(answer, list) or len(answer) < 2 or type(answer[0]) is not int:
                    reason = "malformed answer frame"
                    break
                fut = self._pending.pop(answer[0], None)
                if fut is None or fut.done():
                    continue
                if len(answer) > 2:
                    fut.set_exception(ChannelError(f"rejected ({answer[2]})"))
                else:
                    fut.set_result(answer[1])
        except (ChannelError, ValueError, msgpack.UnpackException) as exc:
            reason = str(exc)
        except (aiohttp.ClientError, ConnectionError) as exc:
            reason = f"connection lost: {exc}"
        finally:
            self._fail_pending(reason)

    def _fail_pending(self, reason: str) -> None:
        self.closed = True
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ChannelError(reason))
        if not self._ws.closed:
            asyncio.get_running_loop().create_task(self._close_ws())

    async def _close_ws(self) -> None:
        with contextlib.suppress(Exception):
            await self._ws.close()

    def close(self) -> None:
        if not self.closed:
            self._reader.cancel()
            self._fail_pending("channel closed")

    async def aclose(self) -> None:
        self.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
        await self._close_ws()


class Channels:
    """The channel to each peer, opened on first use (see the module docstring).

    ``open_ws(peer)`` opens the WebSocket and returns it with its frame key,
    or None when the peer does not serve the route."""

    def __init__(self, open_ws: Callable[[str, float], Any], *,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._open_ws = open_ws
        self._now = now
        self._channels: dict[str, ClientChannel] = {}
        self._opening: dict[str, asyncio.Task[ClientChannel | None]] = {}
        self._plain_until: dict[str, float] = {}

    async def get(self, peer: str, timeout_s: float) -> ClientChannel | None:
        """The open channel to ``peer`` (opening one if needed), or None to
        use plain HTTP. Callers that come while a channel opens wait for
        that one attempt, each within its own ``timeout_s``, and share its
        outcome: a failed open fails them all at once."""
        ch = self._channels.get(peer)
        if ch is not None and not ch.closed:
            return ch
        if self._plain_until.get(peer, 0.0) > self._now():
            return None
        task = self._opening.get(peer)
        if task is None:
            task = self._opening[peer] = asyncio.get_running_loop().create_task(
                self._open(peer, timeout_s), name=f"peer-channel-open-{peer}")
            task.add_done_callback(lambda t: (self._opening.pop(peer, None), t.cancelled()
                                              or t.exception()))
        async with asyncio.timeout(timeout_s):
            return await asyncio.shield(task)

    def plain(self, peer: str) -> bool:
        """Is ``peer`` served over plain HTTP (it had no channel when last
        tried, and none is open since)? True also while a retry is under
        way, whose outcome is not known yet."""
        ch = self._channels.get(peer)
        return (ch is None or ch.closed) and peer in self._plain_until

    async def _open(self, peer: str, timeout_s: float) -> ClientChannel | None:
        opened = await self._open_ws(peer, timeout_s)
        if opened is None:
            self._plain_until[peer] = self._now() + limits.peer_channel_retry_secs
            log.info("%s does not serve %s: plain HTTP for %.0f s", peer, LINK_PATH,
                     limits.peer_channel_retry_secs)
            return None
        ws, key, incarnation = opened
        ch = self._channels[peer] = ClientChannel(peer, ws, key, incarnation)
        return ch

    async def close(self) -> None:
        for task in list(self._opening.values()):
            task.cancel()
        channels, self._channels = self._channels, {}
        await asyncio.gather(*(ch.aclose() for ch in channels.values()))


class ServerChannel:
    """The receiver's end of one channel: checks frames and answers them."""

    def __init__(self, ws: Any, key: bytes | None, incarnation: str = "") -> None:
        self.ws = ws
        self.incarnation = incarnation  # of the process that opened it ("": not said)
        self._in = FrameSeal(key, TO_SERVER)
        self._out = FrameSeal(key, TO_CLIENT)
        self._send_lock = asyncio.Lock()
        self.serving: set[asyncio.Task[Any]] = set()  # frames being served

    def track(self, task: asyncio.Task[Any]) -> None:
        self.serving.add(task)
        task.add_done_callback(self.serving.discard)

    async def drain_and_close(self, grace_s: float) -> None:
        """Shutdown: let the frames being served answer (within ``grace_s``),
        as in-flight requests are let finish, then close (going away)."""
        if self.serving:
            await asyncio.wait(list(self.serving), timeout=grace_s)
        await self.ws.close(code=1001)

    def open(self, frame: bytes) -> tuple[Any, Any]:
        """(id, messages) of a frame; ChannelError if it fails its check or
        is not ``[id, messages]``."""
        body = self._in.open(frame)
        try:
            got = msgpack.unpackb(body, raw=False)
        except Exception:
            raise ChannelError("peer frame is not valid msgpack") from None
        if not isinstance(got, list) or len(got) != 2 or type(got[0]) is not int:
            raise ChannelError("peer frame is not [id, messages]")
        return got[0], got[1]

    async def answer(self, fid: int, replies: Any, status: int | None = None) -> None:
        frame = [fid, replies] if status is None else [fid, None, status]
        async with self._send_lock:
            if self.ws.closed:
                return
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.send_bytes(self._out.seal(msgpack.packb(frame, use_bin_type=True)))
