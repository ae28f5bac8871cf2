"""One API request, whichever way it came in: an HTTP route or an ``/mcp`` tool.

A route's rules (what it validates, and in which order; whose name it acts
in; which service it calls) are written once, as an *operation*: an async
function of an :class:`ApiCall` that returns the reply's JSON. ``add_routes``
serves an operation over HTTP with :func:`http` (the success status is the
route's); the ``/mcp`` tools run the very same operation in process
(:mod:`daemon.mcp.direct`), with the ``/mcp`` request's caller and the
tool's query, path and body. A refusal is an
:class:`~common.errors.AiMemoryError` either way, so an HTTP client and an
MCP client read the same ``{"error", "code"}``.

:data:`OPERATIONS` in each route module lists its routes served as
operations; :data:`daemon.api.OPERATIONS` gathers them, and that is what
``/mcp`` may ask for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

import pydantic
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy

from common.errors import BadRequest, Unavailable
from common.policy import Principal
from daemon.http.appkeys import NODE
from daemon.http.auth import PRINCIPAL, acting_agent, principal_of
from daemon.http.errors import Handler, decode_json, read_body
from daemon.http.jsonio import dumps, json_response
from daemon.lanes.frames import HANDOFF, decode_principal, frame_of, register_operation
from daemon.schemas.headers import session_id
from daemon.schemas.ids import check_idempotency_key
from daemon.schemas.validation import validate

if TYPE_CHECKING:
    from daemon.node import Node

M = TypeVar("M", bound=pydantic.BaseModel)


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One request as an operation sees it."""

    request: web.Request  # whose headers name the caller: the route's own, or /mcp's
    query: Mapping[str, Any]
    path: Mapping[str, str]  # the route's {placeholders}
    headers: Mapping[str, str]  # this call's own (Idempotency-Key)
    read: Callable[[], Awaitable[Any]]  # the decoded JSON body

    @classmethod
    def of(cls, request: web.Request) -> ApiCall:
        """An HTTP request, as it came."""
        return cls(request, request.query, request.match_info, request.headers,
                   lambda: read_body(request))

    @property
    def node(self) -> Node:
        return self.request.app[NODE]

    @property
    def principal(self) -> Principal:
        """The caller, as the key middleware resolved the request."""
        return principal_of(self.request)

    def agent(self, claimed: str | None, *, required: bool = True) -> str | None:
        """The acting agent (:func:`daemon.http.auth.acting_agent`)."""
        return acting_agent(self.principal, claimed, required=required)

    @property
    def session(self) -> str | None:
        return session_id(self.request)

    @property
    def idempotency_key(self) -> str | None:
        return check_idempotency_key(self.headers.get("Idempotency-Key"))

    async def body(self, model: type[M]) -> M:
        """The body, a JSON object, validated with ``model``."""
        data = await self.read()
        if not isinstance(data, dict):
            raise BadRequest("request body must be a JSON object")
        return validate(model, data)

    def params(self, model: type[M]) -> M:
        """The query validated with ``model`` (repeated keys as :func:`daemon.http.errors.query_model`)."""
        return validate(model, dict(self.query))


Operation = Callable[[ApiCall], Awaitable[Any]]


class Route(NamedTuple):
    """One route served as an operation; ``status`` is its HTTP success status."""

    method: str
    path: str
    op: Operation
    status: int = 200


# -- an operation handed to another lane (daemon/lanes/frames.py) ------------------------
class _Standin:
    """What an operation run from a frame sees of its request: exactly the
    attributes operations and the services they call read (``app``,
    ``headers``, the principal, ``body_exists``)."""

    __slots__ = ("_principal", "app", "body_exists", "headers")

    def __init__(self, app: web.Application, headers: CIMultiDictProxy[str],
                 principal: Principal, body_exists: bool) -> None:
        self.app = app
        self.headers = headers
        self._principal = principal
        self.body_exists = body_exists

    def get(self, key: Any, default: Any = None) -> Any:
        return self._principal if key is PRINCIPAL else default


def frame_runner(app: web.Application, routes: list[Route]
                 ) -> Callable[[Any], Awaitable[tuple[int, bytes]]]:
    """Runs a frame of :func:`frame_of` with the operation of ``routes`` it
    names: its success status and JSON, or its refusal raised."""
    table = {(r.method, r.path): r for r in routes}

    async def run(frame: Any) -> tuple[int, bytes]:
        (method, pattern, query, path, req_headers, call_headers, body, has_body,
         principal, time_left) = frame
        route = table.get((str(method), str(pattern)))
        if route is None:
            raise BadRequest(f"no operation {method} {pattern} on this lane", code="no_operation")
        headers = CIMultiDictProxy(CIMultiDict(req_headers))
        stand_in = _Standin(app, headers, decode_principal(principal), bool(has_body))

        async def read() -> Any:
            return body if has_body else decode_json(b"")
        call = ApiCall(cast(web.Request, stand_in), MultiDictProxy(MultiDict(query)), path,
                       headers if call_headers is None else CIMultiDictProxy(
                           CIMultiDict(call_headers)), read)
        try:
            async with asyncio.timeout(float(time_left)):
                result = await route.op(call)
        except TimeoutError:
            raise Unavailable(f"{method} {pattern} took over {time_left} s on its lane; retry",
                              retry_after=1) from None
        return route.status, dumps(result)
    return run


async def _handed(request: web.Request, route: Route, lane: int, body: Any) -> web.Response:
    node: Node = request.app[NODE]
    siblings = node.siblings
    assert siblings is not None
    left = siblings.frame_time_left()
    frame = frame_of(route.method, route.path, list(request.query.items()), request.match_info,
                     request.headers, None, body, body is not None, principal_of(request), left)
    status, data = await siblings.frames.call(lane, frame, left)
    return web.Response(body=data, status=status, content_type="application/json",
                        charset="utf-8")


def http(op: Operation, status: int = 200, route: Route | None = None) -> Handler:
    """``op`` as an aiohttp handler answering ``status`` with its JSON (with
    lanes, run by the lane the router names: :data:`HANDOFF`)."""
    async def handler(request: web.Request) -> web.StreamResponse:
        handed = request.get(HANDOFF)
        if handed is not None and route is not None:
            return await _handed(request, route, handed[0], handed[1])
        return json_response(await op(ApiCall.of(request)), status=status)
    if route is not None:
        register_operation(handler, route)
    return handler


def serve(app: web.Application, routes: list[Route]) -> None:
    """Route each of ``routes`` to its operation over HTTP."""
    for route in routes:
        app.router.add_route(route.method, route.path, http(route.op, route.status, route))
