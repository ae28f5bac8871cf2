"""A ``tools/call`` over ``/mcp``, answered without the SDK's transport machinery.

Why: a tool call is nearly all that agents send to ``/mcp``, and through the
SDK's streamable-HTTP session manager it cost the node 1.4-1.7 times the CPU
of the plain HTTP request it wraps at the same load (1.6-2.0 times for
clients of the ``initialize`` era; docs/performance.md, "The MCP path"). Little of that is
validation: it is the machinery around it (an ASGI scope and a Starlette
request per call, the pydantic models of the JSON-RPC envelope, a
connection object, a middleware chain with its context objects, anyio
cancel scopes, a per-request transport and task for a legacy client, a
chunked response).

How: :meth:`ToolCallPath.serve` takes a request that ``/mcp`` has already
checked (origin, identity, body cap, content type) and answers it itself
only when it is one plain ``tools/call`` of one of our tools, as the SDK
would answer it, or returns ``None`` and leaves the request to the SDK,
which then answers everything else (``server/discover``, ``initialize``,
``tools/list``, notifications, ``GET``, errors of the envelope, unknown
tools, any version or shape it does not recognise). The rules it applies are
the SDK's own functions, called in the SDK's order, so they cannot drift:

- the era, from ``MCP-Protocol-Version`` as the session manager routes it
  (a 2026-07-28 request, or a handshake-era one; anything else is left to
  the SDK), the ``Accept`` check (JSON responses), no duplicated routing
  header;
- the JSON-RPC request (``jsonrpc``, an integer or string ``id``), params of
  ``name``, ``arguments`` and ``_meta`` only (``requestState``,
  ``inputResponses`` and anything else go to the SDK);
- for 2026-07-28 the envelope ladder (``classify_inbound_request``: the
  ``_meta`` pair, the ``Mcp-Method``/``Mcp-Name`` headers, the version);
  ``Mcp-Param-*`` headers need no check because no tool of ours declares
  one (checked once, at start);
- the params' schema at that version (``validate_client_request``);
- the tool's arguments (the tool's own argument model), refused with the
  HTTP API's error body exactly as :func:`daemon.mcp.server.check_arguments`
  refuses them;
- the result: the text block and ``structuredContent`` as the SDK's tool
  manager builds them (its output adapter), sieved for the protocol version
  (``serialize_server_result``), with ``resultType`` and the ``serverInfo``
  stamp on a 2026-07-28 result.

The tool runs bound to the request (:func:`daemon.mcp.http.binding_for`),
as under the SDK. Not reproduced: the SDK's OpenTelemetry span per call (the
node configures no tracer), and progress notifications (there is no stream
to carry them in JSON-response mode). ``tests/daemon/http/test_mcp_toolcall.py``
sends the same requests down both paths and compares the answers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import pydantic
import pydantic_core
from aiohttp import web
from mcp.server.mcpserver import MCPServer
from mcp.shared.inbound import (
    InboundModernRoute,
    classify_inbound_request,
    x_mcp_header_map,
)
from mcp_types import DEFAULT_NEGOTIATED_VERSION, SERVER_INFO_META_KEY, CallToolResult, TextContent
from mcp_types import methods as _methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from common.errors import BadRequest
from daemon.mcp.server import tool_error
from daemon.mcp.tools import Binding
from daemon.schemas.validation import format_validation_error

logger = logging.getLogger(__name__)

_PARAMS = frozenset({"name", "arguments", "_meta"})
_REQUEST = frozenset({"jsonrpc", "id", "method", "params"})
_JSON = "application/json"
_ROUTING_HEADERS = ("mcp-protocol-version", "mcp-method", "mcp-name")
# daemon.mcp.http's request binding, the SDK's own two, daemon.mcp.server's argument check
_CHAIN = ("_bind_request", "OpenTelemetryMiddleware", "RequestStateBoundary",
          "check_arguments.<locals>.middleware")


@dataclass(frozen=True, slots=True)
class _Tool:
    name: str
    fn: Callable[..., Awaitable[Any]]
    validate: Callable[[dict[str, Any]], dict[str, Any]]  # the tool's argument model
    output: pydantic.TypeAdapter[Any] | None  # the SDK's structured-output adapter
    wrap_output: bool


def _accepts_json(accept: str) -> bool:
    """The SDK's ``check_accept_headers`` for JSON responses (RFC 7231 wildcards)."""
    types = [t.strip().split(";")[0].strip().lower() for t in accept.split(",")]
    return "*/*" in types or _JSON in types or "application/*" in types


def _content_type_ok(content_type: str) -> bool:
    """The handshake-era transport's Content-Type check."""
    return any(part.strip() == _JSON for part in content_type.split(";")[0].split(","))


class ToolCallPath:
    """The tools of one ``/mcp`` server, callable without the SDK's transport."""

    def __init__(self, server: MCPServer[Any], bound: ContextVar[Binding],
                 binding_for: Callable[[web.Request], Binding]) -> None:
        lowlevel = server._lowlevel_server
        self._bound, self._binding_for = bound, binding_for
        self._stamp = lowlevel.server_info_stamp
        self._tools: dict[str, _Tool] = {}
        self.served = 0  # calls answered here (the tests look)
        # The path reproduces exactly this middleware chain; with any other (a
        # newer SDK, a server built differently) every call goes to the SDK.
        chain = [getattr(m, "__qualname__", None) or type(m).__qualname__
                 for m in server.middleware]
        self.enabled = chain == list(_CHAIN) and "tools/call" not in lowlevel.cache_hints
        if not self.enabled:
            logger.warning("/mcp: every tools/call goes through the SDK (middleware %s)", chain)
        for tool in server._tool_manager.list_tools():
            meta = tool.fn_metadata
            if (not tool.is_async or tool.context_kwarg is not None or tool.resolved_params
                    or x_mcp_header_map(tool.parameters)):
                continue  # served by the SDK
            output = meta._output_adapter(meta.output_model) \
                if meta.output_schema is not None and meta.output_model is not None else None
            self._tools[tool.name] = _Tool(tool.name, tool.fn, meta.validate_arguments, output,
                                           meta.wrap_output)

    async def serve(self, request: web.Request, body: bytes) -> web.Response | None:
        """The answer to ``request`` when it is a plain ``tools/call``; else ``None``."""
        if not self.enabled or request.method != "POST":
            return None
        headers = request.headers
        version_header = headers.get("mcp-protocol-version")
        modern = version_header in MODERN_PROTOCOL_VERSIONS
        if not (modern or version_header is None or version_header in HANDSHAKE_PROTOCOL_VERSIONS):
            return None
        if not _accepts_json(headers.get("Accept", "")):
            return None
        if not modern and not _content_type_ok(headers.get("Content-Type", "")):
            return None
        if any(len(headers.getall(name, ())) > 1 for name in _ROUTING_HEADERS):
            return None  # the SDK refuses it (find_duplicated_routing_header)
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(decoded, dict) or decoded.keys() - _REQUEST \
                or decoded.get("jsonrpc") != "2.0" or decoded.get("method") != "tools/call":
            return None
        request_id = decoded.get("id")
        params = decoded.get("params")
        if type(request_id) not in (int, str) or not isinstance(params, dict) \
                or params.keys() - _PARAMS:
            return None
        name, arguments = params.get("name"), params.get("arguments")
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None or not isinstance(arguments, dict | None):
            return None
        if modern:
            verdict = classify_inbound_request(decoded, headers={
                name: headers[name] for name in _ROUTING_HEADERS if name in headers})
            if not isinstance(verdict, InboundModernRoute):
                return None
            version = verdict.protocol_version
        else:
            version = version_header or DEFAULT_NEGOTIATED_VERSION
        try:
            _methods.validate_client_request("tools/call", version, params)
        except (pydantic.ValidationError, KeyError, ValueError):
            return None
        self.served += 1
        result = await self._call(request, tool, arguments or {}, version)
        reply = {"jsonrpc": "2.0", "id": request_id, "result": result}
        return web.Response(body=json.dumps(reply, separators=(",", ":")).encode(),
                            content_type=_JSON)

    async def _call(self, request: web.Request, tool: _Tool, arguments: dict[str, Any],
                    version: str) -> dict[str, Any]:
        """The ``CallToolResult`` as the SDK puts it on the wire at ``version``."""
        try:
            validated = tool.validate(arguments)
        except pydantic.ValidationError as exc:
            # as check_arguments answers: the result as such, neither sieved nor stamped
            return tool_error(BadRequest(format_validation_error(exc))).model_dump(
                by_alias=True, mode="json", exclude_none=True)
        token = self._bound.set(self._binding_for(request))
        try:
            value = await tool.fn(**validated)
            dumped = self._convert(tool, value)
        except Exception:
            # The SDK's words for a crash (UnexpectedToolError): nothing of it reaches the client.
            logger.exception("Tool %r raised an unexpected exception", tool.name)
            dumped = CallToolResult(content=[TextContent(
                type="text", text=f"Error executing tool {tool.name}")], is_error=True).model_dump(
                by_alias=True, mode="json", exclude_none=True)
        finally:
            self._bound.reset(token)
        dumped = _methods.serialize_server_result("tools/call", version, dumped)
        if version in MODERN_PROTOCOL_VERSIONS:
            dumped.setdefault("resultType", "complete")
            if dumped.get("_meta") is None:
                dumped["_meta"] = {SERVER_INFO_META_KEY: self._stamp}
        return dumped

    @staticmethod
    def _convert(tool: _Tool, value: Any) -> dict[str, Any]:
        """The SDK's ``FuncMetadata.convert_result`` for what our tools return, dumped."""
        if isinstance(value, CallToolResult):  # a refusal, from daemon.mcp.server.at_boundary
            return value.model_dump(by_alias=True, mode="json", exclude_none=True)
        if not isinstance(value, Mapping):
            raise TypeError(f"tool {tool.name} returned {type(value).__name__}")
        text = pydantic_core.to_json(value, fallback=str, indent=2).decode()
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False,
                                  "resultType": "complete"}
        if tool.output is not None:
            shaped = {"result": value} if tool.wrap_output else value
            result["structuredContent"] = tool.output.dump_python(
                tool.output.validate_python(shaped, by_alias=True, by_name=True),
                mode="json", by_alias=True)
        return result
