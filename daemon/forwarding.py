"""The wire form of a mailbox request forwarded to its owner.

A node that is not a mailbox's owner sends the request to the owner's
``/peer/v1/mailbox`` as msgpack and gets back either ``{"ok": result}`` or
``{"err": error}``. Requests are the dataclasses of :mod:`federation.claim`;
results are an ``Op`` or plain data; errors keep their class, message,
details and code (``common.errors.from_body`` is the inverse of
``to_body``), so a client sees the same error whichever node it asked.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from common.errors import AiMemoryError, BadRequest, Unavailable, from_body
from federation import claim
from store.ops import Op


def encode_request(req: Any) -> dict[str, Any]:
    return {"type": type(req).__name__, "fields": dataclasses.asdict(req)}


def decode_request(raw: dict[str, Any]) -> Any:
    cls = getattr(claim, str(raw.get("type")), None)
    if cls is None or not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
        raise BadRequest(f"unknown mailbox request {raw.get('type')!r}")
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in raw["fields"].items()}
    return cls(**fields)


def encode_result(value: Any) -> dict[str, Any]:
    if isinstance(value, Op):
        return {"op": value.to_wire()}
    return {"value": value}


def decode_result(raw: dict[str, Any]) -> Any:
    """The owner's answer. Only an explicit ``value`` (None: "nothing
    pending", decided by the owner) or ``op`` is an answer; anything else is
    indeterminate, and the caller retries with the same request id."""
    if "op" in raw:
        return Op.from_wire(raw["op"])
    if "value" not in raw:
        raise Unavailable("the mailbox owner's answer was unreadable; retry with the same "
                          "request id", retry_after=0.5)
    return raw["value"]


def encode_error(exc: AiMemoryError) -> dict[str, Any]:
    wait = exc.retry_after if isinstance(exc, Unavailable) else None
    return {"status": exc.status, "body": exc.to_body(), "retry_after": wait}


def decode_error(raw: dict[str, Any]) -> AiMemoryError:
    return from_body(int(raw["status"]), dict(raw["body"]), float(raw.get("retry_after") or 1.0))
