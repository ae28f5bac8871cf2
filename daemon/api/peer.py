"""Peer endpoints (``/peer/v1/*``): msgpack in, msgpack out.

``msgs`` carries core messages (replication, acks, prepares, accepts, sync
offers) and answers with the messages the core addresses back to the
caller; ``pull`` answers an R-quorum read with the ops for one key the
caller lacks; ``mailbox`` runs a forwarded mailbox request here. All three
refuse unauthenticated callers when a cluster secret is set, and refuse
nodes that are not members.
"""

from __future__ import annotations

from typing import Any

import msgpack
from aiohttp import web

from common import limits
from common.errors import BadRequest, Forbidden
from daemon.app import NODE
from daemon.peer_auth import Verifier
from federation.messages import decode_msg
from store.ops import ALL_KEYS

VERIFIER: web.AppKey[Verifier] = web.AppKey("peer_verifier")


async def _peer_body(request: web.Request) -> tuple[str, Any]:
    node = request.app[NODE]
    raw = await request.read()
    peer = request.app[VERIFIER].verify(
        request.headers, request.method, request.path, raw, node.now_ms() / 1000)
    standalone = not node.settings.cluster.peers
    if not peer or peer == node.node_id or (
            not standalone and peer not in node.settings.cluster.member_ids):
        raise Forbidden(f"{peer!r} is not a member of this cluster")
    try:
        return peer, msgpack.unpackb(raw, raw=False)
    except Exception:
        raise BadRequest("peer body is not valid msgpack") from None


def _packed(payload: Any) -> web.Response:
    return web.Response(body=msgpack.packb(payload, use_bin_type=True),
                        content_type="application/msgpack")


async def msgs(request: web.Request) -> web.Response:
    peer, body = await _peer_body(request)
    try:
        decoded = [decode_msg(m) for m in body]
    except Exception:
        raise BadRequest("undecodable peer message") from None
    node = request.app[NODE]
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
    key, vv = str(body["key"]), dict(body.get("vv") or {})
    if key == ALL_KEYS:  # a read spanning records: everything the caller lacks
        ops = await node.store.ops_missing(vv, limits.all_keys_pull_max)
    else:
        ops = await node.store.ops_for_key(key, vv)
    return _packed([op.to_wire() for op in ops])


async def mailbox(request: web.Request) -> web.Response:
    _, body = await _peer_body(request)
    return _packed(await request.app[NODE].handle_forwarded(body))


def add_routes(app: web.Application) -> None:
    app[VERIFIER] = Verifier(app[NODE].settings.cluster.secret)
    app.router.add_post("/peer/v1/msgs", msgs)
    app.router.add_post("/peer/v1/pull", pull)
    app.router.add_post("/peer/v1/mailbox", mailbox)
