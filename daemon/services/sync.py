"""The upstream-shaped sync protocol (``/api/v1/sync/push`` and ``since``).

``push`` applies each pushed memory that is newer than what this node holds
(insert-if-newer, as upstream does) and each deletion, as one ordinary
quorum write, so they replicate like any other change. ``since`` pages
through live memories by ``updated_at`` with a ``next_since`` cursor.

``since`` is exclusive, as upstream's (``updated_at > since``): a client
passes the last ``next_since`` back and gets what changed after it. So that
an exclusive cursor never skips a memory, a page never ends inside a
millisecond: when the last memory of a full page shares its ``updated_at``
with memories beyond ``limit``, the page takes those too (at most
``limits.sync_since_limit_max`` of one millisecond).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from common import limits
from common.errors import BadRequest
from common.ops import MEM_DEL, MEM_PUT, mem_key
from daemon.schemas.memories import memory_json
from daemon.schemas.timefmt import parse_rfc3339, rfc3339
from daemon.services import memory_lanes

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
    held = (await memory_lanes.rows(node, [m.id for m in memories], now_ms=now)
            if memories else {})
    for m in memories:
        updated = _ms(m.updated_at, "updated_at") or now
        current = held.get(m.id)
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


async def _since(node: RecordPorts, since_ms: int, limit: int,
                 now_ms: int) -> list[dict[str, Any]]:
    """The first ``limit`` memories changed after ``since_ms``, in the
    store's order (oldest change first), from every lane."""
    if node.settings.server.lanes == 1:
        return [dict(r) for r in await node.store.memories_since(since_ms, limit=limit,
                                                                  now_ms=now_ms)]
    found = await memory_lanes.every_lane(node, "since", {"since": since_ms, "limit": limit,
                                                          "now": now_ms})
    return sorted((r for lane in found for r in lane),
                  key=lambda r: (int(r["updated_at_ms"]), str(r["id"])))[:limit]


async def since(node: RecordPorts, since: str | None, limit: int) -> dict[str, Any]:
    given = _ms(since, "since")
    since_ms = -1 if given is None else given  # none given: from the beginning
    now = node.now_ms()
    rows = await _since(node, since_ms, limit, now)
    if rows and len(rows) == limit:
        # Finish the last millisecond: the next page starts strictly after it.
        last = rows[-1]["updated_at_ms"]
        tail = await _since(node, last - 1, limits.sync_since_limit_max, now)
        rows = ([r for r in rows if r["updated_at_ms"] < last]
                + [r for r in tail if r["updated_at_ms"] == last])
    next_since = rfc3339(rows[-1]["updated_at_ms"]) if rows else since
    return {"memories": [memory_json(r) for r in rows], "count": len(rows),
            "next_since": next_since}
