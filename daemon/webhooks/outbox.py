"""The outbox: one row per (event, subscription), delivered in seq order.

Rows are written by the intake (:mod:`daemon.webhooks.intake`) and read by
the dispatcher. The dispatcher works on the *head* of each subscription --
its lowest pending seq -- so one subscription's events arrive in the order
they happened here, while a slow or dead receiver holds up only itself.

A row leaves the outbox only once its POST got a 2xx (:func:`delivered`).
A failed attempt bumps ``attempts`` and moves ``next_at_ms`` out by
:func:`retry_delay_secs`; after the last allowed attempt the row is marked
dead (:func:`bury`) and kept for inspection, and beyond
``dead_letter_max`` dead rows the oldest are purged, counted by the caller.
An operator may put a dead row back (:func:`replay`): it is appended as a
new pending row with the same delivery id and body, and tried afresh.
All functions here take the connection and run on the webhook database
thread; :func:`retry_delay_secs` is the one pure piece.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from daemon.webhooks.db import transaction


@dataclass(frozen=True, slots=True)
class NewRow:
    sub_id: str
    delivery_id: str
    event: str
    body: bytes


@dataclass(frozen=True, slots=True)
class Head:
    seq: int
    sub_id: str
    attempts: int
    next_at_ms: int


@dataclass(frozen=True, slots=True)
class Row:
    seq: int
    sub_id: str
    delivery_id: str
    event: str
    body: bytes
    attempts: int


def retry_delay_secs(attempts: int, base: float, cap: float, rng: random.Random) -> float:
    """Delay before the next try after ``attempts`` failures: exponential
    from ``base``, capped at ``cap``, with "equal jitter" (half fixed, half
    random) so retries from many rows spread out yet never collapse to 0."""
    ceiling = min(cap, base * 2.0 ** max(0, attempts - 1))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def pending_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM webhook_outbox WHERE dead = 0").fetchone()[0])


def dead_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM webhook_outbox WHERE dead = 1").fetchone()[0])


def insert(conn: sqlite3.Connection, rows: Iterable[NewRow], now_ms: int) -> int:
    """Append rows (inside the caller's transaction); they are due now."""
    cur = conn.executemany(
        "INSERT INTO webhook_outbox (sub_id, delivery_id, event, body, next_at_ms, created_at_ms)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        ((r.sub_id, r.delivery_id, r.event, r.body, now_ms, now_ms) for r in rows))
    return cur.rowcount


def heads(conn: sqlite3.Connection) -> list[Head]:
    """The lowest pending row of every subscription that has one."""
    # One index probe per subscription (webhook_outbox_pending), so the cost
    # follows the number of subscriptions, not the length of the outbox.
    rows = conn.execute(
        "SELECT o.seq, o.sub_id, o.attempts, o.next_at_ms FROM webhook_subscriptions AS s"
        " JOIN webhook_outbox AS o ON o.seq = (SELECT seq FROM webhook_outbox"
        "   WHERE sub_id = s.id AND dead = 0 ORDER BY seq LIMIT 1)"
        " ORDER BY o.next_at_ms, o.seq")
    return [Head(r[0], r[1], r[2], r[3]) for r in rows]


def fetch(conn: sqlite3.Connection, seq: int) -> Row | None:
    r = conn.execute(
        "SELECT seq, sub_id, delivery_id, event, body, attempts FROM webhook_outbox"
        " WHERE seq = ? AND dead = 0", (seq,)).fetchone()
    return None if r is None else Row(r[0], r[1], r[2], r[3], bytes(r[4]), r[5])


def delivered(conn: sqlite3.Connection, seq: int) -> bool:
    return conn.execute("DELETE FROM webhook_outbox WHERE seq = ?", (seq,)).rowcount > 0


def delivered_then_next(conn: sqlite3.Connection, seq: int, sub_id: str,
                        now_ms: int) -> tuple[bool, Row | None]:
    """Delete a delivered row and return the subscription's next row if it
    is due already: one round trip per delivery while a receiver keeps up."""
    found = delivered(conn, seq)
    r = conn.execute(
        "SELECT seq, sub_id, delivery_id, event, body, attempts, next_at_ms FROM webhook_outbox"
        " WHERE sub_id = ? AND dead = 0 ORDER BY seq LIMIT 1", (sub_id,)).fetchone()
    if r is None or r[6] > now_ms:
        return found, None
    return found, Row(r[0], r[1], r[2], r[3], bytes(r[4]), r[5])


def reschedule(conn: sqlite3.Connection, seq: int, attempts: int, next_at_ms: int,
               error: str) -> bool:
    return conn.execute(
        "UPDATE webhook_outbox SET attempts = ?, next_at_ms = ?, last_error = ?"
        " WHERE seq = ? AND dead = 0", (attempts, next_at_ms, error, seq)).rowcount > 0


def bury(conn: sqlite3.Connection, seq: int, attempts: int, error: str,
         dead_max: int) -> tuple[bool, int]:
    """Dead-letter a row; returns (it was still there, dead rows purged to
    stay within ``dead_max``)."""
    with transaction(conn):
        found = conn.execute(
            "UPDATE webhook_outbox SET dead = 1, attempts = ?, last_error = ?"
            " WHERE seq = ? AND dead = 0", (attempts, error, seq)).rowcount > 0
        excess = dead_count(conn) - dead_max
        purged = 0
        if excess > 0:
            purged = conn.execute(
                "DELETE FROM webhook_outbox WHERE seq IN (SELECT seq FROM webhook_outbox"
                " WHERE dead = 1 ORDER BY seq LIMIT ?)", (excess,)).rowcount
    return found, purged


def dead_letters(conn: sqlite3.Connection, limit: int) -> list[dict[str, object]]:
    rows = conn.execute(
        "SELECT seq, sub_id, delivery_id, event, attempts, last_error, created_at_ms"
        " FROM webhook_outbox WHERE dead = 1 ORDER BY seq LIMIT ?", (limit,))
    return [dict(zip(("seq", "sub_id", "delivery_id", "event", "attempts", "last_error",
                      "created_at_ms"), r, strict=True)) for r in rows]


def is_seq(ref: str) -> bool:
    """Does ``ref`` name a row by its seq (ASCII digits, small enough for SQLite)?"""
    return ref.isascii() and ref.isdigit() and len(ref) <= 18


def _dead_where(ref: str) -> tuple[str, tuple[object, ...]]:
    if is_seq(ref):
        return "seq = ? AND dead = 1", (int(ref),)
    return "delivery_id = ? AND dead = 1", (ref,)


def dead_letter(conn: sqlite3.Connection, ref: str) -> dict[str, object] | None:
    """One dead row by delivery id (or seq, all digits), without its body."""
    where, args = _dead_where(ref)
    r = conn.execute(
        "SELECT seq, sub_id, delivery_id, event, attempts, last_error, created_at_ms"
        f" FROM webhook_outbox WHERE {where}", args).fetchone()
    return None if r is None else dict(zip(
        ("seq", "sub_id", "delivery_id", "event", "attempts", "last_error", "created_at_ms"),
        r, strict=True))


def replay(conn: sqlite3.Connection, ref: str, now_ms: int) -> dict[str, object] | None:
    """Put a dead row back in the outbox: appended as a new pending row at
    the tail of its subscription (so the per-subscription order of what is
    pending still holds), due now, with no attempts, the same delivery id
    and the exact same body; the dead row goes. ``None`` if no dead row
    matches ``ref``."""
    where, args = _dead_where(ref)
    with transaction(conn):
        r = conn.execute(
            "SELECT seq, sub_id, delivery_id, event, body, created_at_ms FROM webhook_outbox"
            f" WHERE {where}", args).fetchone()
        if r is None:
            return None
        conn.execute("DELETE FROM webhook_outbox WHERE seq = ?", (r[0],))
        cur = conn.execute(
            "INSERT INTO webhook_outbox (sub_id, delivery_id, event, body, next_at_ms,"
            " created_at_ms) VALUES (?, ?, ?, ?, ?, ?)", (r[1], r[2], r[3], r[4], now_ms, r[5]))
    return {"replayed": True, "seq": cur.lastrowid, "replaced_seq": r[0], "sub_id": r[1],
            "delivery_id": r[2], "event": r[3]}
