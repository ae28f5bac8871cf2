"""The webhook database: subscriptions, the outbox and memory versions.

They live in their own SQLite file beside the node's (``<db>.webhooks.sqlite``)
rather than in the node's database: subscriptions are per daemon and never
replicated, and outbox writes then never wait on, or hold up, the store's
single writer on the replication path. The connection comes from the
store's helper (:func:`store.schema.connect`: WAL, ``synchronous=NORMAL``,
busy timeout, autocommit with explicit transactions) and every statement
runs on one dedicated thread, so calls are serialised without locks.

The schema is versioned with ``PRAGMA user_version``: each entry of
:data:`MIGRATIONS` runs once, in its own ``BEGIN IMMEDIATE`` transaction
that also bumps the version, so a crash mid-migration leaves the previous
version and the next open retries. The file is made readable by its owner
only, because it holds subscription secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from store.schema import connect

T = TypeVar("T")

MIGRATIONS: list[str] = [
    """
    CREATE TABLE webhook_subscriptions (
        id            TEXT PRIMARY KEY,
        url           TEXT NOT NULL,
        events        TEXT NOT NULL,          -- JSON list of event names; [] = every event
        namespace     TEXT,                   -- prefix filter; NULL = every namespace
        secret        TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL,
        created_by    TEXT
    ) WITHOUT ROWID;

    -- One row per (event, subscription). seq only grows (AUTOINCREMENT never
    -- reuses a value), so per-subscription delivery order is seq order.
    CREATE TABLE webhook_outbox (
        seq           INTEGER PRIMARY KEY AUTOINCREMENT,
        sub_id        TEXT NOT NULL,
        delivery_id   TEXT NOT NULL,          -- uuid4, the same on every retry
        event         TEXT NOT NULL,
        body          BLOB NOT NULL,          -- the exact bytes POSTed and signed
        attempts      INTEGER NOT NULL DEFAULT 0,
        next_at_ms    INTEGER NOT NULL,
        dead          INTEGER NOT NULL DEFAULT 0,
        last_error    TEXT,
        created_at_ms INTEGER NOT NULL
    );
    CREATE INDEX webhook_outbox_pending ON webhook_outbox (sub_id, seq) WHERE dead = 0;
    CREATE INDEX webhook_outbox_dead ON webhook_outbox (seq) WHERE dead = 1;

    -- What the intake knows of each memory: enough to tell store / update /
    -- promote apart and to skip ops that change nothing (daemon/webhooks/events.py).
    CREATE TABLE webhook_memory_versions (
        id            TEXT PRIMARY KEY,
        hlc           INTEGER NOT NULL,
        origin        TEXT NOT NULL,
        seq           INTEGER NOT NULL,
        tier          TEXT,
        namespace     TEXT,
        agent_id      TEXT,
        expires_at_ms INTEGER,
        deleted       INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID;
    CREATE INDEX webhook_memory_versions_expiry ON webhook_memory_versions (expires_at_ms)
        WHERE deleted = 0 AND expires_at_ms IS NOT NULL;
    """,
    # 2: upstream's exact filters and the signature a subscription's deliveries carry.
    """
    ALTER TABLE webhook_subscriptions ADD COLUMN namespace_filter TEXT;   -- exact; NULL = any
    ALTER TABLE webhook_subscriptions ADD COLUMN agent_filter TEXT;       -- exact; NULL = any
    ALTER TABLE webhook_subscriptions ADD COLUMN signature_version TEXT NOT NULL DEFAULT 'secret';
    """,
]


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection) -> list[int]:
    """Bring the file up to the newest schema; return the versions applied."""
    applied = []
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    for version, sql in enumerate(MIGRATIONS, start=1):
        if version <= current:
            continue
        conn.executescript(f"BEGIN IMMEDIATE;\n{sql}\nPRAGMA user_version = {version};\nCOMMIT;")
        applied.append(version)
    return applied


def _open(path: str) -> sqlite3.Connection:
    if path != ":memory:" and not os.path.exists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    if path == ":memory:":  # tests only: WAL does not apply to an in-memory database
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    else:
        conn = connect(path)
    try:
        conn.row_factory = sqlite3.Row
        migrate(conn)
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()
        raise
    return conn


class WebhookDB:
    """One connection, one thread; ``await db.call(fn, *args)`` runs
    ``fn(conn, *args)`` there."""

    def __init__(self, path: str, conn: sqlite3.Connection, executor: ThreadPoolExecutor) -> None:
        self.path = path
        self._conn = conn
        self._executor = executor
        self._closed = False

    @classmethod
    async def open(cls, path: str) -> WebhookDB:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="webhook-db")
        try:
            conn = await asyncio.get_running_loop().run_in_executor(executor, _open, path)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(path, conn, executor)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise RuntimeError("webhook database is closed")
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, fn, self._conn, *args)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(self._executor, self._conn.close)
        self._executor.shutdown(wait=True)
