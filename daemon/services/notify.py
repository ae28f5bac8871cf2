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

Replies and threads: ``in_reply_to`` names a notification the sender may
read (one it received or sent; any other id is a 404, so a reply reveals
nothing); the new notification joins that one's thread (``thread_id``, the
first notification's id; a first one is its own thread). ``reply_to`` is
``in_reply_to`` addressed to the original sender: the target is that
notification's ``from``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common import limits
from common.errors import BadRequest, Conflict, NotFound, PayloadTooLarge
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


async def _parent(node: RecordPorts, note_id: str, sender: str) -> dict[str, Any]:
    """The notification ``note_id`` if ``sender`` received or sent it, else 404."""
    rows = await node.store.notifications([note_id])
    if not rows:  # written through another node a moment ago: hear a read quorum
        await node.read_barrier(ALL_KEYS)
        rows = await node.store.notifications([note_id])
    if not rows or sender not in (rows[0].get("from"), rows[0].get("to")):
        raise NotFound(f"no notification {note_id} this agent received or sent", id=note_id)
    return rows[0]


async def _recipients(node: RecordPorts, req: NotifyRequest, sender: str) -> list[str]:
    prefix = req.broadcast_prefix
    if prefix is None:
        t = req.target_agent_id
        assert t is not None  # NotifyRequest: a target, or reply_to resolved above
        return list(dict.fromkeys(t)) if isinstance(t, list) else [t]
    await node.read_barrier(ALL_KEYS)
    rows = [*await node.store.list_agents(),  # with lanes, each lane keeps some of the agents
            *(row for rows in await node.every_other_lane("agents", None) for row in rows)]
    agents = sorted(a["agent_id"] for a in rows
                    if a["agent_id"].startswith(prefix) and a["agent_id"] != sender)
    if not agents:
        raise NotFound(f"no registered agent matches {req.target_agent_id!r}"
                         + (f" with prefix {prefix!r}" if prefix else ""))
    return agents


async def notify(node: RecordPorts, req: NotifyRequest, *, sender: str,
                 idempotency_key: str | None = None) -> dict[str, Any]:
    parent_id = req.reply_to or req.in_reply_to
    thread: tuple[str, str] | None = None
    if parent_id is not None:
        parent = await _parent(node, parent_id, sender)
        thread = (str(parent["id"]), str(parent.get("thread_id") or parent["id"]))
        if req.reply_to is not None:
            origin = str(parent["from"])
            if req.target_agent_id not in (None, origin):
                raise BadRequest(f"reply_to answers {origin}, the sender of {parent_id}; "
                                 "target_agent_id names someone else")
            req = req.model_copy(update={"target_agent_id": origin})
    targets = await _recipients(node, req, sender)
    if len(targets) > limits.notify_broadcast_max:
        raise PayloadTooLarge(
            f"{len(targets)} recipients, over {limits.notify_broadcast_max} "
            "(limits.notify_broadcast_max)", limit="notify_broadcast_max")
    if isinstance(req.target_agent_id, str) and req.broadcast_prefix is None:
        return await _notify_one(node, req, targets[0], sender=sender,
                                 idempotency_key=idempotency_key, thread=thread)
    bodies = [await _note_body(node, req, t, sender=sender,
                               idempotency_key=None if idempotency_key is None
                               else f"{idempotency_key}:{t}", thread=thread) for t in targets]
    await node.write([(NOTE_NEW, inbox_key(b["to"]), b) for b in bodies])
    return {
        "from": sender,
        "delivered_to": [b["to"] for b in bodies],
        "count": len(bodies),
        "notifications": [notified_json(b) for b in bodies],
    }


async def _notify_one(node: RecordPorts, req: NotifyRequest, target: str, *, sender: str,
                      idempotency_key: str | None,
                      thread: tuple[str, str] | None) -> dict[str, Any]:
    body = await _note_body(node, req, target, sender=sender, idempotency_key=idempotency_key,
                            thread=thread)
    await node.write([(NOTE_NEW, inbox_key(target), body)])
    return notified_json(body)


async def _note_body(node: RecordPorts, req: NotifyRequest, target: str, *, sender: str,
                     idempotency_key: str | None,
                     thread: tuple[str, str] | None = None) -> dict[str, Any]:
    """``thread``: (the notification answered, its thread id), or None."""
    now = node.now_ms()
    ttl = node.settings.notify.tier_ttl_secs.get(req.tier)
    note_id = record_id("note", sender, idempotency_key, key=inbox_key(target),
                        lanes=node.settings.server.lanes)
    body: dict[str, Any] = {
        "id": note_id,
        "from": sender,
        "to": target,
        "namespace": inbox_namespace(target),
        "title": req.title,
        "payload": req.payload,
        "priority": req.priority,
        "tier": req.tier,
        "created_at_ms": now,
        "expires_at_ms": None if ttl is None else now + ttl * 1000,
        "in_reply_to": None if thread is None else thread[0],
        "thread_id": note_id if thread is None else thread[1],
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
        thread_id=q.thread_id, now_ms=node.now_ms())
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
