"""The wire form of a mailbox request forwarded to its owner.

A node that is not a mailbox's owner sends the request to the owner's
``/peer/v1/mailbox`` as msgpack and gets back either ``{"ok": result}`` or
``{"err": error}``. Requests are the dataclasses of :mod:`federation.requests`
(the :data:`federation.requests.MailRequest` union), coded by the same
mechanism as peer messages (:mod:`federation.wire`), in its map layout:
``{"type": "MailPop", "fields": {name: value}}``; a field an older node
does not send takes its default. Results are ``{"op": op}`` (a send) or
``{"value": v}``, with ``v`` checked against :data:`RESULTS`, the result
type of each request kind. Errors keep their class, message, details and
code (``common.errors.from_body`` is the inverse of ``to_body``), so a
client sees the same error whichever node it asked.
"""

from __future__ import annotations

import typing
from typing import Any

from common.errors import AiMemoryError, BadRequest, Unavailable, from_body
from common.ops import Op
from federation import requests
from federation.wire import OP, Conv, Registry, WireError, converter

REQUESTS = Registry("mailbox request", typing.get_args(requests.MailRequest), layout="map",
                    tag=lambda cls: cls.__name__)

# What the owner answers each request kind with: a send its ``msg.send`` op;
# a pop ``{"message": row, "claim": body, "rank": ...}`` or None ("nothing
# pending"); a cancel the ids it cancelled; a hold or release
# ``{"message": row, ...}`` (the hold record, the decision's rank); a
# decision ``{"message": row, "decision": body, "approved": bool, "rank": ...}``;
# a purge ``{"purge": body, "removed": n or None}``; a renew
# ``{"message": row, "claim": body, "rank": ...}``; a leased completion
# ``{"completion": body, "rank": ..., "replayed": bool}``; an expiry the ids
# it returned to the queue.
RESULTS: dict[type, Any] = {
    requests.MailSend: Op,
    requests.MailPop: dict[str, Any] | None,
    requests.MailCancel: list[str],
    requests.MailHold: dict[str, Any],
    requests.MailRelease: dict[str, Any],
    requests.MailDecide: dict[str, Any],
    requests.MailPurge: dict[str, Any],
    requests.MailRenew: dict[str, Any],
    requests.MailComplete: dict[str, Any],
    requests.MailExpire: list[str],
}
_RESULT_CONVS: dict[type, Conv] = {cls: converter(tp) for cls, tp in RESULTS.items()}


def encode_request(req: requests.MailRequest) -> dict[str, Any]:
    out: dict[str, Any] = REQUESTS.encode(req)
    return out


def decode_request(raw: Any) -> requests.MailRequest:
    """The request a forwarding node sent; BadRequest if malformed."""
    try:
        req: requests.MailRequest = REQUESTS.decode(raw)
    except WireError as exc:
        raise BadRequest(str(exc)) from None
    return req


def decode_forward(raw: Any) -> tuple[requests.MailRequest, int]:
    """The request and hop count of a ``/peer/v1/mailbox`` body; BadRequest
    if either is malformed."""
    hops = raw.get("hops", 1) if isinstance(raw, dict) else None
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 0:
        raise BadRequest("a forwarded mailbox request is {req, hops}, hops a count")
    return decode_request(raw.get("req")), hops


def encode_result(value: Any) -> dict[str, Any]:
    if isinstance(value, Op):
        return {"op": OP[0](value)}
    return {"value": value}


def decode_result(raw: Any, request: type | None = None) -> Any:
    """The owner's answer to a request of kind ``request``. Only an explicit
    ``value`` (None: "nothing pending", decided by the owner) or ``op`` is
    an answer, and only of the kind's result type; anything else is
    indeterminate, and the caller retries with the same request id."""
    try:
        if isinstance(raw, dict) and "op" in raw:
            if request is not None and RESULTS.get(request) is not Op:
                raise WireError(f"an op is not an answer to {request.__name__}")
            return OP[1](raw["op"])
        if isinstance(raw, dict) and "value" in raw:
            conv = _RESULT_CONVS.get(request) if request is not None else None
            return raw["value"] if conv is None else conv[1](raw["value"])
    except WireError:
        pass
    raise Unavailable("the mailbox owner's answer was unreadable; retry with the same "
                      "request id", retry_after=0.5)


def encode_error(exc: AiMemoryError) -> dict[str, Any]:
    wait = exc.retry_after if isinstance(exc, Unavailable) else None
    return {"status": exc.status, "body": exc.to_body(), "retry_after": wait}


def decode_error(raw: dict[str, Any]) -> AiMemoryError:
    return from_body(int(raw["status"]), dict(raw["body"]), float(raw.get("retry_after") or 1.0))
