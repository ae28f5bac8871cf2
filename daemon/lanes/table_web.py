"""The lane rules of the web inbox (``/web``) and of the webhook subscriptions.

Imported by :mod:`daemon.lanes.table` (the rules of every other route).

Web inbox: a browser session is in a file every lane of the node reads
(:class:`daemon.api.websession.SharedWebSessions`), so a page, the login,
the logout and ``/web/api/me`` are served where they arrive; a call that
reads or changes mail goes to the lane that keeps it:

* a project's mailbox (received history, held, approvals, harnesses): the
  project's lane;
* a message by id (edit, save, discard, approve, reject, and a send that
  answers one): the message's lane (:meth:`daemon.lanes.rules.View.id_lane`); a send
  there hands the new message to its recipient's lane itself
  (:meth:`daemon.node.Node.mailbox`);
* the sent history and the project list: every lane, merged (each lane
  answers for the mailboxes it keeps, whose purge marks are there).

Webhook subscriptions are served where they arrive: the service installs,
lists and removes them on every lane itself
(:mod:`daemon.webhooks.lanes`); upstream's namespace subscriptions (no
``url``) are replicated records of the home lane.
"""

from __future__ import annotations

from typing import Any

from common.lanes import HOME_LANE, lane_of
from common.ops import mailbox_key
from daemon.lanes.rules import ALL_LANES, FANOUT, HERE_RULE, KEY, LaneOf, Rule, View, register


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _project_lane(ws: Any, project: Any, lanes: int) -> int | None:
    ws, project = _text(ws), _text(project)
    if ws is None or project is None:
        return None  # the route refuses it (400)
    return lane_of(mailbox_key(ws, project), lanes)


async def _query_project(view: View) -> int | None:
    q = view.query
    return _project_lane(q.get("workspace"), q.get("project"), view.lanes)


async def _history(view: View) -> int | None:
    if view.query.get("box") == "sent":
        return ALL_LANES  # a project's outbox spans every project's mailbox
    return await _query_project(view)


async def _web_send(view: View) -> int | None:
    body = view.json()
    parent = _text(body.get("in_reply_to"))
    if parent is not None:
        return await view.id_lane(parent)  # the parent is read there
    return _project_lane(body.get("to_workspace"), body.get("to_project"), view.lanes)


async def _path_message(view: View) -> int | None:
    found = _text(view.match.get("id"))
    return None if found is None else await view.id_lane(found)


def _merge_sent(view: View, bodies: list[Any]) -> Any:
    """Each lane's sent messages newest first, from the first of the page
    (:func:`daemon.services.mail.history` with ``lane_share``): one page of
    their merge, newest first by (hlc, origin), then lane."""
    first = dict(bodies[0])
    page, size = int(first["page"]), int(first["page_size"])
    rows = [(m["order"][0], m["order"][1], lane, m)
            for lane, b in enumerate(bodies) for m in b.get("messages", [])]
    rows.sort(key=lambda r: (r[0], r[1], r[2]), reverse=True)
    cut = rows[page * size:page * size + size]
    first["messages"] = [{k: v for k, v in m.items() if k != "order"} for *_, m in cut]
    first["has_next"] = len(rows) > (page + 1) * size
    return first


def _merge_projects(view: View, bodies: list[Any]) -> Any:
    rows = sorted((r for b in bodies for r in b.get("projects", [])),
                  key=lambda r: (r["workspace"], r["project"]))
    return {"projects": rows, "count": len(rows)}


async def _subscribe(view: View) -> int | None:
    body = view.json()
    if "url" not in body and "namespace" in body and "agent_id" in body:
        return HOME_LANE  # a namespace subscription (nsub.put: the home lane)
    return None  # a webhook: installed on every lane by the one it reached


async def _namespace_query(view: View) -> int | None:
    return HOME_LANE if "agent_id" in view.query else None


_HERE = [
    ("GET", "/web"), ("GET", "/web/"), ("GET", "/web/login"), ("POST", "/web/login"),
    ("POST", "/web/logout"), ("GET", "/web/inbox"), ("GET", "/web/legacy"),
    ("GET", "/web/static/{name}"), ("GET", "/web/api/me"),
    ("GET", "/api/v1/subscriptions/dead-letters"),
    ("POST", "/api/v1/subscriptions/dead-letters/{ref}/replay"),
    ("DELETE", "/api/v1/subscriptions/{sub_id}"),
]
_KEYED: list[tuple[str, str, LaneOf, Any]] = [
    ("GET", "/web/api/history", _history, _merge_sent),
    ("GET", "/web/api/held", _query_project, None),
    ("GET", "/web/api/harnesses", _query_project, None),
    ("GET", "/web/api/approvals", _query_project, None),
    ("POST", "/web/api/messages", _web_send, None),
    ("POST", "/web/api/messages/{id}/edit", _path_message, None),
    ("POST", "/web/api/messages/{id}/save", _path_message, None),
    ("POST", "/web/api/messages/{id}/discard", _path_message, None),
    ("POST", "/web/api/messages/{id}/approve", _path_message, None),
    ("POST", "/web/api/messages/{id}/reject", _path_message, None),
    ("POST", "/api/v1/subscriptions", _subscribe, None),
    ("GET", "/api/v1/subscriptions", _namespace_query, None),
    ("DELETE", "/api/v1/subscriptions", _namespace_query, None),
]

for _m, _p in _HERE:
    register(_m, _p, HERE_RULE)
for _m, _p, _lane, _merge in _KEYED:
    register(_m, _p, Rule(KEY, lane=_lane, merge=_merge))
register("GET", "/web/api/projects", Rule(FANOUT, merge=_merge_projects))
