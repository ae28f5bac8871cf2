"""Peer endpoints (``/peer/v1/*``): msgpack in, msgpack out.

``msgs`` carries core messages (replication, acks, prepares, accepts, sync
offers) and answers with the messages the core addresses back to the
caller; ``pull`` answers an R-quorum read with the ops for one key the
caller lacks; ``mailbox`` runs a forwarded mailbox request here. All three
refuse unauthenticated callers when a cluster secret is set, and refuse
nodes that are not members; on a TLS node, also a caller whose client
certificate does not name the member it claims to be (:mod:`daemon.runtime.tls`). The signature is checked from the headers
before the body is read (:mod:`daemon.peer.auth`); a refused request is
answered at once and its connection closed, so an unsigned 60 MiB body is
never buffered. Each request's ``X-AIM-Protocol`` (see
:mod:`federation.messages`) is recorded per peer; senders older than
``PROTOCOL_MIN`` are refused, and messages of tags this version does not
know are skipped and counted, not allowed to fail the batch.

``link`` (``GET /peer/v1/link``) upgrades to the peer channel
(:mod:`daemon.peer.channel`): the same batches as ``msgs``, as WebSocket
frames, each served in its own task like a request of its own, at most
``limits.peer_channel_frames_serving_max`` at once per channel (the next
frame is read when one is answered, so a flood backs up into the sender's
socket). The upgrade is checked like any peer request; a frame that fails
its tag closes the channel.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

import msgpack
from aiohttp import WSMsgType, web

from common import limits
from common.errors import AiMemoryError, BadRequest, Forbidden
from daemon.http.appkeys import NODE
from daemon.http.errors import refuse_unread
from daemon.peer.auth import BOOT_HEADER, BootMismatch
from daemon.peer.channel import ChannelError, ServerChannel, channel_key
from daemon.peer.client import INCARNATION_HEADER, PROTOCOL_HEADER
from daemon.replication.forwarding import decode_forward
from daemon.replication.joining import HELLO_PATH, hello_answer
from daemon.runtime.tls import check_peer_cert
from daemon.services import peer as service
from federation.bootstrap import SERVING
from federation.messages import PROTOCOL_MIN, PROTOCOL_VERSION, decode_msg, is_known_tag

log = logging.getLogger("ai_memory.peer")

_CHANNELS: web.AppKey[weakref.WeakSet[Any]] = web.AppKey("peer_channels")


class _Refused(Exception):
    def __init__(self, exc: AiMemoryError, headers: dict[str, str]) -> None:
        self.exc = exc
        self.headers = headers


def _refuse(exc: AiMemoryError, boot: str) -> _Refused:
    # A boot mismatch tells the sender the boot id to re-sign for.
    return _Refused(exc, {BOOT_HEADER: boot} if isinstance(exc, BootMismatch) else {})


def _protocol(request: web.Request) -> int:
    raw = request.headers.get(PROTOCOL_HEADER)
    try:
        version = int(raw) if raw is not None else 1
    except ValueError:
        raise BadRequest(f"bad {PROTOCOL_HEADER} header {str(raw)[:20]!r}") from None
    if version < PROTOCOL_MIN:
        raise BadRequest(f"peer protocol {version} is older than the oldest this node "
                         f"speaks ({PROTOCOL_MIN}); upgrade that node first")
    return version


def _check_peer(request: web.Request, content_length: int | None) -> Any:
    """The checked signature of a peer request (its headers only)."""
    node = request.app[NODE]
    verifier = node.verifier
    try:
        checked = verifier.verify_headers(request.headers, request.method, request.path,
                                          content_length, node.now_ms() / 1000)
        peer = checked.node
        standalone = not node.settings.cluster.peers
        if not peer or peer == node.node_id or (
                not standalone and peer not in node.settings.cluster.member_ids):
            raise Forbidden(f"{peer!r} is not a member of this cluster")
        check_peer_cert(node.settings, request.transport, peer)
    except AiMemoryError as exc:
        raise _refuse(exc, verifier.boot) from None
    return checked


async def _peer_body(request: web.Request) -> tuple[str, Any]:
    node = request.app[NODE]
    verifier = node.verifier
    checked = _check_peer(request, request.content_length)
    peer = checked.node
    raw = await request.read()
    verifier.check_body(checked, raw)
    node.peer_protocols[peer] = _protocol(request)
    try:
        return peer, msgpack.unpackb(raw, raw=False)
    except Exception:
        raise BadRequest("peer body is not valid msgpack") from None


def _peer(handler: Any) -> Any:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)  # type: ignore[no-any-return]
        except _Refused as refused:
            return await refuse_unread(request, refused.exc, refused.headers)
    wrapped.__name__ = wrapped.__qualname__ = handler.__name__
    return wrapped


def _packed(payload: Any, node: Any) -> web.Response:
    return web.Response(body=msgpack.packb(payload, use_bin_type=True),
                        content_type="application/msgpack",
                        headers={PROTOCOL_HEADER: str(PROTOCOL_VERSION),
                                 INCARNATION_HEADER: node.core.incarnation})


async def _serve_msgs(node: Any, peer: str, body: Any, incarnation: str) -> list[Any]:
    """The wire replies to a batch of messages from ``peer``, sent by its
    process of ``incarnation`` ("": it did not say)."""
    if not isinstance(body, list):
        raise BadRequest("peer messages come as a list")
    known = [m for m in body if is_known_tag(m)]
    if len(known) < len(body):  # a newer peer's message kinds: skip them, keep the rest
        node.metrics.inc("peer_messages_unknown_total", len(body) - len(known), peer=peer)
    try:
        decoded = [decode_msg(m) for m in known]
    except Exception:
        raise BadRequest("undecodable peer message") from None
    replies = await service.receive(node, peer, decoded, incarnation)
    return [m.to_wire() for m in replies]


async def msgs(request: web.Request) -> web.Response:
    peer, body = await _peer_body(request)
    node = request.app[NODE]
    incarnation = request.headers.get(INCARNATION_HEADER, "")
    return _packed(await _serve_msgs(node, peer, body, incarnation), node)


async def link(request: web.Request) -> web.StreamResponse:
    checked = _check_peer(request, 0)  # an upgrade has no body
    node = request.app[NODE]
    peer = checked.node
    node.peer_protocols[peer] = _protocol(request)
    ws = web.WebSocketResponse(compress=False, autoping=True,
                               heartbeat=limits.peer_channel_heartbeat_secs,
                               max_msg_size=limits.peer_body_max_bytes + 64)
    ws.headers[INCARNATION_HEADER] = node.core.incarnation
    channel = ServerChannel(ws, channel_key(node.verifier.secret,
                                            request.headers.get("X-AIM-Sig", "")),
                            request.headers.get(INCARNATION_HEADER, ""))
    request.app[_CHANNELS].add(channel)  # before the upgrade: shutdown sees it either way
    await ws.prepare(request)
    async for msg in ws:
        if msg.type != WSMsgType.BINARY:
            break
        try:
            fid, body = channel.open(msg.data)
        except ChannelError as exc:
            log.warning("closing the peer channel from %s: %s", peer, exc)
            break
        if len(channel.serving) >= limits.peer_channel_frames_serving_max:
            # Backpressure: read no further until one is answered, so a peer
            # that sends faster than this node serves fills its own socket
            # buffer, not this node's memory.
            await asyncio.wait(list(channel.serving), return_when=asyncio.FIRST_COMPLETED)
        channel.track(node.spawn(_serve_frame(node, peer, channel, fid, body)))
    await ws.close()
    return ws


async def _serve_frame(node: Any, peer: str, channel: ServerChannel, fid: int,
                       body: Any) -> None:
    try:
        replies = await _serve_msgs(node, peer, body, channel.incarnation)
    except AiMemoryError as exc:
        await channel.answer(fid, None, exc.status)
        return
    except Exception:
        log.exception("serving a peer frame from %s failed", peer)
        await channel.answer(fid, None, 500)
        return
    await channel.answer(fid, replies)


async def _close_channels(app: web.Application) -> None:
    """Shutdown: every peer channel answers the frames it is serving (as
    in-flight requests finish), then closes, so no handler holds the server open."""
    channels: weakref.WeakSet[Any] = app[_CHANNELS]
    grace = app[NODE].settings.server.shutdown_grace_secs
    await asyncio.gather(*(ch.drain_and_close(grace) for ch in list(channels)),
                         return_exceptions=True)


async def hello(request: web.Request) -> web.Response:
    """The first-start probe (:mod:`daemon.replication.joining`): this member serves a
    database of its cluster."""
    node = request.app[NODE]
    await _peer_body(request)
    return _packed(hello_answer(SERVING, node.node_id, node.settings.cluster.cluster_id,
                                fresh=node.core.pristine,
                                collected=await service.collected(node)), node)


async def pull(request: web.Request) -> web.Response:
    _, body = await _peer_body(request)
    vv = body.get("vv") or {} if isinstance(body, dict) else None
    if not (isinstance(body, dict) and isinstance(body.get("key"), str) and isinstance(vv, dict)
            and all(isinstance(k, str) and type(v) is int for k, v in vv.items())):
        raise BadRequest("peer pull body must be {key: str, vv: {origin: int}}")
    ops = await service.pull(request.app[NODE], body["key"], dict(vv))
    return _packed([op.to_wire() for op in ops], request.app[NODE])


async def mailbox(request: web.Request) -> web.Response:
    _, body = await _peer_body(request)
    decode_forward(body)  # BadRequest naming the fault; the router decodes it again
    return _packed(await request.app[NODE].router.handle_forwarded(body), request.app[NODE])


def add_routes(app: web.Application) -> None:
    app[_CHANNELS] = weakref.WeakSet()
    app.on_shutdown.append(_close_channels)
    app.router.add_post(HELLO_PATH, _peer(hello))
    app.router.add_post("/peer/v1/msgs", _peer(msgs))
    app.router.add_get("/peer/v1/link", _peer(link))
    app.router.add_post("/peer/v1/pull", _peer(pull))
    app.router.add_post("/peer/v1/mailbox", _peer(mailbox))
