"""Completing a claimed message: its holder says how it ended.

Whoever holds a claim (the session that popped it, the same key, or the
same agent id: :func:`daemon.services.mail.claimer_ids`) may complete the
message once, with a result (done, blocked or rejected) and a note. The
sender sees the outcome in its outbox and the web inbox; webhooks and the
push streams get ``message_complete``.

The outcome is a ``msg.complete`` op written by quorum through any node,
not decided by the mailbox's owner: only one party may complete (the claim
is decided once), so the only race is that party against itself (a retry
through another node, two of its own calls at once). Replicas keep the
first completion by ``(hlc, origin, seq)``, so every node shows the same
one. Before writing, the node reads a quorum of the mailbox, so a
completion acknowledged earlier is seen: a second one is a 409 (the same
result and note again is answered as a replay). docs/federation.md
("Completion") says why that is enough, and what a leased claim would need.

The note is scrubbed of secrets and capped like a body
(``limits.completion_note_max_chars``).
"""

from __future__ import annotations

from typing import Any

from common import limits, policy
from common.errors import BadRequest, Conflict, Forbidden
from common.lifecycle import COMPLETABLE, MSG_COMPLETE
from common.ops import mailbox_key
from common.policy import Principal
from common.vocab import RESULTS
from daemon.ports import MailPorts
from daemon.schemas.timefmt import rfc3339 as iso_ms
from daemon.services import leases, scrub
from daemon.services.mail import (
    claimer_ids,
    completion_json,
    own_session,
    readable_message,
)
from federation.requests import MailComplete, MailRenew

_CLAIM_IDS = ("claimed_by_session", "claimed_by_key", "claimed_by_agent_id")


def holds_claim(row: dict[str, Any], principal: Principal, session_id: str | None) -> bool:
    """Is the caller the holder of the message's claim: its session, its key,
    or its agent id (a bound key's, or the claimed one in anonymous mode)?"""
    mine = {"claimed_by_session": session_id,
            "claimed_by_key": claimer_ids(principal)["claimer_key"],
            "claimed_by_agent_id": claimer_ids(principal)["claimer_agent_id"]}
    return any(v is not None and row.get(k) == v for k, v in mine.items())


def clean_note(note: str | None) -> tuple[str | None, bool, int]:
    """(the note as stored, cut?, secrets scrubbed): scrubbed, then capped."""
    if note is None or not note.strip():
        return None, False, 0
    text, n = scrub.scrub(note.strip())
    text, cut = scrub.cap(text, limits.completion_note_max_chars)
    return text, cut, n


async def complete(node: MailPorts, principal: Principal, *, message_id: str, result: str,
                   note: str | None, session_id: str | None,
                   token: str | None = None) -> dict[str, Any]:
    if result not in RESULTS:
        raise BadRequest(f"result must be one of {', '.join(RESULTS)}")
    row = await readable_message(node, principal, message_id)
    ws, proj = str(row["to_workspace"]), str(row["to_project"])
    policy.check(principal, "message.complete", {"box": (ws, proj)})
    if token is not None:
        return await _complete_leased(node, principal, row, result=result, note=note,
                                      session_id=session_id, token=token)
    # The claim and any earlier completion were acknowledged by a majority:
    # hear one before deciding.
    await node.read_barrier(mailbox_key(ws, proj))
    row = await readable_message(node, principal, message_id)
    if row.get("state") != COMPLETABLE:
        raise Conflict(f"message {message_id} is {row.get('state')}, not claimed: only a "
                       "claimed message can be completed", id=message_id, state=row.get("state"))
    if row.get("lease_until_ms") is not None:
        raise BadRequest(f"the claim on {message_id} is leased: complete it with its "
                         "claim_token (the pop returned it)", id=message_id)
    session = await own_session(node, principal, session_id)
    if not holds_claim(row, principal, session):
        if not any(row.get(k) for k in _CLAIM_IDS):
            raise Forbidden(
                f"the claim on {message_id} recorded no session, key or agent id, so no caller "
                "can show it holds it; pop with x-memory-actor-session-id, an API key or "
                "X-Agent-Id to complete later", id=message_id)
        raise Forbidden(f"only the holder of the claim on {message_id} (its session, key or "
                        "agent) may complete it", id=message_id)
    text, cut, scrubbed = clean_note(note)
    done = row.get("completion")
    if done is not None:
        if done.get("result") == result and done.get("note") == text:
            return _answer(message_id, done, cut, scrubbed, replayed=True)
        raise Conflict(f"message {message_id} was already completed "
                       f"({done.get('result')})", id=message_id,
                       completion=completion_json(done))
    ids = claimer_ids(principal)
    body = {"id": message_id, "result": result, "note": text,
            "by_session": session, "by_agent": row.get("claimed_by_agent"),
            "by_key": ids["claimer_key"], "by_agent_id": ids["claimer_agent_id"],
            "from_workspace": row.get("from_workspace"),
            "from_project": row.get("from_project"), "at_ms": node.now_ms()}
    rank = row.get("terminal_rank")
    if rank:  # the claim it completes: the latest claim's completion wins
        body.update(claim_epoch=rank[0], claim_rank=list(rank))
    await node.write([(MSG_COMPLETE, mailbox_key(ws, proj), body)])
    return _answer(message_id, body, cut, scrubbed, replayed=False)


async def _complete_leased(node: MailPorts, principal: Principal, row: dict[str, Any], *,
                           result: str, note: str | None, session_id: str | None,
                           token: str) -> dict[str, Any]:
    """A leased claim's completion, decided by the mailbox's owner (it ends
    the lease, so it is ordered against the expiry): the token proves the
    holder; a token whose lease ran out is refused (409 ``lease_lost``)."""
    message_id = str(row["id"])
    text, cut, scrubbed = clean_note(note)
    ids = claimer_ids(principal)
    body = {"result": result, "note": text,
            "by_session": await own_session(node, principal, session_id),
            "by_agent": row.get("claimed_by_agent"), "by_key": ids["claimer_key"],
            "by_agent_id": ids["claimer_agent_id"], "from_workspace": row.get("from_workspace"),
            "from_project": row.get("from_project")}
    done = await node.mailbox(MailComplete(
        mailbox_key(str(row["to_workspace"]), str(row["to_project"])), message_id, token, body))
    return _answer(message_id, done["completion"], cut, scrubbed, replayed=done["replayed"])


def _answer(message_id: str, done: dict[str, Any], cut: bool, scrubbed: int, *,
            replayed: bool) -> dict[str, Any]:
    return {"message_id": message_id, "state": COMPLETABLE, "completion": completion_json(done),
            "truncated": {"note": cut}, "scrubbed": scrubbed, "replayed": replayed}


async def renew(node: MailPorts, principal: Principal, *, message_id: str, token: str,
                lease_secs: float | None) -> dict[str, Any]:
    """Extend the lease on ``message_id`` held with claim ``token``."""
    row = await readable_message(node, principal, message_id)
    ws, proj = str(row["to_workspace"]), str(row["to_project"])
    policy.check(principal, "message.complete", {"box": (ws, proj)})
    claim = await node.mailbox(MailRenew(mailbox_key(ws, proj), message_id, token,
                                         leases.lease_ms(lease_secs)))
    return {"message_id": message_id, "state": "claimed", **leases.lease_json(claim["claim"]),
            "renewed_at": iso_ms(claim["claim"].get("renewed_at_ms"))}
