"""Agent-to-agent notifications: notify, inbox, mark read.

A notify is one ``note.new`` op under the recipient's ``inbox:<agent>`` key:
its own record (never an overwrite of an earlier one with the same title),
``from`` exactly the sending agent, lifetime set by its tier
(``settings.notify.tier_ttl_secs``). It is acknowledged once W members hold
it. With an ``Idempotency-Key`` the id is derived from (sender, key); a
retry re-writes the record exactly as first written (insert-once, so the
store keeps one copy) and answers as the first attempt did. Reusing a key
for a different notification is a 409.

An inbox read first runs the node's read barrier for that inbox key (R + W
> N, so a notify acknowledged anywhere is seen here), unless the caller
asked for ``consistency=local``. Read marks are ``note.read`` ops: monotone,
replicated, and only ever for notifications addressed to the reader.

Broadcast: ``target_agent_id`` may be a list of agent ids, or ``"*"`` /
``"prefix*"`` for every registered agent (whose id starts with the prefix;
the sender is left out), read after the cluster-wide read barrier. Each
recipient gets its own ``note.new``; all of them go in ONE quorum write, so
the reply (``delivered_to``: the ids written) is all-or-nothing. More than
``limits.notify_broadcast_max`` recipients is a 413 and writes nothing.
With an ``Idempotency-Key`` each recipient's id is derived from (sender,
key, recipient), so a retried broadcast re-asserts the same records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common import limits
from common.errors import Conflict, NotFound, PayloadTooLarge
from common.ops import ALL_KEYS, NOTE_NEW, NOTE_READ, inbox_key
from common.vocab import CONSISTENCY_DEFAULT, NOTE_FIELDS, Consistency
from daemon.schemas.ids import record_id
from daemon.schemas.notify import (
    InboxQuery,
    NotifyRequest,
    inbox_namespace,
    message_json,
    notified_json,
)
from daemon.schemas.timefmt import parse_rfc3339

if TYPE_CHECKING:
    from daemon.ports import RecordPorts

_SAME_REQUEST = ("from", "to", "title", "payload", "priority", "tier")


async def _recipients(node: RecordPorts, req: NotifyRequest, sender: str) -> list[str]:
    prefix = req.broadcast_prefix
    if prefix is None:
        t = req.target_agent_id
        return list(dict.fromkeys(t)) if isinstance(t, list) else [t]
    await node.read_barrier(ALL_KEYS)
    agents = [a["agent_id"] for a in await node.store.list_agents()
              if a["agent_id"].startswith(prefix) and a["agent_id"] != sender]
    if not agents:
        raise NotFound(f"no registered agent matches {req.target_agent_id!r}"
                         + (f" with prefix {prefix!r}" if prefix else ""))
    return agents


async def notify(node: RecordPorts, req: NotifyRequest, *, sender: str,
                 idempotency_key: str | None = None) -> dict[str, Any]:
    targets = await _recipients(node, req, sender)
    if len(targets) > limits.notify_broadcast_max:
        raise PayloadTooLarge(
            f"{len(targets)} recipients, over {limits.notify_broadcast_max} "
            "(limits.notify_broadcast_max)", limit="notify_broadcast_max")
    if isinstance(req.target_agent_id, str) and req.broadcast_prefix is None:
        return await _notify_one(node, req, targets[0], sender=sender,
                                 idempotency_key=idempotency_key)
    bodies = [await _note_body(node, req, t, sender=sender,
                               idempotency_key=None if idempotency_key is None
                               else f"{idempotency_key}:{t}") for t in targets]
    await node.write([(NOTE_NEW, inbox_key(b["to"]), b) for b in bodies])
    return {
        "from": sender,
        "delivered_to": [b["to"] for b in bodies],
        "count": len(bodies),
        "notifications": [notified_json(b) for b in bodies],
    }


async def _notify_one(node: RecordPorts, req: NotifyRequest, target: str, *, sender: str,
                      idempotency_key: str | None) -> dict[str, Any]:
    body = await _note_body(node, req, target, sender=sender, idempotency_key=idempotency_key)
    await node.write([(NOTE_NEW, inbox_key(target), body)])
    return notified_json(body)


async def _note_body(node: RecordPorts, req: NotifyRequest, target: str, *, sender: str,
                     idempotency_key: str | None) -> dict[str, Any]:
    now = node.now_ms()
    ttl = node.settings.notify.tier_ttl_secs.get(req.tier)
    body: dict[str, Any] = {
        "id": record_id("note", sender, idempotency_key),
        "from": sender,
        "to": target,
        "namespace": inbox_namespace(target),
        "title": req.title,
        "payload": req.payload,
        "priority": req.priority,
        "tier": req.tier,
        "created_at_ms": now,
        "expires_at_ms": None if ttl is None else now + ttl * 1000,
    }
    if idempotency_key is not None:
        prior = await node.store.notifications([body["id"]])
        if prior:
            first = prior[0]
            if any(first.get(f) != body[f] for f in _SAME_REQUEST):
                raise Conflict("Idempotency-Key already used for a different notification",
                               id=body["id"])
            body = {f: first.get(f) for f in NOTE_FIELDS}
    return body


async def inbox(node: RecordPorts, q: InboxQuery, *, agent: str) -> dict[str, Any]:
    await node.read_barrier(inbox_key(agent), q.consistency)
    rows = await node.store.inbox(
        agent, unread_only=q.unread_only, limit=q.limit, min_priority=q.min_priority,
        since_ms=None if q.since is None else parse_rfc3339(q.since), tier=q.tier,
        now_ms=node.now_ms())
    if q.mark_read:
        unread = [r["id"] for r in rows if not r.get("read")]
        if unread:
            await node.write([(NOTE_READ, inbox_key(agent), {"to": agent, "ids": unread})])
    messages = [message_json(r, read=True if q.mark_read else None) for r in rows]
    return {
        "agent_id": agent,
        "namespace": inbox_namespace(agent),
        "count": len(messages),
        "unread_only": q.unread_only,
        "messages": messages,
    }


async def mark_read(node: RecordPorts, ids: list[str], *, agent: str,
                    consistency: Consistency = CONSISTENCY_DEFAULT) -> dict[str, Any]:
    """Mark the given notifications read; ids addressed to someone else (or
    unknown here after the read barrier) are ignored, not reported."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {"marked": 0}
    await node.read_barrier(inbox_key(agent), consistency)
    rows = [r for r in await node.store.notifications(wanted) if r.get("to") == agent]
    unread = [r["id"] for r in rows if not r.get("read")]
    if unread:
        await node.write([(NOTE_READ, inbox_key(agent), {"to": agent, "ids": unread})])
    return {"marked": len(rows)}
