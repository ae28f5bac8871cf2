"""Browser sessions of the web inbox, and the checks every browser write passes.

A person logs in on one node (user name and password through the identity
directory, or a bare API key) and gets a session: a random id in an
``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` over TLS) and a random
CSRF token the page reads from ``GET /web/api/me`` and sends back in a
header. Sessions live in this node's memory (bounded by
``limits.web_sessions_max``, forgotten after ``limits.web_session_idle_secs``
unused or at a restart); log in again on another node or after a restart.
A node with lanes keeps them in one small SQLite file its lanes share
(:class:`SharedWebSessions`), so a login, and a logout, counts at once on
whichever lane serves the next request.

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

import base64
import contextlib
import hashlib
import hmac
import os
import secrets
import sqlite3
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from aiohttp import web

from common import limits
from common.errors import Forbidden
from common.policy import ANONYMOUS, KEYS, Principal
from daemon.lanes.hop import client_scheme

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

    def close(self) -> None:
        self._by_id.clear()


_SCHEMA = """
CREATE TABLE IF NOT EXISTS web_sessions (
    id          TEXT PRIMARY KEY,   -- sha256 of the session id: the file holds no cookie
    login       TEXT NOT NULL,
    name        TEXT NOT NULL,
    user        TEXT,               -- a password login's user, looked up afresh on each use
    editor_id   TEXT NOT NULL,
    credential  BLOB,               -- a key login's key, encrypted under the session id
    last_used   REAL NOT NULL       -- time.monotonic(): one clock for every process of the host
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS web_sessions_last_used ON web_sessions (last_used);
"""


_OPEN_RETRY_SECS = 10.0


def _open_shared(path: str) -> sqlite3.Connection:
    """The lanes' sessions file, created (mode 0600) in WAL mode with its table.

    Every lane opens it as it starts, at about the same moment. Turning a new
    file to WAL, or creating the table, takes the write lock from a read
    lock; when two lanes do that at once SQLite refuses one at once with
    SQLITE_BUSY instead of waiting (waiting could deadlock), so a busy open
    is tried again, for up to ``_OPEN_RETRY_SECS``."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    deadline = time.monotonic() + _OPEN_RETRY_SECS
    while True:
        conn = sqlite3.connect(path, isolation_level=None, timeout=5.0, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = OFF")  # sessions need not survive a crash
            conn.executescript(_SCHEMA)
            return conn
        except sqlite3.OperationalError as e:
            conn.close()
            if e.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
        time.sleep(0.005 + secrets.randbelow(20) / 1000)


def _derive(sid: str, label: bytes, size: int) -> bytes:
    """``size`` bytes only the holder of session id ``sid`` can compute."""
    out = b""
    counter = 0
    while len(out) < size:
        out += hmac.digest(sid.encode(), label + counter.to_bytes(4, "big"), "sha256")
        counter += 1
    return out[:size]


def _seal(sid: str, data: bytes) -> bytes:
    """``data`` XORed with a key stream of the session id (both ways)."""
    return bytes(a ^ b for a, b in zip(data, _derive(sid, b"credential", len(data)), strict=True))


class SharedWebSessions(WebSessions):
    """The browser sessions of a node with lanes: rows of one SQLite file in
    the node's private lane directory (mode 0700, removed when the node
    stops, so sessions still end at a restart), shared by its lanes.

    Every lookup reads the file (WAL: a read waits for no writer), so a
    session made on one lane is known on the next request whatever lane
    serves it, and a logout (a delete) is refused at once on every lane;
    nothing is cached. The file never holds what logs in: a row is named by
    the SHA-256 of the session id, the CSRF token is derived from the
    session id (HMAC), and a key login's key is stored encrypted under the
    session id, which only the browser's cookie carries. ``last_used`` is
    written at most every :data:`TOUCH_SECS`, so an idle session may last
    that much longer than ``limits.web_session_idle_secs``."""

    TOUCH_SECS = 30.0

    def __init__(self, path: str, node_id: str = "", max_sessions: int = limits.web_sessions_max,
                 idle_secs: float = limits.web_session_idle_secs) -> None:
        super().__init__(node_id, max_sessions, idle_secs)
        self._conn = _open_shared(path)

    @staticmethod
    def _row_id(sid: str) -> str:
        return hashlib.sha256(sid.encode()).hexdigest()

    @staticmethod
    def _csrf(sid: str) -> str:
        return base64.urlsafe_b64encode(_derive(sid, b"csrf", 32)).decode().rstrip("=")

    def create(self, principal: Principal, *, login: str, name: str,
               credential: str | None = None) -> WebSession:
        sid = secrets.token_urlsafe(32)
        s = WebSession(sid=sid, csrf=self._csrf(sid), principal=principal, login=login,
                       name=name, credential=credential)
        sealed = None if credential is None else _seal(sid, credential.encode())
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        try:
            (count,) = c.execute("SELECT COUNT(*) FROM web_sessions").fetchone()
            if count >= self._max:
                c.execute("DELETE FROM web_sessions WHERE id IN (SELECT id FROM web_sessions"
                          " ORDER BY last_used LIMIT ?)", (count - self._max + 1,))
            c.execute("INSERT INTO web_sessions (id, login, name, user, editor_id, credential,"
                      " last_used) VALUES (?, ?, ?, ?, ?, ?, ?)",
                      (self._row_id(sid), login, name, principal.user, s.editor_id, sealed,
                       time.monotonic()))
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("COMMIT")
        return s

    def get(self, sid: str | None) -> WebSession | None:
        if not sid:
            return None
        row_id = self._row_id(sid)
        row = self._conn.execute("SELECT login, name, user, editor_id, credential, last_used"
                                 " FROM web_sessions WHERE id = ?", (row_id,)).fetchone()
        if row is None:
            return None
        login, name, user, editor_id, sealed, last_used = row
        now = time.monotonic()
        if now - last_used > self._idle:
            self.drop(sid)
            return None
        if now - last_used > self.TOUCH_SECS:
            self._conn.execute("UPDATE web_sessions SET last_used = ? WHERE id = ?",
                               (now, row_id))
        # For a key or password login the caller looks the principal up afresh
        # (webui._session); this one only carries the user to look up.
        principal = (Principal.anonymous("web") if login == "anonymous"
                     else Principal(mode=KEYS, user=user))
        return WebSession(sid=sid, csrf=self._csrf(sid), principal=principal, login=login,
                          name=name, editor_id=editor_id,
                          credential=None if sealed is None else _seal(sid, bytes(sealed)).decode())

    def drop(self, sid: str) -> None:
        self._conn.execute("DELETE FROM web_sessions WHERE id = ?", (self._row_id(sid),))

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM web_sessions").fetchone()[0])

    def close(self) -> None:
        self._conn.close()


def own_origin(request: web.Request) -> str:
    return f"{client_scheme(request)}://{request.host}"


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
