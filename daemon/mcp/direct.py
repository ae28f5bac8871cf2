"""The node's own MCP tools run the HTTP API's operations in process, in the caller's name.

``/mcp`` on a daemon runs the same tool table (:mod:`daemon.mcp.tools`) as
``ai-memory mcp`` over stdio. The stdio server hands each tool's request to
a node over HTTP (:class:`daemon.mcp.node_client.NodeClient`); here the same
request (method, path, query or JSON body, as the public API takes it) is
carried out in process by :class:`DirectClient`, which finds the route among
:data:`daemon.api.OPERATIONS` and runs its operation, the very function that
serves it over HTTP (:mod:`daemon.api.call`). So every rule (validation,
identity, the service called) is the route's, and a refusal is the same
``{"error", "code"}``. The caller is the ``/mcp`` request's own (``X-Agent-Id``,
``X-API-Key`` or a bearer key, the hook session in ``x-memory-actor-session-id``),
as :mod:`daemon.http.auth` resolved it; the tool's query, path and body are the call's.
Nothing goes back over a socket.

A tool asking for a request that is no operation is a bug (a 500 naming the
request).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from aiohttp import web

from common import limits
from common.errors import ServerError
from common.retry import retrying_once
from daemon.api import OPERATIONS
from daemon.api.call import ApiCall, Route
from daemon.lanes.router import run_call

T = TypeVar("T")

_COMPILED = [(r.method, re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", r.path) + "$"),
              r) for r in OPERATIONS]


def _resolve(method: str, path: str) -> tuple[Route, dict[str, str]]:
    """The operation route serving ``method path``, and the path's placeholders."""
    for m, pattern, route in _COMPILED:
        found = pattern.match(path) if m == method else None
        if found is not None:
            return route, found.groupdict()
    raise ServerError(f"the MCP tools asked for {method} {path}, which /mcp does not serve")


class DirectClient:
    """The tools' node client for ``/mcp``: the requests carried out in this process."""

    def __init__(self, request: web.Request) -> None:
        self.http_request = request

    async def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                      json_body: Any = None, headers: Mapping[str, str] | None = None) -> Any:
        route, path_args = _resolve(method, path)
        op = route.op
        body = dict(json_body or {})

        async def read() -> Any:
            return body

        query = {k: v for k, v in (params or {}).items() if v is not None}
        call_headers = dict(headers or {})

        async def here() -> Any:
            return await op(ApiCall(self.http_request, query, path_args, call_headers, read))
        # With lanes, on the lane its route's rule names (daemon/lanes/router.py).
        return await run_call(self.http_request, method, route.path, path, path_args, query,
                              call_headers, body, here, route)

    async def get(self, path: str, **params: Any) -> Any:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: Mapping[str, Any], *,
                   headers: Mapping[str, str] | None = None) -> Any:
        return await self.request("POST", path, json_body=dict(body), headers=headers)

    async def delete(self, path: str) -> Any:
        return await self.request("DELETE", path)

    async def retrying_once(self, call: Callable[[], Awaitable[T]]) -> T:
        """As over HTTP: after a 503 (a quorum not met in time) once more, same keys."""
        return await retrying_once(call, wait_max=limits.mcp_retry_wait_max_secs,
                                   sleep=asyncio.sleep)
