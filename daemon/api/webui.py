"""The web inbox: pages under ``/web`` and the JSON they call under ``/web/api``.

The pages are static files of the package (``daemon/web/``: HTML, one CSS
file, vanilla JS; no build step, no CDN), served with a strict
Content-Security-Policy (scripts and styles from this origin only, nothing
inline, no framing). Every action goes through the same services as the
HTTP API (:mod:`daemon.services.mail`) and asks :mod:`common.policy`;
sessions and the CSRF rules are :mod:`daemon.api.websession`.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from pathlib import Path
from typing import Annotated

from aiohttp import web
from pydantic import Field, StringConstraints

from common import limits, policy
from common.errors import BadRequest, Forbidden, NotFound, Unauthorized
from common.lanes import lane_of
from common.ops import mailbox_key
from common.policy import ANONYMOUS, Principal
from common.vocab import (
    FROM_AGENT_MEANINGS,
    FROM_AGENT_WEB,
    NATURE_DEFAULT,
    NATURE_MEANINGS,
    Nature,
)
from daemon.api.mail import MessageId
from daemon.api.websession import (
    WRITE_TOKEN_HEADER,
    SharedWebSessions,
    WebSession,
    WebSessions,
    check_origin_and_header,
    check_write,
    clear_cookie,
    set_cookie,
)
from daemon.http.appkeys import NODE
from daemon.http.errors import query_model, read_json
from daemon.http.jsonio import json_response
from daemon.node import Node
from daemon.schemas.validation import Lenient, ScopeName, Strict, text
from daemon.services import mail

STATIC = Path(__file__).resolve().parent.parent / "web"
PAGES = {"login": "login.html", "inbox": "inbox.html"}
ASSETS = {"web.css": "text/css", "inbox.js": "text/javascript", "login.js": "text/javascript"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")

SESSIONS = web.AppKey("web_sessions", WebSessions)

class LoginIn(Strict):
    user: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    password: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = None
    key: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = None


class WebSendIn(Strict):
    from_workspace: ScopeName
    from_project: ScopeName
    to_workspace: ScopeName
    to_project: ScopeName
    to_agent: ScopeName | None = None
    subject: text(10 * limits.message_subject_max_chars) | None = None  # type: ignore[valid-type]
    body: text(limits.request_body_max_bytes, min_chars=1)  # type: ignore[valid-type]
    nature: Nature = NATURE_DEFAULT
    evidence: text(10 * limits.message_evidence_max_chars) | None = None  # type: ignore[valid-type]
    in_reply_to: MessageId | None = None  # the composer's Reply: a message the viewer may read


class SaveIn(Strict):
    subject: text(10 * limits.message_subject_max_chars) | None = None  # type: ignore[valid-type]
    body: text(limits.request_body_max_bytes, min_chars=1)  # type: ignore[valid-type]


class EmptyIn(Strict):
    pass


class DecideIn(Strict):
    reason: text(10 * limits.approval_reason_max_chars) | None = None  # type: ignore[valid-type]


class ProjectQuery(Lenient):
    workspace: ScopeName
    project: ScopeName


class HistoryQuery(ProjectQuery):
    box: str = "received"
    page: Annotated[int, Field(ge=0, lt=limits.web_history_pages_max)] = 0
    thread_id: MessageId | None = None


# -- who is looking -----------------------------------------------------------------

def anonymous_mode(node: Node) -> bool:
    """No keys to check: the daemon runs without identities."""
    return not node.settings.auth.keys_mode


def from_loopback(request: web.Request) -> bool:
    try:
        return request.remote is not None and ipaddress.ip_address(request.remote).is_loopback
    except ValueError:
        return False


async def resolve_key(node: Node, key: str) -> tuple[Principal, str]:
    """A bare API key's principal (and what to call its holder), through the
    node's directory (the replicated users and keys, and the static keys)."""
    found = await node.directory.resolve(key)
    if found is None:
        raise Unauthorized("unknown API key")
    return found, found.user or found.agent or "API key"


async def verify_password(node: Node, user: str, password: str) -> Principal:
    found = await node.identity.verify_password(user, password)
    if not isinstance(found, Principal):
        raise Unauthorized("wrong user name or password")
    return found


async def _session(request: web.Request) -> WebSession | None:
    """The request's cookie session, its principal looked up afresh: a key
    revoked, a user removed or a grant changed since the login counts at
    once (the directory answers from its cache), and a session whose key or
    user is gone is dropped."""
    sessions = request.app[SESSIONS]
    s = sessions.get(request.cookies.get(sessions.cookie))
    if s is None or s.login == "anonymous":
        return s
    node = request.app[NODE]
    if s.login == "key":
        fresh = await node.directory.resolve(s.credential or "")
    else:
        fresh = await node.identity.principal_for_user(s.principal.user or "")
    if fresh is None:
        sessions.drop(s.sid)
        return None
    s.principal = fresh
    return s


def _basic_key(request: web.Request) -> str | None:
    """The key of a legacy HTTP Basic login (the password field), if any."""
    auth = request.headers.get("Authorization", "")
    if not auth.startswith("Basic "):
        return None
    try:
        _, _, key = base64.b64decode(auth[6:], validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise Unauthorized("malformed Basic credentials") from None
    return key or None


async def viewer(request: web.Request) -> tuple[WebSession | None, Principal]:
    """Who reads: the cookie session, else a legacy Basic login (reads only)."""
    s = await _session(request)
    if s is not None:
        return s, s.principal
    key = _basic_key(request)
    if key is not None:
        principal, _ = await resolve_key(request.app[NODE], key)
        return None, principal
    raise Unauthorized("log in at /web/login first")


# -- pages ----------------------------------------------------------------------------

def _page(name: str) -> web.Response:
    return web.Response(body=(STATIC / PAGES[name]).read_bytes(),
                        content_type="text/html", charset="utf-8")


async def root(request: web.Request) -> web.Response:
    raise web.HTTPFound("/web/inbox")


async def login_page(request: web.Request) -> web.Response:
    if anonymous_mode(request.app[NODE]) and from_loopback(request):
        raise web.HTTPFound("/web/inbox")  # nothing to log in to
    return _page("login")


async def inbox_page(request: web.Request) -> web.Response:
    node = request.app[NODE]
    if await _session(request) is not None:
        return _page("inbox")
    if anonymous_mode(node):
        if not from_loopback(request):
            raise Forbidden("this daemon runs in anonymous mode, which serves the web inbox "
                            "only to loopback clients; configure keys to use it remotely")
        s = request.app[SESSIONS].create(Principal.anonymous("web"), login="anonymous",
                                         name="anonymous")
        resp = _page("inbox")
        set_cookie(request, resp, s, request.app[SESSIONS].cookie)
        return resp
    raise web.HTTPFound("/web/login")


async def legacy_page(request: web.Request) -> web.Response:
    """The GET-only login: HTTP Basic with an API key as the password."""
    key = _basic_key(request)
    if key is None:
        return json_response(
            {"error": "log in with any user name and your API key as the password",
             "code": "unauthorized"}, status=401,
            headers={"WWW-Authenticate": 'Basic realm="ai-memory web inbox"'})
    await resolve_key(request.app[NODE], key)
    return _page("inbox")


async def asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in ASSETS:
        raise NotFound(f"no asset {name}")
    return web.Response(body=(STATIC / name).read_bytes(), content_type=ASSETS[name],
                        charset="utf-8")


# -- login ------------------------------------------------------------------------------

async def login(request: web.Request) -> web.Response:
    check_origin_and_header(request)
    node = request.app[NODE]
    body = await read_json(request, LoginIn, limit="web_login_body_max_bytes")
    if body.key is not None:
        principal, name = await resolve_key(node, body.key)
        how = "key"
    elif body.user is not None and body.password is not None:
        principal = await verify_password(node, body.user, body.password)
        name, how = principal.user or body.user, "password"
    else:
        raise BadRequest("give user and password, or key")
    s = request.app[SESSIONS].create(principal, login=how, name=name,
                                     credential=body.key if how == "key" else None)
    resp = json_response({"ok": True, "name": name, "login": how}, status=201)
    set_cookie(request, resp, s, request.app[SESSIONS].cookie)
    return resp


async def logout(request: web.Request) -> web.Response:
    s = check_write(request, await _session(request))
    request.app[SESSIONS].drop(s.sid)
    resp = json_response({"ok": True})
    clear_cookie(resp, request.app[SESSIONS].cookie)
    return resp


async def me(request: web.Request) -> web.Response:
    node = request.app[NODE]
    s, principal = await viewer(request)
    anonymous = principal.mode == ANONYMOUS
    return json_response({
        "name": "anonymous" if anonymous else (s.name if s else "legacy key login"),
        "login": s.login if s else "legacy",
        "anonymous": anonymous,
        "legacy": s is None,
        "csrf_token": s.csrf if s else None,
        "can_edit": s is not None,
        "node": node.settings.cluster.node_id,
        # What the provenance words mean, shown beside them (common/vocab.py).
        "meanings": {"nature": NATURE_MEANINGS, "from_agent": FROM_AGENT_MEANINGS},
    })


# -- reading ------------------------------------------------------------------------------

async def projects(request: web.Request) -> web.Response:
    _, principal = await viewer(request)
    node = request.app[NODE]
    rows = await mail.readable_projects(node, principal)
    lanes = node.siblings
    if lanes is not None:  # every lane answers (daemon/lanes/table_web.py) for its own mailboxes
        rows = [r for r in rows
                if lane_of(mailbox_key(r["workspace"], r["project"]), lanes.lanes) == lanes.lane]
    return json_response({"projects": rows, "count": len(rows)})


async def history(request: web.Request) -> web.Response:
    _, principal = await viewer(request)
    q = query_model(request, HistoryQuery)
    node = request.app[NODE]
    return json_response(await mail.history(
        node, principal, box=q.box, workspace=q.workspace, project=q.project,
        page=q.page, thread_id=q.thread_id, lane_share=node.siblings is not None))


async def held(request: web.Request) -> web.Response:
    _, principal = await viewer(request)
    q = query_model(request, ProjectQuery)
    return json_response(await mail.held(request.app[NODE], principal,
                                             workspace=q.workspace, project=q.project))


async def harnesses(request: web.Request) -> web.Response:
    _, principal = await viewer(request)
    q = query_model(request, ProjectQuery)
    return json_response(await mail.harnesses(request.app[NODE], principal,
                                                  workspace=q.workspace, project=q.project))


# -- writing ------------------------------------------------------------------------------

async def _writer(request: web.Request) -> tuple[WebSession | None, Principal]:
    """The principal of a browser send: the session's (all checks), or, for
    a legacy Basic login, the key in the write-token header of this one
    request (Basic alone never writes)."""
    s = await _session(request)
    if s is None and _basic_key(request) is not None:
        check_origin_and_header(request)
        token = request.headers.get(WRITE_TOKEN_HEADER)
        if not token:
            raise Forbidden("the legacy login writes only with a write token for the message",
                            code="csrf_refused")
        # A wrong token is a 403, never a 401: a browser takes a 401 as the
        # refusal of its cached Basic login and forgets it, so the page's
        # next read, and the next send with the right token, would fail.
        found = await request.app[NODE].directory.resolve(token)
        if found is None:
            raise Forbidden("the write token is not a valid API key; nothing was sent",
                            code="write_token_refused")
        return None, found
    s = check_write(request, s)
    return s, s.principal


async def send(request: web.Request) -> web.Response:
    node = request.app[NODE]
    _, principal = await _writer(request)
    body = await read_json(request, WebSendIn)
    policy.check(principal, "message.send", {"to": (body.to_workspace, body.to_project),
                                             "from": (body.from_workspace, body.from_project)})
    # Neither coordinate is created by a send from the browser.
    if not await mail.project_exists(node, body.from_workspace, body.from_project):
        raise NotFound(f"unknown project {body.from_workspace}/{body.from_project}: a project "
                       "exists once an agent has started a session there")
    owner = principal.owner_user or principal.user or None
    out = await mail.send(node, principal, mail.SendRequest(
        to_workspace=body.to_workspace, to_project=body.to_project, body=body.body,
        to_agent=body.to_agent, from_workspace=body.from_workspace,
        from_project=body.from_project, from_agent=FROM_AGENT_WEB, subject=body.subject,
        nature=body.nature, evidence=body.evidence, in_reply_to=body.in_reply_to),
        session_id=None, owner_user=owner, idempotency_key=None)
    return json_response(out, status=201)


def _message_id(request: web.Request) -> str:
    mid = request.match_info["id"]
    if not mid or len(mid) > 64 or not all(c.isalnum() or c == "-" for c in mid):
        raise BadRequest("malformed message id")
    return mid


async def edit(request: web.Request) -> web.Response:
    s = check_write(request, await _session(request))
    mid = _message_id(request)
    await read_json(request, EmptyIn)
    return json_response(await mail.hold(request.app[NODE], s.principal, message_id=mid,
                                             holder=s.holder()))


async def save(request: web.Request) -> web.Response:
    s = check_write(request, await _session(request))
    mid = _message_id(request)
    body = await read_json(request, SaveIn)
    return json_response(await mail.release(
        request.app[NODE], s.principal, message_id=mid, holder=s.holder(),
        subject=body.subject, body=body.body, save=True))


async def discard(request: web.Request) -> web.Response:
    s = check_write(request, await _session(request))
    mid = _message_id(request)
    await read_json(request, EmptyIn)
    return json_response(await mail.release(
        request.app[NODE], s.principal, message_id=mid, holder=s.holder(), save=False))


async def approvals(request: web.Request) -> web.Response:
    _, principal = await viewer(request)
    q = query_model(request, ProjectQuery)
    return json_response(await mail.approvals(request.app[NODE], principal,
                                                  workspace=q.workspace, project=q.project))


async def _decide(request: web.Request, approve: bool) -> web.Response:
    s = check_write(request, await _session(request))
    mid = _message_id(request)
    body = await read_json(request, DecideIn)
    return json_response(await mail.decide(request.app[NODE], s.principal, message_id=mid,
                                               approve=approve, reason=body.reason,
                                               by_agent=FROM_AGENT_WEB))


async def approve(request: web.Request) -> web.Response:
    return await _decide(request, True)


async def reject(request: web.Request) -> web.Response:
    return await _decide(request, False)


# -- wiring ---------------------------------------------------------------------------------

async def _headers(request: web.Request, resp: web.StreamResponse) -> None:
    if request.path == "/web" or request.path.startswith("/web/"):
        resp.headers["Content-Security-Policy"] = CSP
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Referrer-Policy"] = "no-referrer"
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["Cache-Control"] = "no-store"


SESSIONS_FILE = "web_sessions.sqlite"  # in a node's lane directory (daemon/lanes/supervisor.py)


def _sessions(node: Node) -> WebSessions:
    """This node's browser sessions: in memory, or with lanes in a file its lanes share."""
    s = node.settings.server
    if s.laned and s.lane_dir:
        return SharedWebSessions(str(Path(s.lane_dir) / SESSIONS_FILE),
                                 node.settings.cluster.node_id)
    return WebSessions(node.settings.cluster.node_id)


async def _close_sessions(app: web.Application) -> None:
    app[SESSIONS].close()


def add_routes(app: web.Application) -> None:
    app[SESSIONS] = _sessions(app[NODE])
    app.on_cleanup.append(_close_sessions)
    app.on_response_prepare.append(_headers)
    r = app.router
    r.add_get("/web", root)
    r.add_get("/web/", root)  # the address docs/web.md gives
    r.add_get("/web/login", login_page)
    r.add_post("/web/login", login)
    r.add_post("/web/logout", logout)
    r.add_get("/web/inbox", inbox_page)
    r.add_get("/web/legacy", legacy_page)
    r.add_get("/web/static/{name}", asset)
    r.add_get("/web/api/me", me)
    r.add_get("/web/api/projects", projects)
    r.add_get("/web/api/history", history)
    r.add_get("/web/api/held", held)
    r.add_get("/web/api/harnesses", harnesses)
    r.add_post("/web/api/messages", send)
    r.add_post("/web/api/messages/{id}/edit", edit)
    r.add_post("/web/api/messages/{id}/save", save)
    r.add_post("/web/api/messages/{id}/discard", discard)
    r.add_get("/web/api/approvals", approvals)
    r.add_post("/web/api/messages/{id}/approve", approve)
    r.add_post("/web/api/messages/{id}/reject", reject)
