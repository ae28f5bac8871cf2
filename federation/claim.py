"""Mailbox ownership and claims: epochs, promises, accept rounds.

Claim-once needs one decider per mailbox. The decider is the *owner*, and
ownership is fenced by epochs, in the manner of single-decree Paxos run
once per owner term rather than once per claim:

1. **Prepare.** A node asked to act as owner picks an epoch above every
   epoch it has seen for the key (``round * 1024 + member index``, so two
   nodes never pick the same one), persists its own promise, loads its ops
   for the mailbox and sends ``Prepare(mailbox, epoch, vv)`` to every peer.
   A peer whose promise is lower persists the new promise and answers
   ``Promise`` with the mailbox ops the candidate lacks; otherwise it
   answers ``PromiseNack(promised)``.
2. **Own.** With promises from a majority (itself included) and its own
   load done, the candidate has merged every op a majority holds for the
   mailbox and becomes owner at that epoch. Queued requests run FIFO.
3. **Accept.** Every owner action (send, claim, cancel) is a set of ops
   stamped with the owner's epoch, persisted locally and sent as
   ``Accept``. A peer accepts iff the epoch is at least its promise (raising
   it), persists the ops and answers ``Accepted``; else ``Rejected``. The
   caller gets its answer once a majority (owner included) accepted.

Any sign of a higher epoch (a ``Prepare`` this node promises, a
``PromiseNack`` / ``Rejected`` / op carrying one) ends the term: the owner
or candidate drops the mailbox and fails its waiting requests with a
retryable error. Why an acknowledged claim is then never granted twice is
argued in docs/federation.md ("Claims").

Inside a term the owner serves requests without waiting for each other:
a message with an op in flight is *held* (a pop skips it; a request whose
answer depends on it is *parked* until that round ends). Claims and cancels
enter the model only once accepted, so a failed round leaves the message
pending again. A round that decides a message also carries the message's
send op, so every member holding the decision holds the body too. A reply
that asserts a terminal state (a pop result, a cancel) is given only for a
terminal op a majority accepted in the current term; an older or
unconfirmed one is first re-issued at the current epoch.

A pop's request id is decided once, cluster-wide: "nothing pending" is a
decision too (a ``msg.empty`` op, accepted by a majority before the reply),
so a retried or late copy of the request meets the same answer at any
later owner instead of claiming whatever was sent in between. A request
older than ``limits.mailbox_request_ttl_secs`` by its sender's clock is
refused, so no copy outlives the decisions kept to answer it.

Pure: time is ``now_ms``, randomness is the seeded ``rng`` (retry jitter),
output is a list of effects. The host (:class:`federation.core.NodeCore`)
allocates op ids and routes messages here; the requests served are the
types of :mod:`federation.requests`.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from common import limits
from common.errors import (
    AiMemoryError,
    BadRequest,
    Conflict,
    Forbidden,
    LimitExceeded,
    NoMajority,
    NotFound,
    Unavailable,
)
from common.lifecycle import (
    AWAITING,
    CANCELLED,
    CLAIM_KINDS,
    CLAIMED,
    EDITABLE_FIELDS,
    EDITING,
    PENDING,
    REJECTED,
    allowed,
)
from common.ops import (
    MAILBOX_KINDS,
    MSG_APPROVE,
    MSG_CANCEL,
    MSG_CLAIM,
    MSG_COMPLETE,
    MSG_EMPTY,
    MSG_EXPIRE,
    MSG_HOLD,
    MSG_PURGE,
    MSG_REJECT,
    MSG_RELEASE,
    MSG_RENEW,
    MSG_SEND,
    Op,
    mailbox_key,
)
from federation.effects import (
    Effect,
    LoadMailbox,
    Persist,
    PersistPromise,
    Reply,
    Send,
    SendPromise,
)
from federation.mailbox import MailboxModel
from federation.membership import EPOCH_STRIDE, Membership
from federation.messages import (
    Accept,
    Accepted,
    Prepare,
    Promise,
    PromiseNack,
    Rejected,
)
from federation.requests import (
    MailCancel,
    MailComplete,
    MailDecide,
    MailExpire,
    MailHold,
    MailPop,
    MailPurge,
    MailRelease,
    MailRenew,
    MailRequest,
    MailSend,
)

OpId = tuple[str, int]


# -- helpers of the requests' service (the types: federation/requests.py) ----


def _rank(op: Op) -> list[Any]:
    """An op's place in the owner's order of decisions, as a reply carries it."""
    return [op.epoch, op.hlc, op.origin, op.seq]


def _not_now(mid: str, state: str | None) -> Conflict:
    """The error for an action the message's state does not allow."""
    why = {CLAIMED: "was already collected", CANCELLED: "was cancelled",
           EDITING: "is being edited", PENDING: "is not being edited",
           AWAITING: "is awaiting approval",
           REJECTED: "was rejected by an approver"}.get(str(state), str(state))
    return Conflict(f"message {mid} {why}", id=mid, state=state)


def _holds_it(hold: Op | None, holder: dict[str, Any]) -> bool:
    """Does ``holder`` (a release's) name the session or user of ``hold``?"""
    if hold is None:
        return False
    return any(holder.get(k) is not None and hold.body.get(k) == holder.get(k)
               for k in ("holder_session", "holder_user"))


IDLE, CANDIDATE, OWNER = "idle", "candidate", "owner"
# The token of a round the owner starts on its own (an expiry): nobody waits
# for its answer.
_NO_REPLY = object()


def _reply(token: Any, value: Any) -> list[Effect]:
    return [] if token is _NO_REPLY else [Reply(token, value)]


def _lease_lost(mid: str, why: str) -> Conflict:
    exc = Conflict(f"the lease on message {mid} {why}; the claim token no longer holds it",
                   id=mid)
    exc.code = "lease_lost"
    return exc


@dataclass(slots=True)
class _Round:
    """One Accept in flight: ``ops`` must reach a majority."""

    ops: tuple[Op, ...]
    accepted: set[str]
    deadline_ms: int
    token: Any
    value: Any
    busy: frozenset[str]
    request_id: str | None
    confirms: frozenset[str]  # messages whose terminal decision this round confirms
    confirms_sends: frozenset[str]
    terminals: tuple[Op, ...]  # ops to merge into the model on success
    confirms_empty: str | None = None  # a request id decided "nothing pending"
    confirms_hold: str | None = None  # a message now held for an edit
    confirms_purge: str | None = None  # a purge id whose mark a majority now holds


@dataclass(slots=True)
class _Slot:
    """This node's state for one mailbox it owns or is trying to own."""

    key: str
    role: str
    epoch: int
    model: MailboxModel
    deadline_ms: int
    promised_by: set[str] = field(default_factory=set)
    loaded: bool = False
    queue: deque[tuple[Any, MailRequest]] = field(default_factory=deque)
    parked: list[tuple[Any, MailRequest]] = field(default_factory=list)
    rounds: dict[tuple[OpId, ...], _Round] = field(default_factory=dict)
    # op id -> the rounds in flight that carry it (an answer names op ids)
    rounds_of: dict[OpId, set[tuple[OpId, ...]]] = field(default_factory=dict)
    busy: dict[str, int] = field(default_factory=dict)  # message id -> rounds in flight
    busy_requests: set[str] = field(default_factory=set)
    # message id -> the op id of its decision (claim, renew, cancel, reject)
    # a majority accepted in this term, and of its completion: a reply that
    # asserts one is given without a round only while the model's current
    # op is that very op (a failed round's op may be in the model too)
    confirmed: dict[str, OpId] = field(default_factory=dict)
    confirmed_done: dict[str, OpId] = field(default_factory=dict)
    owned_since_ms: int = 0  # when this term began serving (leases of older terms)
    confirmed_sends: set[str] = field(default_factory=set)
    confirmed_empty: set[str] = field(default_factory=set)  # request ids
    confirmed_holds: set[str] = field(default_factory=set)  # messages held in this term
    confirmed_purge: str | None = None  # the purge id whose mark a majority holds this term
    last_used_ms: int = 0

    def waiting(self) -> int:
        return len(self.queue) + len(self.parked) + len(self.rounds)


NewOp = Callable[[str, str, dict[str, Any], int, int], Op]


class Claims:
    """Every mailbox slot of one node, plus its promises."""

    def __init__(self, membership: Membership, promises: MutableMapping[str, int], *,
                 claim_timeout_ms: int, rng: random.Random, new_op: NewOp,
                 reachable: Callable[[int], int], vv: Callable[[], dict[str, int]]) -> None:
        self.m = membership
        self.promises = promises
        self.claim_timeout_ms = claim_timeout_ms
        self.rng = rng
        self._new_op = new_op
        self._reachable = reachable
        self._vv = vv
        self.slots: dict[str, _Slot] = {}
        self._seen: dict[str, int] = dict(promises)
        self._loads: dict[str, int] = {}

    # -- helpers -----------------------------------------------------------
    def _see(self, key: str, epoch: int) -> None:
        if epoch > self._seen.get(key, 0):
            self._seen[key] = epoch

    def _retry_after(self) -> float:
        return round(0.05 + self.rng.random() * 0.2, 3)

    def _no_majority(self, now_ms: int, why: str | None = None) -> NoMajority:
        g, n = self._reachable(now_ms), self.m.n
        msg = why or f"this node reaches {g} of {n} members; a majority is {self.m.majority}"
        return NoMajority(msg, retry_after=1.0, reachable=g, members=n)

    def _moved(self) -> Unavailable:
        return Unavailable("mailbox ownership moved to another member; retry",
                           retry_after=self._retry_after())

    # -- requests ----------------------------------------------------------
    def request(self, token: Any, req: MailRequest, now_ms: int) -> list[Effect]:
        key = req.mailbox
        if not isinstance(key, str) or not key.startswith("mbox:"):
            return [Reply(token, BadRequest(f"not a mailbox key: {key!r}"))]
        sent = req.sent_at_ms
        if sent is not None and now_ms - sent > limits.mailbox_request_ttl_secs * 1000:
            return [Reply(token, Unavailable(
                f"mailbox request sent {(now_ms - sent) // 1000} s ago by its entry node's clock, "
                "older than limits.mailbox_request_ttl_secs; not served", retry_after=1.0))]
        slot = self.slots.get(key)
        if slot is not None:
            slot.last_used_ms = now_ms
        if slot is not None and slot.waiting() >= limits.mailbox_requests_max:
            return [Reply(token, Unavailable(
                f"too many requests waiting for mailbox {key} (limits.mailbox_requests_max)",
                retry_after=self._retry_after()))]
        if slot is not None and slot.role == OWNER:
            return self._serve(slot, token, req, now_ms)
        if slot is not None:
            slot.queue.append((token, req))
            return []
        return self._start_candidacy(key, token, req, now_ms)

    def _start_candidacy(self, key: str, token: Any, req: MailRequest,
                         now_ms: int) -> list[Effect]:
        if self._reachable(now_ms) < self.m.majority:
            return [Reply(token, self._no_majority(now_ms))]
        top = max(self._seen.get(key, 0), self.promises.get(key, 0))
        epoch = self.m.epoch_for_round(top // EPOCH_STRIDE + 1)
        self.promises[key] = epoch
        self._see(key, epoch)
        slot = _Slot(key=key, role=CANDIDATE, epoch=epoch, model=MailboxModel(key),
                     deadline_ms=now_ms + self.claim_timeout_ms, promised_by={self.m.self_id},
                     last_used_ms=now_ms)
        slot.queue.append((token, req))
        self.slots[key] = slot
        self._loads[key] = self._loads.get(key, 0) + 1
        vv = self._vv()
        out: list[Effect] = [PersistPromise(key, epoch)]
        out += [Send(p, Prepare(key, epoch, dict(vv))) for p in self.m.peers]
        out.append(LoadMailbox(key))
        return out

    def on_loaded(self, key: str, ops: Iterable[Op], now_ms: int) -> list[Effect]:
        left = max(0, self._loads.get(key, 0) - 1)
        if left:
            self._loads[key] = left
        else:
            self._loads.pop(key, None)
        slot = self.slots.get(key)
        if slot is None:
            return []
        slot.model.apply(ops)
        if left == 0 and slot.role == CANDIDATE:
            slot.loaded = True
            return self._maybe_own(slot, now_ms)
        return []

    def _maybe_own(self, slot: _Slot, now_ms: int) -> list[Effect]:
        if slot.role != CANDIDATE or not slot.loaded or len(slot.promised_by) < self.m.majority:
            return []
        slot.role = OWNER
        slot.owned_since_ms = now_ms
        out: list[Effect] = []
        queued = list(slot.queue)
        slot.queue.clear()
        for token, req in queued:
            if self.slots.get(slot.key) is not slot:
                out.append(Reply(token, self._moved()))
                continue
            out += self._serve(slot, token, req, now_ms)
        return out

    # -- serving as owner ----------------------------------------------------
    def _serve(self, slot: _Slot, token: Any, req: MailRequest, now_ms: int) -> list[Effect]:
        if self._reachable(now_ms) < self.m.majority:
            return [Reply(token, self._no_majority(now_ms))]
        if not isinstance(req, MailPurge) and any(isinstance(r, MailPurge) for _, r in slot.parked):
            return self._park(slot, token, req)  # a waiting purge goes first
        try:
            if isinstance(req, MailPurge):
                return self._purge(slot, token, req, now_ms)
            if isinstance(req, MailSend):
                return self._send(slot, token, req, now_ms)
            if isinstance(req, MailPop):
                return self._pop(slot, token, req, now_ms)
            if isinstance(req, MailCancel):
                return self._cancel(slot, token, req, now_ms)
            if isinstance(req, MailHold):
                return self._hold(slot, token, req, now_ms)
            if isinstance(req, MailRelease):
                return self._release(slot, token, req, now_ms)
            if isinstance(req, MailDecide):
                return self._decide(slot, token, req, now_ms)
            if isinstance(req, MailRenew):
                return self._renew(slot, token, req, now_ms)
            if isinstance(req, MailComplete):
                return self._complete(slot, token, req, now_ms)
            if isinstance(req, MailExpire):
                return self._expire_due(slot, token, now_ms)
        except AiMemoryError as exc:
            return [Reply(token, exc)]
        return [Reply(token, BadRequest(f"unknown mailbox request {type(req).__name__}"))]

    def _park(self, slot: _Slot, token: Any, req: MailRequest) -> list[Effect]:
        slot.parked.append((token, req))
        return []

    def _send(self, slot: _Slot, token: Any, req: MailSend, now_ms: int) -> list[Effect]:
        body = dict(req.body)
        mid = body.get("id")
        if not isinstance(mid, str) or not mid:
            raise BadRequest("a message needs a string id")
        ws, proj = body.get("to_workspace"), body.get("to_project")
        if ws is not None and proj is not None and mailbox_key(str(ws), str(proj)) != slot.key:
            raise BadRequest(f"message {mid} is addressed to {ws}/{proj}, not {slot.key}")
        if mid in slot.busy:
            return self._park(slot, token, req)
        if slot.model.is_purged(mid):
            raise Conflict(f"message {mid} was purged with its mailbox {slot.key}", id=mid,
                           state="purged")
        existing = slot.model.send_op(mid)
        if existing is not None:
            if mid in slot.confirmed_sends:
                return [Reply(token, existing)]
            # Known here but perhaps only here: make a majority hold it first.
            return self._issue(slot, (existing,), (), now_ms, token=token, value=existing,
                               busy={mid}, confirms_sends={mid})
        if slot.model.queued_count() >= req.cap:
            raise LimitExceeded(
                f"mailbox {slot.key} is full: {req.cap} messages pending "
                "(limits.mailbox_pending_max)", limit="mailbox_pending_max", cap=req.cap)
        op = self._new_op(MSG_SEND, slot.key, body, slot.epoch, now_ms)
        slot.model.apply((op,))
        return self._issue(slot, (op,), (op,), now_ms, token=token, value=op, busy={mid},
                           confirms_sends={mid})

    def _pop(self, slot: _Slot, token: Any, req: MailPop, now_ms: int) -> list[Effect]:
        model, rid = slot.model, req.request_id
        if req.lease_ms is not None and not req.token:
            raise BadRequest("a leased pop needs a claim token")
        if rid is not None:
            if rid in slot.busy_requests:
                return self._park(slot, token, req)
            decided = model.decision(rid)
            if decided is not None and decided[0] is None:
                if rid in slot.confirmed_empty:
                    return [Reply(token, None)]
                # Decided "nothing pending" before this term, maybe only on a
                # minority: re-issue that decision at this epoch, then answer it.
                return self._decide_empty(slot, token, req, now_ms)
            if decided is None and model.purged_claim(rid):
                # Its message was claimed, then purged: the answer stays
                # "nothing", never a message sent since.
                return self._decide_empty(slot, token, req, now_ms)
            prior = None if decided is None else decided[0]
            if prior is not None:
                if prior in slot.busy:
                    return self._park(slot, token, req)
                claim = model.terminal_op(prior)
                assert claim is not None
                if slot.confirmed.get(prior) == claim.op_id:
                    return [Reply(token, {"message": model.message(prior),
                                          "claim": dict(claim.body), "rank": _rank(claim),
                                          "fresh": False})]
                # Decided before this term and maybe only on a minority:
                # re-issue the same claim at this epoch so it outranks all.
                op = self._new_op(claim.kind, slot.key, dict(claim.body), slot.epoch, now_ms)
                return self._issue(slot, (*self._carried(slot, prior), op), (op,), now_ms,
                                   token=token,
                                   value={"message": model.message(prior), "claim": dict(op.body),
                                          "rank": _rank(op), "fresh": False},
                                   busy={prior}, request_id=rid, confirms={prior},
                                   terminals=(op,))
        if req.message_id is not None:
            mid: str | None = req.message_id
            assert mid is not None
            state = model.state(mid)
            if state is None:
                raise NotFound(f"no message {mid} in {slot.key}", id=mid)
            if mid in slot.busy:
                return self._park(slot, token, req)
            if not allowed(MSG_CLAIM, state):
                raise _not_now(mid, state)
            to_agent = model.message(mid).get("to_agent")
            if to_agent is not None and to_agent != req.agent:
                raise Forbidden(f"message {mid} is addressed to agent {to_agent}", id=mid)
        else:
            mid = model.first_pending(req.agent, slot.busy)
            if mid is None:
                if rid is None:
                    return [Reply(token, None)]
                return self._decide_empty(slot, token, req, now_ms)
        body = {**req.claimer, "id": mid, "request_id": rid, "at_ms": now_ms}
        before = model.terminal_op(mid)  # an expired claim's, if any
        if before is not None and before.body.get("delivery") is not None:
            body["delivery"] = int(before.body["delivery"]) + 1  # handed out again
        if req.lease_ms is not None:
            body.update(token=req.token, lease_ms=int(req.lease_ms),
                        lease_until_ms=now_ms + int(req.lease_ms),
                        delivery=body.get("delivery", 1))
        op = self._new_op(MSG_CLAIM, slot.key, body, slot.epoch, now_ms)
        return self._issue(slot, (*self._carried(slot, mid), op), (op,), now_ms, token=token,
                           value={"message": model.message(mid), "claim": dict(op.body),
                                  "rank": _rank(op), "fresh": True},
                           busy={mid}, request_id=rid, confirms={mid}, terminals=(op,))

    def _decide_empty(self, slot: _Slot, token: Any, req: MailPop, now_ms: int) -> list[Effect]:
        """Record, on a majority, that pop ``req.request_id`` found nothing;
        answer None once they hold it."""
        assert req.request_id is not None
        body = {"request_id": req.request_id,
                "claimer_session": req.claimer.get("claimer_session"),
                "claimer_agent": req.claimer.get("claimer_agent"), "at_ms": now_ms}
        op = self._new_op(MSG_EMPTY, slot.key, body, slot.epoch, now_ms)
        return self._issue(slot, (op,), (op,), now_ms, token=token, value=None, busy=(),
                           request_id=req.request_id, terminals=(op,),
                           confirms_empty=req.request_id)

    def _hold(self, slot: _Slot, token: Any, req: MailHold, now_ms: int) -> list[Effect]:
        model, mid = slot.model, req.message_id
        state = model.state(mid)
        if state is None:
            raise NotFound(f"no message {mid} in {slot.key}", id=mid)
        if mid in slot.busy:
            return self._park(slot, token, req)
        current = model.hold_op(mid)
        session = req.holder.get("holder_session")
        if (state == EDITING and current is not None and session is not None
                and current.body.get("holder_session") == session):
            if mid in slot.confirmed_holds:
                return [Reply(token, {"message": model.message(mid), "hold": dict(current.body),
                                      "rank": _rank(current)})]
            body = dict(current.body)  # held in an earlier term: confirm it at this epoch
        elif not allowed(MSG_HOLD, state):
            raise _not_now(mid, state)
        else:
            body = {**req.holder, "id": mid, "at_ms": now_ms}
        op = self._new_op(MSG_HOLD, slot.key, body, slot.epoch, now_ms)
        return self._issue(slot, (*self._carried(slot, mid), op), (op,), now_ms, token=token,
                           value={"message": model.message(mid), "hold": dict(op.body),
                                  "rank": _rank(op)},
                           busy={mid}, terminals=(op,), confirms_hold=mid)

    def _release(self, slot: _Slot, token: Any, req: MailRelease, now_ms: int) -> list[Effect]:
        model, mid = slot.model, req.message_id
        state = model.state(mid)
        if state is None:
            raise NotFound(f"no message {mid} in {slot.key}", id=mid)
        if mid in slot.busy:
            return self._park(slot, token, req)
        content = req.content
        if content is not None and (not isinstance(content, dict)
                                    or set(content) - set(EDITABLE_FIELDS)):
            raise BadRequest(f"an edit may change only {', '.join(EDITABLE_FIELDS)}")
        if state == PENDING and content is None:
            return [Reply(token, {"message": model.message(mid)})]  # discarded already
        if not allowed(MSG_RELEASE, state):
            raise _not_now(mid, state)
        if not _holds_it(model.hold_op(mid), req.holder):
            current = model.hold_op(mid)
            by = None if current is None else current.body.get("holder_user")
            raise Conflict(f"message {mid} is being edited by another editor"
                           + ("" if by is None else f" ({by})"), id=mid, state=EDITING,
                           holder_user=by)
        saved = None if content is None else {k: content.get(k) for k in EDITABLE_FIELDS}
        body = {"id": mid, "at_ms": now_ms, "content": saved}
        op = self._new_op(MSG_RELEASE, slot.key, body, slot.epoch, now_ms)
        after = {**model.message(mid), **(saved or {})}
        return self._issue(slot, (*self._carried(slot, mid), op), (op,), now_ms, token=token,
                           value={"message": after, "rank": _rank(op)}, busy={mid},
                           terminals=(op,))

    def _decide(self, slot: _Slot, token: Any, req: MailDecide, now_ms: int) -> list[Effect]:
        """An approver's answer for a message awaiting approval. Decided once:
        the owner orders decisions like pops, and a message that no longer
        awaits approval (decided, cancelled) gets 409 naming what stands."""
        model, mid = slot.model, req.message_id
        state = model.state(mid)
        if state is None:
            if model.is_purged(mid):
                # Purged while it waited (or after it was decided): nothing is
                # left to decide, and nothing the purge removed comes back.
                raise Conflict(f"message {mid} was purged with its mailbox {slot.key}", id=mid,
                               state="purged")
            raise NotFound(f"no message {mid} in {slot.key}", id=mid)
        if mid in slot.busy:
            return self._park(slot, token, req)
        kind = MSG_APPROVE if req.approve else MSG_REJECT
        if not allowed(kind, state):
            prior = model.decision_op(mid)
            if prior is None:  # never held, or cancelled while it waited
                raise _not_now(mid, state)
            decision = "approved" if prior.kind == MSG_APPROVE else "rejected"
            exc = Conflict(f"message {mid} was already {decision}"
                           + ("" if state in (PENDING, REJECTED) else f"; it is now {state}"),
                           id=mid, state=state, decision=decision,
                           decided_by=prior.body.get("by_user"))
            exc.code = "already_decided"
            raise exc
        reason = None if req.reason is None else str(req.reason)[:limits.approval_reason_max_chars]
        body = {"id": mid, "by_user": req.decider.get("by_user"),
                "by_agent": req.decider.get("by_agent"), "reason": reason, "at_ms": now_ms}
        op = self._new_op(kind, slot.key, body, slot.epoch, now_ms)
        return self._issue(slot, (*self._carried(slot, mid), op), (op,), now_ms, token=token,
                           value={"message": model.message(mid), "decision": dict(op.body),
                                  "approved": req.approve, "rank": _rank(op)},
                           busy={mid}, confirms={mid} if not req.approve else (),
                           terminals=(op,))

    @staticmethod
    def _deadline(slot: _Slot, term: Op) -> int:
        """The deadline this owner holds ``term``'s lease to: its own, or for
        a lease decided in an earlier term no earlier than the lease's length
        after this term began (a new owner whose clock runs ahead of the old
        one's would otherwise cut leases short by the difference)."""
        until = int(term.body["lease_until_ms"])
        if term.epoch < slot.epoch:
            until = max(until, slot.owned_since_ms + int(term.body.get("lease_ms") or 0))
        return until

    def _due(self, slot: _Slot, now_ms: int) -> list[str]:
        """Leases of the mailbox that ran out by this owner's deadlines and
        that no round holds."""
        out = []
        for mid in slot.model.due_leases(now_ms):
            term = slot.model.terminal_op(mid)
            if mid not in slot.busy and term is not None and self._deadline(slot, term) <= now_ms:
                out.append(mid)
        return out

    def _held_lease(self, slot: _Slot, mid: str, claim_token: str, now_ms: int) -> Op:
        """The claim (or renew) op by which ``claim_token`` holds ``mid`` with
        a lease that has not run out by this owner's clock; else 409."""
        model = slot.model
        state = model.state(mid)
        if state is None:
            if model.is_purged(mid):
                raise Conflict(f"message {mid} was purged with its mailbox {slot.key}", id=mid,
                               state="purged")
            raise NotFound(f"no message {mid} in {slot.key}", id=mid)
        term = model.terminal_op(mid)
        if state != CLAIMED or term is None or term.kind not in CLAIM_KINDS \
                or term.body.get("token") != claim_token:
            raise _lease_lost(mid, "ended: the message was handed on or its lease expired"
                              if term is not None and term.kind in CLAIM_KINDS
                              else f"is not held ({state})")
        if model.completion_op(mid) is not None:
            raise Conflict(f"message {mid} was already completed", id=mid, state=CLAIMED)
        if model.lease_until(mid) is None:
            raise BadRequest(f"the claim on message {mid} has no lease")
        until = self._deadline(slot, term)
        if until <= now_ms:
            raise _lease_lost(mid, f"ran out {now_ms - until} ms ago")
        return term

    def _current(self, slot: _Slot, term: Op, now_ms: int) -> Op:
        """``term`` (a claim or renew) if decided in this term, else the same
        op re-issued at this epoch: a round that rests on the claim carries
        it at this epoch, so that no deposed owner's op of an older epoch
        (an expiry no majority accepted) outranks what this round decides."""
        if term.epoch == slot.epoch:
            return term
        return self._new_op(term.kind, slot.key, dict(term.body), slot.epoch, now_ms)

    def _renew(self, slot: _Slot, token: Any, req: MailRenew, now_ms: int) -> list[Effect]:
        mid = req.message_id
        if mid in slot.busy:
            return self._park(slot, token, req)
        term = self._held_lease(slot, mid, req.token, now_ms)
        lease_ms = int(req.lease_ms if req.lease_ms is not None else term.body["lease_ms"])
        body = {**term.body, "lease_ms": lease_ms, "lease_until_ms": now_ms + lease_ms,
                "renewed_at_ms": now_ms}
        op = self._new_op(MSG_RENEW, slot.key, body, slot.epoch, now_ms)
        return self._issue(slot, (*self._carried(slot, mid), op), (op,), now_ms, token=token,
                           value={"message": slot.model.message(mid), "claim": dict(op.body),
                                  "rank": _rank(op)},
                           busy={mid}, confirms={mid}, terminals=(op,))

    def _complete(self, slot: _Slot, token: Any, req: MailComplete,
                  now_ms: int) -> list[Effect]:
        """Complete a leased claim: decided here so that it is ordered
        against the lease's expiry (and ends the lease). A completion that
        stands already is answered as a replay when it says the same."""
        mid, model = req.message_id, slot.model
        if mid in slot.busy:
            return self._park(slot, token, req)
        done = model.completion_op(mid)
        term = model.terminal_op(mid)
        if done is not None and term is not None and done.body.get("token") == req.token:
            same = all(done.body.get(k) == req.body.get(k) for k in ("result", "note"))
            if not same:
                raise Conflict(f"message {mid} was already completed "
                               f"({done.body.get('result')})", id=mid, state=CLAIMED,
                               completion=dict(done.body))
            if slot.confirmed_done.get(mid) == done.op_id:
                return [Reply(token, {"completion": dict(done.body), "rank": _rank(done),
                                      "replayed": True})]
            body = dict(done.body)  # decided before this term: confirm it at this epoch
            replayed = True
        else:
            term = self._held_lease(slot, mid, req.token, now_ms)
            body = {**req.body, "id": mid, "token": req.token, "at_ms": now_ms}
            replayed = False
        claim = self._current(slot, term, now_ms)
        body.update(claim_epoch=claim.epoch, claim_rank=_rank(claim))
        op = self._new_op(MSG_COMPLETE, slot.key, body, slot.epoch, now_ms)
        fresh = (op,) if claim is term else (claim, op)
        return self._issue(slot, (*self._carried(slot, mid), claim, op), fresh, now_ms,
                           token=token, value={"completion": dict(op.body), "rank": _rank(op),
                                               "replayed": replayed},
                           busy={mid}, confirms={mid}, terminals=fresh)

    def _expire_due(self, slot: _Slot, token: Any, now_ms: int) -> list[Effect]:
        """Expire every lease of the mailbox that ran out by this owner's
        deadlines and is not in a round: the message is pending again at its
        place. One round for them all; answers their ids."""
        model = slot.model
        due = self._due(slot, now_ms)
        if not due:
            return _reply(token, [])
        ops, carried = [], []
        for mid in due:
            term = model.terminal_op(mid)
            assert term is not None
            carried += [*self._carried(slot, mid), term]
            # delivery and to_agent let a push stream announce the message
            # as back in the queue without a read.
            ops.append(self._new_op(MSG_EXPIRE, slot.key, {
                "id": mid, "token": term.body.get("token"), "at_ms": now_ms,
                "delivery": term.body.get("delivery"),
                "to_agent": model.message(mid).get("to_agent")}, slot.epoch, now_ms))
        return self._issue(slot, (*carried, *ops), tuple(ops), now_ms, token=token, value=due,
                           busy=set(due), terminals=tuple(ops))

    def _cancel(self, slot: _Slot, token: Any, req: MailCancel, now_ms: int) -> list[Effect]:
        model = slot.model
        ws, proj = req.by_workspace, req.by_project
        fresh: list[str] = []
        redo: list[Op] = []
        if req.message_ids is None:
            ids = model.pending_from(ws, proj)
            if any(mid in slot.busy for mid in ids):
                return self._park(slot, token, req)
            fresh = ids
        else:
            ids = list(dict.fromkeys(req.message_ids))
            for mid in ids:
                send = model.send_op(mid)
                if send is None:
                    raise NotFound(f"no message {mid} in {slot.key}", id=mid)
                if (send.body.get("from_workspace"), send.body.get("from_project")) != (ws, proj):
                    raise Forbidden(f"message {mid} was not sent by {ws}/{proj}", id=mid)
            if any(mid in slot.busy for mid in ids):
                return self._park(slot, token, req)
            for mid in ids:
                state = model.state(mid)
                if state in (CLAIMED, EDITING, REJECTED):
                    raise _not_now(mid, str(state))
                if state == CANCELLED:
                    term = model.terminal_op(mid)
                    assert term is not None
                    if slot.confirmed.get(mid) != term.op_id:
                        redo.append(term)
                else:
                    fresh.append(mid)
        ops = [self._new_op(MSG_CANCEL, slot.key,
                            {"id": mid, "by_workspace": ws, "by_project": proj, "at_ms": now_ms},
                            slot.epoch, now_ms) for mid in fresh]
        ops += [self._new_op(MSG_CANCEL, slot.key, dict(t.body), slot.epoch, now_ms) for t in redo]
        if not ops:
            return [Reply(token, ids)]
        targets = frozenset(str(op.body["id"]) for op in ops)
        sends = tuple(o for mid in sorted(targets) for o in self._carried(slot, mid))
        return self._issue(slot, sends + tuple(ops), tuple(ops), now_ms, token=token, value=ids,
                           busy=targets, confirms=targets, terminals=tuple(ops))

    def _purge(self, slot: _Slot, token: Any, req: MailPurge, now_ms: int) -> list[Effect]:
        """Remove every message sent before now. Issued only once no round
        of the mailbox is in flight: a claim still in flight could otherwise
        be acknowledged after the purge. The mark enters the model at once,
        so nothing it covers is popped, held or cancelled from then on;
        sends served later rank above it and stay."""
        pid = req.body.get("id")
        if not isinstance(pid, str) or not pid:
            raise BadRequest("a purge needs a string id")
        if slot.rounds:
            return self._park(slot, token, req)
        mark = slot.model.purge_op()
        if mark is not None and mark.body.get("id") == pid:
            value: dict[str, Any] = {"purge": dict(mark.body), "removed": None,
                                     "rank": _rank(mark)}
            if slot.confirmed_purge == pid:
                return [Reply(token, value)]
            return self._issue(slot, (mark,), (), now_ms, token=token, value=value, busy=(),
                               confirms_purge=pid)
        before = len(slot.model)
        if req.only_if_empty and before:
            return [Reply(token, {"purge": None, "removed": 0, "kept": before})]
        at_ms = now_ms
        if req.only_if_empty and isinstance(req.body.get("at_ms"), int):
            # The cleanup hides only sessions idle since the time it names,
            # not one that started while it ran.
            at_ms = min(now_ms, req.body["at_ms"])
        body = {**req.body, "at_ms": at_ms}
        op = self._new_op(MSG_PURGE, slot.key, body, slot.epoch, now_ms)
        slot.model.apply((op,))
        value = {"purge": dict(op.body), "removed": before - len(slot.model), "rank": _rank(op)}
        return self._issue(slot, (op,), (op,), now_ms, token=token, value=value, busy=(),
                           confirms_purge=pid)

    @staticmethod
    def _carried(slot: _Slot, message_id: str) -> tuple[Op, ...]:
        """The send op of a message, its saved edit and its approval, if
        any: they ride along in every round that decides the message, so
        whoever holds the decision holds the body a reader sees and the
        approval that let it into the queue."""
        send = slot.model.send_op(message_id)
        assert send is not None
        extra = (slot.model.revision_op(message_id), slot.model.approve_op(message_id))
        return (send, *(op for op in extra if op is not None))

    def _issue(self, slot: _Slot, ops: tuple[Op, ...], new: tuple[Op, ...], now_ms: int, *,
               token: Any, value: Any, busy: Iterable[str], request_id: str | None = None,
               confirms: Iterable[str] = (), confirms_sends: Iterable[str] = (),
               terminals: tuple[Op, ...] = (), confirms_empty: str | None = None,
               confirms_hold: str | None = None,
               confirms_purge: str | None = None) -> list[Effect]:
        """Start an accept round for ``ops`` (``new`` are this node's fresh
        ops, persisted first)."""
        rnd = _Round(ops=ops, accepted={self.m.self_id},
                     deadline_ms=now_ms + self.claim_timeout_ms, token=token, value=value,
                     busy=frozenset(busy), request_id=request_id,
                     confirms=frozenset(confirms), confirms_sends=frozenset(confirms_sends),
                     terminals=terminals, confirms_empty=confirms_empty,
                     confirms_hold=confirms_hold, confirms_purge=confirms_purge)
        rid = tuple(op.op_id for op in ops)
        slot.rounds[rid] = rnd
        for op_id in rid:
            slot.rounds_of.setdefault(op_id, set()).add(rid)
        for mid in rnd.busy:
            slot.busy[mid] = slot.busy.get(mid, 0) + 1
        if request_id is not None:
            slot.busy_requests.add(request_id)
        out: list[Effect] = [Persist(new)] if new else []
        out += [Send(p, Accept(slot.key, slot.epoch, ops)) for p in self.m.peers]
        if len(rnd.accepted) >= self.m.majority:
            out += self._end_round(slot, rid, None, now_ms)
        return out

    def _end_round(self, slot: _Slot, rid: tuple[OpId, ...], error: AiMemoryError | None,
                   now_ms: int) -> list[Effect]:
        rnd = slot.rounds.pop(rid)
        for op_id in rid:
            holders = slot.rounds_of.get(op_id)
            if holders is not None:
                holders.discard(rid)
                if not holders:
                    del slot.rounds_of[op_id]
        for mid in rnd.busy:
            left = slot.busy.get(mid, 0) - 1
            if left > 0:
                slot.busy[mid] = left
            else:
                slot.busy.pop(mid, None)
        if rnd.request_id is not None:
            slot.busy_requests.discard(rnd.request_id)
        if error is None:
            slot.model.apply(rnd.terminals)
            for op in rnd.terminals:
                decided = str(op.body.get("id"))
                if decided in rnd.confirms:
                    table = slot.confirmed_done if op.kind == MSG_COMPLETE else slot.confirmed
                    table[decided] = op.op_id
            slot.confirmed_sends.update(rnd.confirms_sends)
            if rnd.confirms_hold is not None:
                slot.confirmed_holds.add(rnd.confirms_hold)
            if rnd.confirms_purge is not None:
                slot.confirmed_purge = rnd.confirms_purge
            if rnd.confirms_empty is not None:
                if len(slot.confirmed_empty) >= limits.mailbox_empty_decisions_max:
                    slot.confirmed_empty.clear()  # bounded: a retry re-issues its decision
                slot.confirmed_empty.add(rnd.confirms_empty)
            out = _reply(rnd.token, rnd.value)
        else:
            # A leased claim (or renew) of a failed round is persisted here
            # and stands wherever it landed, so the model keeps it: the
            # owner then expires it at its deadline, and a retry of the pop
            # re-issues it. (Left out, it stood on the replicas while this
            # owner saw the message pending and never expired it: simulator
            # seed 36. A claim without a lease stays out: the next pop may
            # take its message, outranking it.)
            slot.model.apply(op for op in rnd.terminals if op.kind in CLAIM_KINDS
                             and op.body.get("lease_until_ms") is not None)
            out = _reply(rnd.token, error)
        return out + self._unpark(slot, now_ms)

    def _unpark(self, slot: _Slot, now_ms: int) -> list[Effect]:
        if not slot.parked or self.slots.get(slot.key) is not slot or slot.role != OWNER:
            return []
        parked, slot.parked = slot.parked, []
        out: list[Effect] = []
        for token, req in parked:
            out += self._serve(slot, token, req, now_ms)
        return out

    def _step_down(self, slot: _Slot, error: AiMemoryError) -> list[Effect]:
        """End this node's term (or candidacy) for the mailbox."""
        if self.slots.get(slot.key) is slot:
            del self.slots[slot.key]
        out: list[Effect] = [e for r in slot.rounds.values() for e in _reply(r.token, error)]
        out += [Reply(t, error) for t, _ in slot.queue]
        out += [Reply(t, error) for t, _ in slot.parked]
        slot.rounds.clear()
        slot.rounds_of.clear()
        slot.queue.clear()
        slot.parked.clear()
        return out

    def _fence(self, key: str, epoch: int) -> list[Effect]:
        """A higher epoch exists for ``key``: end any term of ours below it."""
        self._see(key, epoch)
        slot = self.slots.get(key)
        if slot is not None and epoch > slot.epoch:
            return self._step_down(slot, self._moved())
        return []

    # -- messages from peers ---------------------------------------------------
    def observe_ops(self, ops: Iterable[Op]) -> list[Effect]:
        """Every mailbox op this node receives or creates passes here."""
        out: list[Effect] = []
        for op in ops:
            if op.kind not in MAILBOX_KINDS and op.kind != MSG_COMPLETE:
                continue
            out += self._fence(op.key, op.epoch)
            slot = self.slots.get(op.key)
            if slot is None:
                continue
            if op.kind == MSG_SEND or op.origin != self.m.self_id:
                slot.model.apply((op,))
            elif op.op_id not in {o.op_id for r in slot.rounds.values() for o in r.terminals}:
                slot.model.apply((op,))
        return out

    def on_prepare(self, peer: str, msg: Prepare) -> list[Effect]:
        self._see(msg.mailbox, msg.epoch)
        promised = self.promises.get(msg.mailbox, 0)
        if msg.epoch < promised or self.m.index_of(peer) != msg.epoch % EPOCH_STRIDE:
            return [Send(peer, PromiseNack(msg.mailbox, promised))]
        out: list[Effect] = []
        if msg.epoch > promised:
            self.promises[msg.mailbox] = msg.epoch
            out += self._fence(msg.mailbox, msg.epoch)
            out.append(PersistPromise(msg.mailbox, msg.epoch))
        out.append(SendPromise(peer, msg.mailbox, msg.epoch, dict(msg.vv)))
        return out

    def on_promise(self, peer: str, msg: Promise, now_ms: int) -> list[Effect]:
        slot = self.slots.get(msg.mailbox)
        if slot is None or slot.role != CANDIDATE or slot.epoch != msg.epoch:
            return []
        slot.promised_by.add(peer)
        return self._maybe_own(slot, now_ms)

    def on_promise_nack(self, msg: PromiseNack) -> list[Effect]:
        return self._fence(msg.mailbox, msg.promised)

    def on_accept(self, peer: str, msg: Accept) -> tuple[bool, list[Effect]]:
        """(accepted?, effects before the ops are persisted)."""
        self._see(msg.mailbox, msg.epoch)
        promised = self.promises.get(msg.mailbox, 0)
        if msg.epoch < promised or self.m.index_of(peer) != msg.epoch % EPOCH_STRIDE:
            return False, [Send(peer, Rejected(msg.mailbox, promised))]
        out: list[Effect] = []
        if msg.epoch > promised:
            self.promises[msg.mailbox] = msg.epoch
            out += self._fence(msg.mailbox, msg.epoch)
            out.append(PersistPromise(msg.mailbox, msg.epoch))
        return True, out

    def on_accepted(self, peer: str, msg: Accepted, now_ms: int) -> list[Effect]:
        slot = self.slots.get(msg.mailbox)
        if slot is None or slot.role != OWNER or slot.epoch != msg.epoch:
            return []
        # Several rounds may have travelled folded into one Accept
        # (federation.batching): the answer counts for each round all of
        # whose ops it names, found through the ops it names.
        held = set(msg.op_ids)
        candidates: set[tuple[OpId, ...]] = set()
        for op_id in held:
            candidates.update(slot.rounds_of.get(op_id, ()))
        rounds = sorted(r for r in candidates if held.issuperset(r))  # in a fixed order
        out: list[Effect] = []
        for r in rounds:
            rnd = slot.rounds.get(r)  # ending one round may have ended or replaced others
            if rnd is None:
                continue
            rnd.accepted.add(peer)
            if len(rnd.accepted) >= self.m.majority:
                out += self._end_round(slot, r, None, now_ms)
        return out

    def on_rejected(self, msg: Rejected) -> list[Effect]:
        return self._fence(msg.mailbox, msg.promised)

    # -- time ------------------------------------------------------------------
    def tick(self, now_ms: int) -> list[Effect]:
        out: list[Effect] = []
        idle_ms = int(limits.mailbox_owner_idle_secs * 1000)
        for slot in list(self.slots.values()):
            if (slot.role == OWNER and not slot.waiting()
                    and now_ms - slot.last_used_ms >= idle_ms):
                # Memory stays bounded by the mailboxes in use. Giving up a
                # term is always safe: the next request for this mailbox runs
                # a new candidacy at a higher epoch and reloads the model.
                del self.slots[slot.key]
                continue
            if slot.role == CANDIDATE:
                if now_ms >= slot.deadline_ms:
                    g = self._reachable(now_ms)
                    out += self._step_down(slot, self._no_majority(
                        now_ms, f"no majority promised mailbox {slot.key} within "
                                f"{self.claim_timeout_ms} ms (limits.claim_timeout_ms); "
                                f"this node reaches {g} of {self.m.n} members"))
                continue
            for rid in [r for r, rnd in slot.rounds.items() if now_ms >= rnd.deadline_ms]:
                if rid in slot.rounds:
                    out += self._end_round(slot, rid, self._no_majority(
                        now_ms, f"mailbox {slot.key}: no majority accepted within "
                                f"{self.claim_timeout_ms} ms (limits.claim_timeout_ms)"), now_ms)
            if (slot.role == OWNER and self.slots.get(slot.key) is slot
                    and not any(isinstance(r, MailPurge) for _, r in slot.parked)
                    and self._reachable(now_ms) >= self.m.majority
                    and self._due(slot, now_ms)):
                out += self._expire_due(slot, _NO_REPLY, now_ms)
        return out

    # -- recovery ----------------------------------------------------------------
    def seen_epochs(self) -> dict[str, int]:
        """The highest epoch this node has seen per mailbox."""
        return dict(self._seen)

    def see(self, key: str, epoch: int) -> None:
        self._see(key, epoch)

    def abandon_all(self) -> list[Effect]:
        """Give up every term and candidacy (this node stops voting)."""
        out: list[Effect] = []
        for slot in list(self.slots.values()):
            out += self._step_down(slot, Unavailable(
                "this member is recovering; retry", retry_after=self._retry_after()))
        return out

    # -- introspection ---------------------------------------------------------
    def owned(self) -> dict[str, int]:
        return {k: s.epoch for k, s in self.slots.items() if s.role == OWNER}

    def candidacies(self) -> dict[str, int]:
        return {k: s.epoch for k, s in self.slots.items() if s.role == CANDIDATE}

    def in_flight(self) -> int:
        return sum(len(s.rounds) for s in self.slots.values())
