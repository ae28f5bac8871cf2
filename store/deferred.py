"""Ops of kinds this version does not know: keep them, apply them later.

During a rolling upgrade a newer node may replicate a kind an older node
lacks. The older node must neither refuse the batch (that would block every
other op in it, and with them write quorums) nor guess at a merge rule. So
:func:`store.apply.apply_op` hands such an op here: it is written to
``ops_deferred`` (beside the op log, which logs and replicates it like any
other op, so the node keeps forwarding it through anti-entropy) and changes
no state. When the database is opened by a build that knows the kind,
:func:`replay` applies every deferred op of a now-known kind, in HLC order,
and deletes it, in the open's own transaction. Merge rules are order-free,
so applying an op late gives the state applying it on arrival would have.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from common.ops import Op, known_kind, pack_body, unpack_body


def defer(conn: sqlite3.Connection, op: Op) -> None:
    conn.execute("INSERT OR IGNORE INTO ops_deferred (origin, seq, hlc, kind, key, epoch, body)"
                 " VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (op.origin, op.seq, op.hlc, op.kind, op.key, op.epoch, pack_body(op.body)))


def count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM ops_deferred").fetchone()[0])


def replay(conn: sqlite3.Connection, apply: Callable[[sqlite3.Connection, Op, int], None],
           now_ms: int) -> int:
    """Apply (and forget) every deferred op whose kind this build knows."""
    rows = conn.execute("SELECT origin, seq, hlc, kind, key, epoch, body FROM ops_deferred"
                        " ORDER BY hlc, origin, seq").fetchall()
    ready = [Op(origin=o, seq=s, hlc=h, kind=k, key=key, epoch=e, body=unpack_body(b))
             for o, s, h, k, key, e, b in rows if known_kind(k)]
    if not ready:
        return 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        for op in ready:
            apply(conn, op, now_ms)
        conn.executemany("DELETE FROM ops_deferred WHERE origin = ? AND seq = ?",
                         [op.op_id for op in ready])
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return len(ready)
