"""Intake: a batch of applied ops becomes outbox rows, in one transaction.

For each op in order: look up what this node knew of the memory (memory
ops, and a link's source), classify it
(:func:`daemon.webhooks.events.classify`), remember the memory's new
version, and add a row for every subscription that wants the event
(:func:`daemon.webhooks.filters.route`), under the name that subscription
asked for it by. Versions are kept even when nobody subscribes, so a
subscription added later still tells a promote from an update.

The outbox is bounded: rows beyond the ``room`` left under ``outbox_max``
are refused and reported back as dropped (the caller counts and logs them), never
silently lost. Runs on the webhook database thread.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.ops import Op
from common.randomid import uuid4
from daemon.webhooks import outbox
from daemon.webhooks.db import transaction
from daemon.webhooks.events import MEMORY_KINDS, MemoryVersion, classify, next_version, version_key
from daemon.webhooks.filters import route
from daemon.webhooks.registry import Subscription

log = logging.getLogger("ai_memory.webhooks")

_IN_CHUNK = 500  # ids per "IN (...)" lookup, well under SQLite's variable limit


@dataclass(slots=True)
class Admitted:
    enqueued: Counter[str] = field(default_factory=Counter)  # rows written, by event
    dropped: Counter[str] = field(default_factory=Counter)  # rows refused (outbox full), by event
    skipped: int = 0  # ops that could not be classified (malformed body)


def _load_versions(conn: sqlite3.Connection, ids: Iterable[str]) -> dict[str, MemoryVersion]:
    out: dict[str, MemoryVersion] = {}
    wanted = sorted(set(ids))
    for i in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[i:i + _IN_CHUNK]
        marks = ",".join("?" * len(chunk))
        for r in conn.execute(
                "SELECT id, hlc, origin, seq, tier, namespace, agent_id, expires_at_ms, deleted"
                f" FROM webhook_memory_versions WHERE id IN ({marks})", chunk):
            out[r[0]] = MemoryVersion((r[1], r[2], r[3]), r[4], r[5], r[6], r[7], bool(r[8]))
    return out


def _save_versions(conn: sqlite3.Connection, versions: dict[str, MemoryVersion]) -> None:
    conn.executemany(
        "INSERT OR REPLACE INTO webhook_memory_versions"
        " (id, hlc, origin, seq, tier, namespace, agent_id, expires_at_ms, deleted)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(mid, v.rank[0], v.rank[1], v.rank[2], v.tier, v.namespace, v.agent_id,
          v.expires_at_ms, int(v.deleted)) for mid, v in versions.items()])


def prune_versions(conn: sqlite3.Connection, now_ms: int) -> int:
    """Forget memories that have expired (tombstones are kept, as the store keeps them)."""
    with transaction(conn):
        return conn.execute(
            "DELETE FROM webhook_memory_versions WHERE deleted = 0 AND expires_at_ms IS NOT NULL"
            " AND expires_at_ms <= ?", (now_ms,)).rowcount


def admit(conn: sqlite3.Connection, ops: list[Op], subs: list[Subscription], node_id: str,
          now_ms: int, room: int) -> Admitted:
    """Turn ``ops`` into at most ``room`` new outbox rows (the caller keeps
    the exact pending count, so the bound costs no COUNT over the outbox)."""
    result = Admitted()
    with transaction(conn):
        versions = _load_versions(conn, filter(None, (version_key(op) for op in ops)))
        changed: dict[str, MemoryVersion] = {}
        rows: list[outbox.NewRow] = []
        for op in ops:
            mid = version_key(op)
            prior = versions.get(mid) if mid is not None else None
            try:
                event = classify(op, prior, node_id)
                body = event.body() if event is not None else b""
            except (KeyError, TypeError, ValueError):
                log.warning("webhooks: op %s#%s (%s) has a malformed body; no event",
                            op.origin, op.seq, op.kind)
                result.skipped += 1
                continue
            if mid is not None and op.kind in MEMORY_KINDS:
                current = next_version(op, prior)
                if current is not None:
                    versions[mid] = changed[mid] = current
            if event is None:
                continue
            bodies = {event.name: body}
            for sub in subs:
                name = route(event, sub)
                if name is None:
                    continue
                if name not in bodies:
                    bodies[name] = event.body_as(name)
                rows.append(outbox.NewRow(sub.id, uuid4(), name, bodies[name]))
        if changed:
            _save_versions(conn, changed)
        if rows:
            # A subscription deleted after ``subs`` was taken gets no rows.
            live = {r[0] for r in conn.execute("SELECT id FROM webhook_subscriptions")}
            rows = [r for r in rows if r.sub_id in live]
            room = max(0, room)
            accepted, refused = rows[:room], rows[room:]
            if accepted:
                outbox.insert(conn, accepted, now_ms)
            result.enqueued.update(r.event for r in accepted)
            result.dropped.update(r.event for r in refused)
    return result
