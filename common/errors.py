"""One error tree for the whole daemon.

::

    AiMemoryError                          (status 500, retryable: no)
    ├── ClientError                        the caller's fault; a retry as-is won't help
    │   ├── BadRequest               400   malformed JSON, wrong type, missing field
    │   ├── Unauthorized             401   no or bad credentials (peers: bad signature)
    │   ├── Forbidden                403   identity mismatch, reading another agent's inbox
    │   ├── NotFound                 404   no such memory / message / subscription
    │   ├── Conflict                 409   state forbids it (already claimed, scope refused)
    │   │   └── ClusterMismatch      409   a member or database of another cluster
    │   ├── PayloadTooLarge          413   body over limits.request_body_max_bytes (or a route's own)
    │   └── LimitExceeded            429   mailbox full, too many items (names the limit)
    ├── ServerError                        ours or the cluster's; a retry may help
    │   └── Unavailable              503   overloaded, shutting down (with Retry-After)
    │       ├── MemberRecovering     503   this member's database is new or restored: catching up
    │       ├── QuorumNotMet         503   fewer than W members acknowledged
    │       ├── DirectoryUnconfirmed 503   keys not yet confirmed by a read quorum
    │       └── NoMajority           503   this side of a partition cannot claim
    └── WaitTimedOut                (CLI)  `--wait --timeout S` ended with nothing (exit 8)

Each boundary translates once: HTTP (``daemon/http/errors.py``) uses
``status`` and ``to_body()``; the CLI maps ``exit_code``; MCP returns
``to_body()`` as a tool error. Nothing else catches and re-labels.
"""

from __future__ import annotations

from typing import Any


class AiMemoryError(Exception):
    status: int = 500
    retryable: bool = False
    exit_code: int = 1
    code: str = "internal_error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.message, "code": self.code}
        body.update(self.details)
        return body


class ClientError(AiMemoryError):
    status = 400
    exit_code = 2
    code = "bad_request"


class BadRequest(ClientError):
    pass


class Unauthorized(ClientError):
    status = 401
    code = "unauthorized"


class Forbidden(ClientError):
    status = 403
    code = "forbidden"


class NotFound(ClientError):
    status = 404
    exit_code = 3
    code = "not_found"


class Conflict(ClientError):
    status = 409
    exit_code = 4
    code = "conflict"


class ClusterMismatch(Conflict):
    """A member (or a database) that belongs to another cluster than the
    configuration names: a deployment mistake, refused before it serves."""

    code = "cluster_mismatch"


class PayloadTooLarge(ClientError):
    status = 413
    code = "payload_too_large"


class LimitExceeded(ClientError):
    status = 429
    exit_code = 5
    code = "limit_exceeded"


class ServerError(AiMemoryError):
    status = 500
    retryable = True
    exit_code = 6


class Unavailable(ServerError):
    status = 503
    code = "unavailable"

    def __init__(self, message: str, retry_after: float = 1.0, **details: Any) -> None:
        super().__init__(message, **details)
        self.retry_after = retry_after


class MemberRecovering(Unavailable):
    """This member lost its state (a new or restored database) and does not
    coordinate writes or own mailboxes until it has caught up with every
    other member; another member can serve the request now."""

    code = "recovering"


class QuorumNotMet(Unavailable):
    """Fewer than W members held a write before the timeout.

    Body is ``{"error":"quorum_not_met","code":"quorum_not_met","got":G,
    "needed":W,"reason":...}`` (every 503 carries a ``code``);
    the operation stays in the log and still spreads by anti-entropy.
    """

    code = "quorum_not_met"

    def __init__(self, got: int, needed: int, reason: str, retry_after: float = 1.0) -> None:
        super().__init__("quorum_not_met", retry_after=retry_after, got=got, needed=needed, reason=reason)

    def to_body(self) -> dict[str, Any]:
        return {"error": "quorum_not_met", "code": self.code, **self.details}


class DirectoryUnconfirmed(Unavailable):
    """This node could not confirm its copy of the users and keys with a
    read quorum (just started, or cut off), so it refuses to accept keys for
    now; another member, or a retry, can serve the request."""

    code = "identity_unconfirmed"


class NoMajority(Unavailable):
    """This node cannot reach a majority, so it may not decide claims."""

    code = "no_majority"


class WaitTimedOut(AiMemoryError):
    """A CLI ``--wait --timeout S`` ran out with nothing arriving. Not an
    HTTP error (no daemon sends it); the CLI exits with code 8."""

    status = 408
    exit_code = 8
    code = "wait_timed_out"


_BY_STATUS: dict[int, type[AiMemoryError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    429: LimitExceeded,
    503: Unavailable,
}


def parse_retry_after(value: str | None) -> float:
    """Seconds from a ``Retry-After`` header (1 when absent or unreadable)."""
    try:
        return max(0.0, float(value)) if value is not None else 1.0
    except ValueError:
        return 1.0


def from_reply(status: int, raw: bytes, retry_after: str | None = None) -> AiMemoryError:
    """The error a daemon's HTTP error reply names, for the API's own clients
    (the CLI, the MCP server); the HTTP status is added to the details for
    display."""
    import json

    try:
        body: Any = json.loads(raw.decode("utf-8")) if raw else None
    except (ValueError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        text = raw.decode("utf-8", "replace").strip()
        body = {"error": text or f"HTTP {status}"}
    exc = from_body(status, body, parse_retry_after(retry_after))
    exc.details.setdefault("status", status)
    return exc


def from_body(status: int, body: dict[str, Any], wait: float = 1.0) -> AiMemoryError:
    """The inverse of ``status`` and ``to_body()``: the same class, message,
    details and precise ``code``."""
    message = str(body.get("error") or f"HTTP {status}")
    code = body.get("code")
    # Keys that would collide with constructor arguments are not details.
    details = {str(k): v for k, v in body.items()
               if k not in ("error", "code", "message", "retry_after")}
    exc: AiMemoryError
    if status == 503 and (code == "quorum_not_met" or message == "quorum_not_met"):
        exc = QuorumNotMet(got=int(details.get("got", 0)), needed=int(details.get("needed", 0)),
                           reason=str(details.get("reason", "")), retry_after=wait)
    elif status == 503 and code == "no_majority":
        exc = NoMajority(message, retry_after=wait, **details)
    else:
        cls = _BY_STATUS.get(status) or (ClientError if 400 <= status < 500 else ServerError)
        if issubclass(cls, Unavailable):
            exc = cls(message, retry_after=wait, **details)
        else:
            exc = cls(message, **details)
        if isinstance(code, str) and code:
            exc.code = code
    return exc
