"""The life of a project message, in one table.

A message is sent once and then moves between states only through mailbox
operations that the mailbox's owner issues (``docs/federation.md``)::

    msg.send ──► awaiting_approval ──msg.reject──► rejected      (terminal)
    (held by a       │      └───────msg.cancel──► cancelled     (terminal)
     decider)        │ msg.approve
                     ▼
    msg.send ──► pending ──msg.claim──► claimed     (terminal, or leased:)
                 │  ▲ ▲                  │  ▲ msg.renew (the same holder, a later deadline)
                 │  │ └────msg.expire────┘──┘
                 │  │  └───msg.cancel─► cancelled   (terminal)
        msg.hold │  │ msg.release (save: new subject/body; discard: unchanged)
                 ▼  │
                 editing

* ``pending``: in the queue, in FIFO order of its send; a pop may claim it,
  its sender may cancel it, an editor may hold it.
* ``editing``: held out of the queue by an editor (the web inbox's Edit).
  No pop claims it and no cancel takes it; it keeps its place, and counts
  against the mailbox cap, until a release puts it back.
* ``awaiting_approval``: an admission decider answered ``pending`` for the
  send (its ``approval_required`` field is true). No pop claims it and no
  hold takes it; it keeps its FIFO place and counts against the mailbox cap.
  An approver's ``msg.approve`` makes it pending at that place; a
  ``msg.reject`` ends it; its sender may still cancel it.
* ``claimed`` / ``cancelled`` / ``rejected``: terminal; nothing moves it again,
  except a *leased* claim (issue 26): a pop with a lease makes a claim with
  a claim token and a deadline. Its holder renews it (``msg.renew``: the
  same claim, token and holder with a later deadline) or completes it; if
  the deadline passes first, the owner issues ``msg.expire`` and the message
  is pending again at its FIFO place, for the next pop (a new claim with a
  new token). A claim without a lease stays terminal.

The owner decides every transition (a hold and a pop of the same message
are ordered by the owner like two pops, so they never both win) and checks
it against :data:`TRANSITIONS`. Replicas merge the ops order-free by these
rules, which :func:`merged_state` states once for the store, the simulator
and the owner's model:

* the greatest ``(epoch, hlc, origin, seq)`` of a message's claims,
  cancels and rejections is its *winning terminal op*, and the greatest of
  its holds, releases and approvals its *winning hold*;
* the winning terminal op decides (claimed or cancelled) unless the winning
  hold outranks it: a terminal op ranked below the winning hold is *void*
  (:func:`terminal_stands`). An owner issues a hold only for a message it
  knows pending after merging a majority's state, so a terminal op below an
  acknowledged hold was never acknowledged (a deposed owner's claim left on
  a minority): it must not undo the owner's decision and the editor's save;
* otherwise the winning hold decides between ``editing`` and ``pending``
  (an approval is ranked with the holds: the owner approves only a message
  it knows awaiting, so a terminal op below an acknowledged approval is void
  by the same argument); with neither, the message is ``awaiting_approval``
  if its send asked for approval, else ``pending``;
* leases need no rule of their own: ``msg.renew`` is ranked with the
  terminal ops (it carries the whole claim, so the greatest-ranked one
  names the holder and the deadline) and ``msg.expire`` with the holds
  (it leads to pending). The owner issues each only for a message it knows
  claimed by that token, so, by the argument above, whatever outranks the
  other is what the owner decided last: an expiry outranking a renew ends
  that lease; a renew outranking an expiry (a deposed owner's, never
  acknowledged) keeps it;
* the subject and body a reader sees are those of the greatest-ranked
  release that carried new content (a save), else the send's.

Completion (``msg.complete``) is not a move of this table: a claimed
message stays ``claimed`` and gains an outcome (done, blocked or rejected)
and a note from its holder. A terminal claim's completion is written by
quorum through any node; a leased claim's is decided by the owner (it ends
the lease, so it is ordered against the expiry). Of a message's
completions the one for the latest claim (the greatest ``claim_epoch``,
the epoch of the claim or renew it completes), then the lowest
``(hlc, origin, seq)``, is kept, and it shows only while the message is
claimed by the claim token it names (docs/federation.md, "Completion").
"""

from __future__ import annotations

from typing import Any, Final

PENDING: Final = "pending"
EDITING: Final = "editing"
AWAITING: Final = "awaiting_approval"
CLAIMED: Final = "claimed"
CANCELLED: Final = "cancelled"
REJECTED: Final = "rejected"

STATES: Final = (PENDING, EDITING, AWAITING, CLAIMED, CANCELLED, REJECTED)
TERMINAL: Final = frozenset({CLAIMED, CANCELLED, REJECTED})
# States that occupy the mailbox (count against its cap) without being claimable.
QUEUED: Final = frozenset({PENDING, EDITING, AWAITING})

# Operation kinds (their wire names; :mod:`common.ops` registers them).
MSG_SEND: Final = "msg.send"
MSG_CLAIM: Final = "msg.claim"
MSG_CANCEL: Final = "msg.cancel"
MSG_HOLD: Final = "msg.hold"
MSG_RELEASE: Final = "msg.release"
MSG_COMPLETE: Final = "msg.complete"  # outcome of a claimed message (not a transition)
COMPLETABLE: Final = CLAIMED  # the state a completion needs
MSG_APPROVE: Final = "msg.approve"
MSG_REJECT: Final = "msg.reject"
MSG_RENEW: Final = "msg.renew"  # a leased claim's holder extends its deadline
MSG_EXPIRE: Final = "msg.expire"  # the owner ends a lease that ran out

# op kind -> (states it may be issued in, the state it leads to)
TRANSITIONS: Final[dict[str, tuple[frozenset[str], str]]] = {
    MSG_CLAIM: (frozenset({PENDING}), CLAIMED),
    MSG_CANCEL: (frozenset({PENDING, AWAITING}), CANCELLED),
    MSG_REJECT: (frozenset({AWAITING}), REJECTED),
    MSG_HOLD: (frozenset({PENDING}), EDITING),
    MSG_RELEASE: (frozenset({EDITING}), PENDING),
    MSG_APPROVE: (frozenset({AWAITING}), PENDING),
    MSG_RENEW: (frozenset({CLAIMED}), CLAIMED),
    MSG_EXPIRE: (frozenset({CLAIMED}), PENDING),
}
# The ops that decide a claim's holder (a renew carries its whole claim).
CLAIM_KINDS: Final = frozenset({MSG_CLAIM, MSG_RENEW})
# The approver's two answers (each decided once, by the mailbox owner).
DECISION_KINDS: Final = frozenset({MSG_APPROVE, MSG_REJECT})
TERMINAL_KINDS: Final = frozenset(k for k, (_, to) in TRANSITIONS.items() if to in TERMINAL)
HOLD_KINDS: Final = frozenset(k for k, (_, to) in TRANSITIONS.items() if to not in TERMINAL)

# The fields a save may change (the rest of a message is fixed at send).
EDITABLE_FIELDS: Final = ("subject", "body")


def allowed(kind: str, state: str) -> bool:
    """May the owner issue ``kind`` for a message in ``state``?"""
    froms, _ = TRANSITIONS[kind]
    return state in froms


def terminal_stands(terminal_rank: tuple[Any, ...] | None,
                    hold_rank: tuple[Any, ...] | None) -> bool:
    """Does a message's winning terminal op (its ``(epoch, hlc, origin,
    seq)``; None: none known) decide it, given its winning hold/release's
    rank? Only if no hold or release outranks it."""
    return terminal_rank is not None and (hold_rank is None or terminal_rank > hold_rank)


def claim_rank_of(body: dict[str, Any]) -> tuple[int, int, str, int]:
    """The rank of the claim (or renew) a completion completes; one written
    before completions named it ranks below every claim."""
    rank = body.get("claim_rank")
    if isinstance(rank, (list, tuple)) and len(rank) == 4:
        return (int(rank[0]), int(rank[1]), str(rank[2]), int(rank[3]))
    return (int(body.get("claim_epoch") or 0), 0, "", 0)


def merged_state(terminal_kind: str | None, hold_kind: str | None, *,
                 terminal_void: bool = False, approval_required: bool = False) -> str:
    """A message's state from the kinds of its winning terminal op and its
    winning hold/release/approve op (None: none known); ``terminal_void``:
    the terminal op is ranked below the hold (:func:`terminal_stands`);
    ``approval_required``: the send was held for an approver."""
    if terminal_kind is not None and not terminal_void:
        return TRANSITIONS[terminal_kind][1]
    if hold_kind is not None:
        return TRANSITIONS[hold_kind][1]
    return AWAITING if approval_required else PENDING


assert TERMINAL_KINDS == {MSG_CLAIM, MSG_CANCEL, MSG_REJECT, MSG_RENEW}
assert HOLD_KINDS == {MSG_HOLD, MSG_RELEASE, MSG_APPROVE, MSG_EXPIRE}
assert all(to in STATES and froms <= set(STATES) for froms, to in TRANSITIONS.values())
