"""Which lane serves a request, and the hop there: the lanes' middleware.

Every lane accepts on the node's port, so a request reaches any of them.
:func:`lane_router` looks up the route's :class:`daemon.lanes.rules.Rule`
and places the request:

* on this lane: it is served here, as on a node without lanes;
* on another lane, by its key (``KEY``), a route served as an operation
  (:mod:`daemon.api.call`): its operation goes there as one frame
  (:mod:`daemon.lanes.frames`; the route's handler sends it, so this lane's
  middlewares answer as for a request served here);
* on another lane otherwise (a stream, ``/web``, a route that is no
  operation, ``HOME``): the whole request goes there over the local link
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
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgpack
from aiohttp import web

from common.errors import AiMemoryError, ClusterMismatch, NotFound, PayloadTooLarge
from common.ops import ALL_KEYS, IDENT_KEY
from daemon.http.appkeys import NODE
from daemon.http.auth import PRINCIPAL
from daemon.http.errors import BODY_READ, Handler, decode_json
from daemon.http.jsonio import loads
from daemon.identity import admin
from daemon.lanes import rules, table  # noqa: F401  (table fills the rules)
from daemon.lanes.frames import (
    CALL_FRAME,
    CALL_FRAME_MAX,
    HANDOFF,
    TOO_BIG_CODE,
    frame_of,
    route_of,
)
from daemon.lanes.hop import RPC_PREFIX, arrived_by_hop
from daemon.replication.forwarding import decode_request, encode_error, encode_result
from daemon.replication.joining import HELLO_PATH
from daemon.services import agents, memory_lanes, notices, purge

log = logging.getLogger("ai_memory.lanes")


@web.middleware
async def lane_router(request: web.Request, handler: Handler) -> web.StreamResponse:
    node = request.app[NODE]
    siblings = node.siblings
    if siblings is None or arrived_by_hop(request):
        return await handler(request)
    if (request.path.startswith("/peer/") and request.path != HELLO_PATH
            and _local_port(request) == node.settings.server.port):
        # Lane i of the other members talks to this node's lane i on its own port;
        # on the shared port a peer call would reach whichever lane took it. (The
        # hello is answered: it tells a member of another lane count what this is.)
        raise ClusterMismatch(
            f"this node runs {siblings.lanes} lanes: peers reach lane i on port "
            f"{node.settings.server.port} + {node.settings.server.lane_port_offset} x (i + 1), "
            "and every member runs the same lane count (docs/lanes.md)", code="lane_port_required")
    rule = rules.rule_for(request)
    if rule.where == rules.HERE:
        return await handler(request)
    body = await request.read() if request.can_read_body else b""
    request[BODY_READ] = body
    lane = await rules.place(rule, rules.View.of(request, body), siblings.lane)
    if lane == siblings.lane:
        return await handler(request)
    if lane is not None:
        if rule.where == rules.KEY and route_of(request.match_info.handler) is not None:
            try:  # the operation goes as one frame; its body decoded here, once
                decoded = decode_json(body) if body else None
            except AiMemoryError:
                decoded = UNREADABLE  # refused where it is run, as it is today
            if decoded is not UNREADABLE:
                node.metrics.inc("lane_handoffs_total", how="frame")
                request[HANDOFF] = (lane, decoded)
                return await handler(request)
        node.metrics.inc("lane_handoffs_total", how="http")
        return await siblings.forward(request, lane, body)
    if request.method == "HEAD":  # no bodies to merge: this lane's answer's head
        return await handler(request)
    return await _everywhere(request, handler, rule, body)


UNREADABLE: Any = object()


def _local_port(request: web.Request) -> int | None:
    transport = request.transport
    found = transport.get_extra_info("sockname") if transport is not None else None
    return found[1] if isinstance(found, tuple) and len(found) >= 2 else None


async def _everywhere(request: web.Request, handler: Handler, rule: rules.Rule,
                      body: bytes) -> web.StreamResponse:
    """An ``EVERY`` or ``FANOUT`` request: served by every lane at once."""
    node = request.app[NODE]
    siblings = node.siblings
    assert siblings is not None
    node.metrics.inc("lane_fanouts_total")
    others = siblings.others
    answers = await asyncio.gather(_here(request, handler),
                                   *(siblings.forward(request, i, body) for i in others))
    by_lane: dict[int, web.Response] = {}
    for lane, answer in zip([siblings.lane, *others], answers, strict=True):
        assert isinstance(answer, web.Response)
        by_lane[lane] = answer
    failed = [a for _, a in sorted(by_lane.items()) if a.status >= 400]
    if failed:
        return failed[0]
    if rule.where == rules.EVERY:
        return by_lane[siblings.lane]
    assert rule.merge is not None
    view = rules.View.of(request, body)
    if rule.text:
        return web.Response(text=rule.merge(view, [_text(by_lane[i]) for i in sorted(by_lane)]),
                            content_type=by_lane[siblings.lane].content_type)
    merged = rule.merge(view, [_json(by_lane[i]) for i in sorted(by_lane)])
    return web.json_response(merged, status=by_lane[siblings.lane].status)


async def _here(request: web.Request, handler: Handler) -> web.Response:
    try:
        answer = await handler(request)
    except web.HTTPException as exc:  # a route's own HTTP answer (a redirect, a 404)
        return web.Response(status=exc.status, body=exc.body, headers=exc.headers)
    if not isinstance(answer, web.Response):
        raise TypeError(f"{request.path} streams; it cannot be served on every lane")
    return answer


def _text(response: web.Response) -> str:
    raw = response.body
    return raw.decode() if isinstance(raw, bytes | bytearray) else str(response.text or "")


def _json(response: web.Response) -> Any:
    raw = response.body
    if isinstance(raw, bytes | bytearray):
        return json.loads(raw) if raw else None
    raise TypeError("a lane answered a body that is not bytes")


# -- an /mcp tool's call ------------------------------------------------------------------
_CALLER_HEADERS = ("X-API-Key", "Authorization", "X-Agent-Id", "X-Request-Id",
                   "x-memory-actor-session-id")


async def run_call(request: web.Request, method: str, pattern: str, path: str,
                   match: Mapping[str, str], query: Mapping[str, Any],
                   headers: Mapping[str, str], body: dict[str, Any],
                   here: Callable[[], Awaitable[Any]], operation: Any = None) -> Any:
    """An ``/mcp`` tool's API request (``method path``, of the route
    ``pattern``) served where its rule places it: ``here()`` on this lane,
    or the same request, in the ``/mcp`` caller's name, on its lane: as one
    frame of ``operation`` (its :class:`daemon.api.call.Route`) when the
    rule names the lane of a key, else as an HTTP request."""
    node = request.app[NODE]
    siblings = node.siblings
    if siblings is None:
        return await here()
    rule = rules.rule_of(method, pattern)
    caller = {h: request.headers[h] for h in _CALLER_HEADERS if h in request.headers}
    view = rules.View(node, query=query, match=match, headers={**caller, **headers},
                      principal=request.get(PRINCIPAL), json=body)
    lane = await rules.place(rule, view, siblings.lane)
    if lane == siblings.lane:
        return await here()

    async def there(i: int) -> Any:
        return await siblings.request_json(i, method, path, query=query,
                                           headers={**caller, **headers}, body=body)
    if lane is not None:
        route = operation
        principal = request.get(PRINCIPAL)
        if rule.where == rules.KEY and route is not None and principal is not None:
            node.metrics.inc("lane_handoffs_total", how="frame")
            left = siblings.frame_time_left()
            frame = frame_of(route.method, route.path, list(query.items()), match, caller,
                             headers, body, True, principal, left)
            _, data = await siblings.frames.call(lane, frame, left)
            return loads(data)
        node.metrics.inc("lane_handoffs_total", how="http")
        return await there(lane)
    node.metrics.inc("lane_fanouts_total")
    lanes = [siblings.lane, *siblings.others]
    answers = await asyncio.gather(here(), *(there(i) for i in siblings.others),
                                   return_exceptions=True)
    by_lane = dict(zip(lanes, answers, strict=True))
    for i in sorted(by_lane):
        if isinstance(by_lane[i], BaseException):
            raise by_lane[i]
    if rule.where == rules.EVERY:
        return by_lane[siblings.lane]
    assert rule.merge is not None
    return rule.merge(view, [by_lane[i] for i in sorted(by_lane)])


# -- the lanes' own calls -------------------------------------------------------------
async def serve_call(node: Any, name: str, payload: Any) -> Any:
    """A sibling's call ``name`` on this lane (``Siblings.call``: a frame on
    the lanes' link, or ``/lane/v1/<name>`` over their HTTP socket): its answer,
    or an :class:`AiMemoryError` raised."""
    if name == "write":
        ops = await node.write_here([(str(k), str(key), dict(p)) for k, key, p in payload])
        return [op.to_wire() for op in ops]
    if name == "mailbox":
        return encode_result(await node.router.route(decode_request(payload)))
    if name == "refuse":  # identity records taken away: write, confirm on every member
        await admin.write_refused_here(node, [(str(k), str(key), dict(p)) for k, key, p in payload])
        return None
    if name == "ident":  # a user's records on this lane (daemon/identity/admin.py)
        await node.read_barrier(IDENT_KEY)
        return await admin.lane_view(node, str(payload[0]),
                                     *(None if x is None else str(x) for x in payload[1:3]))
    if name == "purge_scan":  # a purge's look at this lane's mailboxes
        return await purge.mailbox_projects(node, str(payload[0]),
                                            None if payload[1] is None else str(payload[1]))
    if name == "purge_sent":  # the cleanup's: projects that sent mail this lane holds
        return await purge.sent_from(node, [(str(w), str(p)) for w, p in payload])
    if name == "status":
        return node.status()
    if name == "agents":  # a broadcast's recipients (daemon/services/notify.py)
        await node.read_barrier(ALL_KEYS)
        return await node.store.list_agents()
    if name == "unread":  # an agent's unread count for a notice (services/notices.py)
        found = await notices.unread(node, str(payload))
        return None if found is None else [found.agent, found.count, found.senders,
                                           found.more_senders]
    if name == "seen":  # an agent's last seen (daemon/services/agents.py)
        return await agents.refresh_seen(node, str(payload))
    if name == "mem":  # a memory read on this lane (daemon/services/memory_lanes.py)
        return await memory_lanes.here(node, str(payload[0]), dict(payload[1]))
    if name == "webhooks":  # a subscription on every lane (daemon/webhooks/lanes.py)
        return await node.webhooks.lane_call(payload)
    raise NotFound(f"no lane call {name!r}")


# The lanes' calls that only read: one whose answer is too large for a frame
# is refused there and asked for again over HTTP (run twice: harmless). The
# others (a write's share, a refusal, a mailbox request, a last-seen refresh,
# a webhook change) are answered as a frame whatever their size, so that none
# runs twice; their answers are bounded by the request body limit far below.
READ_CALLS = frozenset({"ident", "purge_scan", "purge_sent", "status", "agents", "unread",
                        "mem"})


def call_runner(app: web.Application, operations: Callable[[Any], Awaitable[tuple[int, bytes]]]
                ) -> Callable[[Any], Awaitable[tuple[int, bytes]]]:
    """What this lane's frame socket runs: a sibling's call (``[CALL_FRAME,
    name, payload]``: its answer as msgpack), else an operation handed over
    (``operations``, :func:`daemon.api.call.frame_runner`)."""
    async def run(frame: Any) -> tuple[int, bytes]:
        if isinstance(frame, list) and len(frame) == 3 and frame[0] == CALL_FRAME:
            name = str(frame[1])
            answer = msgpack.packb(await serve_call(app[NODE], name, frame[2]),
                                   use_bin_type=True)
            if len(answer) > CALL_FRAME_MAX and name in READ_CALLS:  # asked again over HTTP
                raise PayloadTooLarge(f"{len(answer)} bytes: over a frame", code=TOO_BIG_CODE)
            return 200, answer
        return await operations(frame)
    return run


async def rpc(request: web.Request) -> web.Response:
    """``/lane/v1/<name>``: a sibling's call over the HTTP socket, on the local
    socket only (a call whose answer is too large for a frame comes this way)."""
    if not arrived_by_hop(request):
        raise NotFound("no such route")
    try:
        payload = msgpack.unpackb(await request.read(), raw=False)
        answer = await serve_call(request.app[NODE], request.match_info["name"], payload)
    except AiMemoryError as exc:
        return web.Response(status=exc.status, body=msgpack.packb({"error": encode_error(exc)}),
                            content_type="application/msgpack")
    return web.Response(body=msgpack.packb(answer), content_type="application/msgpack")


def add_routes(app: web.Application) -> None:
    app.router.add_post(RPC_PREFIX + "{name}", rpc)
