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

from common.errors import BadRequest, Forbidden
from daemon.appkeys import NODE
from daemon.services import peer as service
from federation.messages import decode_msg


async def _peer_body(request: web.Request) -> tuple[str, Any]:
    node = request.app[NODE]
    raw = await request.read()
    peer = node.verifier.verify(
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
    replies = await service.receive(request.app[NODE], peer, decoded)
    return _packed([m.to_wire() for m in replies])


async def pull(request: web.Request) -> web.Response:
    _, body = await _peer_body(request)
    ops = await service.pull(request.app[NODE], str(body["key"]), dict(body.get("vv") or {}))
    return _packed([op.to_wire() for op in ops])


async def mailbox(request: web.Request) -> web.Response:
    _, body = await _peer_body(request)
    return _packed(await request.app[NODE].router.handle_forwarded(body))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/peer/v1/msgs", msgs)
    app.router.add_post("/peer/v1/pull", pull)
    app.router.add_post("/peer/v1/mailbox", mailbox)
