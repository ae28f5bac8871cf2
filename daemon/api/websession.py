"""Browser sessions of the web inbox, and the checks every browser write passes.

A person logs in on one node (user name and password through the identity
directory, or a bare API key) and gets a session: a random id in an
``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` over TLS) and a random
CSRF token the page reads from ``GET /web/api/me`` and sends back in a
header. Sessions live in this node's memory (bounded by
``limits.web_sessions_max``, forgotten after ``limits.web_session_idle_secs``
unused or at a restart); log in again on another node or after a restart.

A browser write is accepted only when all of these hold, checked before
anything is read or written (:func:`check_write`):

* the body is JSON (``Content-Type: application/json``), so a cross-site
  HTML form cannot produce it;
* the custom header ``X-AI-Memory-UI: 1`` is present (a form cannot set
  headers; a cross-site ``fetch`` that sets it needs a CORS preflight this
  server never grants);
* the ``Origin`` header names this server (scheme and host of the request);
* the ``X-CSRF-Token`` header equals the session's token (compared in
  constant time); another session's token is refused like a missing one.

Anything else is a 403 and changes nothing. In anonymous mode on loopback
the inbox makes a session without a login; the same checks apply.

The legacy GET-only login (HTTP Basic, the key as the password) reads like
a session but never writes on its own: a send carries a key for that one
request in ``X-AI-Memory-Write-Token`` (the page keeps it only in the form
field and clears it after the answer), and it cannot edit.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from aiohttp import web

from common import limits
from common.errors import Forbidden
from common.policy import ANONYMOUS, Principal

COOKIE_PREFIX = "aim_web_"
UI_HEADER = "X-AI-Memory-UI"
CSRF_HEADER = "X-CSRF-Token"
WRITE_TOKEN_HEADER = "X-AI-Memory-Write-Token"


@dataclass(slots=True)
class WebSession:
    sid: str
    csrf: str
    principal: Principal
    login: str  # anonymous | key | password
    name: str  # what the page shows as the viewer
    editor_id: str = field(default_factory=lambda: "web-" + secrets.token_hex(8))
    last_used: float = field(default_factory=time.monotonic)
    # A key login's key, kept in this node's memory only, so every request
    # resolves it again (a revoked key ends the session at once).
    credential: str | None = field(default=None, repr=False)

    def holder(self) -> dict[str, str | None]:
        """Who holds a message this session takes for an edit. The session id
        itself never leaves the node (it is a credential); ``editor_id`` is a
        separate random name. In anonymous mode every browser is the same
        "anonymous" user, so any of them may save or discard."""
        user = self.principal.user
        if user is None:
            user = "anonymous" if self.principal.mode == ANONYMOUS else f"key:{self.name}"
        return {"holder_session": self.editor_id, "holder_agent": "web", "holder_user": user}


class WebSessions:
    """This node's browser sessions, bounded and expiring."""

    def __init__(self, node_id: str = "", max_sessions: int = limits.web_sessions_max,
                 idle_secs: float = limits.web_session_idle_secs) -> None:
        # Cookies are not kept apart by port: nodes on one host (a test
        # cluster on loopback) each need a cookie name of their own.
        self.cookie = COOKIE_PREFIX + hashlib.sha256(node_id.encode()).hexdigest()[:10]
        self._by_id: OrderedDict[str, WebSession] = OrderedDict()
        self._max = max_sessions
        self._idle = idle_secs

    def create(self, principal: Principal, *, login: str, name: str,
               credential: str | None = None) -> WebSession:
        while len(self._by_id) >= self._max:
            self._by_id.popitem(last=False)
        s = WebSession(sid=secrets.token_urlsafe(32), csrf=secrets.token_urlsafe(32),
                       principal=principal, login=login, name=name, credential=credential)
        self._by_id[s.sid] = s
        return s

    def get(self, sid: str | None) -> WebSession | None:
        if not sid:
            return None
        s = self._by_id.get(sid)
        if s is None:
            return None
        now = time.monotonic()
        if now - s.last_used > self._idle:
            del self._by_id[sid]
            return None
        s.last_used = now
        self._by_id.move_to_end(sid)
        return s

    def drop(self, sid: str) -> None:
        self._by_id.pop(sid, None)

    def __len__(self) -> int:
        return len(self._by_id)


def own_origin(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def check_origin_and_header(request: web.Request) -> None:
    """The checks of a browser write that need no session (login too)."""
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise Forbidden("browser writes must send a JSON body", code="csrf_refused")
    if request.headers.get(UI_HEADER) != "1":
        raise Forbidden(f"browser writes need the {UI_HEADER}: 1 header", code="csrf_refused")
    origin = request.headers.get("Origin")
    if origin is None or origin != own_origin(request):
        raise Forbidden(f"cross-origin write refused (Origin {origin!r})", code="csrf_refused")


def check_write(request: web.Request, session: WebSession | None) -> WebSession:
    """Refuse (403) a browser write without a session, or that fails any
    check of the module docstring."""
    check_origin_and_header(request)
    if session is None:
        raise Forbidden("no web session: log in first", code="csrf_refused")
    token = request.headers.get(CSRF_HEADER, "")
    if not token or not hmac.compare_digest(token.encode(), session.csrf.encode()):
        raise Forbidden("missing or wrong CSRF token", code="csrf_refused")
    return session


def set_cookie(request: web.Request, resp: web.StreamResponse, session: WebSession,
               name: str) -> None:
    resp.set_cookie(name, session.sid, httponly=True, samesite="Strict", path="/web",
                    secure=request.secure, max_age=int(limits.web_session_idle_secs))


def clear_cookie(resp: web.StreamResponse, name: str) -> None:
    resp.del_cookie(name, path="/web")
