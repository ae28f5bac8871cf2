"""The HTTP boundary for errors: the one place that turns exceptions into
responses.

Every :class:`common.errors.AiMemoryError` becomes its ``status`` with
``to_body()`` as JSON (plus ``Retry-After`` for 503s). Malformed JSON, wrong
types and oversized bodies are caught where the body is read
(:func:`read_json`) and become 400/413 before any service runs, so bad input
never writes anything. Anything else is a bug: logged with its traceback and
answered 500 without internals.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pydantic
from aiohttp import web

from common import limits
from common.errors import AiMemoryError, BadRequest, PayloadTooLarge, Unavailable
from daemon.validation import validate

log = logging.getLogger("ai_memory.http")

M = TypeVar("M", bound=pydantic.BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(exc: AiMemoryError) -> web.Response:
    headers = {}
    if isinstance(exc, Unavailable):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    return web.json_response(exc.to_body(), status=exc.status, headers=headers)


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
            return web.json_response({"error": exc.reason, "code": "http_error"}, status=exc.status)
        raise
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return web.json_response({"error": "internal error", "code": "internal_error"}, status=500)


async def read_body(request: web.Request) -> Any:
    """Decoded JSON body; 400 for malformed JSON or a non-UTF-8 body, 413 for
    a body over the limit (aiohttp's client_max_size enforces it too)."""
    if request.content_length is not None and request.content_length > limits.request_body_max_bytes:
        raise PayloadTooLarge(
            f"request body over {limits.request_body_max_bytes} bytes (limits.request_body_max_bytes)")
    # Read incrementally so a chunked body (no Content-Length) is held to the
    # same limit instead of being buffered whole.
    buf = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        buf += chunk
        if len(buf) > limits.request_body_max_bytes:
            raise PayloadTooLarge(
                f"request body over {limits.request_body_max_bytes} bytes "
                "(limits.request_body_max_bytes)")
    raw = bytes(buf)
    if not raw.strip():
        raise BadRequest("request body is empty; expected JSON")
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise BadRequest("request body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise BadRequest("JSON nested too deeply") from None


async def read_json(request: web.Request, model: type[M]) -> M:
    data = await read_body(request)
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return validate(model, data)


def query_model(request: web.Request, model: type[M]) -> M:
    """Validate query parameters with a pydantic model (repeated keys: last wins)."""
    return validate(model, dict(request.query))
