"""MCP over streamable HTTP at ``/mcp`` on the daemon's own port.

How: the official SDK's :class:`~mcp.server.streamable_http_manager.StreamableHTTPSessionManager`
does the transport (protocol versions, the ``initialize`` handshake and the
2026 per-request envelope, ``Accept`` checks, JSON-RPC framing). It is an
ASGI app and the daemon is aiohttp, so :func:`handle` is a small ASGI bridge:
it turns the aiohttp request into an ASGI ``scope`` plus one ``receive``
message (the body, already read under aiohttp's size cap), and writes what
the app ``send``s back as an aiohttp :class:`~aiohttp.web.StreamResponse`.
A request from a browser page of another origin is refused first
(:func:`check_origin`, the MCP specification's defence against DNS
rebinding). This keeps every protocol rule in the SDK and every HTTP rule (the error
middleware, header guard, body cap, ``Server`` header, and whatever identity
middleware the app grows) in the daemon, on one port, with no second server.

A plain ``tools/call`` never reaches the SDK's transport: :mod:`daemon.mcp.toolcall`
answers it, after the same HTTP rules and with the SDK's own checks, from
the same server's tool table (that costs a tool call far less CPU; its
docstring says what it checks). Everything else goes to the manager.

The manager runs **stateless with JSON responses**: every POST is one
exchange, answered with ``application/json``, and no MCP session lives on
the node. So any member serves any request (a client, or the bridge, may
move to another node between two calls), and each request is authenticated
on its own, like the HTTP API: :func:`daemon.http.auth.principal_of` runs before
the SDK sees the request, and a missing or wrong key is the API's 401/403
JSON error. Server-initiated requests (sampling, elicitation) are not used
by these tools, so nothing needs the SSE back channel.

The tools are :class:`daemon.mcp.tools.Tools` (the same table as
``ai-memory mcp``), bound per call to a :class:`~daemon.mcp.direct.DirectClient`
for the request being served: a server middleware finds that aiohttp
request in the ASGI scope and sets it for the tool call.

The route itself is :mod:`daemon.api.mcp`, which keeps the SDK off the node's
start-up path: this module is imported in a thread after start-up, and the
first request starts the manager (:func:`_manager`), whose task group runs in
a task of its own, so it is entered and left in the same task whatever task
serves requests; app cleanup stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from common import limits
from common.errors import BadRequest, Forbidden, PayloadTooLarge, ServerError
from daemon.api.mcp import MCP_STATE
from daemon.http.appkeys import NODE
from daemon.http.auth import principal_of
from daemon.mcp.direct import DirectClient
from daemon.mcp.server import build_tools_server
from daemon.mcp.settings import McpSettings
from daemon.mcp.toolcall import ToolCallPath
from daemon.mcp.tools import Binding, Tools
from daemon.schemas.headers import session_id

_SCOPE_KEY = "ai_memory.request"  # the aiohttp request, in the ASGI scope
_bound: ContextVar[Binding] = ContextVar("ai_memory_mcp_binding")


def _binding() -> Binding:
    try:
        return _bound.get()
    except LookupError:  # pragma: no cover - only reachable by calling a tool outside /mcp
        raise ServerError("an /mcp tool ran without its HTTP request") from None


def binding_for(request: web.Request) -> Binding:
    """The tools' client and defaults for one ``/mcp`` request: its own identity."""
    node = request.app[NODE]
    who = principal_of(request)
    settings = McpSettings(url=f"in-process:{node.node_id}", agent_id=who.agent,
                           session_id=session_id(request))
    return DirectClient(request), settings


async def _bind_request(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    scope = getattr(ctx.request, "scope", None)
    request = scope.get(_SCOPE_KEY) if isinstance(scope, dict) else None
    if not isinstance(request, web.Request):
        return await call_next(ctx)
    token = _bound.set(binding_for(request))
    try:
        return await call_next(ctx)
    finally:
        _bound.reset(token)


def build_http_server() -> MCPServer[None]:
    server = build_tools_server(Tools(bind=_binding))
    server.middleware.insert(0, _bind_request)
    return server


_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def check_origin(request: web.Request, host: str) -> None:
    """Refuse a browser page of another site (or a DNS-rebound name) driving /mcp.

    MCP clients send no ``Origin``; a browser always does on a POST. Only loopback
    origins and the node's own configured host are accepted.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return
    name = urlsplit(origin).hostname if origin != "null" else None
    if name is None or (name not in _LOOPBACK_NAMES and name != host):
        raise Forbidden(f"/mcp does not serve pages of origin {origin!r}", code="bad_origin")


async def handle(request: web.Request) -> web.StreamResponse:
    """One ``/mcp`` request: authenticated here, then served by the SDK's transport."""
    node = request.app[NODE]
    check_origin(request, node.settings.server.host)
    principal_of(request, node.settings.auth)  # 401/403 as the HTTP API answers them
    if request.content_length is not None and request.content_length > limits.request_body_max_bytes:
        raise PayloadTooLarge(f"request body over {limits.request_body_max_bytes} bytes "
                              "(limits.request_body_max_bytes)")
    if request.method == "POST" and not request.headers.get("Content-Type", "").lower() \
            .startswith("application/json"):
        # the SDK would answer this in plain text; the API answers in JSON
        raise BadRequest("/mcp takes a POST body of Content-Type application/json")
    body = await request.read() if request.body_exists else b""
    manager, calls = await _transport(request)
    answered = await calls.serve(request, body)
    if answered is not None:
        return answered  # a plain tools/call (daemon/mcp/toolcall.py)
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1"),
        # the query as sent (percent-encoded), not aiohttp's decoded text,
        # which may hold characters latin-1 cannot encode
        "query_string": request.rel_url.raw_query_string.encode("utf-8"),
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": tuple(peer[:2]) if peer else None,
        "server": tuple(sockname[:2]) if sockname else None,
        "state": {},
        _SCOPE_KEY: request,
    }
    sent_body = False
    done = asyncio.Event()
    response: web.StreamResponse | None = None

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # nothing more to read: the client is gone once we are done
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for k, v in message.get("headers", []):
                name = k.decode("latin-1")
                if name.lower() in ("content-length", "transfer-encoding"):
                    continue  # aiohttp frames the body itself
                response.headers.add(name, v.decode("latin-1"))
        elif message["type"] == "http.response.body":
            assert response is not None, "body before response start"
            if not response.prepared:
                await response.prepare(request)
            chunk = message.get("body", b"")
            if chunk:
                await response.write(chunk)
            if not message.get("more_body", False):
                await response.write_eof()

    try:
        await manager.handle_request(scope, receive, send)  # type: ignore[arg-type]
    finally:
        done.set()
    if response is None:
        raise ServerError("the MCP transport sent no response")
    if not response.prepared:
        await response.prepare(request)
        await response.write_eof()
    return response


async def _transport(request: web.Request) -> tuple[StreamableHTTPSessionManager, ToolCallPath]:
    """The app's session manager and tool-call path, started by the first request."""
    state = request.app[MCP_STATE]
    started = state.context.get("transport")
    if started is not None:
        return started  # type: ignore[return-value]
    async with state.lock:
        started = state.context.get("transport")
        if started is not None:
            return started  # type: ignore[return-value]
        server = build_http_server()
        manager = StreamableHTTPSessionManager(
            app=server._lowlevel_server, json_response=True, stateless=True,
            max_request_body_size=limits.request_body_max_bytes)
        state.stop = await _run_manager(manager)
        pair = (manager, ToolCallPath(server, _bound, binding_for))
        state.context["transport"] = pair
        return pair


async def _run_manager(manager: StreamableHTTPSessionManager) -> Callable[[], Awaitable[None]]:
    """Run the manager's task group in a task of its own; the function that stops it.

    The task group is entered and left in that one task, whatever tasks serve requests.
    """
    started, stop = asyncio.Event(), asyncio.Event()

    async def run() -> None:
        async with manager.run():
            started.set()
            await stop.wait()

    task = asyncio.create_task(run(), name="mcp-session-manager")
    waiter = asyncio.ensure_future(started.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiter.cancel()
        task.result()  # raises what stopped it
        raise ServerError("the MCP session manager stopped at start")

    async def stop_manager() -> None:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return stop_manager
