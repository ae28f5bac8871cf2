"""Merging one op into the SQLite state tables.

The same rules as :mod:`store.in_memory`, written as conditional upserts so
SQLite itself keeps the winner: each statement compares the incoming op's
rank with the rank stored beside the row (``hlc, origin, seq`` columns) and
only overwrites when the merge rule says so. Because every statement is a
correct merge on its own, ops can be applied in any order and any grouping.

Runs inside the writer's transaction (on its thread, or on the event loop
for a small batch); nothing here commits. The op log and the seen-set are the writer's business
(:mod:`store.writer`); this module touches only the state tables.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any, Final

from common import ops as K
from common.lifecycle import AWAITING, DECISION_KINDS, EDITING, PENDING
from common.ops import Op, mailbox_key
from store import deferred
from store.records import (
    COMPLETION_COLS,
    DECISION_COLS,
    MEMORY_FIELDS,
    MESSAGE_FIELDS,
    TERMINAL_COLS,
    apikey_row,
    body_rank,
    completion_below,
    completion_row,
    decision_row,
    empty_row,
    grant_row,
    hold_row,
    is_expired,
    link_row,
    memory_row,
    message_row,
    note_row,
    nsub_row,
    pgrant_row,
    physical_ms,
    purged_completion,
    revision_row,
    terminal_row,
    user_row,
)


def to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


_MEM_COLS = (*MEMORY_FIELDS, "hlc", "origin", "seq")
# A tombstoned id inserts nothing: the SELECT yields no row.
_MEM_UPSERT = (
    f"INSERT INTO memories ({', '.join(_MEM_COLS)}) "
    f"SELECT {', '.join(':' + c for c in _MEM_COLS)}"
    " WHERE NOT EXISTS (SELECT 1 FROM mem_tombstones WHERE id = :id) "
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _MEM_COLS[1:])
    + " WHERE (excluded.hlc, excluded.origin, excluded.seq)"
    " > (memories.hlc, memories.origin, memories.seq)"
)

_NOTE_COLS = ("id", "from_agent", "to_agent", "namespace", "title", "payload", "priority", "tier",
              "created_at_ms", "expires_at_ms", "in_reply_to", "thread_id", "hlc", "origin", "seq")
# Positional (``?1`` is the id, ``?3`` the recipient) so that a job's notes
# go in one executemany; see :func:`apply_ops`.
_NOTE_UPSERT = (
    f"INSERT INTO notes ({', '.join(_NOTE_COLS)}, read) "
    f"VALUES ({', '.join(f'?{i}' for i in range(1, len(_NOTE_COLS) + 1))}, "
    " EXISTS (SELECT 1 FROM note_reads WHERE agent_id = ?3 AND note_id = ?1)) "
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in (*_NOTE_COLS[1:], "read"))
    + " WHERE (excluded.hlc, excluded.origin, excluded.seq) < (notes.hlc, notes.origin, notes.seq)"
)

_AGENT_NEWER = ("(agents.reg_hlc IS NULL OR (excluded.reg_hlc, excluded.reg_origin, excluded.reg_seq)"
                " > (agents.reg_hlc, agents.reg_origin, agents.reg_seq))")
_AGENT_REG = (
    "INSERT INTO agents (agent_id, agent_type, capabilities, registered_at_ms, last_seen_at_ms,"
    " reg_hlc, reg_origin, reg_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (agent_id) DO UPDATE SET "
    + ", ".join(f"{c} = CASE WHEN {_AGENT_NEWER} THEN excluded.{c} ELSE agents.{c} END"
                for c in ("agent_type", "capabilities", "reg_hlc", "reg_origin", "reg_seq"))
    + ", registered_at_ms = min(coalesce(agents.registered_at_ms, excluded.registered_at_ms),"
    " excluded.registered_at_ms)"
    ", last_seen_at_ms = max(coalesce(agents.last_seen_at_ms, excluded.last_seen_at_ms),"
    " excluded.last_seen_at_ms)"
)
_AGENT_SEEN = (
    "INSERT INTO agents (agent_id, last_seen_at_ms) VALUES (?, ?) "
    "ON CONFLICT (agent_id) DO UPDATE SET last_seen_at_ms ="
    " max(coalesce(agents.last_seen_at_ms, excluded.last_seen_at_ms), excluded.last_seen_at_ms)"
)

_SESSION_OLDER = ("(excluded.hlc, excluded.origin, excluded.seq)"
                  " < (sessions.hlc, sessions.origin, sessions.seq)")
_SESSION_UPSERT = (
    "INSERT INTO sessions (session_id, workspace, project, harness, owner_user, started_at_ms,"
    " last_at_ms, hlc, origin, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (session_id) DO UPDATE SET "
    + ", ".join(f"{c} = CASE WHEN {_SESSION_OLDER} THEN excluded.{c} ELSE sessions.{c} END"
                for c in ("workspace", "project", "harness", "owner_user", "hlc", "origin", "seq"))
    + ", started_at_ms = min(sessions.started_at_ms, excluded.started_at_ms)"
    ", last_at_ms = max(sessions.last_at_ms, excluded.last_at_ms)"
)
_HARNESS_UPSERT = (
    "INSERT INTO project_harnesses (workspace, project, harness, first_at_ms, last_at_ms)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (workspace, project, harness) DO UPDATE SET"
    " first_at_ms = min(project_harnesses.first_at_ms, excluded.first_at_ms),"
    " last_at_ms = max(project_harnesses.last_at_ms, excluded.last_at_ms)"
)

# A message's state column, from its winning terminal and hold ops
# (common.lifecycle.merged_state as SQL: a terminal op ranked below the
# winning hold/release is void; with neither, a send that asked for approval
# awaits it; ``{id}`` is the id parameter, ``{gate}`` its approval_required).
_STATE_OF = (
    "coalesce((SELECT t.state FROM msg_terminal t LEFT JOIN msg_hold h ON h.id = t.id"
    " WHERE t.id = {id} AND (h.id IS NULL OR (t.epoch, t.hlc, t.origin, t.seq)"
    " > (h.epoch, h.hlc, h.origin, h.seq))),"
    f" (SELECT CASE kind WHEN '{K.MSG_HOLD}' THEN '{EDITING}' ELSE '{PENDING}' END"
    " FROM msg_hold WHERE id = {id}),"
    f" CASE WHEN {{gate}} THEN '{AWAITING}' ELSE '{PENDING}' END)"
)

_MSG_COLS = (*MESSAGE_FIELDS, "send_epoch", "hlc", "origin", "seq")
_MSG_UPSERT = (
    f"INSERT INTO messages ({', '.join(_MSG_COLS)}, state) "
    f"VALUES ({', '.join(':' + c for c in _MSG_COLS)}, "
    f"{_STATE_OF.format(id=':id', gate=':approval_required')}) "
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _MSG_COLS[1:])
    # A lower copy may replace a known send with another approval gate: the
    # state follows the winning send's.
    + f", state = {_STATE_OF.format(id='excluded.id', gate='excluded.approval_required')}"
    # The winning copy of a send: the latest owner term's, then the lowest
    # (hlc, origin, seq) (federation.mailbox._copy_key).
    + " WHERE (-excluded.send_epoch, excluded.hlc, excluded.origin, excluded.seq)"
    " < (-messages.send_epoch, messages.hlc, messages.origin, messages.seq)"
)

_TERM_COLS = ("id", "hlc", "origin", "seq", *TERMINAL_COLS)
_TERM_UPSERT = (
    f"INSERT INTO msg_terminal ({', '.join(_TERM_COLS)}) "
    f"VALUES ({', '.join(':' + c for c in _TERM_COLS)}) "
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _TERM_COLS[1:])
    + " WHERE (excluded.epoch, excluded.hlc, excluded.origin, excluded.seq)"
    " > (msg_terminal.epoch, msg_terminal.hlc, msg_terminal.origin, msg_terminal.seq)"
)

# The latest claim's first completion wins (store.records.completion_wins).
_NEW_CLAIM = "(excluded.claim_epoch, excluded.claim_hlc, excluded.claim_origin, excluded.claim_seq)"
_CUR_CLAIM = ("(msg_completion.claim_epoch, msg_completion.claim_hlc,"
              " msg_completion.claim_origin, msg_completion.claim_seq)")
_COMPLETION_UPSERT = (
    f"INSERT INTO msg_completion ({', '.join(COMPLETION_COLS)}) "
    f"VALUES ({', '.join(':' + c for c in COMPLETION_COLS)}) "
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COMPLETION_COLS[1:])
    + f" WHERE {_NEW_CLAIM} > {_CUR_CLAIM} OR ({_NEW_CLAIM} = {_CUR_CLAIM} AND"
    " (excluded.hlc, excluded.origin, excluded.seq)"
    " < (msg_completion.hlc, msg_completion.origin, msg_completion.seq))"
)

_EMPTY_COLS = ("mailbox", "request_id", "epoch", "hlc", "origin", "seq", "claimer_session",
               "claimer_agent", "at_ms")
_EMPTY_UPSERT = (
    f"INSERT INTO pop_empty ({', '.join(_EMPTY_COLS)}) "
    f"VALUES ({', '.join(':' + c for c in _EMPTY_COLS)}) "
    "ON CONFLICT (mailbox, request_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _EMPTY_COLS[2:])
    + " WHERE (excluded.epoch, excluded.hlc, excluded.origin, excluded.seq)"
    " > (pop_empty.epoch, pop_empty.hlc, pop_empty.origin, pop_empty.seq)"
)

_LINK_PUT = (
    "INSERT INTO memory_links (source_id, target_id, relation, created_at_ms) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (source_id, target_id, relation) DO UPDATE SET"
    " created_at_ms = min(memory_links.created_at_ms, excluded.created_at_ms)"
)
_GRANT_COLS = ("memory_id", "agent_id", "permission", "granted", "at_ms", "hlc", "origin", "seq")
_GRANT_UPSERT = (
    f"INSERT INTO memory_grants ({', '.join(_GRANT_COLS)}) "
    f"VALUES ({', '.join(':' + c for c in _GRANT_COLS)}) "
    "ON CONFLICT (memory_id, agent_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _GRANT_COLS[2:])
    + " WHERE (excluded.hlc, excluded.origin, excluded.seq)"
    " > (memory_grants.hlc, memory_grants.origin, memory_grants.seq)"
)


_NSUB_COLS = ("agent_id", "namespace", "active", "at_ms", "hlc", "origin", "seq")
_NSUB_UPSERT = (
    f"INSERT INTO namespace_subscriptions ({', '.join(_NSUB_COLS)}) "
    f"VALUES ({', '.join(':' + c for c in _NSUB_COLS)}) "
    "ON CONFLICT (agent_id, namespace) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _NSUB_COLS[2:])
    + " WHERE (excluded.hlc, excluded.origin, excluded.seq)"
    " > (namespace_subscriptions.hlc, namespace_subscriptions.origin, namespace_subscriptions.seq)"
)


_STAMP_GT = "(excluded.hlc, excluded.origin, excluded.seq) > ({t}.hlc, {t}.origin, {t}.seq)"
_STAMP_LT = "(excluded.hlc, excluded.origin, excluded.seq) < ({t}.hlc, {t}.origin, {t}.seq)"

# Users: root and password hash last-writer-wins; removed is sticky (max);
# created_at is the minimum.
_USER_COLS = ("name", "root", "password_hash", "removed", "created_at_ms", "hlc", "origin", "seq")
_USER_NEWER = _STAMP_GT.format(t="users")
_USER_UPSERT = (
    f"INSERT INTO users ({', '.join(_USER_COLS)}) "
    f"VALUES ({', '.join(':' + c for c in _USER_COLS)}) "
    "ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{c} = CASE WHEN {_USER_NEWER} THEN excluded.{c} ELSE users.{c} END"
                for c in ("root", "password_hash", "hlc", "origin", "seq"))
    + ", removed = max(users.removed, excluded.removed)"
    ", created_at_ms = min(users.created_at_ms, excluded.created_at_ms)"
)

# API keys: identity fields from the lowest-ranked op (insert-once); revoked
# is sticky.
_KEY_COLS = ("id", "user", "agent", "label", "hash", "created_at_ms", "revoked", "hlc", "origin",
             "seq")
_KEY_OLDER = _STAMP_LT.format(t="api_keys")
_KEY_UPSERT = (
    f"INSERT INTO api_keys ({', '.join(_KEY_COLS)}) "
    f"VALUES ({', '.join(':' + c for c in _KEY_COLS)}) "
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = CASE WHEN {_KEY_OLDER} THEN excluded.{c} ELSE api_keys.{c} END"
                for c in ("user", "agent", "label", "hash", "created_at_ms", "hlc", "origin",
                          "seq"))
    + ", revoked = max(api_keys.revoked, excluded.revoked)"
)

_PGRANT_COLS = ("user", "workspace", "project", "access", "granted", "at_ms", "hlc", "origin",
                "seq")
_PGRANT_UPSERT = (
    f"INSERT INTO project_grants ({', '.join(_PGRANT_COLS)}) "
    f"VALUES ({', '.join(':' + c for c in _PGRANT_COLS)}) "
    "ON CONFLICT (user, workspace, project) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _PGRANT_COLS[3:])
    + " WHERE " + _STAMP_GT.format(t="project_grants")
)


# How one copy of a record every lane keeps merges into another: the upsert
# its op applies with, and the columns it takes, in order (a name list for
# the statements with named parameters). ``ai-memory lanes resize`` merges
# every old lane's copy with these (a lane may hold a write another missed).
ROW_MERGES: Final[dict[str, tuple[str, tuple[str, ...], bool]]] = {
    "sessions": (_SESSION_UPSERT, ("session_id", "workspace", "project", "harness",
                                   "owner_user", "started_at_ms", "last_at_ms", "hlc", "origin",
                                   "seq"), False),
    "project_harnesses": (_HARNESS_UPSERT, ("workspace", "project", "harness", "first_at_ms",
                                            "last_at_ms"), False),
    "users": (_USER_UPSERT, _USER_COLS, True),
    "api_keys": (_KEY_UPSERT, _KEY_COLS, True),
    "project_grants": (_PGRANT_UPSERT, _PGRANT_COLS, True),
}


def _stamp(op: Op) -> dict[str, Any]:
    return {"hlc": op.hlc, "origin": op.origin, "seq": op.seq}


def _body_stamp(op: Op) -> dict[str, Any]:
    """A record every lane keeps is ranked by the stamp minted with its body
    (:func:`store.records.body_rank`)."""
    hlc, origin, seq = body_rank(op)
    return {"hlc": hlc, "origin": origin, "seq": seq}


def _mem_put(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    row = memory_row(op)
    params = {**row, **_stamp(op), "tags": to_json(row["tags"]),
              "metadata": to_json(row["metadata"])}
    c.execute(_MEM_UPSERT, params)


def _mem_del(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    mem_id = str(op.body["id"])
    c.execute("INSERT OR IGNORE INTO mem_tombstones (id) VALUES (?)", (mem_id,))
    c.execute("DELETE FROM memories WHERE id = ?", (mem_id,))


def _note_values(op: Op, now_ms: int) -> tuple[Any, ...] | None:
    """The ``_NOTE_UPSERT`` parameters of a ``note.new`` op; None when it
    has expired (nothing to store)."""
    row = note_row(op)
    if is_expired(row["expires_at_ms"], now_ms):
        return None
    return (row["id"], row["from"], row["to"], row["namespace"], row["title"], row["payload"],
            row["priority"], row["tier"], row["created_at_ms"], row["expires_at_ms"],
            row["in_reply_to"], row["thread_id"], op.hlc, op.origin, op.seq)


def _note_new(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    values = _note_values(op, now_ms)
    if values is not None:
        c.execute(_NOTE_UPSERT, values)


def _note_read(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    reader = str(op.body["to"])
    pairs = [(reader, str(i)) for i in op.body.get("ids") or []]
    c.executemany("INSERT OR IGNORE INTO note_reads (agent_id, note_id) VALUES (?, ?)", pairs)
    c.executemany("UPDATE notes SET read = 1 WHERE to_agent = ? AND id = ? AND read = 0", pairs)


def _agent_reg(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    b = op.body
    registered = int(b.get("registered_at_ms", physical_ms(op.hlc)))
    caps = b.get("capabilities")
    c.execute(_AGENT_REG, (str(b["agent_id"]), b.get("agent_type"),
                           None if caps is None else to_json(caps), registered, registered,
                           op.hlc, op.origin, op.seq))


def _agent_seen(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    c.execute(_AGENT_SEEN, (str(op.body["agent_id"]), int(op.body["at_ms"])))


def _session_start(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    b = op.body
    at_ms = int(b["at_ms"])
    ws, proj, harness = str(b["workspace"]), str(b["project"]), str(b["harness"])
    c.execute(_SESSION_UPSERT, (str(b["session_id"]), ws, proj, harness, b.get("owner_user"),
                                at_ms, at_ms, *body_rank(op)))
    c.execute(_HARNESS_UPSERT, (ws, proj, harness, at_ms, at_ms))


def _msg_send(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    row = message_row(op)
    purged = c.execute("SELECT -epoch, hlc, origin, seq FROM msg_purged WHERE id = ?",
                       (row["id"],)).fetchone()
    if purged is not None:
        if tuple(purged) <= (-op.epoch, op.hlc, op.origin, op.seq):
            return
        c.execute("DELETE FROM msg_purged WHERE id = ?", (row["id"],))  # judged again below
    # Inserted or replaced, the row's state is computed by the statement itself.
    cur = c.execute(_MSG_UPSERT, {**row, **_stamp(op), "send_epoch": op.epoch})
    if _under_mark(c, row["id"]):
        _purge_marked(c, "m.id = ?", (row["id"],))
    elif not cur.rowcount:
        c.execute(_SET_STATE, (row["id"],))  # what _purge_marked's state update did


# Messages (``m``) decided below their mailbox's mark, in the owners' order
# of decisions (epoch, hlc, origin, seq).
_MARKED = ("FROM messages m JOIN msg_purge p ON p.workspace = m.to_workspace"
           " AND p.project = m.to_project"
           " WHERE (m.send_epoch, m.hlc, m.origin, m.seq) < (p.epoch, p.hlc, p.origin, p.seq)"
           " AND {where}")

# The holds, saved edits and approval decisions of messages ``{ids}`` decided
# before the mark of
# their mailbox (known from the message's row or its purged record; one whose
# send has not arrived is judged when it does).
_OLD_EDITS = ("DELETE FROM {table} WHERE id IN ({ids}) AND ({table}.epoch, {table}.hlc,"
              " {table}.origin, {table}.seq) < (SELECT p.epoch, p.hlc, p.origin, p.seq"
              " FROM msg_purge p WHERE (p.workspace, p.project) IN"
              " (SELECT to_workspace, to_project FROM messages WHERE id = {table}.id"
              " UNION ALL SELECT to_workspace, to_project FROM msg_purged WHERE id = {table}.id))")


# Is the mailbox of message ?1 (known from its row or its purged record) under
# a mark? Without one (no purge and no hiding bound there, the usual case) a
# purge can drop nothing of the message, so the statements below are skipped.
_MARK_OF_ID = ("SELECT 1 FROM msg_purge p WHERE (p.workspace, p.project) IN"
               " (SELECT to_workspace, to_project FROM messages WHERE id = ?1"
               " UNION ALL SELECT to_workspace, to_project FROM msg_purged WHERE id = ?1)")


def _under_mark(c: sqlite3.Connection, msg_id: str) -> bool:
    return c.execute(_MARK_OF_ID, (msg_id,)).fetchone() is not None


def _drop_old_edits(c: sqlite3.Connection, ids: str, params: tuple[Any, ...]) -> None:
    for table in ("msg_hold", "msg_revision", "msg_decision"):
        c.execute(_OLD_EDITS.format(table=table, ids=ids), params)


def _purge_marked(c: sqlite3.Connection, where: str, params: tuple[Any, ...]) -> None:
    """Drop the messages ``where`` selects that their mailbox's mark covers,
    in any state (awaiting approval and rejected too), and every hold, saved edit and approval decision of theirs
    decided before that mark (one decided after it stays: a later copy of
    the send may bring the message back); remember their ids and ranks."""
    _drop_old_edits(c, f"SELECT m.id FROM messages m WHERE {where}", params)
    c.execute(f"UPDATE messages SET state = "
              f"{_STATE_OF.format(id='messages.id', gate='messages.approval_required')}"
              f" WHERE id IN (SELECT m.id FROM messages m WHERE {where})", params)
    marked = _MARKED.format(where=where)
    c.execute("INSERT OR REPLACE INTO msg_purged"
              " (id, hlc, origin, seq, to_workspace, to_project, epoch)"
              f" SELECT m.id, m.hlc, m.origin, m.seq, m.to_workspace, m.to_project, m.send_epoch"
              f" {marked}", params)
    c.execute(f"DELETE FROM messages WHERE id IN (SELECT m.id {marked})", params)


_PURGE_COLS = ("workspace", "project", "id", "scope", "by_user", "reason", "at_ms", "max_at_ms",
               "epoch", "hlc", "origin", "seq")
# The mark: the greatest purge in the owners' order of decisions.
_MARK_GT = ("(excluded.epoch, excluded.hlc, excluded.origin, excluded.seq)"
            " > (msg_purge.epoch, msg_purge.hlc, msg_purge.origin, msg_purge.seq)")
_PURGE_UPSERT = (
    f"INSERT INTO msg_purge ({', '.join(_PURGE_COLS)}) "
    f"VALUES ({', '.join(':' + c for c in _PURGE_COLS)}) "
    "ON CONFLICT (workspace, project) DO UPDATE SET "
    + ", ".join(f"{c} = CASE WHEN {_MARK_GT} THEN excluded.{c} ELSE msg_purge.{c} END"
                for c in ("id", "scope", "by_user", "reason", "at_ms", "epoch", "hlc", "origin",
                          "seq"))
    + ", max_at_ms = max(msg_purge.max_at_ms, excluded.max_at_ms)"
)


def _msg_purge(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    b = op.body
    ws, proj = str(b["workspace"]), str(b["project"])
    at_ms = int(b.get("at_ms", physical_ms(op.hlc)))
    c.execute(_PURGE_UPSERT, {
        "workspace": ws, "project": proj, "id": str(b["id"]), "scope": b.get("scope"),
        "by_user": b.get("by_user"), "reason": b.get("reason"), "at_ms": at_ms,
        "max_at_ms": at_ms, "epoch": op.epoch, **_stamp(op)})
    _purge_marked(c, "m.to_workspace = ? AND m.to_project = ?", (ws, proj))
    mark = c.execute("SELECT epoch, hlc, origin, seq FROM msg_purge WHERE workspace = ?"
                     " AND project = ?", (ws, proj)).fetchone()
    c.execute("UPDATE msg_completion SET result = '', note = NULL, by_session = NULL,"
              " by_agent = NULL, by_key = NULL, by_agent_id = NULL, purged = 1"
              " WHERE mailbox = ? AND purged = 0 AND claim_hlc > 0"
              " AND (claim_epoch, claim_hlc, claim_origin, claim_seq) < (?, ?, ?, ?)",
              (mailbox_key(ws, proj), *mark))
    _drop_old_edits(c, "SELECT g.id FROM msg_purged g WHERE g.to_workspace = ?"
                       " AND g.to_project = ?", (ws, proj))


def _proj_hide(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    """Raise the project's hiding bound (``max_at_ms``); where no purge of it
    is known, under a mark that ranks below every real purge (it drops no
    message and gives way to the first real mark)."""
    b = op.body
    c.execute(_PURGE_UPSERT, {
        "workspace": str(b["workspace"]), "project": str(b["project"]), "id": str(b["id"]),
        "scope": None, "by_user": None, "reason": None, "at_ms": int(b["at_ms"]),
        "max_at_ms": int(b["at_ms"]), "epoch": -1, "hlc": 0, "origin": "", "seq": 0})


_SET_STATE = ("UPDATE messages SET state = "
              f"{_STATE_OF.format(id='?1', gate='messages.approval_required')} WHERE id = ?1")

_HOLD_COLS = ("id", "kind", "epoch", "hlc", "origin", "seq", "holder_session", "holder_agent",
              "holder_user", "at_ms")
_REV_COLS = ("id", "subject", "body", "epoch", "hlc", "origin", "seq", "edited_at_ms")


def _ranked_upsert(table: str, cols: tuple[str, ...]) -> str:
    """Insert, or overwrite when the incoming (epoch, hlc, origin, seq) is greater."""
    return (f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)}) "
            "ON CONFLICT (id) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in cols[1:])
            + " WHERE (excluded.epoch, excluded.hlc, excluded.origin, excluded.seq)"
            f" > ({table}.epoch, {table}.hlc, {table}.origin, {table}.seq)")


_HOLD_UPSERT = _ranked_upsert("msg_hold", _HOLD_COLS)
_DECISION_UPSERT = _ranked_upsert("msg_decision", ("id", *DECISION_COLS)).replace(
    "ON CONFLICT (id)", "ON CONFLICT (id, kind)")
_REV_UPSERT = _ranked_upsert("msg_revision", _REV_COLS)


def _msg_decision(c: sqlite3.Connection, op: Op) -> None:
    if op.kind in DECISION_KINDS:
        c.execute(_DECISION_UPSERT, {**decision_row(op), **_stamp(op), "id": str(op.body["id"])})


def _msg_terminal(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    msg_id = str(op.body["id"])
    _msg_decision(c, op)
    c.execute(_TERM_UPSERT, {**terminal_row(op), **_stamp(op), "id": msg_id})
    if _under_mark(c, msg_id):
        _drop_old_edits(c, "?", (msg_id,))  # a decision made before the purge goes with it
    c.execute(_SET_STATE, (msg_id,))


def _msg_hold(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    msg_id = str(op.body["id"])
    _msg_decision(c, op)
    c.execute(_HOLD_UPSERT, {**hold_row(op), **_stamp(op), "id": msg_id})
    revision = revision_row(op)
    if revision is not None:
        c.execute(_REV_UPSERT, {**revision, **_stamp(op), "id": msg_id})
    if _under_mark(c, msg_id):
        _drop_old_edits(c, "?", (msg_id,))  # one decided before the purge goes with it
    c.execute(_SET_STATE, (msg_id,))


def _msg_complete(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    # One decided before its mailbox's mark keeps only its rank (purged): the
    # kept completion is then the same whatever order they came in.
    row = {**completion_row(op), **_stamp(op)}
    ws, _, proj = op.key.removeprefix("mbox:").partition("/")
    mark = c.execute("SELECT epoch, hlc, origin, seq FROM msg_purge WHERE workspace = ?"
                     " AND project = ?", (ws, proj)).fetchone()
    if completion_below(row, None if mark is None else tuple(mark)):
        row = purged_completion(row)
    c.execute(_COMPLETION_UPSERT, row)


def _msg_empty(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    c.execute(_EMPTY_UPSERT, {**empty_row(op), **_stamp(op)})


def _link_put(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    row = link_row(op)
    c.execute(_LINK_PUT, (row["source_id"], row["target_id"], row["relation"],
                          row["created_at_ms"]))


def _grant_put(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    row = grant_row(op)
    c.execute(_GRANT_UPSERT, {**row, **_stamp(op), "granted": int(row["granted"])})


def _nsub_put(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    row = nsub_row(op)
    c.execute(_NSUB_UPSERT, {**row, **_stamp(op), "active": int(row["active"])})


def _user_put(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    row = user_row(op)
    c.execute(_USER_UPSERT, {**row, **_body_stamp(op), "root": int(row["root"]),
                             "removed": int(row["removed"])})


def _apikey_put(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    row = apikey_row(op)
    c.execute(_KEY_UPSERT, {**row, **_body_stamp(op), "revoked": int(row["revoked"])})


def _pgrant_put(c: sqlite3.Connection, op: Op, now_ms: int) -> None:
    row = pgrant_row(op)
    c.execute(_PGRANT_UPSERT, {**row, **_body_stamp(op), "project": row["project"] or "",
                               "granted": int(row["granted"])})


_APPLY: dict[str, Callable[[sqlite3.Connection, Op, int], None]] = {
    K.MEM_PUT: _mem_put,
    K.MEM_DEL: _mem_del,
    K.NOTE_NEW: _note_new,
    K.NOTE_READ: _note_read,
    K.AGENT_REG: _agent_reg,
    K.AGENT_SEEN: _agent_seen,
    K.SESSION_START: _session_start,
    K.MSG_SEND: _msg_send,
    K.MSG_CLAIM: _msg_terminal,
    K.MSG_RENEW: _msg_terminal,
    K.MSG_EXPIRE: _msg_hold,
    K.MSG_CANCEL: _msg_terminal,
    K.MSG_HOLD: _msg_hold,
    K.MSG_RELEASE: _msg_hold,
    K.MSG_APPROVE: _msg_hold,
    K.MSG_REJECT: _msg_terminal,
    K.MSG_EMPTY: _msg_empty,
    K.MSG_COMPLETE: _msg_complete,
    K.MSG_PURGE: _msg_purge,
    K.PROJ_HIDE: _proj_hide,
    K.LINK_PUT: _link_put,
    K.GRANT_PUT: _grant_put,
    K.NSUB_PUT: _nsub_put,
    K.USER_PUT: _user_put,
    K.APIKEY_PUT: _apikey_put,
    K.PGRANT_PUT: _pgrant_put,
    K.OP_GAP: lambda c, op, now_ms: None,  # a lost op id, filled: nothing to apply
}


def register(kind: str, fn: Callable[[sqlite3.Connection, Op, int], None]) -> None:
    """Add the apply rule of a kind this build did not ship with (a newer
    build, or a test standing in for one); see :func:`common.ops.register_kind`."""
    K.register_kind(kind)
    _APPLY[kind] = fn


def apply_op(conn: sqlite3.Connection, op: Op, now_ms: int) -> None:
    """Merge ``op`` into the state tables (the caller holds the transaction).
    An op of a kind this build does not know is kept aside, unapplied
    (:mod:`store.deferred`)."""
    fn = _APPLY.get(op.kind)
    if fn is None:
        deferred.defer(conn, op)
        return
    fn(conn, op, now_ms)


def apply_ops(conn: sqlite3.Connection, ops: list[Op], now_ms: int) -> None:
    """Merge each of ``ops`` (the caller holds the transaction), the
    ``note.new`` ops of the list in one ``executemany``.

    Grouping changes nothing in the outcome: every statement here is a merge
    on its own, right in any order (the module docstring), so the notes may
    go in after the other ops of the list. It spares the per-statement
    Python of one ``execute`` per replicated notification."""
    notes: list[tuple[Any, ...]] = []
    grouped = _APPLY.get(K.NOTE_NEW) is _note_new
    for op in ops:
        if grouped and op.kind == K.NOTE_NEW:
            values = _note_values(op, now_ms)
            if values is not None:
                notes.append(values)
        else:
            apply_op(conn, op, now_ms)
    if notes:
        conn.executemany(_NOTE_UPSERT, notes)
