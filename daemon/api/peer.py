"""Peer endpoints (``/peer/v1/*``): msgpack in, msgpack out.

``msgs`` carries core messages (replication, acks, prepares, accepts, sync
offers) and answers with the messages the core addresses back to the
caller; ``pull`` answers an R-quorum read with the ops for one key the
caller lacks; ``mailbox`` runs a forwarded mailbox request here. All three
refuse unauthenticated callers when a cluster secret is set, and refuse
nodes that are not members. The signature is checked from the headers
before the body is read (:mod:`daemon.peer_auth`); a refused request is
answered at once and its connection closed, so an unsigned 60 MiB body is
never buffered. Each request's ``X-AIM-Protocol`` (see
:mod:`federation.messages`) is recorded per peer; senders older than
``PROTOCOL_MIN`` are refused, and messages of tags this version does not
know are skipped and counted, not allowed to fail the batch.
"""

from __future__ import annotations

from typing import Any

import msgpack
from aiohttp import web

from common.errors import AiMemoryError, BadRequest, Forbidden
from daemon.appkeys import NODE
from daemon.forwarding import decode_forward
from daemon.http_errors import refuse_unread
from daemon.peer_auth import BOOT_HEADER, BootMismatch
from daemon.peer_client import PROTOCOL_HEADER
from daemon.services import peer as service
from federation.messages import PROTOCOL_MIN, PROTOCOL_VERSION, decode_msg, is_known_tag


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


async def _peer_body(request: web.Request) -> tuple[str, Any]:
    node = request.app[NODE]
    verifier = node.verifier
    try:
        checked = verifier.verify_headers(request.headers, request.method, request.path,
                                          request.content_length, node.now_ms() / 1000)
        peer = checked.node
        standalone = not node.settings.cluster.peers
        if not peer or peer == node.node_id or (
                not standalone and peer not in node.settings.cluster.member_ids):
            raise Forbidden(f"{peer!r} is not a member of this cluster")
    except AiMemoryError as exc:
        raise _refuse(exc, verifier.boot) from None
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


def _packed(payload: Any) -> web.Response:
    return web.Response(body=msgpack.packb(payload, use_bin_type=True),
                        content_type="application/msgpack",
                        headers={PROTOCOL_HEADER: str(PROTOCOL_VERSION)})


async def msgs(request: web.Request) -> web.Response:
    peer, body = await _peer_body(request)
    node = request.app[NODE]
    if not isinstance(body, list):
        raise BadRequest("peer messages come as a list")
    known = [m for m in body if is_known_tag(m)]
    if len(known) < len(body):  # a newer peer's message kinds: skip them, keep the rest
        node.metrics.inc("peer_messages_unknown_total", len(body) - len(known), peer=peer)
    try:
        decoded = [decode_msg(m) for m in known]
    except Exception:
        raise BadRequest("undecodable peer message") from None
    replies = await service.receive(node, peer, decoded)
    return _packed([m.to_wire() for m in replies])


async def pull(request: web.Request) -> web.Response:
    _, body = await _peer_body(request)
    vv = body.get("vv") or {} if isinstance(body, dict) else None
    if not (isinstance(body, dict) and isinstance(body.get("key"), str) and isinstance(vv, dict)
            and all(isinstance(k, str) and type(v) is int for k, v in vv.items())):
        raise BadRequest("peer pull body must be {key: str, vv: {origin: int}}")
    ops = await service.pull(request.app[NODE], body["key"], dict(vv))
    return _packed([op.to_wire() for op in ops])


async def mailbox(request: web.Request) -> web.Response:
    _, body = await _peer_body(request)
    decode_forward(body)  # BadRequest naming the fault; the router decodes it again
    return _packed(await request.app[NODE].router.handle_forwarded(body))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/peer/v1/msgs", _peer(msgs))
    app.router.add_post("/peer/v1/pull", _peer(pull))
    app.router.add_post("/peer/v1/mailbox", _peer(mailbox))
