"""The lane rule of every route (see :mod:`daemon.lanes.rules`).

A route's key is read from the request the way the route itself reads it
(the same fields, aliases and defaults); where the route would refuse the
request (a field missing or of the wrong type), the rule answers None and
the request is served where it arrived, whose route refuses it before it
touches a key. ``tests/daemon/test_lane_table.py`` checks that every route
the app serves has a rule here.
"""

from __future__ import annotations

from typing import Any

from common.lanes import lane_of, lane_of_id
from common.ops import inbox_key, mailbox_key
from daemon.http.auth import principal_of
from daemon.lanes.rules import (
    FANOUT,
    HERE_RULE,
    HOME_RULE,
    KEY,
    LaneOf,
    Rule,
    View,
    register,
)
from daemon.schemas.headers import SESSION_HEADER
from daemon.services.scope import resolve


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _agent(view: View, claimed: Any) -> str | None:
    """The acting agent as :func:`daemon.http.auth.acting_agent` finds it."""
    bound = principal_of(view.request).agent
    return bound or _text(claimed)


def _by_agent(field: str, *, in_body: bool) -> LaneOf:
    async def lane(view: View) -> int | None:
        src = view.json() if in_body else view.request.query
        agent = _agent(view, src.get(field) or (None if in_body else src.get("as_agent")))
        return None if agent is None else lane_of(inbox_key(agent), view.lanes)
    return lane


def _by_id(field: str, *, where: str = "body") -> LaneOf:
    async def lane(view: View) -> int | None:
        src: Any = (view.json() if where == "body" else view.request.query if where == "query"
                    else view.request.match_info)
        found = _text(src.get(field))
        return None if found is None else lane_of_id(found, view.lanes)
    return lane


async def _scope_lane(view: View, workspace: Any, project: Any) -> int | None:
    """The lane of the project a mail call acts for (:mod:`daemon.services.scope`:
    named, else the caller's session, else inferred); sessions are on every lane."""
    node = view.node
    session = view.request.headers.get(SESSION_HEADER) or None
    try:
        scope = await resolve(node.store, node.settings.mail, _text(workspace), _text(project),
                              session)
    except Exception:  # the route refuses the same request with its own 4xx
        return None
    return lane_of(mailbox_key(scope.workspace, scope.project), view.lanes)


def _by_scope(*, in_body: bool) -> LaneOf:
    async def lane(view: View) -> int | None:
        src = view.json() if in_body else view.request.query
        return await _scope_lane(view, src.get("workspace"), src.get("project"))
    return lane


async def _list_lane(view: View) -> int | None:
    """``GET /api/v1/messages``: the inbox box reads its project's mailbox, kept
    by that project's lane. The outbox box (this project's messages, in every
    lane's mailboxes) is served here: it lists this lane's share only."""
    q = view.request.query
    if q.get("box", "inbox") != "inbox":
        return None
    return await _scope_lane(view, q.get("workspace"), q.get("project"))


async def _notify_lane(view: View) -> int | None:
    body = view.json()
    for parent in ("reply_to", "in_reply_to"):
        if _text(body.get(parent)):
            return lane_of_id(body[parent], view.lanes)  # where the notification answered is
    target = body.get("target_agent_id", body.get("to"))
    if not isinstance(target, str) or target.endswith("*") or body.get("target_prefix"):
        return None  # a broadcast: served here, written to each recipient's lane
    return lane_of(inbox_key(target), view.lanes)


async def _send_lane(view: View) -> int | None:
    body = view.json()
    ws, project = _text(body.get("to_workspace")), _text(body.get("to_project"))
    if ws is None or project is None:
        return None
    return lane_of(mailbox_key(ws, project), view.lanes)


async def _pop_lane(view: View) -> int | None:
    body = view.json()
    return await _scope_lane(view, body.get("workspace"), body.get("project"))


async def _cancel_lane(view: View) -> int | None:
    body = view.json()
    if body.get("workspace") is None and body.get("project") is None and _text(body.get("message_id")):
        return lane_of_id(body["message_id"], view.lanes)
    return await _scope_lane(view, body.get("workspace"), body.get("project"))


def _key(lane: LaneOf) -> Rule:
    return Rule(KEY, lane=lane)


def _concat(field: str, *, count: str | None = "count") -> Any:
    """A FANOUT merge: the lists under ``field`` of every lane, one after the other."""
    def merge(view: View, bodies: list[Any]) -> Any:
        out = dict(bodies[0])
        out[field] = [row for b in bodies for row in b.get(field, [])]
        if count is not None:
            out[count] = len(out[field])
        return out
    return merge


# -- the table -------------------------------------------------------------------------------
_HERE = [
    ("GET", "/api/v1/health"), ("GET", "/health"),
    ("POST", "/api/v1/sessions"),  # sessions are on every lane: the write goes to each
    ("GET", "/api/v1/projects"),  # read from the sessions, on every lane
    ("POST", "/lane/v1/{name}"),
]
_HOME = [
    ("POST", "/api/v1/memories"), ("GET", "/api/v1/memories"), ("GET", "/api/v1/memories/{id}"),
    ("PUT", "/api/v1/memories/{id}"), ("DELETE", "/api/v1/memories/{id}"),
    ("POST", "/api/v1/memories/{id}/promote"), ("POST", "/api/v1/memories/bulk"),
    ("GET", "/api/v1/search"), ("POST", "/api/v1/search"), ("GET", "/api/v1/recall"),
    ("POST", "/api/v1/recall"), ("POST", "/api/v1/forget"), ("POST", "/api/v1/gc"),
    ("POST", "/api/v1/links"), ("GET", "/api/v1/links/{id}"),
    ("GET", "/api/v1/memories/{id}/lineage"), ("GET", "/api/v1/stats"),
    ("GET", "/api/v1/namespaces"), ("GET", "/api/v1/export"), ("POST", "/api/v1/import"),
    ("POST", "/api/v1/consolidate"), ("POST", "/api/v1/memories/{id}/grant"),
    ("POST", "/api/v1/memories/{id}/revoke"), ("GET", "/api/v1/memories/{id}/grants"),
]
_KEYED: list[tuple[str, str, LaneOf]] = [
    ("POST", "/api/v1/notify", _notify_lane),
    ("GET", "/api/v1/inbox", _by_agent("agent_id", in_body=False)),
    ("GET", "/api/v1/inbox/stream", _by_agent("agent_id", in_body=False)),  # relayed whole
    ("GET", "/api/v1/messages/stream", _by_scope(in_body=False)),
    ("POST", "/api/v1/inbox/read", _by_agent("agent_id", in_body=True)),
    ("POST", "/api/v1/messages", _send_lane),
    ("GET", "/api/v1/messages", _list_lane),
    ("POST", "/api/v1/messages/pop", _pop_lane),
    ("POST", "/api/v1/messages/cancel", _cancel_lane),
    ("POST", "/api/v1/messages/reply", _by_id("message_id")),
    ("POST", "/api/v1/messages/complete", _by_id("message_id")),
    ("POST", "/api/v1/messages/renew", _by_id("message_id")),
    ("GET", "/api/v1/handoff", _by_scope(in_body=False)),
    ("GET", "/handoff", _by_scope(in_body=False)),
    ("POST", "/api/v1/handoff", _by_scope(in_body=True)),
    ("POST", "/handoff", _by_scope(in_body=True)),
    ("GET", "/api/v1/approvals", _by_scope(in_body=False)),
    ("POST", "/api/v1/approvals/{id}/approve", _by_id("id", where="path")),
    ("POST", "/api/v1/approvals/{id}/reject", _by_id("id", where="path")),
]
_FANOUT: list[tuple[str, str, Any]] = [
    ("GET", "/api/v1/agents", _concat("agents")),
]

for _m, _p in _HERE:
    register(_m, _p, HERE_RULE)
for _m, _p in _HOME:
    register(_m, _p, HOME_RULE)
for _m, _p, _lane in _KEYED:
    register(_m, _p, _key(_lane))
for _m, _p, _merge in _FANOUT:
    register(_m, _p, Rule(FANOUT, merge=_merge))
