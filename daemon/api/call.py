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

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import pydantic
from aiohttp import web

from common.errors import BadRequest
from common.policy import Principal
from daemon.http.appkeys import NODE
from daemon.http.auth import acting_agent, principal_of
from daemon.http.errors import Handler, read_body
from daemon.http.jsonio import json_response
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


def http(op: Operation, status: int = 200) -> Handler:
    """``op`` as an aiohttp handler answering ``status`` with its JSON."""
    async def handler(request: web.Request) -> web.StreamResponse:
        return json_response(await op(ApiCall.of(request)), status=status)
    return handler


def serve(app: web.Application, routes: list[Route]) -> None:
    """Route each of ``routes`` to its operation over HTTP."""
    for route in routes:
        app.router.add_route(route.method, route.path, http(route.op, route.status))
