"""Subscriptions: rows in the webhook database, mirrored in memory.

The intake matches every event against every subscription, so the table
is loaded once at start and the in-memory copy is updated on each create
and delete (after the row is committed). At most ``limits.subscriptions_max``
exist; the count is checked inside the inserting transaction. Deleting a
subscription deletes its outbox rows in the same transaction.

Beside our ``namespace`` prefix, a row keeps upstream's exact
``namespace_filter`` and ``agent_filter`` (:mod:`daemon.webhooks.filters`)
and the ``signature_version`` its deliveries are signed with
(:mod:`daemon.webhooks.signing`). Like the rest of the row they belong to
this daemon and are not replicated.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from common.errors import LimitExceeded
from daemon.schemas.timefmt import rfc3339
from daemon.webhooks.db import WebhookDB, transaction
from daemon.webhooks.signing import SIGNATURE_SECRET


@dataclass(frozen=True, slots=True)
class Subscription:
    id: str
    url: str
    events: tuple[str, ...]  # empty: every event
    namespace: str | None  # prefix filter; None: every namespace
    secret: str
    created_at_ms: int
    created_by: str | None = None
    namespace_filter: str | None = None  # exact namespace; None: any
    agent_filter: str | None = None  # exact agent; None: any
    signature_version: str = SIGNATURE_SECRET

    def public(self) -> dict[str, object]:
        """The API view: everything but the secret."""
        return {"id": self.id, "url": self.url, "events": list(self.events),
                "namespace": self.namespace, "namespace_filter": self.namespace_filter,
                "agent_filter": self.agent_filter, "signature_version": self.signature_version,
                "created_at": rfc3339(self.created_at_ms), "created_by": self.created_by}

    def asks(self) -> tuple[object, ...]:
        """What a create asked for, to compare an idempotent retry with."""
        return (self.url, self.events, self.namespace, self.namespace_filter,
                self.agent_filter, self.signature_version)


def _row(r: sqlite3.Row) -> Subscription:
    return Subscription(id=r["id"], url=r["url"], events=tuple(json.loads(r["events"])),
                        namespace=r["namespace"], secret=r["secret"],
                        created_at_ms=r["created_at_ms"], created_by=r["created_by"],
                        namespace_filter=r["namespace_filter"], agent_filter=r["agent_filter"],
                        signature_version=r["signature_version"])


def _load(conn: sqlite3.Connection) -> list[Subscription]:
    rows = conn.execute("SELECT * FROM webhook_subscriptions ORDER BY created_at_ms, id")
    return [_row(r) for r in rows]


def _insert(conn: sqlite3.Connection, sub: Subscription, cap: int) -> None:
    with transaction(conn):
        (count,) = conn.execute("SELECT COUNT(*) FROM webhook_subscriptions").fetchone()
        if count >= cap:
            raise LimitExceeded(f"already {count} subscriptions on this node, the most allowed "
                                "(limits.subscriptions_max)", limit="subscriptions_max")
        conn.execute(
            "INSERT INTO webhook_subscriptions (id, url, events, namespace, secret, created_at_ms,"
            " created_by, namespace_filter, agent_filter, signature_version)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (sub.id, sub.url, json.dumps(list(sub.events)), sub.namespace, sub.secret,
             sub.created_at_ms, sub.created_by, sub.namespace_filter, sub.agent_filter,
             sub.signature_version))


def _delete(conn: sqlite3.Connection, sub_id: str) -> tuple[int, int] | None:
    """Delete a subscription and its outbox rows; returns (pending, dead)
    rows deleted, ``None`` if the subscription did not exist."""
    with transaction(conn):
        gone = conn.execute("DELETE FROM webhook_subscriptions WHERE id = ?", (sub_id,)).rowcount
        if not gone:
            return None
        pending = conn.execute("DELETE FROM webhook_outbox WHERE sub_id = ? AND dead = 0",
                               (sub_id,)).rowcount
        dead = conn.execute("DELETE FROM webhook_outbox WHERE sub_id = ?", (sub_id,)).rowcount
        return pending, dead


class Registry:
    def __init__(self, db: WebhookDB, cap: int) -> None:
        self._db = db
        self._cap = cap
        self._subs: dict[str, Subscription] = {}

    async def load(self) -> None:
        self._subs = {s.id: s for s in await self._db.call(_load)}

    def all(self) -> list[Subscription]:
        return list(self._subs.values())

    def get(self, sub_id: str) -> Subscription | None:
        return self._subs.get(sub_id)

    def __len__(self) -> int:
        return len(self._subs)

    async def add(self, sub: Subscription) -> None:
        await self._db.call(_insert, sub, self._cap)
        self._subs[sub.id] = sub

    async def remove(self, sub_id: str) -> tuple[int, int] | None:
        """Delete; returns the (pending, dead) outbox rows that went with it,
        ``None`` if unknown."""
        dropped = await self._db.call(_delete, sub_id)
        self._subs.pop(sub_id, None)
        return dropped
