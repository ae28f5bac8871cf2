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

from common.lanes import lane_of, lane_of_id, memory_placement
from common.ops import agent_key, inbox_key, mailbox_key
from daemon.lanes.rules import (
    EVERYWHERE,
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
from daemon.schemas.memories import NAMESPACE_DEFAULT
from daemon.services.inbox_view import inbox_agent
from daemon.services.mail import scope_for


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _agent(view: View, claimed: Any) -> str | None:
    """The acting agent as :func:`daemon.http.auth.acting_agent` finds it."""
    bound = view.principal.agent if view.principal is not None else None
    return bound or _text(claimed) or _text(view.headers.get("X-Agent-Id"))


def _by_agent(field: str, *, in_body: bool) -> LaneOf:
    async def lane(view: View) -> int | None:
        src = view.json() if in_body else view.query
        agent = _agent(view, src.get(field) or (None if in_body else src.get("as_agent")))
        return None if agent is None else lane_of(inbox_key(agent), view.lanes)
    return lane


def _by_id(field: str, *, where: str = "body", moved: bool = True) -> LaneOf:
    """The lane of the record an id names; ``moved``: a message's or a
    notification's, which a change of the lane count may have moved off the
    lane its id names (a memory is on that lane under any count)."""
    async def lane(view: View) -> int | None:
        src: Any = (view.json() if where == "body" else view.query if where == "query"
                    else view.match)
        found = _text(src.get(field))
        if found is None:
            return None
        return await view.id_lane(found) if moved else lane_of_id(found, view.lanes)
    return lane


async def _scope_lane(view: View, workspace: Any, project: Any) -> int | None:
    """The lane of the project a mail call acts for (:mod:`daemon.services.scope`:
    named, else the caller's session, else inferred); sessions are on every lane."""
    node = view.node
    session = view.headers.get(SESSION_HEADER) or None
    try:  # as the route: a session the caller may not use (keys mode) decides nothing
        scope = await scope_for(node, _text(workspace), _text(project), session, view.principal)
    except Exception:  # the route refuses the same request with its own 4xx
        return None
    return lane_of(mailbox_key(scope.workspace, scope.project), view.lanes)


def _by_scope(*, in_body: bool) -> LaneOf:
    async def lane(view: View) -> int | None:
        src = view.json() if in_body else view.query
        return await _scope_lane(view, src.get("workspace"), src.get("project"))
    return lane


async def _notify_lane(view: View) -> int | None:
    body = view.json()
    for parent in ("reply_to", "in_reply_to"):
        if _text(body.get(parent)):
            return await view.id_lane(body[parent])  # where the notification answered is
    target = body.get("target_agent_id", body.get("to"))
    if not isinstance(target, str) or target.endswith("*") or body.get("target_prefix"):
        return None  # a broadcast: served here, written to each recipient's lane
    return lane_of(inbox_key(target), view.lanes)


async def _send_lane(view: View) -> int | None:
    body = view.json()
    if _text(body.get("in_reply_to")):  # the parent is read on its lane; the send is handed on
        return await view.id_lane(body["in_reply_to"])
    ws, project = _text(body.get("to_workspace")), _text(body.get("to_project"))
    if ws is None or project is None:
        return None
    return lane_of(mailbox_key(ws, project), view.lanes)


async def _pop_lane(view: View) -> int | None:
    body = view.json()
    return await _scope_lane(view, body.get("workspace"), body.get("project"))


async def _cancel_lane(view: View) -> int | None:
    body = view.json()
    if _text(body.get("message_id")):  # in the recipient's mailbox, whatever the sender's scope
        return await view.id_lane(body["message_id"])
    return await _scope_lane(view, body.get("workspace"), body.get("project"))


async def _list_lane(view: View) -> int | None:
    """A project's inbox is on its lane; the outbox spans every mailbox."""
    q = view.query
    if q.get("box", "inbox") != "inbox":
        return EVERYWHERE
    return await _scope_lane(view, q.get("workspace"), q.get("project"))


async def _cancel_all_lane(view: View) -> int | None:
    body = view.json()
    if body.get("all") is True:
        return EVERYWHERE  # the sender's messages, in every mailbox
    return await _cancel_lane(view)


def _by_namespace(*, in_body: bool) -> LaneOf:
    """Memories are on every lane (the service fans the read out from the
    lane it reached); an agent's inbox read as memories (``_inbox/<agent>``)
    is on the agent's."""
    async def lane(view: View) -> int | None:
        src = view.json() if in_body else view.query
        agent = inbox_agent(_text(src.get("namespace")))
        return None if agent is None else lane_of(inbox_key(agent), view.lanes)
    return lane


async def _create_memory_lane(view: View) -> int | None:
    """A new memory is made on the lane of its namespace, which its id will name."""
    namespace = _text(view.json().get("namespace")) or NAMESPACE_DEFAULT
    return lane_of(memory_placement(namespace), view.lanes)


async def _register_lane(view: View) -> int | None:
    agent = _text(view.json().get("agent_id"))
    return None if agent is None else lane_of(agent_key(agent), view.lanes)


def _concat(field: str, *, count: str | None = "count") -> Any:
    """A FANOUT merge: the lists under ``field`` of every lane, one after the other."""
    def merge(view: View, bodies: list[Any]) -> Any:
        out = dict(bodies[0])
        out[field] = [row for b in bodies for row in b.get(field, [])]
        if count is not None:
            out[count] = len(out[field])
        return out
    return merge


def _messages(view: View, bodies: list[Any]) -> Any:
    """An outbox from every lane: pending oldest first, every state newest first."""
    out = dict(bodies[0])
    newest_first = _text(str(view.query.get("all", ""))) in ("1", "true", "True", "yes")
    rows = sorted((m for b in bodies for m in b.get("messages", [])),
                  key=lambda m: (m.get("created_at") or "", m.get("id") or ""),
                  reverse=newest_first)
    limit = view.query.get("limit")
    cut = int(limit) if isinstance(limit, str) and limit.isdigit() else len(rows)
    out["messages"] = rows[:cut]
    out["count"] = len(out["messages"])
    if out["messages"]:
        out.pop("project_exists", None)
    else:
        out["project_exists"] = any(b.get("project_exists") for b in bodies)
    return out


def _cancelled(view: View, bodies: list[Any]) -> Any:
    out = dict(bodies[0])
    for field in ("cancelled", "ids"):
        if isinstance(out.get(field), list):
            out[field] = [x for b in bodies for x in b.get(field, [])]
    if isinstance(out.get("count"), int):
        out["count"] = sum(int(b.get("count") or 0) for b in bodies)
    return out


def _per_lane(view: View, bodies: list[Any]) -> Any:
    """Lane 0's answer, with every lane's under ``lanes``."""
    out = dict(bodies[0])
    out["lanes"] = [{"lane": i, **b} for i, b in enumerate(bodies)]
    return out


def _health(view: View, bodies: list[Any]) -> Any:
    """Lane 0's health (``lanes``: their count), each lane's under ``per_lane``."""
    out = dict(bodies[0])
    out["per_lane"] = [{"lane": i, "state": b.get("state"), "recovering": b.get("recovering")}
                       for i, b in enumerate(bodies)]
    out["recovering"] = any(b.get("recovering") for b in bodies)
    out["state"] = "recovering" if out["recovering"] else out.get("state")
    return out


def _metrics(view: View, texts: list[str]) -> str:
    """Every lane's metrics, each sample labelled with its lane."""
    seen: set[str] = set()
    lines: list[str] = []
    for lane, text in enumerate(texts):
        for line in text.splitlines():
            if line.startswith("#"):
                if line not in seen:
                    seen.add(line)
                    lines.append(line)
                continue
            name, sep, rest = line.partition(" ")
            if not sep:
                continue
            if "{" in name:
                name = name.replace("{", f'{{lane="{lane}",', 1)
            else:
                name = f'{name}{{lane="{lane}"}}'
            lines.append(f"{name} {rest}")
    return "\n".join(lines) + "\n"


# -- the table -------------------------------------------------------------------------------
_HERE = [
    ("POST", "/api/v1/sessions"),  # sessions are on every lane: the write goes to each
    ("GET", "/api/v1/projects"),  # read from the sessions, on every lane
    ("POST", "/lane/v1/{name}"),
    ("*", "/mcp"),  # each tool call is placed by its own route's rule (daemon/mcp/direct.py)
    # peer calls arrive at the lane they are for, by its port
    ("POST", "/peer/v1/hello"), ("POST", "/peer/v1/msgs"), ("GET", "/peer/v1/link"),
    ("POST", "/peer/v1/pull"), ("POST", "/peer/v1/mailbox"),
    # users, keys and grants are on every lane: a write goes to each, a read is local
    ("POST", "/api/v1/admin/users"), ("GET", "/api/v1/admin/users"),
    ("DELETE", "/api/v1/admin/users/{name}"), ("POST", "/api/v1/admin/users/{name}/password"),
    ("POST", "/api/v1/admin/keys"), ("GET", "/api/v1/admin/keys"),
    ("DELETE", "/api/v1/admin/keys/{key_id}"), ("POST", "/api/v1/admin/grants"),
    ("GET", "/api/v1/admin/grants"), ("DELETE", "/api/v1/admin/grants"), ("GET", "/api/v1/whoami"),
    ("POST", "/api/v1/admin/backup"),  # a lane's own database (seeding asks a lane's port)
]
_HOME = [("POST", "/api/v1/cluster")]
# Reads and writes that span memories: served where they arrive, each lane
# asked for its own (daemon/services/memory_lanes.py).
_MEMORIES_HERE = [
    ("POST", "/api/v1/memories/bulk"), ("GET", "/api/v1/recall"), ("POST", "/api/v1/recall"),
    ("POST", "/api/v1/forget"), ("POST", "/api/v1/gc"), ("POST", "/api/v1/links"),
    ("GET", "/api/v1/stats"), ("GET", "/api/v1/namespaces"), ("GET", "/api/v1/export"),
    ("POST", "/api/v1/import"), ("POST", "/api/v1/consolidate"),
]
# One memory: the lane its id names.
_MEMORY_BY_ID = [
    ("GET", "/api/v1/memories/{id}"), ("PUT", "/api/v1/memories/{id}"),
    ("DELETE", "/api/v1/memories/{id}"), ("POST", "/api/v1/memories/{id}/promote"),
    ("POST", "/api/v1/memories/{id}/grant"), ("POST", "/api/v1/memories/{id}/revoke"),
    ("GET", "/api/v1/memories/{id}/grants"), ("GET", "/api/v1/memories/{id}/lineage"),
    ("GET", "/api/v1/links/{id}"),
]
_KEYED: list[tuple[str, str, LaneOf]] = [
    ("POST", "/api/v1/memories", _create_memory_lane),
    *((m, p, _by_id("id", where="path", moved=False)) for m, p in _MEMORY_BY_ID),
    ("GET", "/api/v1/memories", _by_namespace(in_body=False)),
    ("GET", "/api/v1/search", _by_namespace(in_body=False)),
    ("POST", "/api/v1/search", _by_namespace(in_body=True)),
    ("POST", "/api/v1/agents", _register_lane),
    ("POST", "/api/v1/notify", _notify_lane),
    ("GET", "/api/v1/inbox/stream", _by_agent("agent_id", in_body=False)),
    ("GET", "/api/v1/messages/stream", _by_scope(in_body=False)),
    ("GET", "/api/v1/messages", _list_lane),
    ("GET", "/api/v1/briefing", _by_scope(in_body=False)),
    ("GET", "/api/v1/inbox", _by_agent("agent_id", in_body=False)),
    ("POST", "/api/v1/inbox/read", _by_agent("agent_id", in_body=True)),
    ("POST", "/api/v1/messages", _send_lane),
    ("POST", "/api/v1/messages/pop", _pop_lane),
    ("POST", "/api/v1/messages/cancel", _cancel_all_lane),
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
    ("GET", "/api/v1/health", _health),
    ("GET", "/api/v1/cluster/status", _per_lane),
]
_TEXT_FANOUT = [("GET", "/api/v1/metrics"), ("GET", "/metrics")]
# A KEY rule's EVERYWHERE answer is merged by these.
_MERGES: dict[tuple[str, str], Any] = {
    ("GET", "/api/v1/messages"): _messages,
    ("POST", "/api/v1/messages/cancel"): _cancelled,
}

for _m, _p in (*_HERE, *_MEMORIES_HERE):
    register(_m, _p, HERE_RULE)
for _m, _p in _HOME:
    register(_m, _p, HOME_RULE)
for _m, _p, _lane in _KEYED:
    register(_m, _p, Rule(KEY, lane=_lane, merge=_MERGES.get((_m, _p))))
for _m, _p, _merge in _FANOUT:
    register(_m, _p, Rule(FANOUT, merge=_merge))
for _m, _p in _TEXT_FANOUT:
    register(_m, _p, Rule(FANOUT, merge=_metrics, text=True))


# -- sync: a signature is checked by one process (its boot id): the home lane's,
# which keeps the memories these calls read and write
register("POST", "/api/v1/sync/push", HOME_RULE)
register("GET", "/api/v1/sync/since", HOME_RULE)


# -- purges and the cleanup of empty projects (daemon/services/purge.py) ----------------------
def _cleanups(view: View, bodies: list[Any]) -> Any:
    """Each lane cleans the projects whose mailbox it holds: their lists, one after the other."""
    out = dict(bodies[0])
    for field in ("removed", "kept"):
        out[field] = sorted(row for b in bodies for row in b.get(field, []))
    return out


for _m, _p in [("POST", "/api/v1/projects/{workspace}/{project}/purge"),
               ("DELETE", "/api/v1/projects/{workspace}/{project}"),
               ("POST", "/api/v1/workspaces/{workspace}/purge"),
               ("DELETE", "/api/v1/workspaces/{workspace}")]:
    register(_m, _p, HOME_RULE)  # the memories and the audit; mailboxes asked of their lanes
register("POST", "/api/v1/projects/cleanup", Rule(FANOUT, merge=_cleanups))

# -- the web inbox and webhook subscriptions: their own module ------------------------------
from daemon.lanes import table_web  # noqa: E402, F401
