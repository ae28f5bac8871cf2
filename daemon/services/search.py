"""Search and recall over the memories' full-text index.

Both are reads that span records, so before querying they pass the node's
read barrier for :data:`common.ops.ALL_KEYS`: R-1 peers (R + W > N, the same
read quorum the inbox uses) hand over every op this node lacks, so a memory
acknowledged on any node is found on every node at once. ``consistency=local``
skips the barrier. With lanes each lane searches its own memories (and
ranks them by its own index's statistics) and the best of every lane are
merged (:mod:`daemon.services.memory_lanes`).

``search`` requires every word of ``q`` (AND) and answers the SDK's shape
(``memories``) plus upstream's (``results``, ``query``); ``recall`` accepts
any word (OR), ranks the same way, and trims to ``budget_tokens`` (about
four characters a token) when given. Unlike upstream, a recall here does not
write (no access-count bump, no TTL extension): a read that replicates a
write per hit would turn every recall into a quorum round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.ops import ALL_KEYS
from daemon.schemas.memories import memory_json
from daemon.schemas.search import RecallBody, SearchBody
from daemon.schemas.timefmt import parse_rfc3339
from daemon.services import memory_lanes
from store import search as S

if TYPE_CHECKING:
    from daemon.ports import RecordPorts

_CHARS_PER_TOKEN = 4


def _ms(value: str | None) -> int | None:
    return None if value is None else parse_rfc3339(value)


def _scored(row: dict[str, Any]) -> dict[str, Any]:
    out = memory_json(row)
    out["score"] = row["score"]
    return out


async def _matching(node: RecordPorts, match: str | None, req: SearchBody | RecallBody, *,
                    agent_id: str | None = None) -> list[dict[str, Any]]:
    """The live memories ``match`` finds under the request's filters, scored, best first
    (none when the text had no words)."""
    if match is None:
        return []
    kw: dict[str, Any] = {"limit": req.limit, "now_ms": node.now_ms(), "namespace": req.namespace,
          "tier": req.tier, "tags": req.tags, "min_priority": req.min_priority,
          "agent_id": agent_id, "since_ms": _ms(req.since), "until_ms": _ms(req.until)}
    if node.settings.server.lanes == 1:
        await node.read_barrier(ALL_KEYS, req.consistency)
        rows = await S.search(node.store.reads, match, **kw)
    else:  # every lane's best, merged in the query's order (each lane ranks by its own index)
        answers = await memory_lanes.every_lane(
            node, "search", {"match": match, "kw": kw, "consistency": req.consistency})
        rows = sorted((r for a in answers for r in a),
                      key=lambda r: (-float(r["score"]), -int(r["priority"]), str(r["id"])))
        rows = rows[:req.limit]
    return [_scored(r) for r in rows]


async def search(node: RecordPorts, req: SearchBody) -> dict[str, Any]:
    text = req.q or req.query or ""
    memories = await _matching(node, S.fts_query(text), req, agent_id=req.agent_id)
    return {"memories": memories, "results": memories, "count": len(memories), "query": text}


async def recall(node: RecordPorts, req: RecallBody) -> dict[str, Any]:
    memories = await _matching(node, S.fts_query(req.context, any_word=True), req)
    out: dict[str, Any] = {"memories": memories, "count": len(memories)}
    if req.budget_tokens is not None:
        kept: list[dict[str, Any]] = []
        used = 0
        for m in memories:
            cost = (len(m["title"]) + len(m["content"])) // _CHARS_PER_TOKEN + 1
            if kept and used + cost > req.budget_tokens:
                break
            kept.append(m)
            used += cost
        out = {"memories": kept, "count": len(kept), "tokens_used": used,
               "budget_tokens": req.budget_tokens}
    return out
