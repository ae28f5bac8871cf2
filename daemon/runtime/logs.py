"""Log lines: text for a terminal, JSON for a collector, and request ids.

``ai-memory serve --log-format json`` writes one JSON object per line:

    {"time": "2026-12-01T09:40:01.123Z", "level": "info", "node": "node1",
     "event": "peer call failed", "logger": "ai_memory.peer",
     "request_id": "3f2a9c01d4e5b6a7", "fields": {"peer": "node2", ...}}

``fields`` holds what a call site passes as ``extra={"fields": {...}}`` (and
the traceback, as ``exc``); ``request_id`` is there when the line was logged
while serving a request. ``--log-format text`` (the default) keeps the
classic one-line form and appends ``rid=...`` and the fields.

Request ids: :func:`request_id_middleware` takes the caller's
``X-Request-Id`` (1-128 characters of ``[A-Za-z0-9._:/@+=-]``; anything else
is a 400) or makes one up, puts it in the :data:`request_id` context
variable for the handler and everything it awaits or spawns (asyncio copies
the context into new tasks), and returns it in the ``X-Request-Id`` response
header. :class:`daemon.peer.client.PeerClient` sends it on the peer calls
made in that context, so the peer's own log lines for the call carry the
same id. Replication batches are sent by each peer link's own task and mix
many requests' operations; they carry no request id.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
from typing import Any

from aiohttp import web

from common import limits
from common.randomid import token_hex

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ai_memory_request_id", default=None)

log = logging.getLogger("ai_memory.http")

HEADER = "X-Request-Id"
_VALID = re.compile(r"[A-Za-z0-9._:/@+=-]+")
FORMATS = ("text", "json")


def new_request_id() -> str:
    return token_hex(8)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    out = dict(fields) if isinstance(fields, dict) else {}
    if record.exc_info:
        out["exc"] = logging.Formatter().formatException(record.exc_info)
    return out


class JsonFormatter(logging.Formatter):
    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        ms = int(record.created * 1000)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"
        line: dict[str, Any] = {
            "time": stamp,
            "level": record.levelname.lower(),
            "node": self.node_id,
            "event": record.getMessage(),
            "logger": record.name,
        }
        rid = request_id.get()
        if rid is not None:
            line["request_id"] = rid
        line["fields"] = _fields(record)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self, node_id: str) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record)
        exc = fields.pop("exc", None)
        saved = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            text = super().format(record)
        finally:
            record.exc_info, record.exc_text = saved
        rid = request_id.get()
        if rid is not None:
            text += f" rid={rid}"
        if fields:
            text += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        if exc:
            text += "\n" + str(exc)
        return text


# Libraries whose INFO lines are routine chatter: the MCP SDK's streamable
# HTTP transport logs "Terminating session: None" (and "Created new
# transport ...") for every request of the stateless /mcp endpoint. Below
# --log-level debug they log warnings and errors only, which keeps their
# real failures ("Error handling POST request", "Stateless session crashed").
QUIET_LIBRARIES = ("mcp",)


def configure(level: str, fmt: str, node_id: str) -> None:
    """Send every log line of the process to stderr in ``fmt``."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(node_id) if fmt == "json" else TextFormatter(node_id))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    quiet = logging.NOTSET if root.level <= logging.DEBUG else logging.WARNING
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(quiet)


def _bad_id(reason: str) -> web.Response:
    return web.json_response({"error": f"bad {HEADER} header: {reason}",
                              "code": "bad_request_id"}, status=400)


@web.middleware
async def request_id_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    given = request.headers.get(HEADER)
    if given is not None:
        if len(given) > limits.request_id_max_chars:
            return _bad_id(f"longer than {limits.request_id_max_chars} characters "
                           "(limits.request_id_max_chars)")
        if not _VALID.fullmatch(given):
            return _bad_id("1 or more of A-Z a-z 0-9 . _ : / @ + = - only")
    rid = given or new_request_id()
    token = request_id.set(rid)
    started = time.monotonic()
    status = 500
    try:
        response: web.StreamResponse = await handler(request)
        status = response.status
    except web.HTTPException as exc:
        exc.headers[HEADER] = rid
        status = exc.status
        raise
    finally:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("http request", extra={"fields": {
                "method": request.method, "path": request.path, "status": status,
                "ms": round((time.monotonic() - started) * 1000, 1)}})
        request_id.reset(token)
    if not response.prepared:
        response.headers[HEADER] = rid
    return response
