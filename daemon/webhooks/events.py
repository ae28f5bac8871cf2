"""From applied ops to webhook events: a pure mapping.

=================  =========================================================
op                 event
=================  =========================================================
mem.put            ``memory_store`` when the body is a first version
                   (``created_at_ms == updated_at_ms``: the memory service
                   stamps both with the same time only on create), or
                   ``memory_consolidate`` when that first version is the
                   result of ``POST /consolidate`` (its metadata names the
                   ``consolidated_from`` ids, which the payload carries);
                   ``memory_promote`` when it raises the tier to ``long``
                   from a lower tier this node knew; else ``memory_update``
mem.del            ``memory_delete``
link.put           ``memory_link_created``: source, target, relation, and
                   the source memory's namespace as this node knew it
note.new           ``notify``
msg.send           ``message_send``: scope and actor only -- never the body,
                   subject or message id (observers get a signal to go and
                   read their inbox, not the mail itself); a send an
                   admission decider held for approval makes
                   ``approval_requested`` instead: the message id, scope,
                   sender and the decider's note (never the body or
                   subject), so a pager can link an approver to it
msg.approve,       ``approval_decided``: the message id, scope, the
msg.reject         decision (``approved`` / ``rejected``), the approver and
                   the reason
msg.claim          ``message_claim``
msg.cancel         ``message_cancel``
msg.complete       ``message_complete``: the message id, its mailbox and
                   sender project, the result and who completed it -- not
                   the note (read it in the outbox, as a body)
=================  =========================================================

Mailbox ops of a project's reserved handoff mailbox (:mod:`common.handoffs`)
produce no event: a handoff is not mail.

Each event also names the agents it concerns (:attr:`Event.agents`: the
actor, and for a notification or a message the recipient too), which a
subscription's ``agent_filter`` is matched against
(:mod:`daemon.webhooks.filters`).

Events describe changes to this node's state, so a memory op that changes
nothing produces none: a put that loses last-writer-wins to a version this
node already holds, a put or a second delete for a memory already deleted.
To decide these and to tell a promote from an update, the intake keeps a
small per-memory :class:`MemoryVersion` (tier, namespace, rank) beside the
outbox; :func:`classify` takes it as input and :func:`next_version` says
what to keep next. Nothing here does I/O or reads a clock.

Every payload is canonical JSON (sorted keys, compact separators, UTF-8),
built once when the event is enqueued; those exact bytes are what gets
signed and sent, on every attempt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from common import ops as K
from common.handoffs import is_box_key
from common.ops import Op
from daemon.schemas.timefmt import rfc3339
from store.records import lww_rank, physical_ms

MEMORY_STORE: Final = "memory_store"
MEMORY_UPDATE: Final = "memory_update"
MEMORY_PROMOTE: Final = "memory_promote"
MEMORY_DELETE: Final = "memory_delete"
MEMORY_CONSOLIDATE: Final = "memory_consolidate"
MEMORY_LINK_CREATED: Final = "memory_link_created"
NOTIFY: Final = "notify"
MESSAGE_SEND: Final = "message_send"
MESSAGE_CLAIM: Final = "message_claim"
MESSAGE_CANCEL: Final = "message_cancel"
MESSAGE_COMPLETE: Final = "message_complete"
APPROVAL_REQUESTED: Final = "approval_requested"
APPROVAL_DECIDED: Final = "approval_decided"

EVENTS: Final = (MEMORY_STORE, MEMORY_UPDATE, MEMORY_PROMOTE, MEMORY_DELETE, MEMORY_CONSOLIDATE,
                 MEMORY_LINK_CREATED, NOTIFY, MESSAGE_SEND, MESSAGE_CLAIM, MESSAGE_CANCEL,
                 MESSAGE_COMPLETE, APPROVAL_REQUESTED, APPROVAL_DECIDED)
# Op kinds that can produce an event; the others are ignored at intake.
EVENT_KINDS: Final = frozenset({K.MEM_PUT, K.MEM_DEL, K.LINK_PUT, K.NOTE_NEW, K.MSG_SEND,
                                K.MSG_CLAIM, K.MSG_CANCEL, K.MSG_COMPLETE, K.MSG_APPROVE,
                                K.MSG_REJECT})
MEMORY_KINDS: Final = frozenset({K.MEM_PUT, K.MEM_DEL})

Rank = tuple[int, str, int]


@dataclass(frozen=True, slots=True)
class MemoryVersion:
    """What the intake remembers about one memory id."""

    rank: Rank
    tier: str | None
    namespace: str | None
    agent_id: str | None
    expires_at_ms: int | None
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    namespace: str | None  # what a subscription's namespace filters are matched against
    payload: dict[str, Any]
    agents: tuple[str, ...] = ()  # what a subscription's agent_filter is matched against

    def body(self) -> bytes:
        return canonical_json(self.payload)

    def body_as(self, name: str) -> bytes:
        """The body under another name for this event (an upstream alias)."""
        return self.body() if name == self.name else canonical_json({**self.payload, "event": name})


def _agents(*candidates: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(a) for a in candidates if a))


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def next_version(op: Op, prior: MemoryVersion | None) -> MemoryVersion | None:
    """The version to remember after ``op``; ``None`` when it changes nothing."""
    if op.kind == K.MEM_DEL:
        if prior is not None and prior.deleted:
            return None
        base = prior or MemoryVersion(lww_rank(op), None, None, None, None)
        return MemoryVersion(base.rank, base.tier, base.namespace, base.agent_id, None,
                             deleted=True)
    if op.kind != K.MEM_PUT:
        return None
    if prior is not None and (prior.deleted or lww_rank(op) <= prior.rank):
        return None
    b = op.body
    return MemoryVersion(lww_rank(op), b.get("tier"), b.get("namespace"), b.get("agent_id"),
                         _opt_int(b.get("expires_at_ms")))


def _memory_event(op: Op, prior: MemoryVersion | None, node_id: str) -> Event | None:
    current = next_version(op, prior)
    if current is None:
        return None
    if op.kind == K.MEM_DEL:
        name = MEMORY_DELETE
    else:
        b = op.body
        created, updated = b.get("created_at_ms"), b.get("updated_at_ms")
        first = prior is None if created is None or updated is None else created == updated
        merged = (b.get("metadata") or {}).get("consolidated_from")
        if first and b.get("source") == "consolidation" and isinstance(merged, list):
            name = MEMORY_CONSOLIDATE
        elif first:
            name = MEMORY_STORE
        elif current.tier == "long" and prior is not None and prior.tier not in (None, "long"):
            name = MEMORY_PROMOTE
        else:
            name = MEMORY_UPDATE
    payload: dict[str, Any] = {
        "event": name,
        "memory_id": str(op.body["id"]),
        "namespace": current.namespace,
        "tier": current.tier,
        "agent_id": current.agent_id,
        "timestamp": rfc3339(physical_ms(op.hlc)),
        "node_id": node_id,
        "change_id": f"{op.origin}#{op.seq}",
    }
    if name == MEMORY_CONSOLIDATE:
        payload["consolidated_from"] = [str(i) for i in op.body["metadata"]["consolidated_from"]]
    return Event(name, current.namespace, payload, _agents(current.agent_id))


def _link_event(op: Op, source: MemoryVersion | None, node_id: str) -> Event:
    b = op.body
    ns = source.namespace if source is not None else None
    return Event(MEMORY_LINK_CREATED, ns, {
        "event": MEMORY_LINK_CREATED, "memory_id": str(b["source_id"]),
        "source_id": str(b["source_id"]), "target_id": str(b["target_id"]),
        "relation": str(b["relation"]), "namespace": ns, "agent_id": None,
        "timestamp": rfc3339(physical_ms(op.hlc)), "node_id": node_id,
        "change_id": f"{op.origin}#{op.seq}",
    })


def _mailbox_scope(op: Op) -> tuple[str | None, str | None]:
    """``(workspace, project)`` of a mailbox op, from its ``mbox:<ws>/<project>`` key."""
    prefix = "mbox:"
    if not op.key.startswith(prefix) or "/" not in op.key:
        return None, None
    workspace, project = op.key[len(prefix):].split("/", 1)
    return workspace, project


def _scope_ns(workspace: str | None, project: str | None) -> str | None:
    return None if workspace is None or project is None else f"{workspace}/{project}"


def _other_event(op: Op, node_id: str) -> Event | None:
    if is_box_key(op.key):
        return None  # a handoff is not mail: its mailbox reports no events
    b = op.body
    stamp = rfc3339(physical_ms(op.hlc))
    if op.kind == K.NOTE_NEW:
        ns = b.get("namespace")
        return Event(NOTIFY, ns, {
            "event": NOTIFY, "id": str(b["id"]), "namespace": ns, "tier": b.get("tier"),
            "agent_id": b.get("from"), "to": b.get("to"), "priority": b.get("priority"),
            "timestamp": stamp, "node_id": node_id, "change_id": f"{op.origin}#{op.seq}",
        }, _agents(b.get("from"), b.get("to")))
    if op.kind == K.MSG_SEND and b.get("approval_required"):
        ns = _scope_ns(b.get("to_workspace"), b.get("to_project"))
        return Event(APPROVAL_REQUESTED, ns, {
            "event": APPROVAL_REQUESTED, "id": str(b["id"]), "namespace": ns,
            "workspace": b.get("to_workspace"), "project": b.get("to_project"),
            "to_agent": b.get("to_agent"), "from_workspace": b.get("from_workspace"),
            "from_project": b.get("from_project"), "from_agent": b.get("from_agent"),
            "agent_id": b.get("from_agent"), "note": b.get("approval_note"),
            "timestamp": stamp, "node_id": node_id, "change_id": f"{op.origin}#{op.seq}",
        }, _agents(b.get("from_agent"), b.get("to_agent")))
    if op.kind in (K.MSG_APPROVE, K.MSG_REJECT):
        workspace, project = _mailbox_scope(op)
        ns = _scope_ns(workspace, project)
        return Event(APPROVAL_DECIDED, ns, {
            "event": APPROVAL_DECIDED, "id": str(b["id"]), "namespace": ns,
            "workspace": workspace, "project": project,
            "decision": "approved" if op.kind == K.MSG_APPROVE else "rejected",
            "by_user": b.get("by_user"), "agent_id": b.get("by_agent"),
            "reason": b.get("reason"), "timestamp": stamp, "node_id": node_id,
            "change_id": f"{op.origin}#{op.seq}",
        }, _agents(b.get("by_agent")))
    if op.kind == K.MSG_SEND:
        ns = _scope_ns(b.get("to_workspace"), b.get("to_project"))
        # Observer rule: scope and actor metadata only. No body, no subject,
        # no message id and no op id (which would let a receiver fetch it).
        return Event(MESSAGE_SEND, ns, {
            "event": MESSAGE_SEND, "namespace": ns,
            "to_workspace": b.get("to_workspace"), "to_project": b.get("to_project"),
            "to_agent": b.get("to_agent"), "from_workspace": b.get("from_workspace"),
            "from_project": b.get("from_project"), "from_agent": b.get("from_agent"),
            "agent_id": b.get("from_agent"), "timestamp": stamp, "node_id": node_id,
        }, _agents(b.get("from_agent"), b.get("to_agent")))
    if op.kind in (K.MSG_CLAIM, K.MSG_CANCEL):
        workspace, project = _mailbox_scope(op)
        ns = _scope_ns(workspace, project)
        name = MESSAGE_CLAIM if op.kind == K.MSG_CLAIM else MESSAGE_CANCEL
        payload: dict[str, Any] = {
            "event": name, "id": str(b["id"]), "namespace": ns, "workspace": workspace,
            "project": project, "timestamp": stamp, "node_id": node_id,
            "change_id": f"{op.origin}#{op.seq}",
        }
        if name == MESSAGE_CLAIM:
            payload["agent_id"] = b.get("claimer_agent")
        else:
            payload.update(by_workspace=b.get("by_workspace"), by_project=b.get("by_project"))
        return Event(name, ns, payload, _agents(payload.get("agent_id")))
    if op.kind == K.MSG_COMPLETE:
        workspace, project = _mailbox_scope(op)
        ns = _scope_ns(workspace, project)
        return Event(MESSAGE_COMPLETE, ns, {
            "event": MESSAGE_COMPLETE, "id": str(b["id"]), "namespace": ns,
            "workspace": workspace, "project": project,
            "from_workspace": b.get("from_workspace"), "from_project": b.get("from_project"),
            "result": b.get("result"), "agent_id": b.get("by_agent_id") or b.get("by_agent"),
            "timestamp": stamp, "node_id": node_id, "change_id": f"{op.origin}#{op.seq}",
        }, _agents(b.get("by_agent_id"), b.get("by_agent")))
    return None


def version_key(op: Op) -> str | None:
    """The memory whose :class:`MemoryVersion` :func:`classify` needs for
    ``op``: the memory itself, or a link's source; ``None`` for the rest."""
    if op.kind in MEMORY_KINDS:
        raw = op.body.get("id")
    elif op.kind == K.LINK_PUT:
        raw = op.body.get("source_id")
    else:
        return None
    return None if raw is None else str(raw)


def classify(op: Op, prior: MemoryVersion | None, node_id: str) -> Event | None:
    """The event ``op`` produces on this node, given what it knew of the
    memory before (``prior``: the memory of :func:`version_key`)."""
    if op.kind in MEMORY_KINDS:
        return _memory_event(op, prior, node_id)
    if op.kind == K.LINK_PUT:
        if op.key != K.mem_key(str(op.body.get("source_id"))):
            return None  # the copy a lane keeps for the link's target (docs/lanes.md)
        return _link_event(op, prior, node_id)
    return _other_event(op, node_id)
