"""Which lane serves a request, and the hop there: the lanes' middleware.

Every lane accepts on the node's port, so a request reaches any of them.
:func:`lane_router` looks up the route's :class:`daemon.lanes.rules.Rule`
and places the request:

* on this lane: it is served here, as on a node without lanes;
* on another lane: the whole request goes there over the local link
  (:meth:`daemon.lanes.hop.Siblings.forward`) and its answer comes back as it was;
* on every lane (``EVERY``, a write of records each lane keeps a copy of,
  such as a webhook subscription): served here and by every sibling; the
  answer is this lane's, unless one lane refused, whose refusal is answered;
* fanned out (``FANOUT``, a read across keys): asked of every lane, the
  answers merged by the rule.

A request that came from a sibling is served where it arrived. A request
the rule cannot place (a body that is not JSON, a missing field) is served
here: the route refuses it with the same 4xx as on one lane, before it
reads or writes a key.

The lanes' own calls (``/lane/v1/*``, msgpack) are served on the local
socket only: a quorum write of another lane's items (:func:`write`) and a
lane's status.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import msgpack
from aiohttp import web

from common.errors import AiMemoryError, NotFound
from daemon.http.appkeys import NODE
from daemon.http.errors import BODY_READ, Handler
from daemon.identity import admin
from daemon.lanes import rules, table  # noqa: F401  (table fills the rules)
from daemon.lanes.hop import RPC_PREFIX, arrived_by_hop
from daemon.replication.forwarding import decode_request, encode_error, encode_result
from daemon.services import purge

log = logging.getLogger("ai_memory.lanes")


@web.middleware
async def lane_router(request: web.Request, handler: Handler) -> web.StreamResponse:
    node = request.app[NODE]
    siblings = node.siblings
    if siblings is None or arrived_by_hop(request):
        return await handler(request)
    rule = rules.rule_for(request)
    if rule.where == rules.HERE:
        return await handler(request)
    body = await request.read() if request.can_read_body else b""
    request[BODY_READ] = body
    view = rules.View(request, body, node)
    if rule.where == rules.KEY:
        assert rule.lane is not None
        lane = await rule.lane(view)
        if lane is None or lane == siblings.lane:
            return await handler(request)
        node.metrics.inc("lane_handoffs_total")
        return await siblings.forward(request, lane, body)
    if rule.where == rules.HOME:
        if siblings.lane == 0:
            return await handler(request)
        node.metrics.inc("lane_handoffs_total")
        return await siblings.forward(request, 0, body)
    return await _everywhere(request, handler, rule, body)


async def _everywhere(request: web.Request, handler: Handler, rule: rules.Rule,
                      body: bytes) -> web.StreamResponse:
    """An ``EVERY`` or ``FANOUT`` request: served by every lane at once."""
    siblings = request.app[NODE].siblings
    assert siblings is not None
    request.app[NODE].metrics.inc("lane_fanouts_total")
    others = siblings.others
    answers = await asyncio.gather(_here(request, handler),
                                   *(siblings.forward(request, i, body) for i in others),
                                   return_exceptions=True)
    by_lane: dict[int, web.Response] = {}
    for lane, answer in zip([siblings.lane, *others], answers, strict=True):
        if isinstance(answer, BaseException):
            if isinstance(answer, AiMemoryError):
                raise answer
            raise answer
        assert isinstance(answer, web.Response)
        by_lane[lane] = answer
    failed = [a for _, a in sorted(by_lane.items()) if a.status >= 400]
    if failed:
        return failed[0]
    if rule.where == rules.EVERY:
        return by_lane[siblings.lane]
    assert rule.merge is not None
    first = by_lane[siblings.lane]
    bodies = [_json(by_lane[i]) for i in sorted(by_lane)]
    merged = rule.merge(rules.View(request, body, request.app[NODE]), bodies)
    return web.json_response(merged, status=first.status)


async def _here(request: web.Request, handler: Handler) -> web.Response:
    try:
        answer = await handler(request)
    except web.HTTPException as exc:  # a route's own HTTP answer (a redirect, a 404)
        return web.Response(status=exc.status, body=exc.body, headers=exc.headers)
    if not isinstance(answer, web.Response):
        raise TypeError(f"{request.path} streams; it cannot be served on every lane")
    return answer


def _json(response: web.Response) -> Any:
    raw = response.body
    if isinstance(raw, bytes | bytearray):
        return json.loads(raw) if raw else None
    raise TypeError("a lane answered a body that is not bytes")


# -- the lanes' own calls -------------------------------------------------------------
async def rpc(request: web.Request) -> web.Response:
    """``/lane/v1/<name>``: a sibling's call, on the local socket only."""
    if not arrived_by_hop(request):
        raise NotFound("no such route")
    node = request.app[NODE]
    name = request.match_info["name"]
    try:
        payload = msgpack.unpackb(await request.read(), raw=False)
        if name == "write":
            ops = await node.write_here([(str(k), str(key), dict(p)) for k, key, p in payload])
            answer: Any = [op.to_wire() for op in ops]
        elif name == "mailbox":
            answer = encode_result(await node.router.route(decode_request(payload)))
        elif name == "refuse":  # identity records taken away: write, confirm on every member
            await admin.write_refused_here(node, [(str(k), str(key), dict(p))
                                                  for k, key, p in payload])
            answer = None
        elif name == "purge_scan":  # a purge's look at this lane's mailboxes
            answer = await purge.mailbox_projects(node, str(payload[0]),
                                                  None if payload[1] is None else str(payload[1]))
        elif name == "purge_sent":  # the cleanup's: projects that sent mail this lane holds
            answer = await purge.sent_from(node, [(str(w), str(p)) for w, p in payload])
        elif name == "status":
            answer = node.status()
        else:
            raise NotFound(f"no lane call {name!r}")
    except AiMemoryError as exc:
        return web.Response(status=exc.status, body=msgpack.packb({"error": encode_error(exc)}),
                            content_type="application/msgpack")
    return web.Response(body=msgpack.packb(answer), content_type="application/msgpack")


def add_routes(app: web.Application) -> None:
    app.router.add_post(RPC_PREFIX + "{name}", rpc)
