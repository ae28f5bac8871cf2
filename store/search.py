"""Reads that span memories: full-text search, filters, links, grants,
namespaces, statistics and export.

Search runs on the ``memories_fts`` FTS5 index (migration 0007) over title,
content and tags, ranked by bm25 with the title weighted above tags above
content. User text never reaches FTS5 as syntax: :func:`fts_query` keeps
only its words and quotes each one, so ``NEAR``, ``*``, ``"``, ``:`` or
``-`` in a query are plain text. A search requires every word (AND); a
recall accepts any (OR), so long prose still finds what shares a few words.

Everything here is a read on the pool's read-only connections; nothing
writes.
"""

from __future__ import annotations

import re
from typing import Any

from common import limits
from common.errors import BadRequest
from store import queries as Q
from store.reader import ReadPool

_WORD = re.compile(r"\w+", re.UNICODE)
_BM25 = "bm25(memories_fts, 5.0, 1.0, 3.0)"  # title, content, tags
_M_COLS = ", ".join(f"m.{c.strip()}" for c in Q.MEMORY_COLS.split(","))
_LIVE = "(m.expires_at_ms IS NULL OR m.expires_at_ms > :now)"


def fts_query(text: str, *, any_word: bool = False) -> str | None:
    """An FTS5 MATCH expression for ``text``: its words, each quoted; None
    when it has no words."""
    words = _WORD.findall(text)
    if len(words) > limits.search_terms_max:
        if not any_word:
            raise BadRequest(f"a search takes at most {limits.search_terms_max} words "
                             "(limits.search_terms_max)")
        words = words[:limits.search_terms_max]
    if not words:
        return None
    quoted = ['"' + w.replace('"', '""') + '"' for w in dict.fromkeys(words)]
    return (" OR " if any_word else " ").join(quoted)


async def search(reads: ReadPool, match: str, *, limit: int, now_ms: int,
                 namespace: str | None = None, tier: str | None = None,
                 tags: list[str] | None = None, min_priority: int | None = None,
                 agent_id: str | None = None, since_ms: int | None = None,
                 until_ms: int | None = None) -> list[dict[str, Any]]:
    """Live memories matching the FTS expression ``match``, best first, each
    with ``score`` (higher is better)."""
    where = ["memories_fts MATCH :match", _LIVE]
    params: dict[str, Any] = {"match": match, "now": now_ms, "limit": limit}
    Q.memory_filters(where, params, namespace=namespace, tier=tier, tags=tags,
                     min_priority=min_priority, agent_id=agent_id, since_ms=since_ms,
                     until_ms=until_ms)
    rows = await reads.fetchall(
        f"SELECT {_M_COLS}, {_BM25} AS rank FROM memories_fts"
        " JOIN memories m ON m.rowid = memories_fts.rowid"
        f" WHERE {' AND '.join(where)} ORDER BY rank, m.priority DESC, m.id LIMIT :limit", params)
    out = []
    for r in rows:
        row = Q.memory(r)
        rank = row.pop("rank")
        row["score"] = round(-float(rank), 6)
        out.append(row)
    return out


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def matching_ids(reads: ReadPool, *, now_ms: int, limit: int,
                       namespace: str | None = None, tier: str | None = None,
                       pattern: str | None = None) -> list[str]:
    """Ids of live memories in ``namespace`` / ``tier`` whose title or content
    contains ``pattern`` (a plain substring, case-insensitive for ASCII)."""
    where = [_LIVE]
    params: dict[str, Any] = {"now": now_ms, "limit": limit}
    Q.memory_filters(where, params, namespace=namespace, tier=tier)
    if pattern is not None:
        where.append("(m.title LIKE :pat ESCAPE '\\' OR m.content LIKE :pat ESCAPE '\\')")
        params["pat"] = _like(pattern)
    rows = await reads.fetchall(
        f"SELECT m.id FROM memories m WHERE {' AND '.join(where)} ORDER BY m.id LIMIT :limit",
        params)
    return [str(r[0]) for r in rows]


async def expired_ids(reads: ReadPool, *, now_ms: int, limit: int) -> list[str]:
    rows = await reads.fetchall(
        "SELECT id FROM memories WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?"
        " ORDER BY expires_at_ms, id LIMIT ?", (now_ms, limit))
    return [str(r[0]) for r in rows]


def _link(r: Any) -> dict[str, Any]:
    return {"source_id": r["source_id"], "target_id": r["target_id"],
            "relation": r["relation"], "created_at_ms": r["created_at_ms"]}


async def links_of(reads: ReadPool, memory_id: str, *, limit: int) -> list[dict[str, Any]]:
    """Links from or to ``memory_id``, oldest first."""
    rows = await reads.fetchall(
        "SELECT * FROM (SELECT * FROM memory_links WHERE source_id = :id UNION"
        " SELECT * FROM memory_links WHERE target_id = :id)"
        " ORDER BY created_at_ms, source_id, target_id, relation LIMIT :limit",
        {"id": memory_id, "limit": limit})
    return [_link(r) for r in rows]


async def link_edges(reads: ReadPool, ids: list[str], *, outgoing: bool,
                     relations: tuple[str, ...]) -> list[dict[str, Any]]:
    """Links leaving (``outgoing``) or entering ``ids`` with one of ``relations``."""
    if not ids:
        return []
    col = "source_id" if outgoing else "target_id"
    marks = ", ".join("?" for _ in ids)
    rels = ", ".join("?" for _ in relations)
    rows = await reads.fetchall(
        f"SELECT * FROM memory_links WHERE {col} IN ({marks}) AND relation IN ({rels})"
        " ORDER BY source_id, target_id, relation", [*ids, *relations])
    return [_link(r) for r in rows]


async def all_links(reads: ReadPool) -> list[dict[str, Any]]:
    rows = await reads.fetchall(
        "SELECT * FROM memory_links ORDER BY created_at_ms, source_id, target_id, relation")
    return [_link(r) for r in rows]


async def all_memories(reads: ReadPool, *, now_ms: int, limit: int) -> list[dict[str, Any]]:
    rows = await reads.fetchall(
        f"SELECT {_M_COLS} FROM memories m WHERE {_LIVE} ORDER BY m.created_at_ms, m.id"
        " LIMIT :limit", {"now": now_ms, "limit": limit})
    return [Q.memory(r) for r in rows]


async def tombstoned(reads: ReadPool, ids: list[str]) -> set[str]:
    if not ids:
        return set()
    marks = ", ".join("?" for _ in ids)
    rows = await reads.fetchall(f"SELECT id FROM mem_tombstones WHERE id IN ({marks})", ids)
    return {str(r[0]) for r in rows}


async def grants_of(reads: ReadPool, memory_id: str) -> list[dict[str, Any]]:
    rows = await reads.fetchall(
        "SELECT agent_id, permission, at_ms FROM memory_grants"
        " WHERE memory_id = ? AND granted = 1 ORDER BY agent_id", (memory_id,))
    return [{"agent_id": r["agent_id"], "permission": r["permission"], "at_ms": r["at_ms"]}
            for r in rows]


async def namespaces(reads: ReadPool, *, now_ms: int) -> list[dict[str, Any]]:
    rows = await reads.fetchall(
        f"SELECT m.namespace AS namespace, count(*) AS count FROM memories m WHERE {_LIVE}"
        " GROUP BY m.namespace ORDER BY m.namespace", {"now": now_ms})
    return [{"namespace": r["namespace"], "count": r["count"]} for r in rows]


async def stats(reads: ReadPool, *, now_ms: int, soon_ms: int) -> dict[str, Any]:
    p = {"now": now_ms, "soon": soon_ms}
    total = await reads.fetchone(f"SELECT count(*) FROM memories m WHERE {_LIVE}", p)
    by_tier = await reads.fetchall(
        f"SELECT m.tier AS tier, count(*) AS count FROM memories m WHERE {_LIVE}"
        " GROUP BY m.tier ORDER BY m.tier", p)
    soon = await reads.fetchone(
        f"SELECT count(*) FROM memories m WHERE {_LIVE} AND m.expires_at_ms IS NOT NULL"
        " AND m.expires_at_ms <= :soon", p)
    links = await reads.fetchone("SELECT count(*) FROM memory_links")
    return {
        "total": int(total[0]) if total else 0,
        "by_tier": [{"tier": r["tier"], "count": r["count"]} for r in by_tier],
        "by_namespace": await namespaces(reads, now_ms=now_ms),
        "expiring_soon": int(soon[0]) if soon else 0,
        "links_count": int(links[0]) if links else 0,
    }


async def namespace_subscriptions(reads: ReadPool, agent_id: str) -> list[dict[str, Any]]:
    rows = await reads.fetchall(
        "SELECT agent_id, namespace, at_ms FROM namespace_subscriptions"
        " WHERE agent_id = ? AND active = 1 ORDER BY namespace", (agent_id,))
    return [{"agent_id": r["agent_id"], "namespace": r["namespace"], "at_ms": r["at_ms"]}
            for r in rows]
