"""The owner's in-memory model of one mailbox, built from its ops.

An owner must decide, synchronously and exactly, what is pending, in which
order, how many, and who holds which request id. It builds this model from
every op it holds for the mailbox key (loaded from its store, merged from
promises, received later) with the same rules as :mod:`store.in_memory`:

* ``msg.send`` is insert-once: of two sends with one message id, the one of
  the later owner term (greater epoch) wins, then the one of lower
  ``(hlc, origin, seq)``, and that rank is the message's FIFO position (a
  later term stamps a copy of its own only when it never saw the older one,
  which was then never acknowledged);
* ``msg.claim`` / ``msg.cancel`` are terminal: the op of greatest
  ``(epoch, hlc, origin, seq)`` decides the message, and a terminal op may
  arrive before its send;
* a message is pending while its send is known and no terminal op is, or
  its winning terminal op is *void*: a claim outranked by its own request
  id's "nothing pending" decision (below), or any terminal op outranked by
  the message's winning hold or release (``msg.hold`` / ``msg.release``,
  also ranked by ``(epoch, hlc, origin, seq)``;
  :func:`common.lifecycle.terminal_stands`): then the hold decides between
  pending and editing;
* a send whose body has ``approval_required`` starts ``awaiting_approval``
  (kept in a set of its own, counted against the cap, never claimable);
  ``msg.approve`` is ranked with the holds and makes it pending at its
  FIFO place, ``msg.reject`` with the terminal ops (``rejected``). The
  winning approve op and the winning reject op are each kept; the
  message's *decision* is the one its state bears out: the reject if it is
  rejected, else the approval (a reject outranked by a later claim or hold
  was never acknowledged);
* ``msg.empty`` records that pop ``request_id`` found nothing: per request
  id the greatest ``(epoch, hlc, origin, seq)`` is kept. A request id's
  *decision* is the greatest-ranked of its empty op and the winning claims
  that carry it, so every owner that holds the same ops answers a retried
  (or late) copy of the request the same way. At most
  ``limits.mailbox_empty_decisions_max`` are kept per model (the oldest go
  first, by ``at_ms``).

* ``msg.purge`` (issue 27): the greatest ``(epoch, hlc, origin, seq)`` (the
  owners' order of decisions) of the mailbox's purges is its *mark*; a
  message whose winning send was decided below the mark is gone from the
  model in any state, awaiting approval and rejected included (its send;
  its terminal ops stay, so a request id's claim of it is still known as
  *purged*, and a retried pop of that request id is answered "nothing
  pending", never a newer message). Every hold, edit and approval decision
  (``msg.approve`` / ``msg.reject``) decided below the mark goes too. A
  copy of a purged send that would not win is ignored; one that would (a
  later term's) is judged again, and stays if decided after the mark (with
  the holds, edits and decisions decided after the mark, kept but hidden
  while the message is purged).

* leases (issue 26): ``msg.renew`` is a terminal op (the whole claim with
  a later deadline) and ``msg.expire`` a hold-ranked op (pending again), so
  the rules above decide them. A claim voided by its expiry no longer
  decides its request id: a copy of a leased pop that arrives after its
  lease ended is served as a new pop (the message it got is back in the
  queue, so none is lost). The model indexes the deadlines of the leases
  that stand (claimed, not completed) for the owner's expiry.
* ``msg.complete``: per message the one of the greatest ``claim_rank`` (the
  rank of the claim or renew it completes), then the lowest ``(hlc, origin,
  seq)``, is kept;
  it counts only while the message is claimed by the token it names.

Merging is idempotent and order-free, so the model may be fed the same op
twice or out of order. The pending set is a sorted list (bisect), so the
FIFO head, the pending count and a removal cost O(log n) + O(n) memmove on
a list bounded by the mailbox cap.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any

from common import limits
from common.lifecycle import (
    AWAITING,
    CLAIM_KINDS,
    CLAIMED,
    DECISION_KINDS,
    EDITABLE_FIELDS,
    EDITING,
    MSG_APPROVE,
    MSG_REJECT,
    PENDING,
    REJECTED,
    TRANSITIONS,
    claim_rank_of,
    merged_state,
    terminal_stands,
)
from common.ops import (
    HOLD_KINDS,
    MSG_COMPLETE,
    MSG_EMPTY,
    MSG_PURGE,
    MSG_SEND,
    TERMINAL_KINDS,
    Op,
)

_FifoEntry = tuple[int, str, int, str]  # (hlc, origin, seq, message id)


def _copy_key(op: Op) -> tuple[int, int, str, int]:
    """Which copy of a send wins: the one of the latest owner term, then the
    lowest ``(hlc, origin, seq)``. A later term stamps a copy of its own only
    when it never saw the older one, which no majority then held: never
    acknowledged, it must not undercut the copy the later term decided."""
    return (-op.epoch, op.hlc, op.origin, op.seq)


def _terminal_rank(op: Op) -> tuple[int, int, str, int]:
    return (op.epoch, op.hlc, op.origin, op.seq)


def completion_wins(new: Op, cur: Op) -> bool:
    """Of two completions of a message, is ``new`` the one kept? The one of
    the later claim, then the first (lowest ``(hlc, origin, seq)``)."""
    a, b = claim_rank_of(new.body), claim_rank_of(cur.body)
    return a > b or (a == b and (new.hlc, new.origin, new.seq) < (cur.hlc, cur.origin, cur.seq))


class MailboxModel:
    __slots__ = ("_awaiting", "_by_request", "_completions", "_decisions", "_editing",
                 "_empties", "_empty_max", "_holds", "_leases", "_mark", "_pending", "_purged",
                 "_revisions", "_sends", "_terminals", "key")

    def __init__(self, key: str, empty_max: int = limits.mailbox_empty_decisions_max) -> None:
        self.key = key
        self._empty_max = empty_max
        # request id -> its greatest-ranked msg.empty op
        self._empties: dict[str, Op] = {}
        self._sends: dict[str, Op] = {}
        self._terminals: dict[str, Op] = {}
        self._holds: dict[str, Op] = {}  # message id -> winning msg.hold / msg.release
        self._revisions: dict[str, Op] = {}  # message id -> winning release with content
        self._editing: set[str] = set()
        self._awaiting: set[str] = set()
        # message id -> {kind: the winning msg.approve, the winning msg.reject}
        self._decisions: dict[str, dict[str, Op]] = {}
        self._pending: list[_FifoEntry] = []
        # request id -> {message id: rank of its winning claim carrying that id}
        self._by_request: dict[str, dict[str, tuple[int, int, str, int]]] = {}
        self._mark: Op | None = None  # the greatest msg.purge
        # message id -> the copy key (_copy_key) of its purged winning send
        self._purged: dict[str, tuple[int, int, str, int]] = {}
        self._completions: dict[str, Op] = {}  # message id -> its winning msg.complete
        self._leases: dict[str, int] = {}  # message id -> deadline of the lease that stands

    # -- merging ---------------------------------------------------------
    def apply(self, ops: Iterable[Op]) -> None:
        for op in ops:
            if op.key != self.key:
                continue
            if op.kind == MSG_SEND:
                self._apply_send(op)
            elif op.kind in TERMINAL_KINDS:
                self._apply_terminal(op)
            elif op.kind == MSG_EMPTY:
                self._apply_empty(op)
            elif op.kind in HOLD_KINDS:
                self._apply_hold(op)
            elif op.kind == MSG_PURGE:
                self._apply_purge(op)
            elif op.kind == MSG_COMPLETE:
                self._apply_complete(op)

    def _apply_complete(self, op: Op) -> None:
        mid = str(op.body["id"])
        cur = self._completions.get(mid)
        if cur is None or completion_wins(op, cur):
            self._completions[mid] = op
            self._relist(mid)

    def _below_mark(self, op: Op) -> bool:
        """Was ``op`` decided before the mark, in the owners' order of
        decisions ``(epoch, hlc, origin, seq)``?"""
        return self._mark is not None and _terminal_rank(op) < _terminal_rank(self._mark)

    def _apply_purge(self, op: Op) -> None:
        if self._mark is not None and _terminal_rank(self._mark) >= _terminal_rank(op):
            return
        self._mark = op
        for mid in [m for m, send in self._sends.items() if self._below_mark(send)]:
            self._drop(mid)
        for table in (self._holds, self._revisions):
            for mid in [m for m, h in table.items() if self._below_mark(h)]:
                del table[mid]
                term = self._terminals.get(mid)
                for other in {mid, *([] if term is None else self._request_peers(term))}:
                    self._relist(other)
        for mid in list(self._decisions):
            self._drop_old_decisions(mid)
        for mid in list(self._completions):  # one the mark now covers no longer ends a lease
            self._relist(mid)

    def _drop(self, mid: str) -> None:
        """Forget a purged message's send (not its terminal ops), in any
        state (awaiting approval and rejected too); its hold, edit and
        approval decisions go too when decided before the mark (a later one,
        decided on a copy that outranks this send, stays for when that copy
        comes)."""
        send = self._sends.pop(mid)
        self._unlist(send)
        self._leases.pop(mid, None)
        self._editing.discard(mid)
        self._awaiting.discard(mid)
        for table in (self._holds, self._revisions):
            if mid in table and self._below_mark(table[mid]):
                del table[mid]
        self._drop_old_decisions(mid)
        self._purged[mid] = _copy_key(send)
        term = self._terminals.get(mid)
        for other in [] if term is None else self._request_peers(term):
            self._relist(other)

    def _drop_old_decisions(self, mid: str) -> None:
        """Forget the approval decisions of ``mid`` decided before the mark."""
        mine = self._decisions.get(mid)
        if mine is None:
            return
        for kind in [k for k, d in mine.items() if self._below_mark(d)]:
            del mine[kind]
        if not mine:
            del self._decisions[mid]

    def _note_decision(self, op: Op) -> None:
        # One decided before the purge goes with it; one decided after it
        # stays (hidden while its message is purged), like a hold.
        if op.kind in DECISION_KINDS and not self._below_mark(op):
            mine = self._decisions.setdefault(str(op.body["id"]), {})
            cur = mine.get(op.kind)
            if cur is None or _terminal_rank(op) > _terminal_rank(cur):
                mine[op.kind] = op

    def _apply_hold(self, op: Op) -> None:
        mid = str(op.body["id"])
        if self._below_mark(op):
            return  # decided before the purge: gone with it
        self._note_decision(op)
        cur = self._holds.get(mid)
        if cur is None or _terminal_rank(op) > _terminal_rank(cur):
            self._holds[mid] = op
            term = self._terminals.get(mid)
            for other in [] if term is None else self._request_peers(term):
                self._relist(other)
        if isinstance(op.body.get("content"), dict):
            rev = self._revisions.get(mid)
            if rev is None or _terminal_rank(op) > _terminal_rank(rev):
                self._revisions[mid] = op
        self._relist(mid)

    def _apply_empty(self, op: Op) -> None:
        rid = str(op.body["request_id"])
        cur = self._empties.get(rid)
        if cur is not None and _terminal_rank(cur) >= _terminal_rank(op):
            return
        self._empties[rid] = op
        if len(self._empties) > self._empty_max:
            oldest = min(self._empties, key=lambda r: (int(self._empties[r].body.get("at_ms") or 0),
                                                        _terminal_rank(self._empties[r])))
            del self._empties[oldest]
            for mid in list(self._by_request.get(oldest, ())):
                self._relist(mid)
        for mid in list(self._by_request.get(rid, ())):
            self._relist(mid)

    def _apply_send(self, op: Op) -> None:
        mid = str(op.body["id"])
        key = _copy_key(op)
        purged = self._purged.get(mid)
        if purged is not None:
            if purged <= key:
                return
            if self._below_mark(op):
                self._purged[mid] = key
                return
            del self._purged[mid]  # a winning copy the mark does not cover: judged again
        cur = self._sends.get(mid)
        if cur is not None and _copy_key(cur) <= key:
            return
        if cur is not None:
            self._unlist(cur)
        self._sends[mid] = op
        if self._below_mark(op):
            self._drop(mid)
            return
        term = self._terminals.get(mid)
        for other in {mid, *([] if term is None else self._request_peers(term))}:
            self._relist(other)

    def _apply_terminal(self, op: Op) -> None:
        mid = str(op.body["id"])
        self._note_decision(op)  # not one decided before the purge
        cur = self._terminals.get(mid)
        if cur is not None and _terminal_rank(cur) >= _terminal_rank(op):
            return
        affected = {mid}
        if cur is not None:
            affected.update(self._request_peers(cur))
            self._forget_request(cur)
        self._terminals[mid] = op
        if op.kind in CLAIM_KINDS and op.body.get("request_id") is not None:
            rid = str(op.body["request_id"])
            self._by_request.setdefault(rid, {})[mid] = _terminal_rank(op)
        affected.update(self._request_peers(op))
        for other in affected:
            self._relist(other)

    def _request_peers(self, term: Op) -> list[str]:
        """Messages whose claims carry the same request id as ``term``."""
        rid = term.body.get("request_id") if term.kind in CLAIM_KINDS else None
        return [] if rid is None else list(self._by_request.get(str(rid), ()))

    def _void(self, term: Op) -> bool:
        """A terminal op outranked by the message's winning hold or release
        (an owner holds only what it knows pending, so that terminal op was
        never acknowledged), or a claim outranked by another decision of its own request id: the
        request's "nothing pending", or a claim of another message for the
        same request id. Such a claim is an unacknowledged one of a deposed
        owner (the acknowledged decision of a request id is never outranked:
        later owners only re-issue it). Nobody holds that message, so it is
        pending again."""
        rank = _terminal_rank(term)
        hold = self._holds.get(str(term.body["id"]))
        if not terminal_stands(rank, None if hold is None else _terminal_rank(hold)):
            return True
        rid = term.body.get("request_id") if term.kind in CLAIM_KINDS else None
        if rid is None:
            return False
        empty = self._empties.get(str(rid))
        if empty is not None and _terminal_rank(empty) > rank:
            return True
        mid = str(term.body["id"])
        return any(other != mid and other_rank > rank and other in self._sends
                   and not self._held_over(other)
                   for other, other_rank in self._by_request.get(str(rid), {}).items())

    def _held_over(self, mid: str) -> bool:
        """Is the winning terminal op of ``mid`` outranked by its winning hold?"""
        term, hold = self._terminals.get(mid), self._holds.get(mid)
        return (term is not None and hold is not None
                and not terminal_stands(_terminal_rank(term), _terminal_rank(hold)))

    def _decided(self, mid: str) -> bool:
        term = self._terminals.get(mid)
        return term is not None and not self._void(term)

    def _relist(self, mid: str) -> None:
        """Put ``mid`` in the FIFO (pending) or the editing set, or take it
        out of both, as its state says."""
        send = self._sends.get(mid)
        if send is None:
            return
        state = self.state(mid)
        entry = self._entry(send)
        i = bisect.bisect_left(self._pending, entry)
        present = i < len(self._pending) and self._pending[i] == entry
        if state == PENDING and not present:
            self._pending.insert(i, entry)
        elif present and state != PENDING:
            del self._pending[i]
        if state == EDITING:
            self._editing.add(mid)
        else:
            self._editing.discard(mid)
        if state == AWAITING:
            self._awaiting.add(mid)
        else:
            self._awaiting.discard(mid)
        until = (self._lease_until(mid) if state == CLAIMED or self._voided_lease(mid)
                 else None)
        if until is None:
            self._leases.pop(mid, None)
        else:
            self._leases[mid] = until

    def _lease_until(self, mid: str) -> int | None:
        """The deadline of the lease that decides claimed ``mid``, unless
        its holder completed it (None: no lease stands)."""
        term = self._terminals[mid]
        token, until = term.body.get("token"), term.body.get("lease_until_ms")
        if token is None or until is None:
            return None
        done = self._kept_completion(mid)
        if done is not None and done.body.get("token") == token:
            return None
        return int(until)

    def _voided_lease(self, mid: str) -> bool:
        """Is the winning op of ``mid`` a leased claim void only because its
        request id decided otherwise (a deposed owner's claim, left on a
        minority, whose pop a later owner served with another message)? The
        stores know no request ids and show it claimed, so the owner lets
        its lease run out and expires it like any other: then every replica
        shows the message pending."""
        term = self._terminals.get(mid)
        return (term is not None and term.kind in CLAIM_KINDS
                and term.body.get("token") is not None and self._void(term)
                and not self._held_over(mid))

    def _kept_completion(self, mid: str) -> Op | None:
        """The winning completion of ``mid``, unless it completes a claim
        decided before the mark (a purge took it, as the stores keep it:
        rank only, :func:`store.records.completion_below`)."""
        done = self._completions.get(mid)
        if done is None or self._mark is None:
            return done
        rank = claim_rank_of(done.body)
        return None if rank[1] > 0 and rank < _terminal_rank(self._mark) else done

    def _forget_request(self, op: Op) -> None:
        rid = op.body.get("request_id")
        if op.kind not in CLAIM_KINDS or rid is None:
            return
        claims = self._by_request.get(str(rid))
        if claims is not None:
            claims.pop(str(op.body["id"]), None)
            if not claims:
                del self._by_request[str(rid)]

    @staticmethod
    def _entry(op: Op) -> _FifoEntry:
        return (op.hlc, op.origin, op.seq, str(op.body["id"]))

    def _unlist(self, send: Op) -> None:
        entry = self._entry(send)
        i = bisect.bisect_left(self._pending, entry)
        if i < len(self._pending) and self._pending[i] == entry:
            del self._pending[i]

    # -- reading ---------------------------------------------------------
    def send_op(self, message_id: str) -> Op | None:
        return self._sends.get(message_id)

    def terminal_op(self, message_id: str) -> Op | None:
        return self._terminals.get(message_id)

    def state(self, message_id: str) -> str | None:
        """A :mod:`common.lifecycle` state; None if the send is unknown."""
        send = self._sends.get(message_id)
        if send is None:
            return None
        if self._decided(message_id):
            return TRANSITIONS[self._terminals[message_id].kind][1]
        hold = self._holds.get(message_id)
        return merged_state(None, None if hold is None else hold.kind,
                            approval_required=bool(send.body.get("approval_required")))

    def completion_op(self, message_id: str) -> Op | None:
        """The completion that stands: the winning one, if the message is
        claimed by the token it names."""
        done = self._kept_completion(message_id)
        if done is None or self.state(message_id) != CLAIMED:
            return None
        term = self._terminals[message_id]
        return done if done.body.get("token") == term.body.get("token") else None

    def lease_until(self, message_id: str) -> int | None:
        """The deadline of the lease on ``message_id`` that stands, if any."""
        return self._leases.get(message_id)

    def due_leases(self, now_ms: int) -> list[str]:
        """Messages whose standing lease ran out by ``now_ms``, oldest deadline first."""
        return sorted((m for m, until in self._leases.items() if until <= now_ms),
                      key=lambda m: (self._leases[m], m))

    def hold_op(self, message_id: str) -> Op | None:
        """The winning hold or release op of a message, if any."""
        return self._holds.get(message_id)

    def decision_op(self, message_id: str) -> Op | None:
        """The approver's decision that stands: the winning reject op if the
        message is rejected, else its winning approve op, if any."""
        mine = self._decisions.get(message_id) or {}
        if self.state(message_id) == REJECTED:
            return mine.get(MSG_REJECT)
        return mine.get(MSG_APPROVE)

    def approve_op(self, message_id: str) -> Op | None:
        """The winning approve op of a message, if any (it rides along in
        every round that decides the message, like its send)."""
        return (self._decisions.get(message_id) or {}).get(MSG_APPROVE)

    def awaiting_ids(self) -> list[str]:
        """Messages awaiting an approver, oldest first."""
        return sorted(self._awaiting, key=lambda mid: self._entry(self._sends[mid]))

    def revision_op(self, message_id: str) -> Op | None:
        """The release whose saved content a reader sees, if any."""
        return self._revisions.get(message_id)

    def queued_count(self) -> int:
        """Messages that occupy the mailbox: pending, editing and awaiting
        approval (the cap)."""
        return len(self._pending) + len(self._editing) + len(self._awaiting)

    def pending_count(self) -> int:
        return len(self._pending)

    def pending_ids(self) -> Iterator[str]:
        """Pending message ids, oldest first."""
        return (entry[3] for entry in self._pending)

    def first_pending(self, agent: str | None, skip: set[str] | dict[str, Any]) -> str | None:
        """The oldest pending message ``agent`` may claim (shared mail, or
        mail addressed to ``agent``), skipping ids in ``skip``."""
        for entry in self._pending:
            mid = entry[3]
            if mid in skip:
                continue
            to_agent = self._sends[mid].body.get("to_agent")
            if to_agent is None or to_agent == agent:
                return mid
        return None

    def pending_from(self, workspace: str, project: str) -> list[str]:
        """Pending messages (and those awaiting approval) sent by
        ``workspace/project``, oldest first: what a cancel-all takes."""
        entries = sorted([*self._pending, *(self._entry(self._sends[m]) for m in self._awaiting)])
        out = []
        for entry in entries:
            body = self._sends[entry[3]].body
            if body.get("from_workspace") == workspace and body.get("from_project") == project:
                out.append(entry[3])
        return out

    def decision(self, request_id: str) -> tuple[str | None, Op] | None:
        """How pop ``request_id`` was decided, as far as this model knows:
        ``(message id, claim op)`` or ``(None, empty op)``, whichever ranks
        higher; None if it was not decided."""
        mid = self.claim_by_request(request_id)
        claim = None if mid is None else self._terminals[mid]
        empty = self._empties.get(request_id)
        if empty is not None and (claim is None or _terminal_rank(empty) > _terminal_rank(claim)):
            return None, empty
        if mid is not None and claim is not None:
            return mid, claim
        return None

    def is_purged(self, message_id: str) -> bool:
        """Did a purge remove this message (as far as this model knows)?"""
        return message_id in self._purged

    def purged_claim(self, request_id: str) -> bool:
        """Did ``request_id`` claim a message that a purge has since removed?"""
        return any(mid in self._purged for mid in self._by_request.get(request_id, ()))

    def purge_op(self) -> Op | None:
        """The mailbox's mark: its greatest ``msg.purge``, if any."""
        return self._mark

    def claim_by_request(self, request_id: str) -> str | None:
        """The message whose winning claim carries ``request_id``; if several
        do (a retry after an unacknowledged claim of a deposed owner), the
        one claimed at the highest rank, which is the acknowledged one."""
        claims = self._by_request.get(request_id)
        if not claims:
            return None
        known = [(rank, mid) for mid, rank in claims.items()
                 if mid in self._sends and not self._held_over(mid)]
        return max(known)[1] if known else None

    def message(self, message_id: str) -> dict[str, Any]:
        """The send body (with a saved edit's subject and body) plus its FIFO
        ``order`` ``[hlc, origin]``."""
        send = self._sends[message_id]
        out = {**send.body, "order": [send.hlc, send.origin]}
        rev = self._revisions.get(message_id)
        if rev is not None:
            content = rev.body["content"]
            out.update({k: content.get(k) for k in EDITABLE_FIELDS})
        return out

    def __len__(self) -> int:
        return len(self._sends)
