"""Peer endpoints (``/peer/v1/*``): msgpack in, msgpack out.

``msgs`` carries core messages (replication, acks, prepares, accepts, sync
offers) and answers with the messages the core addresses back to the
caller; ``pull`` answers an R-quorum read with the ops for one key the
caller lacks; ``mailbox`` runs a forwarded mailbox request here. All three
refuse unauthenticated callers when a cluster secret is set, and refuse
nodes that are not members. Each request's ``X-AIM-Protocol`` (see
:mod:`federation.messages`) is recorded per peer; senders older than
``PROTOCOL_MIN`` are refused, and messages of tags this version does not
know are skipped and counted, not allowed to fail the batch.
"""

from __future__ import annotations

from typing import Any

import msgpack
from aiohttp import web

from common.errors import BadRequest, Forbidden
from daemon.app import NODE
from daemon.peer_auth import Verifier
from daemon.peer_client import PROTOCOL_HEADER
from federation.messages import PROTOCOL_MIN, PROTOCOL_VERSION, decode_msg, is_known_tag

VERIFIER: web.AppKey[Verifier] = web.AppKey("peer_verifier")
# The protocol version each peer last spoke to us (shown by cluster status).
PEER_PROTOCOLS: web.AppKey[dict[str, int]] = web.AppKey("peer_protocols")


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
    raw = await request.read()
    peer = request.app[VERIFIER].verify(
        request.headers, request.method, request.path, raw, node.now_ms() / 1000)
    standalone = not node.settings.cluster.peers
    if not peer or peer == node.node_id or (
            not standalone and peer not in node.settings.cluster.member_ids):
        raise Forbidden(f"{peer!r} is not a member of this cluster")
    request.app[PEER_PROTOCOLS][peer] = _protocol(request)
    try:
        return peer, msgpack.unpackb(raw, raw=False)
    except Exception:
        raise BadRequest("peer body is not valid msgpack") from None


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
    if not node.settings.cluster.peers:
        replies: list[Any] = []
        for msg in decoded:
            await node.run(node.core.on_foreign_push(peer, msg, node.now_ms()),
                           reply_peer=peer, replies=replies)
    else:
        replies = await node.receive(peer, decoded)
    return _packed([m.to_wire() for m in replies])


async def pull(request: web.Request) -> web.Response:
    _, body = await _peer_body(request)
    node = request.app[NODE]
    ops = await node.store.ops_for_key(str(body["key"]), dict(body.get("vv") or {}))
    return _packed([op.to_wire() for op in ops])


async def mailbox(request: web.Request) -> web.Response:
    _, body = await _peer_body(request)
    return _packed(await request.app[NODE].handle_forwarded(body))


def add_routes(app: web.Application) -> None:
    app[VERIFIER] = Verifier(app[NODE].settings.cluster.secret)
    app[PEER_PROTOCOLS] = {}
    app.router.add_post("/peer/v1/msgs", msgs)
    app.router.add_post("/peer/v1/pull", pull)
    app.router.add_post("/peer/v1/mailbox", mailbox)
