"""``/api/v1/admin/users|keys|grants`` and ``/api/v1/whoami``.

The admin endpoints need a root principal (:func:`common.policy.check` with
``admin.users`` / ``admin.keys`` / ``admin.grants``). The caller is resolved
by :func:`caller`: a directory key (``Authorization: Bearer aim_...`` or
``X-API-Key: aim_...``) through the node's :class:`ReplicatedDirectory`
(unknown, revoked or removed: 401); a static ``[auth].api_keys`` key (as
Bearer, or through :func:`daemon.http.auth.principal_of` as ``X-API-Key``) is
root, as that function says; no key is anonymous. An anonymous caller is accepted for administration only from
loopback, whatever mode the node runs in.

``GET /api/v1/whoami`` answers the caller's principal (user, root, bound
agent, key id, grants, owner_user), which lets anyone check what a key is.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from aiohttp import web
from pydantic import TypeAdapter, ValidationError

from common.errors import BadRequest, Forbidden
from common.policy import ANONYMOUS, Principal, check
from daemon.http.appkeys import NODE
from daemon.http.auth import principal_of
from daemon.http.errors import query_model, read_json
from daemon.http.jsonio import json_response
from daemon.identity import admin
from daemon.schemas.identity import (
    AddUser,
    CreateKey,
    GrantBody,
    KeyId,
    ListQuery,
    RevokeQuery,
    SetPassword,
    UserName,
)


def presented_key(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return request.headers.get("X-API-Key") or None


async def caller(request: web.Request) -> Principal:
    """The caller, as the key middleware resolved it (daemon/http/auth.py)."""
    return principal_of(request)


def _loopback(request: web.Request) -> bool:
    try:
        return ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        return False


async def _admin(request: web.Request, action: str) -> Principal:
    who = await caller(request)
    check(who, action)
    if who.mode == ANONYMOUS and not _loopback(request):
        raise Forbidden(f"{action} without a root key is allowed from loopback only")
    return who


def _path_value(request: web.Request, name: str, typ: Any, what: str) -> str:
    try:
        return str(TypeAdapter(typ).validate_python(request.match_info[name]))
    except ValidationError:
        raise BadRequest(what) from None


def _user_in_path(request: web.Request) -> str:
    return _path_value(request, "name", UserName,
                       "user name must be 1-64 characters of [A-Za-z0-9_.@-]")


# -- users -------------------------------------------------------------------
async def add_user(request: web.Request) -> web.Response:
    await _admin(request, "admin.users")
    req = await read_json(request, AddUser)
    node = request.app[NODE]
    out = await admin.add_user(node, req.name, root=req.root, password=req.password)
    return json_response(out, status=201)


async def list_users(request: web.Request) -> web.Response:
    await _admin(request, "admin.users")
    q = query_model(request, ListQuery)
    return json_response(await admin.list_users(
        request.app[NODE], include_removed=q.all, consistency=q.consistency))


async def remove_user(request: web.Request) -> web.Response:
    await _admin(request, "admin.users")
    name = _user_in_path(request)
    return json_response(await admin.remove_user(request.app[NODE], name))


async def set_password(request: web.Request) -> web.Response:
    await _admin(request, "admin.users")
    name = _user_in_path(request)
    req = await read_json(request, SetPassword)
    return json_response(await admin.set_password(request.app[NODE], name, req.password))


# -- keys --------------------------------------------------------------------
async def create_key(request: web.Request) -> web.Response:
    await _admin(request, "admin.keys")
    req = await read_json(request, CreateKey)
    out = await admin.create_key(request.app[NODE], req.user, agent=req.agent, label=req.label)
    return json_response(out, status=201)


async def list_keys(request: web.Request) -> web.Response:
    await _admin(request, "admin.keys")
    q = query_model(request, ListQuery)
    return json_response(await admin.list_keys(request.app[NODE], user=q.user,
                                                   consistency=q.consistency))


async def revoke_key(request: web.Request) -> web.Response:
    await _admin(request, "admin.keys")
    key_id = _path_value(request, "key_id", KeyId, "a key id is key_ followed by hex digits")
    return json_response(await admin.revoke_key(request.app[NODE], key_id))


# -- grants --------------------------------------------------------------------
async def grant(request: web.Request) -> web.Response:
    await _admin(request, "admin.grants")
    req = await read_json(request, GrantBody)
    out = await admin.grant(request.app[NODE], req.user, req.workspace, req.project, req.access)
    return json_response(out, status=201)


async def revoke(request: web.Request) -> web.Response:
    await _admin(request, "admin.grants")
    q = query_model(request, RevokeQuery)
    return json_response(await admin.revoke(request.app[NODE], q.user, q.workspace,
                                                q.project, q.access))


async def list_grants(request: web.Request) -> web.Response:
    await _admin(request, "admin.grants")
    q = query_model(request, ListQuery)
    return json_response(await admin.list_grants(request.app[NODE], user=q.user,
                                                     consistency=q.consistency))


# -- who am I ------------------------------------------------------------------
def principal_json(p: Principal) -> dict[str, Any]:
    return {"mode": p.mode, "user": p.user, "root": p.root, "agent": p.agent,
            "agent_bound": p.agent_bound, "key_id": p.key_id, "owner_user": p.owner_user,
            "grants": [{"workspace": g.workspace, "project": g.project, "access": g.access}
                       for g in p.grants]}


async def whoami(request: web.Request) -> web.Response:
    """The caller's principal, and the mode the node runs in: on an anonymous
    node a presented key is still resolved (its principal says ``keys``), so
    ``mode`` alone would not tell the node's mode."""
    out = principal_json(await caller(request))
    out["node_mode"] = request.app[NODE].settings.auth.mode
    return json_response(out)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/admin/users", add_user)
    app.router.add_get("/api/v1/admin/users", list_users)
    app.router.add_delete("/api/v1/admin/users/{name}", remove_user)
    app.router.add_post("/api/v1/admin/users/{name}/password", set_password)
    app.router.add_post("/api/v1/admin/keys", create_key)
    app.router.add_get("/api/v1/admin/keys", list_keys)
    app.router.add_delete("/api/v1/admin/keys/{key_id}", revoke_key)
    app.router.add_post("/api/v1/admin/grants", grant)
    app.router.add_get("/api/v1/admin/grants", list_grants)
    app.router.add_delete("/api/v1/admin/grants", revoke)
    app.router.add_get("/api/v1/whoami", whoami)
