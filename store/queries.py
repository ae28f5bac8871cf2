"""Read-side SQL and the conversion of result rows into the shared dict shapes.

Every read of :class:`store.db.Store` is one statement built here plus one
converter, so the shape a reader gets is defined next to the columns it is
built from, and matches :mod:`store.in_memory` (via :mod:`store.records`).
Filters are applied in SQL before ``LIMIT``; the indexes they rely on are
named in ``store/migrations``.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from store.records import (
    COMPLETE_FIELDS,
    LEASE_COLS,
    MESSAGE_FIELDS,
    SESSION_FIELDS,
    message_view,
)

MEMORY_COLS = ("id, tier, namespace, title, content, tags, priority, confidence, source,"
               " access_count, created_at_ms, updated_at_ms, expires_at_ms, agent_id, metadata")
NOTE_COLS = ("id, from_agent, to_agent, namespace, title, payload, priority, tier,"
             " created_at_ms, expires_at_ms, in_reply_to, thread_id, read")
MESSAGE_COLS = (
    ", ".join(f"m.{c}" for c in MESSAGE_FIELDS)
    + ", m.send_epoch, m.hlc, m.origin, m.state AS m_state, t.state AS t_state, t.epoch AS t_epoch,"
    " t.hlc AS t_hlc, t.origin AS t_origin, t.seq AS t_seq,"
    " t.claimed_by_session, t.claimed_by_agent, t.claimed_by_key, t.claimed_by_agent_id,"
    " t.request_id, t.claimed_at_ms, t.cancelled_at_ms, t.token AS t_token,"
    " t.lease_ms AS t_lease_ms, t.lease_until_ms AS t_lease_until_ms,"
    " t.delivery AS t_delivery, t.renewed_at_ms AS t_renewed_at_ms,"
    " h.kind AS h_kind, h.epoch AS h_epoch, h.holder_session, h.holder_agent, h.holder_user,"
    " h.at_ms AS h_at_ms, v.subject AS v_subject, v.body AS v_body, v.epoch AS v_epoch,"
    " v.edited_at_ms, "
    + ", ".join(f"c.{col} AS c_{col}" for col in (*COMPLETE_FIELDS, "purged")) + ", "
    + ", ".join(f"{d}.{c} AS {d}_{c}" for d in ("da", "dr")
                for c in ("kind", "by_user", "by_agent", "reason", "at_ms", "epoch"))
)
MESSAGE_FROM = ("messages m LEFT JOIN msg_terminal t ON t.id = m.id"
                " LEFT JOIN msg_hold h ON h.id = m.id LEFT JOIN msg_revision v ON v.id = m.id"
                " LEFT JOIN msg_completion c ON c.id = m.id"
                " LEFT JOIN msg_decision da ON da.id = m.id AND da.kind = 'msg.approve'"
                " LEFT JOIN msg_decision dr ON dr.id = m.id AND dr.kind = 'msg.reject'")
SESSION_COLS = ", ".join(SESSION_FIELDS)
AGENT_COLS = "agent_id, agent_type, capabilities, registered_at_ms, last_seen_at_ms"
OP_COLS = "origin, seq, hlc, kind, key, epoch, body"
FIFO = "m.hlc, m.origin, m.seq"
NOT_EXPIRED = "(expires_at_ms IS NULL OR expires_at_ms > :now)"


def memory_filters(where: list[str], params: dict[str, Any], *,
                   namespace: str | None = None, tier: str | None = None,
                   tags: list[str] | None = None, min_priority: int | None = None,
                   agent_id: str | None = None, since_ms: int | None = None,
                   until_ms: int | None = None) -> None:
    """Narrow a read of ``memories m`` by each filter given: its clause is added
    to ``where`` and its value to ``params``. Every tag must be present."""
    for name, value, clause in (("namespace", namespace, "m.namespace = :namespace"),
                                ("tier", tier, "m.tier = :tier"),
                                ("min_priority", min_priority, "m.priority >= :min_priority"),
                                ("agent_id", agent_id, "m.agent_id = :agent_id"),
                                ("since", since_ms, "m.updated_at_ms >= :since"),
                                ("until", until_ms, "m.updated_at_ms <= :until")):
        if value is not None:
            where.append(clause)
            params[name] = value
    for i, tag in enumerate(dict.fromkeys(tags or ())):
        where.append(f"EXISTS (SELECT 1 FROM json_each(m.tags) WHERE value = :tag{i})")
        params[f"tag{i}"] = tag


def inbox_sql(*, unread_only: bool, min_priority: bool, since: bool, tier: bool,
              thread: bool = False) -> str:
    """One inbox page: ``:agent``'s live notifications, highest priority then
    newest first, every filter before ``LIMIT :limit``.

    Both shapes walk the one index ``notes_inbox_by_read`` (migration 0011)
    in order, with no sort: unread is the ``read = 0`` range; all is the
    ``read = 0`` and ``read = 1`` ranges merged (``read`` is only ever 0 or
    1), which SQLite runs as a MERGE (UNION ALL) that stops at the limit."""
    where = ["to_agent = :agent", NOT_EXPIRED]
    if min_priority:
        where.append("priority >= :min_priority")
    if since:
        where.append("created_at_ms > :since")  # "after": the instant itself is left out
    if tier:
        where.append("tier = :tier")
    if thread:
        where.append("thread_id = :thread")
    cond = " AND ".join(where)
    order = " ORDER BY priority DESC, created_at_ms DESC, id DESC LIMIT :limit"
    if unread_only:
        return f"SELECT {NOTE_COLS} FROM notes WHERE {cond} AND read = 0{order}"
    return (f"SELECT {NOTE_COLS} FROM notes WHERE {cond} AND read = 0 UNION ALL"
            f" SELECT {NOTE_COLS} FROM notes WHERE {cond} AND read = 1{order}")


# Harness rows as reads see them: a project's rows last active before its
# latest purge are hidden, and first activity reads no earlier than it
# (common/ops.py msg.purge; the same rule as store/in_memory.py).
LIVE_HARNESSES = (
    "SELECT h.workspace AS workspace, h.project AS project, h.harness AS harness,"
    " max(h.first_at_ms, coalesce(p.max_at_ms, h.first_at_ms)) AS first_at_ms,"
    " h.last_at_ms AS last_at_ms FROM project_harnesses h LEFT JOIN msg_purge p"
    " ON p.workspace = h.workspace AND p.project = h.project"
    " WHERE p.max_at_ms IS NULL OR h.last_at_ms >= p.max_at_ms")
# A session row ``s`` hidden by its project's purge.
SESSION_HIDDEN = ("EXISTS (SELECT 1 FROM msg_purge p WHERE p.workspace = s.workspace"
                  " AND p.project = s.project AND s.last_at_ms < p.max_at_ms)")
PURGE_MARK_COLS = ("id", "workspace", "project", "scope", "by_user", "reason", "at_ms", "hlc",
                   "origin", "seq", "epoch")

STAT_TABLES = ("oplog", "memories", "mem_tombstones", "notes", "note_reads", "agents", "pop_empty",
               "sessions", "project_harnesses", "messages", "msg_terminal", "msg_hold",
               "msg_revision", "msg_completion", "msg_decision", "promises")


def memory(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["tags"] = json.loads(out["tags"])
    out["metadata"] = json.loads(out["metadata"])
    return out


def note(row: sqlite3.Row, *, with_read: bool = True) -> dict[str, Any]:
    out = {
        "id": row["id"], "from": row["from_agent"], "to": row["to_agent"],
        "namespace": row["namespace"], "title": row["title"], "payload": row["payload"],
        "priority": row["priority"], "tier": row["tier"],
        "created_at_ms": row["created_at_ms"], "expires_at_ms": row["expires_at_ms"],
        "in_reply_to": row["in_reply_to"], "thread_id": row["thread_id"],
    }
    if with_read:
        out["read"] = bool(row["read"])
    return out


def agent(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    caps = out["capabilities"]
    out["capabilities"] = None if caps is None else json.loads(caps)
    return out


def message(row: sqlite3.Row) -> dict[str, Any]:
    body = {name: row[name] for name in MESSAGE_FIELDS}
    terminal = None
    # The state column says whether the terminal op stands (one ranked below
    # the message's hold is void: store.apply._STATE_OF).
    if row["t_state"] is not None and row["m_state"] == row["t_state"]:
        terminal = {
            "state": row["t_state"], "epoch": row["t_epoch"],
            "claimed_by_session": row["claimed_by_session"],
            "claimed_by_agent": row["claimed_by_agent"], "claimed_by_key": row["claimed_by_key"],
            "claimed_by_agent_id": row["claimed_by_agent_id"], "request_id": row["request_id"],
            "claimed_at_ms": row["claimed_at_ms"], "cancelled_at_ms": row["cancelled_at_ms"],
            **{c: row[f"t_{c}"] for c in LEASE_COLS},
            "terminal_rank": [row["t_epoch"], row["t_hlc"], row["t_origin"], row["t_seq"]],
        }
    completion = (None if row["c_id"] is None
                  else {col: row[f"c_{col}"] for col in (*COMPLETE_FIELDS, "purged")})
    decisions = {row[f"{d}_kind"]: {c: row[f"{d}_{c}"] for c in (
        "kind", "by_user", "by_agent", "reason", "at_ms", "epoch")}
        for d in ("da", "dr") if row[f"{d}_kind"] is not None}
    return message_view(body, (row["hlc"], row["origin"]), row["send_epoch"], terminal,
                        hold_of(row), revision_of(row), completion=completion,
                        decisions=decisions, deliveries=row["t_delivery"])


def hold_of(row: sqlite3.Row) -> dict[str, Any] | None:
    """The :func:`store.records.hold_row` of a message row joined with ``msg_hold h``."""
    if row["h_kind"] is None:
        return None
    return {"kind": row["h_kind"], "epoch": row["h_epoch"],
            "holder_session": row["holder_session"], "holder_agent": row["holder_agent"],
            "holder_user": row["holder_user"], "at_ms": row["h_at_ms"]}


def revision_of(row: sqlite3.Row) -> dict[str, Any] | None:
    """The :func:`store.records.revision_row` of a row joined with ``msg_revision v``."""
    if row["edited_at_ms"] is None:
        return None
    return {"subject": row["v_subject"], "body": row["v_body"], "epoch": row["v_epoch"],
            "edited_at_ms": row["edited_at_ms"]}


def projects(rows: list[sqlite3.Row]) -> list[dict[str, Any]]:
    """Group ``project_harnesses`` rows (ordered by workspace, project, harness)."""
    grouped: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        p = grouped.setdefault((r["workspace"], r["project"]), {
            "workspace": r["workspace"], "project": r["project"], "harnesses": [],
            "first_at_ms": r["first_at_ms"], "last_active_at_ms": r["last_at_ms"]})
        p["harnesses"].append(r["harness"])
        p["first_at_ms"] = min(p["first_at_ms"], r["first_at_ms"])
        p["last_active_at_ms"] = max(p["last_active_at_ms"], r["last_at_ms"])
    return list(grouped.values())
