"""Row shapes shared by the in-memory reference and the SQLite store.

Both :mod:`store.in_memory` and :mod:`store.db` turn op bodies into the same
plain dicts and order conflicting ops the same way, so this module holds
the body-to-row conversions and the rank functions once; the field lists
of op bodies are :mod:`common.vocab`'s (re-exported here), the states
:mod:`common.lifecycle`'s.
Everything here is pure: no I/O, no clock.

Ranks break every tie down to the op id, so two replicas that hold the same
ops always pick the same winner, whatever order the ops came in:

* last-writer-wins records (memories, agent type/capabilities) keep the op
  with the greatest ``(hlc, origin, seq)``;
* insert-once records (notifications, messages, the identity fields of a
  session) keep the op with the smallest ``(hlc, origin, seq)``, so a retry
  that re-creates the same id on another node can never swap the body;
* terminal mailbox ops keep the greatest ``(epoch, hlc, origin, seq)``,
  which is :attr:`common.ops.Op.rank` with the seq as the last tie-break.
"""

from __future__ import annotations

from typing import Any, Final

from common import lifecycle
from common.lifecycle import CANCELLED, CLAIMED, EDITING, PENDING, REJECTED, claim_rank_of
from common.ops import (
    MSG_APPROVE,
    MSG_CANCEL,
    MSG_CLAIM,
    MSG_COMPLETE,
    MSG_HOLD,
    MSG_PURGE,
    MSG_REJECT,
    MSG_RELEASE,
    Op,
)
from common.vocab import COMPLETE_FIELDS as COMPLETE_FIELDS
from common.vocab import EMPTY_FIELDS as EMPTY_FIELDS
from common.vocab import MESSAGE_FIELDS as MESSAGE_FIELDS
from common.vocab import NOTE_FIELDS as NOTE_FIELDS

# Mirrors federation.hlc.LOGICAL_BITS; store/ may not import federation/.
_HLC_LOGICAL_BITS: Final = 16

MEMORY_FIELDS: Final = (
    "id", "tier", "namespace", "title", "content", "tags", "priority", "confidence",
    "source", "access_count", "created_at_ms", "updated_at_ms", "expires_at_ms",
    "agent_id", "metadata",
)
SESSION_FIELDS: Final = (
    "workspace", "project", "harness", "session_id", "owner_user", "started_at_ms",
    "last_at_ms",
)

TERMINAL_STATE: Final = {k: lifecycle.TRANSITIONS[k][1] for k in lifecycle.TERMINAL_KINDS}

Rank = tuple[int, str, int]
TerminalRank = tuple[int, int, str, int]


def physical_ms(hlc: int) -> int:
    """Wall-clock part of an HLC stamp, in milliseconds."""
    return hlc >> _HLC_LOGICAL_BITS


def lww_rank(op: Op) -> Rank:
    return (op.hlc, op.origin, op.seq)


def body_rank(op: Op) -> Rank:
    """The rank of a record every lane keeps (sessions, users, keys, grants:
    :data:`common.lanes.GLOBAL_KINDS`): the stamp minted once with its body
    (``rank``: ``[hlc, clock]``) where it has one, else its op's.

    With lanes each lane writes its own op of the one body, stamped by that
    lane's clock when its share arrives, so two conflicting writes ranked by
    their ops could settle one way in one lane's group and the other way in
    another's, for good (docs/lanes.md, "The admin side")."""
    rank = op.body.get("rank")
    if (isinstance(rank, (list, tuple)) and len(rank) == 2 and type(rank[0]) is int
            and isinstance(rank[1], str)):
        return (rank[0], rank[1], 0)
    return lww_rank(op)


def terminal_rank(op: Op) -> TerminalRank:
    return (op.epoch, op.hlc, op.origin, op.seq)


def is_expired(expires_at_ms: int | None, now_ms: int) -> bool:
    return expires_at_ms is not None and expires_at_ms <= now_ms


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def memory_row(op: Op) -> dict[str, Any]:
    """The memory a ``mem.put`` op describes (``updated_at_ms`` defaults to
    the op's HLC time, ``access_count`` to 0)."""
    b = op.body
    return {
        "id": str(b["id"]),
        "tier": b.get("tier", "mid"),
        "namespace": b.get("namespace", "global"),
        "title": b.get("title", ""),
        "content": b.get("content", ""),
        "tags": [str(t) for t in b.get("tags") or []],
        "priority": int(b.get("priority", 5)),
        "confidence": float(b.get("confidence", 1.0)),
        "source": b.get("source", "api"),
        "access_count": int(b.get("access_count", 0)),
        "created_at_ms": int(b.get("created_at_ms", physical_ms(op.hlc))),
        "updated_at_ms": int(b.get("updated_at_ms", physical_ms(op.hlc))),
        "expires_at_ms": _opt_int(b.get("expires_at_ms")),
        "agent_id": b.get("agent_id"),
        "metadata": dict(b.get("metadata") or {}),
    }


def note_row(op: Op) -> dict[str, Any]:
    """The notification a ``note.new`` op describes (without ``read``)."""
    b = op.body
    return {
        "id": str(b["id"]),
        "from": str(b["from"]),
        "to": str(b["to"]),
        "namespace": b.get("namespace"),
        "title": b.get("title", ""),
        "payload": b.get("payload", ""),
        "priority": int(b.get("priority", 5)),
        "tier": b.get("tier", "short"),
        "created_at_ms": int(b.get("created_at_ms", physical_ms(op.hlc))),
        "expires_at_ms": _opt_int(b.get("expires_at_ms")),
        "in_reply_to": _opt_str(b.get("in_reply_to")),
        "thread_id": str(b.get("thread_id") or b["id"]),
    }


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def link_row(op: Op) -> dict[str, Any]:
    """The link a ``link.put`` op describes."""
    b = op.body
    return {
        "source_id": str(b["source_id"]),
        "target_id": str(b["target_id"]),
        "relation": str(b.get("relation", "related_to")),
        "created_at_ms": int(b.get("created_at_ms", physical_ms(op.hlc))),
    }


def grant_row(op: Op) -> dict[str, Any]:
    """The grant (or revoke, ``granted`` False) a ``grant.put`` op describes."""
    b = op.body
    granted = bool(b.get("granted", True))
    return {
        "memory_id": str(b["memory_id"]),
        "agent_id": str(b["agent_id"]),
        "permission": (str(b.get("permission") or "read")) if granted else None,
        "granted": granted,
        "at_ms": int(b.get("at_ms", physical_ms(op.hlc))),
    }


def nsub_row(op: Op) -> dict[str, Any]:
    """The namespace subscription (or its removal) an ``nsub.put`` op describes."""
    b = op.body
    return {
        "agent_id": str(b["agent_id"]),
        "namespace": str(b["namespace"]),
        "active": bool(b.get("active", True)),
        "at_ms": int(b.get("at_ms", physical_ms(op.hlc))),
    }


def user_row(op: Op) -> dict[str, Any]:
    """The user a ``user.put`` op describes."""
    b = op.body
    pw = b.get("password_hash")
    return {
        "name": str(b["name"]),
        "root": bool(b.get("root", False)),
        "password_hash": None if pw is None else str(pw),
        "removed": bool(b.get("removed", False)),
        "created_at_ms": int(b.get("created_at_ms", physical_ms(op.hlc))),
    }


def apikey_row(op: Op) -> dict[str, Any]:
    """The API key an ``apikey.put`` op describes (the hash, never a secret)."""
    b = op.body
    agent, label = b.get("agent"), b.get("label")
    return {
        "id": str(b["id"]),
        "user": str(b["user"]),
        "agent": None if agent is None else str(agent),
        "label": None if label is None else str(label),
        "hash": str(b["hash"]),
        "created_at_ms": int(b.get("created_at_ms", physical_ms(op.hlc))),
        "revoked": bool(b.get("revoked", False)),
    }


def pgrant_row(op: Op) -> dict[str, Any]:
    """The project grant (or revoke, ``granted`` False) a ``pgrant.put`` op
    describes; ``project`` None is the whole workspace."""
    b = op.body
    project = b.get("project")
    return {
        "user": str(b["user"]),
        "workspace": str(b["workspace"]),
        "project": None if project in (None, "") else str(project),
        "access": "write" if b.get("access") == "write" else "read",
        "granted": bool(b.get("granted", True)),
        "at_ms": int(b.get("at_ms", physical_ms(op.hlc))),
    }


def message_row(op: Op) -> dict[str, Any]:
    """The body fields of a ``msg.send`` op (absent optional fields are None)."""
    b = op.body
    row = {name: b.get(name) for name in MESSAGE_FIELDS}
    row["id"] = str(b["id"])
    row["created_at_ms"] = int(b.get("created_at_ms", physical_ms(op.hlc)))
    row["thread_id"] = str(b.get("thread_id") or row["id"])  # a send older than threads
    row["approval_required"] = bool(b.get("approval_required"))
    return row


# Columns of a msg_decision row (the winning msg.approve / msg.reject).
DECISION_COLS: Final = ("kind", "by_user", "by_agent", "reason", "at_ms", "epoch", "hlc",
                        "origin", "seq")


def decision_row(op: Op) -> dict[str, Any]:
    """What an approver's ``msg.approve`` / ``msg.reject`` op records."""
    b = op.body
    reason = b.get("reason")
    return {"kind": op.kind, "by_user": b.get("by_user"), "by_agent": b.get("by_agent"),
            "reason": None if reason is None else str(reason),
            "at_ms": int(b.get("at_ms", physical_ms(op.hlc))), "epoch": op.epoch}


def decision_op(key: str, msg_id: str, row: Any) -> Op:
    """The winning approve/reject op of a message, rebuilt from its stored
    row (a mapping with :data:`DECISION_COLS`), for an owner's model."""
    return Op(row["origin"], row["seq"], row["hlc"], row["kind"], key,
              {"id": msg_id, "by_user": row["by_user"], "by_agent": row["by_agent"],
               "reason": row["reason"], "at_ms": row["at_ms"]}, row["epoch"])


LEASE_COLS: Final = ("token", "lease_ms", "lease_until_ms", "delivery", "renewed_at_ms")


def terminal_row(op: Op) -> dict[str, Any]:
    """What the winning terminal op says about its message (a ``msg.renew``
    says what a claim does, with its later deadline)."""
    b = op.body
    claim = op.kind in lifecycle.CLAIM_KINDS
    at_ms = int(b.get("at_ms", physical_ms(op.hlc)))
    lease = {c: (_opt_int(b.get(c)) if c != "token" else b.get(c)) if claim else None
             for c in LEASE_COLS}
    return {**lease,
        "state": TERMINAL_STATE[op.kind],
        "epoch": op.epoch,
        "claimed_by_session": b.get("claimer_session") if claim else None,
        "claimed_by_agent": b.get("claimer_agent") if claim else None,
        "claimed_by_key": b.get("claimer_key") if claim else None,
        "claimed_by_agent_id": b.get("claimer_agent_id") if claim else None,
        "request_id": b.get("request_id") if claim else None,
        "claimed_at_ms": at_ms if claim else None,
        "cancelled_at_ms": at_ms if op.kind == MSG_CANCEL else None,
    }


def completion_row(op: Op) -> dict[str, Any]:
    """What a ``msg.complete`` op records (the latest claim's first completion
    wins: :func:`completion_rank`)."""
    b = op.body
    row = {name: b.get(name) for name in COMPLETE_FIELDS}
    row["id"] = str(b["id"])
    row["at_ms"] = int(b.get("at_ms", physical_ms(op.hlc)))
    rank = claim_rank_of(b)
    row["claim_epoch"], row["claim_hlc"], row["claim_origin"], row["claim_seq"] = rank
    row["mailbox"] = op.key
    row["purged"] = 0
    return row


def purged_completion(row: dict[str, Any]) -> dict[str, Any]:
    """A completion a purge took: its rank stays (so the kept completion is
    the same in any order), its outcome and note go."""
    return {**row, "result": "", "note": None, "by_session": None, "by_agent": None,
            "by_key": None, "by_agent_id": None, "purged": 1}


def completion_below(row: Any, mark: tuple[int, int, str, int] | None) -> bool:
    """Does this completion complete a claim decided before the purge ``mark``
    (its mailbox's greatest purge, as (epoch, hlc, origin, seq)), so that
    its message went with the purge? (A completion that names no claim,
    written before completions did, is never judged so.)"""
    return (mark is not None and int(row["claim_hlc"] or 0) > 0
            and _claim_rank(row) < tuple(mark))

def _claim_rank(row: Any) -> tuple[int, int, str, int]:
    return (int(row["claim_epoch"] or 0), int(row["claim_hlc"] or 0),
            str(row["claim_origin"] or ""), int(row["claim_seq"] or 0))


def completion_wins(new: Any, cur: Any) -> bool:
    """Of two completion rows of a message, is ``new`` the one kept? The one
    of the later claim (``claim_rank``), then the first by ``(hlc, origin,
    seq)`` (:func:`federation.mailbox.completion_wins` for ops)."""
    a, b = _claim_rank(new), _claim_rank(cur)
    return a > b or (a == b and (new["hlc"], new["origin"], new["seq"])
                     < (cur["hlc"], cur["origin"], cur["seq"]))


def claim_op(key: str, msg_id: str, row: Any, rank: tuple[int, int, str, int]) -> Op:
    """The winning claim (or renew) of a message, rebuilt from its stored
    terminal row (a :func:`terminal_row` mapping) for an owner's model."""
    epoch, hlc, origin, seq = rank
    body: dict[str, Any] = {
        "id": msg_id, "claimer_session": row["claimed_by_session"],
        "claimer_agent": row["claimed_by_agent"], "claimer_key": row["claimed_by_key"],
        "claimer_agent_id": row["claimed_by_agent_id"], "request_id": row["request_id"],
        "at_ms": row["claimed_at_ms"]}
    body.update({c: row[c] for c in LEASE_COLS if row[c] is not None})
    return Op(origin, seq, hlc, MSG_CLAIM, key, body, epoch)


def completion_op(key: str, row: Any) -> Op:
    """A message's kept completion, rebuilt from its stored row, for an
    owner's model (which needs it to know a lease ended)."""
    body = {name: row[name] for name in COMPLETE_FIELDS}
    body["claim_rank"] = list(_claim_rank(row))
    return Op(row["origin"], row["seq"], row["hlc"], MSG_COMPLETE, key, body, 0)


def empty_row(op: Op) -> dict[str, Any]:
    """What a ``msg.empty`` op records: pop ``request_id`` found nothing."""
    b = op.body
    return {"mailbox": op.key, "request_id": str(b["request_id"]),
            "claimer_session": b.get("claimer_session"), "claimer_agent": b.get("claimer_agent"),
            "at_ms": int(b.get("at_ms", physical_ms(op.hlc))), "epoch": op.epoch}


def hold_row(op: Op) -> dict[str, Any]:
    """What the winning ``msg.hold`` / ``msg.release`` op says."""
    b = op.body
    hold = op.kind == MSG_HOLD
    return {"kind": op.kind, "epoch": op.epoch,
            "holder_session": b.get("holder_session") if hold else None,
            "holder_agent": b.get("holder_agent") if hold else None,
            "holder_user": b.get("holder_user") if hold else None,
            "at_ms": int(b.get("at_ms", physical_ms(op.hlc)))}


def revision_row(op: Op) -> dict[str, Any] | None:
    """The content a ``msg.release`` saved (None for a discard)."""
    content = op.body.get("content")
    if op.kind != MSG_RELEASE or not isinstance(content, dict):
        return None
    return {"subject": content.get("subject"), "body": content.get("body"),
            "epoch": op.epoch, "edited_at_ms": int(op.body.get("at_ms", physical_ms(op.hlc)))}


def standing_decision(state: str, decisions: Any) -> Any:
    """Of a message's winning approve and reject rows (``decisions``: kind ->
    row, or None), the one its state bears out: the reject if it is
    rejected, else the approval. (A reject outranked by a later claim or
    hold was never acknowledged, and an approval below a standing reject
    was not either.)"""
    if not decisions:
        return None
    return decisions.get(MSG_REJECT) if state == REJECTED else decisions.get(MSG_APPROVE)


def reject_op(key: str, msg_id: str, rank: tuple[int, int, str, int],
              decision: Any) -> Op:
    """A winning ``msg.reject`` of ``rank`` (epoch, hlc, origin, seq), rebuilt
    with who rejected it when ``decision`` (its msg_decision row) is that op."""
    epoch, hlc, origin, seq = rank
    if decision is not None and (decision["epoch"], decision["hlc"], decision["origin"],
                                 decision["seq"]) == rank:
        return decision_op(key, msg_id, decision)
    return Op(origin, seq, hlc, MSG_REJECT, key, {"id": msg_id}, epoch)


def message_view(row: dict[str, Any], order: tuple[int, str], send_epoch: int,
                 terminal: dict[str, Any] | None, hold: dict[str, Any] | None = None,
                 revision: dict[str, Any] | None = None,
                 completion: dict[str, Any] | None = None,
                 decisions: dict[str, Any] | None = None,
                 deliveries: int | None = None) -> dict[str, Any]:
    """A message as readers see it: body fields (a saved edit's subject and
    body over the send's), state (:func:`common.lifecycle.merged_state`),
    the claim record of the winning terminal op (a :func:`terminal_row`),
    who holds it for an edit, its outcome (a :func:`completion_row`, shown
    only while claimed), the approver's decision that stands (of
    ``decisions``, kind -> :func:`decision_row`: :func:`standing_decision`),
    its lease (deadline while it stands; the claim token is never shown),
    how many times a leased pop handed it out (``deliveries``: the winning
    claim's, standing or expired), and its mailbox order."""
    out = dict(row)
    if terminal is None:
        out.update(state=PENDING, claimed_by_session=None, claimed_by_agent=None,
                   claimed_by_key=None, claimed_by_agent_id=None,
                   request_id=None, claimed_at_ms=None, cancelled_at_ms=None,
                   epoch=send_epoch, terminal_rank=None)
    else:
        out.update({k: v for k, v in terminal.items() if k not in LEASE_COLS})
    token = None if terminal is None else terminal.get("token")
    out["approval_required"] = bool(row.get("approval_required"))
    state = lifecycle.merged_state(None if terminal is None else _TERMINAL_KIND[terminal["state"]],
                                   None if hold is None else hold["kind"],
                                   approval_required=out["approval_required"])
    editing = state == EDITING and hold is not None
    out["state"] = state
    out["editing_by_session"] = hold["holder_session"] if editing and hold else None
    out["editing_by_user"] = hold["holder_user"] if editing and hold else None
    out["editing_since_ms"] = hold["at_ms"] if editing and hold else None
    out["edited_at_ms"] = None if revision is None else revision["edited_at_ms"]
    if revision is not None:
        out["subject"], out["body"] = revision["subject"], revision["body"]
    shown = (completion is not None and state == CLAIMED and not completion.get("purged")
             and completion.get("token") == token)
    out["completion"] = (None if not shown or completion is None
                         else {name: completion[name] for name in COMPLETE_FIELDS
                               if name not in ("token", "claim_epoch")})
    leased = state == CLAIMED and token is not None and terminal is not None
    out["lease_ms"] = terminal.get("lease_ms") if leased and terminal else None
    out["lease_until_ms"] = (terminal.get("lease_until_ms")
                             if leased and terminal and not shown else None)
    out["renewed_at_ms"] = terminal.get("renewed_at_ms") if leased and terminal else None
    out["deliveries"] = deliveries
    decision = standing_decision(state, decisions)
    out["approval_decision"] = None if decision is None else (
        "approved" if decision["kind"] == MSG_APPROVE else "rejected")
    out["approval_decided_by"] = None if decision is None else decision["by_user"]
    out["approval_decided_at_ms"] = None if decision is None else decision["at_ms"]
    out["approval_reason"] = None if decision is None else decision["reason"]
    out["order"] = [order[0], order[1]]
    return out


_TERMINAL_KIND: Final = {CLAIMED: MSG_CLAIM, CANCELLED: MSG_CANCEL, REJECTED: MSG_REJECT}

# Columns of the msg_hold / msg_revision rows (and of the replica's copies).
HOLD_COLS: Final = ("kind", "epoch", "hlc", "origin", "seq", "holder_session", "holder_agent",
                    "holder_user", "at_ms")
COMPLETION_COLS: Final = (*COMPLETE_FIELDS, "claim_hlc", "claim_origin", "claim_seq", "mailbox",
                          "purged", "hlc", "origin", "seq")
TERMINAL_COLS: Final = ("state", "epoch", "claimed_by_session", "claimed_by_agent",
                        "claimed_by_key", "claimed_by_agent_id", "request_id", "claimed_at_ms",
                        "cancelled_at_ms", *LEASE_COLS)
REVISION_COLS: Final = ("subject", "body", "epoch", "hlc", "origin", "seq", "edited_at_ms")


def edit_ops(key: str, msg_id: str, hold: Any, revision: Any) -> list[Op]:
    """The winning hold/release op and the winning saved content of a
    message, rebuilt as ops from their stored rows (mappings with
    :data:`HOLD_COLS` / :data:`REVISION_COLS`), for an owner's model."""
    out: list[Op] = []
    saved = None if revision is None else (revision["hlc"], revision["origin"], revision["seq"])
    if hold is not None:
        stamp = (hold["hlc"], hold["origin"], hold["seq"])
        if hold["kind"] == MSG_HOLD:
            body: dict[str, Any] = {
                "id": msg_id, "holder_session": hold["holder_session"],
                "holder_agent": hold["holder_agent"], "holder_user": hold["holder_user"],
                "at_ms": hold["at_ms"]}
        else:
            content = None if stamp != saved or revision is None else {
                "subject": revision["subject"], "body": revision["body"]}
            body = {"id": msg_id, "at_ms": hold["at_ms"], "content": content}
        out.append(Op(hold["origin"], hold["seq"], hold["hlc"], hold["kind"], key, body,
                      hold["epoch"]))
    if revision is not None and (hold is None or saved != (hold["hlc"], hold["origin"],
                                                           hold["seq"])):
        out.append(Op(revision["origin"], revision["seq"], revision["hlc"], MSG_RELEASE, key,
                      {"id": msg_id, "at_ms": revision["edited_at_ms"],
                       "content": {"subject": revision["subject"], "body": revision["body"]}},
                      revision["epoch"]))
    return out


PURGE_FIELDS: Final = ("id", "workspace", "project", "scope", "by_user", "reason", "at_ms")


def purge_op(key: str, body: Any, hlc: int, origin: str, seq: int, epoch: int) -> Op:
    """A mailbox's mark (its greatest ``msg.purge``), rebuilt as the op for an
    owner's model from a stored row or op body."""
    out = {k: body.get(k) for k in PURGE_FIELDS}
    at_ms = body.get("at_ms")
    out["at_ms"] = physical_ms(hlc) if at_ms is None else int(at_ms)
    return Op(origin, seq, hlc, MSG_PURGE, key, out, epoch)
