"""Notifications read as memories: the recipient's ``_inbox/<agent>`` namespace.

The notify-and-webhooks document has a notify write a memory with
``source: "notify"`` into the recipient's inbox namespace, and has clients
find it there. Here a notification is a record of its own kind (docs/api.md,
"Notify and inbox", says why), and this module gives that reading too: a
memory list (``GET /memories``, MCP ``memory_list``) or search (``/search``,
MCP ``memory_search``) whose ``namespace`` is exactly ``_inbox/<agent>``
answers that agent's live notifications in the memory shape, with
``source: "notify"``.

Only the recipient reads them: the acting agent (a key's bound agent, or
the ``X-Agent-Id`` it names, exactly as for ``GET /inbox``) must be
``<agent>``, or the key must be root; anyone else gets a 403 and learns
nothing. The view is read-only: it never marks a notification read (that is
``POST /inbox/read`` or ``mark_read``). The ``_inbox/`` namespaces belong to
the notifications: a memory a client stores under one is not shown in this
view, so a memory write can never pass itself off as a notification.

How a notification maps to a memory: ``title`` and ``content`` are its title
and payload; ``agent_id`` and ``metadata.agent_id`` its sender;
``metadata.recipient_agent_id`` its recipient and ``metadata.message_kind``
``"notify"`` (upstream's metadata keys); ``metadata.read`` its read mark, and
``access_count`` 1 once read (upstream counts a read that way); ``tags`` is
empty and ``confidence`` 1.0; ``updated_at`` is ``created_at`` (a
notification never changes). Rows come in the inbox's order: most urgent,
then newest, first.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from common import limits
from common.errors import Forbidden
from common.ops import inbox_key
from common.policy import KEYS, Principal
from daemon.schemas.memories import ListMemoriesQuery, memory_json
from daemon.schemas.notify import inbox_namespace
from daemon.schemas.search import SearchBody
from daemon.schemas.timefmt import parse_rfc3339
from store.search import fts_query

if TYPE_CHECKING:
    from daemon.ports import RecordPorts

SOURCE = "notify"
_PREFIX = inbox_namespace("")
_WORD = re.compile(r"\w+", re.UNICODE)


def inbox_agent(namespace: str | None) -> str | None:
    """The agent whose inbox ``namespace`` names (``_inbox/<agent>``), else None."""
    if namespace is None or not namespace.startswith(_PREFIX) or len(namespace) == len(_PREFIX):
        return None
    return namespace[len(_PREFIX):]


def check_reader(principal: Principal, agent: str) -> None:
    """Refuse (403) anyone but the recipient and root."""
    if principal.mode == KEYS and principal.root:
        return
    if principal.agent == agent:
        return
    raise Forbidden(f"the notifications in {inbox_namespace(agent)} are readable only by "
                    f"{agent!r} (X-Agent-Id: {agent}, or a key bound to it) or a root key",
                    namespace=inbox_namespace(agent))


def note_memory(row: dict[str, Any]) -> dict[str, Any]:
    """One notification in the memory shape (see the module docstring)."""
    read = bool(row.get("read"))
    return memory_json({
        "id": row["id"], "tier": row["tier"], "namespace": inbox_namespace(row["to"]),
        "title": row["title"], "content": row["payload"], "tags": [],
        "priority": row["priority"], "confidence": 1.0, "source": SOURCE,
        "access_count": 1 if read else 0,
        "created_at_ms": row["created_at_ms"], "updated_at_ms": row["created_at_ms"],
        "last_accessed_at_ms": None, "expires_at_ms": row.get("expires_at_ms"),
        "agent_id": row["from"],
        "metadata": {"agent_id": row["from"], "recipient_agent_id": row["to"],
                     "message_kind": SOURCE, "read": read},
    })


async def _notes(node: RecordPorts, agent: str, *, limit: int, tier: str | None,
                 min_priority: int | None, since_ms: int | None = None) -> list[dict[str, Any]]:
    await node.read_barrier(inbox_key(agent))
    return await node.store.inbox(agent, unread_only=False, limit=limit,
                                  min_priority=min_priority, since_ms=since_ms, tier=tier,
                                  now_ms=node.now_ms())


async def list_inbox(node: RecordPorts, principal: Principal, agent: str,
                     q: ListMemoriesQuery) -> dict[str, Any]:
    """``GET /memories?namespace=_inbox/<agent>``: the notifications, paged by limit and offset."""
    check_reader(principal, agent)
    if q.tags:
        return {"memories": [], "count": 0}  # notifications carry no tags
    rows = await _notes(node, agent, limit=q.offset + q.limit, tier=q.tier,
                        min_priority=q.min_priority)
    if q.agent_id is not None:
        rows = [r for r in rows if r["from"] == q.agent_id]
    memories = [note_memory(r) for r in rows[q.offset:q.offset + q.limit]]
    return {"memories": memories, "count": len(memories)}


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


async def search_inbox(node: RecordPorts, principal: Principal, agent: str,
                       req: SearchBody) -> dict[str, Any]:
    """``/search`` in ``_inbox/<agent>``: every word of the query must be a
    word of the title or payload (case-insensitive), as the memory search
    asks; ``since`` and ``until`` are inclusive there too. At most
    ``limits.inbox_view_scan_max`` notifications are looked at, the most
    urgent and newest first. ``score`` counts the query's words found
    (higher is better)."""
    check_reader(principal, agent)
    text = req.q or req.query or ""
    fts_query(text)  # the memory search's own refusal of too many words
    wanted = list(dict.fromkeys(_words(text)))
    found: list[dict[str, Any]] = []
    if wanted and not req.tags:
        since = None if req.since is None else parse_rfc3339(req.since) - 1  # inclusive
        until = None if req.until is None else parse_rfc3339(req.until)
        rows = await _notes(node, agent, limit=limits.inbox_view_scan_max, tier=req.tier,
                            min_priority=req.min_priority, since_ms=since)
        for r in rows:
            if until is not None and r["created_at_ms"] > until:
                continue
            if req.agent_id is not None and r["from"] != req.agent_id:
                continue
            have = _words(f"{r['title']} {r['payload']}")
            if all(w in have for w in wanted):
                m = note_memory(r)
                m["score"] = float(sum(have.count(w) for w in wanted))
                found.append(m)
        found.sort(key=lambda m: -m["score"])  # stable: ties keep the inbox order
        found = found[:req.limit]
    return {"memories": found, "results": found, "count": len(found), "query": text}
