"""The HTTP boundary for errors: the one place that turns exceptions into
responses.

Every :class:`common.errors.AiMemoryError` becomes its ``status`` with
``to_body()`` as JSON (plus ``Retry-After`` for 503s). Malformed JSON, wrong
types, integer literals past Python's digit limit and oversized bodies are
caught where the body is read (:func:`read_json`) and become 400/413 before
any service runs, so bad input never writes anything. A client that hangs
up mid-body is logged at debug level. Anything else is a bug: logged with
its traceback and answered 500 without internals.

:func:`request_guard` runs before every handler and refuses, with a 400
that also closes the connection:

* a header value that is not UTF-8 or carries a control character
  (:func:`daemon.schemas.headers.hostile_header`);
* a body declared (``Content-Length`` > 0 or any ``Transfer-Encoding``) on a
  method that carries none (``BODYLESS_METHODS``): the bytes after the
  headers are never read as a second, pipelined request.

:data:`SERVER_HEADER` replaces aiohttp's ``Server`` header, which names the
aiohttp and Python versions. :class:`BoundaryRunner` (what ``serve`` runs)
answers requests aiohttp's own parser refuses (a bad request line, a
control character in a header) with the same JSON error shape, logged at
debug level instead of as an error with a traceback.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pydantic
from aiohttp import hdrs, web
from aiohttp import web_response as _web_response
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from common import limits
from common.errors import AiMemoryError, BadRequest, PayloadTooLarge, Unavailable
from daemon.http import jsonio
from daemon.http.jsonio import json_response
from daemon.schemas.headers import hostile_header
from daemon.schemas.validation import validate

log = logging.getLogger("ai_memory.http")

SERVER_HEADER = "ai-memory"
# Methods whose requests carry no body anywhere in this API.
BODYLESS_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS", "CONNECT", "TRACE"})
# aiohttp's own responses (a request line it cannot parse) take this default;
# the app's responses set the header in on_response_prepare as well.
if hasattr(_web_response, "SERVER_SOFTWARE"):
    _web_response.SERVER_SOFTWARE = SERVER_HEADER

M = TypeVar("M", bound=pydantic.BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(exc: AiMemoryError) -> web.Response:
    headers = {}
    if isinstance(exc, Unavailable):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    return json_response(exc.to_body(), status=exc.status, headers=headers)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except AiMemoryError as exc:
        return error_response(exc)
    except web.HTTPRequestEntityTooLarge:
        return error_response(PayloadTooLarge(
            f"request body over {limits.request_body_max_bytes} bytes "
            "(limits.request_body_max_bytes)"))
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.content_type != "application/json":
            return json_response({"error": exc.reason, "code": "http_error"}, status=exc.status)
        raise
    except ConnectionResetError:
        # The client hung up while its body was being read: nothing to answer.
        log.debug("client disconnected during %s %s", request.method, request.path)
        return error_response(BadRequest("client disconnected", code="client_disconnected"))
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return json_response({"error": "internal error", "code": "internal_error"}, status=500)


async def set_server_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers[hdrs.SERVER] = SERVER_HEADER


@web.middleware
async def request_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse hostile framing and header values before any handler runs."""
    bad = hostile_header(request.headers)
    if bad is not None:
        return closing_error_response(BadRequest(
            f"header {bad!r} is not UTF-8 text without control characters",
            code="bad_header", header=bad))
    if request.method in BODYLESS_METHODS and (
            hdrs.TRANSFER_ENCODING in request.headers or (request.content_length or 0) > 0):
        return closing_error_response(BadRequest(
            f"a {request.method} request carries no body", code="unexpected_body"))
    return await handler(request)


def closing_error_response(exc: AiMemoryError) -> web.Response:
    """The error response, and the connection closed after it (a body the
    client declared is read and discarded first, within aiohttp's lingering
    time, so the bytes after it are never parsed as another request)."""
    resp = error_response(exc)
    resp.force_close()
    return resp


async def refuse_unread(request: web.Request, exc: AiMemoryError,
                        headers: dict[str, str] | None = None) -> web.StreamResponse:
    """Answer ``exc`` and drop the connection without reading the declared
    body at all: the response is written, then the transport is closed, so
    a refused client costs its headers and the socket buffers, never its body."""
    resp = closing_error_response(exc)
    resp.headers.update(headers or {})
    await resp.prepare(request)
    await resp.write_eof()
    request.protocol.force_close()
    return resp


BODY_READ = "ai_memory.body_read"  # request key: the body, when a middleware read it first


async def read_body(request: web.Request, limit: str = "request_body_max_bytes") -> Any:
    """Decoded JSON body; 400 for malformed JSON or a non-UTF-8 body, 413 for
    a body over ``limits.<limit>`` (by default the general cap, which
    aiohttp's client_max_size enforces too; a route with a smaller body
    names its own, as the web login does)."""
    max_bytes: int = getattr(limits, limit)
    too_large = f"request body over {max_bytes} bytes (limits.{limit})"
    if request.content_length is not None and request.content_length > max_bytes:
        raise PayloadTooLarge(too_large)
    read = request.get(BODY_READ)
    if read is not None:  # read already, to find the lane that serves it (daemon/lanes/)
        if len(read) > max_bytes:
            raise PayloadTooLarge(too_large)
        return decode_json(read)
    # Read incrementally so a chunked body (no Content-Length) is held to the
    # same limit instead of being buffered whole.
    buf = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        buf += chunk
        if len(buf) > max_bytes:
            raise PayloadTooLarge(too_large)
    return decode_json(bytes(buf))


def decode_json(raw: bytes) -> Any:
    """A request body's JSON (see :func:`read_body` for the refusals)."""
    if not raw.strip():
        raise BadRequest("request body is empty; expected JSON")
    try:
        return jsonio.loads(raw)
    except UnicodeDecodeError:
        raise BadRequest("request body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError:
        # An integer literal past sys.get_int_max_str_digits() (4,300 digits).
        raise BadRequest("JSON number too long") from None
    except RecursionError:
        raise BadRequest("JSON nested too deeply") from None


async def read_json(request: web.Request, model: type[M],
                    limit: str = "request_body_max_bytes") -> M:
    data = await read_body(request, limit)
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return validate(model, data)


def query_model(request: web.Request, model: type[M]) -> M:
    """Validate query parameters with a pydantic model (repeated keys: last wins)."""
    return validate(model, dict(request.query))


class _BoundaryHandler(RequestHandler):
    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp: too late for another response
            raise ConnectionError("response already started; cannot send an error")
        if status >= 500:
            self.log_exception("error handling request from %s", request.remote, exc_info=exc)
            body = {"error": "internal error", "code": "internal_error"}
        else:
            text = str(getattr(exc, "message", "") or message or "").strip()
            reason = text.splitlines()[0].rstrip(":") if text else "malformed request"
            log.debug("refused unparsable request from %s: %s", request.remote, text)
            body = {"error": f"malformed HTTP request: {reason}", "code": "bad_http_request"}
        resp = json_response(body, status=status)
        resp.force_close()
        return resp


class _BoundaryServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _BoundaryHandler(self, loop=self._loop, **self._kwargs)


class BoundaryRunner(web.AppRunner):
    """``web.AppRunner`` whose connections answer parser-level refusals in
    JSON (see the module docstring)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _BoundaryServer
        return server
