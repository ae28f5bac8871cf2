"""Who is calling: one principal per request, resolved in one place.

:func:`authenticate` (a middleware, inside the error boundary) turns every
public request into a :class:`common.policy.Principal` before any handler
runs, and :func:`principal_of` hands it to the handlers, which ask
:func:`common.policy.check` (or :func:`acting_agent`) before they act.

A key comes as ``Authorization: Bearer <key>`` or ``X-API-Key: <key>`` and
is resolved through the node's :class:`common.policy.Directory`
(``node.directory``): an unknown, revoked or removed user's key is a 401.
A key bound to an agent fixes the agent: a differing ``X-Agent-Id`` (here)
or ``agent_id`` (in :func:`acting_agent`) is a 403. An unbound key acts for
the agent its caller names.

By mode (``[auth] mode``):

* ``keys`` -- every request needs a key, except ``GET /api/v1/health``,
  the peer routes (``/peer/v1/*``, signed with the cluster secret,
  :mod:`daemon.peer.auth`; refused outright on a node without a secret)
  and the routes an operator may also sign with the cluster secret
  instead (:data:`SIGNED_ROUTES`: backups and the upstream sync
  endpoints), whose handlers check that signature themselves.
* ``anonymous`` -- a request without a key is
  :meth:`Principal.anonymous` with the claimed ``X-Agent-Id``; a key, when
  presented, is resolved and believed as in keys mode.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import replace

from aiohttp import web

from common import limits
from common.errors import BadRequest, Forbidden, Unauthorized
from common.policy import KEYS, Principal
from daemon.http.appkeys import NODE
from daemon.http.errors import Handler, closing_error_response, refuse_unread
from daemon.schemas.validation import AGENT_ID_RE
from daemon.settings import AuthSettings

_AGENT_RE = re.compile(AGENT_ID_RE.strip("^$"))
PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal", Principal)
OPEN_ROUTES = frozenset({"/api/v1/health"})
# The web inbox resolves its callers itself, from its cookie sessions (a key
# or a password at /web/login; daemon/api/webui.py), so keys mode lets its
# paths through here and the web routes refuse a request without a session.
WEB_ROOT = "/web"
SIGNED_ROUTES = frozenset({"/api/v1/admin/backup", "/api/v1/sync/push", "/api/v1/sync/since"})
SIGNATURE_HEADER = "X-AIM-Sig"
# A principal with no rights at all: a signed request on a SIGNED_ROUTE
# before its handler has checked the signature.
NOBODY = Principal(mode=KEYS)


def check_agent_id(value: str, what: str = "agent_id") -> str:
    if not value or len(value) > limits.agent_id_max_chars or not _AGENT_RE.fullmatch(value):
        raise BadRequest(
            f"{what} must be 1-{limits.agent_id_max_chars} characters of [A-Za-z0-9_-:@./]")
    return value


def presented_key(request: web.Request) -> str | None:
    """The key of ``Authorization: Bearer`` or ``X-API-Key`` (both given: they must agree)."""
    bearer = None
    auth = request.headers.get("Authorization")
    if auth:
        scheme, _, value = auth.strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthorized("Authorization must be 'Bearer <key>'")
        bearer = value.strip()
    api_key = request.headers.get("X-API-Key") or None
    if bearer and api_key and bearer != api_key:
        raise Unauthorized("Authorization and X-API-Key carry different keys")
    key = bearer or api_key
    if key is not None and len(key) > limits.api_key_max_chars:
        raise Unauthorized("unknown or revoked API key", code="unknown_key")
    return key


def _is_open(request: web.Request) -> bool:
    path = request.path
    return ((path in OPEN_ROUTES and request.method in ("GET", "HEAD"))
            or path.startswith("/peer/") or path == WEB_ROOT or path.startswith(WEB_ROOT + "/")
            or path.startswith("/lane/"))  # a sibling lane's, on the local socket only


async def resolve(request: web.Request) -> Principal:
    """The caller of ``request`` (see the module docstring); raises 401/403."""
    node = request.app[NODE]
    auth: AuthSettings = node.settings.auth
    claimed = request.headers.get("X-Agent-Id") or None
    if claimed is not None:
        check_agent_id(claimed, "X-Agent-Id")
    secret = presented_key(request)
    if secret is None:
        if not auth.keys_mode:
            return Principal.anonymous(claimed)
        if (request.path in SIGNED_ROUTES and SIGNATURE_HEADER in request.headers
                and node.settings.cluster.secret):
            return NOBODY  # the handler checks the signature
        raise Unauthorized("this node requires a key: send Authorization: Bearer <key> "
                           "(or X-API-Key)", code="key_required")
    principal = await node.directory.resolve(secret)
    if principal is None:
        raise Unauthorized("unknown or revoked API key", code="unknown_key")
    if principal.agent_bound:
        if claimed is not None and claimed != principal.agent:
            raise Forbidden(f"X-Agent-Id {claimed!r} does not match the key's agent "
                            f"{principal.agent!r}")
    elif claimed is not None:
        principal = replace(principal, agent=claimed)
    return principal


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Put the caller on the request. A caller without a valid key is
    answered at once and its connection closed, so its body is not read
    beyond aiohttp's lingering bound (a refused peer's not at all)."""
    if not _is_open(request):
        try:
            request[PRINCIPAL] = await resolve(request)
        except Unauthorized as exc:
            return closing_error_response(exc)
    elif request.path.startswith("/peer/"):
        settings = request.app[NODE].settings
        if settings.auth.keys_mode and not settings.cluster.secret:
            # Without a secret nothing signs peer requests: in keys mode nobody may send them.
            return await refuse_unread(request, Unauthorized(
                "peer routes need the cluster secret in keys mode", code="peer_secret_required"))
    return await handler(request)


def principal_of(request: web.Request, auth: AuthSettings | None = None) -> Principal:
    """The request's :class:`common.policy.Principal`, resolved by :func:`authenticate`.

    (``auth`` is accepted for the callers written before the middleware; the
    principal no longer depends on it.)"""
    found: Principal | None = request.get(PRINCIPAL)
    if found is None:
        raise Unauthorized("this route resolves no caller")
    return found


def acting_agent(principal: Principal, claimed: str | None, *,
                 required: bool = True) -> str | None:
    """The agent a request acts as: the caller's and the claimed id must agree.

    A key bound to an agent fixes it; otherwise ``X-Agent-Id`` (already on
    the principal) and a body/query ``agent_id`` must not differ."""
    if claimed is not None:
        check_agent_id(claimed)
    agent = principal.agent
    if agent and claimed and claimed != agent:
        raise Forbidden(f"agent_id {claimed!r} differs from the caller's identity {agent!r}")
    agent = agent or claimed
    if agent is None and required:
        raise BadRequest("agent identity required: send X-Agent-Id or agent_id")
    return agent


def is_loopback(request: web.Request) -> bool:
    try:
        return ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        return False


def owner_user(principal: Principal) -> str | None:
    """What ``from_owner_user`` records for this caller (None when empty)."""
    return (principal.owner_user or None) if principal.mode == KEYS else None
