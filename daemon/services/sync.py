"""The upstream-shaped sync protocol (``/api/v1/sync/push`` and ``since``).

``push`` applies each pushed memory that is newer than what this node holds
(insert-if-newer, as upstream does) and each deletion, as one ordinary
quorum write, so they replicate like any other change. ``since`` pages
through live memories by ``updated_at`` with a ``next_since`` cursor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from common.errors import BadRequest
from common.ops import MEM_DEL, MEM_PUT, mem_key
from daemon.schemas.memories import memory_json
from daemon.schemas.timefmt import parse_rfc3339, rfc3339

if TYPE_CHECKING:
    from daemon.ports import RecordPorts


def _ms(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        raise BadRequest(f"{what} is not an RFC3339 time") from None


async def push(node: RecordPorts, memories: Sequence[Any], deletions: Sequence[str]) -> int:
    """Apply what is newer than this node holds; returns how many items."""
    now = node.now_ms()
    items: list[tuple[str, str, dict[str, Any]]] = []
    for m in memories:
        updated = _ms(m.updated_at, "updated_at") or now
        current = await node.store.get_memory(m.id, now_ms=now)
        if current is not None and current["updated_at_ms"] >= updated:
            continue  # insert-if-newer, as upstream does
        agent = m.metadata.get("agent_id") if isinstance(m.metadata.get("agent_id"), str) else None
        items.append((MEM_PUT, mem_key(m.id), {
            "id": m.id, "title": m.title, "content": m.content, "tier": m.tier,
            "namespace": m.namespace, "tags": list(m.tags), "priority": m.priority,
            "confidence": m.confidence, "source": m.source, "metadata": dict(m.metadata),
            "agent_id": agent, "created_at_ms": _ms(m.created_at, "created_at"),
            "updated_at_ms": updated, "expires_at_ms": _ms(m.expires_at, "expires_at"),
        }))
    for mid in deletions:
        items.append((MEM_DEL, mem_key(mid), {"id": mid}))
    if items:
        await node.write(items)
    return len(items)


async def since(node: RecordPorts, since: str | None, limit: int) -> dict[str, Any]:
    since_ms = _ms(since, "since") or 0
    rows = await node.store.memories_since(since_ms, limit=limit, now_ms=node.now_ms())
    next_since = rfc3339(rows[-1]["updated_at_ms"]) if rows else since
    return {"memories": [memory_json(r) for r in rows], "count": len(rows),
            "next_since": next_since}
