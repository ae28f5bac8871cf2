"""How a burst of messages to one peer becomes fewer, larger messages.

Pure, shared by the daemon's peer links (:mod:`daemon.peer.link`, on the
way out and, for :func:`coalesce`, on the way in) and the simulator's
network, so the core meets merged messages in both.

* :func:`coalesce` merges runs of quorum ``Replicate`` into one: a batch of
  writes costs the receiver one transaction and one ``Ack``.
* :func:`halve` undoes that for a batch too large to send in one piece
  (``limits.peer_batch_bytes_max``): two batches, sent one after the
  other, that the receiver serves as it would have served the one.
* :func:`merge_accepts` folds the ``Accept`` rounds an owner sent one
  mailbox at one epoch into the first of them: the receiver checks the
  epoch once, persists the ops in one write and answers one ``Accepted``
  naming every op id, which the owner counts for each round whose ops it
  names (:meth:`federation.claim.Claims.on_accepted`). Rounds are not
  merged in the owner's model, only on the wire; a receiver that refuses
  refuses them all, as it would have refused each. An ``Accept`` moves
  ahead only past messages about other mailboxes: anything else about its
  mailbox (a ``Prepare``, a promise or refusal, another epoch's
  ``Accept``) closes the group, so within one batch no receiver sees those
  in another order than they were sent (batches in flight together may be
  overtaken by later ones, which the core tolerates: the simulator delivers
  every message with its own delay). Messages that name no mailbox may carry one inside
  (a ``Forward``'s request, a ``Replicate`` of mailbox ops): an ``Accept``
  may pass those, which changes nothing, since accepting depends only on
  the receiver's promise. Only the sender merges: an owner of a
  build that counts merged answers is the one that asks for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from common import limits
from common.ops import Op
from federation.messages import Accept, Replicate


def coalesce(msgs: Iterable[Any]) -> list[Any]:
    """Merge runs of quorum ``Replicate`` messages into one."""
    out: list[Any] = []
    for msg in msgs:
        prev = out[-1] if out else None
        if (isinstance(msg, Replicate) and isinstance(prev, Replicate)
                and msg.ack == prev.ack and len(prev.ops) < limits.replicate_batch_ops_max):
            out[-1] = Replicate(ops=tuple(prev.ops) + tuple(msg.ops), ack=msg.ack)
        else:
            out.append(msg)
    return out


def mailbox_of(msg: Any) -> str | None:
    """The mailbox a message is about, if it is about one."""
    mailbox = getattr(msg, "mailbox", None)
    return mailbox if isinstance(mailbox, str) else None


def fold(into: Accept, more: Accept) -> Accept | None:
    """``into`` carrying ``more``'s ops too (each op once), or None if they
    are not of one mailbox and epoch or the result would be too large."""
    if into.mailbox != more.mailbox or into.epoch != more.epoch:
        return None
    held = {op.op_id for op in into.ops}
    extra = tuple(op for op in more.ops if op.op_id not in held)
    if len(into.ops) + len(extra) > limits.replicate_batch_ops_max:
        return None
    return Accept(into.mailbox, into.epoch, into.ops + extra) if extra else into


def merge_accepts(msgs: Iterable[Any]) -> tuple[list[Any], int]:
    """``msgs`` with each mailbox's ``Accept``s of one epoch folded into the
    first (see the module docstring), and how many were folded away. Linear
    in the ops: each group gathers its ops once and becomes one message at
    the end."""
    out: list[Any] = []
    groups: dict[int, tuple[list[Op], set[tuple[str, int]]]] = {}  # index in out -> its ops
    open_at: dict[str, int] = {}  # mailbox -> index in out of the Accept still open
    folded = 0
    for msg in msgs:
        mailbox = mailbox_of(msg)
        if isinstance(msg, Accept) and mailbox is not None:
            i = open_at.get(mailbox)
            if i is not None and out[i].epoch == msg.epoch:
                ops, held = groups.setdefault(i, (list(out[i].ops), {o.op_id for o in out[i].ops}))
                extra = [op for op in msg.ops if op.op_id not in held]
                if len(ops) + len(extra) <= limits.replicate_batch_ops_max:
                    ops.extend(extra)
                    held.update(op.op_id for op in extra)
                    folded += 1
                    continue
            open_at[mailbox] = len(out)
        elif mailbox is not None:
            open_at.pop(mailbox, None)
        out.append(msg)
    for i, (ops, _) in groups.items():
        if len(ops) > len(out[i].ops):
            out[i] = Accept(out[i].mailbox, out[i].epoch, tuple(ops))
    return out, folded


def halve(msgs: list[Any]) -> list[list[Any]] | None:
    """``msgs`` as two batches, in order, or None if it is one message that
    cannot be split. A lone ``Replicate`` splits its ops: each half is
    acknowledged by op id, as the whole would have been. Other messages
    stay whole (an ``Accept``'s rounds are counted by the ops it names
    together)."""
    if len(msgs) > 1:
        mid = len(msgs) // 2
        return [msgs[:mid], msgs[mid:]]
    if len(msgs) == 1 and isinstance(msgs[0], Replicate) and len(msgs[0].ops) > 1:
        rep = msgs[0]
        mid = len(rep.ops) // 2
        return [[Replicate(ops=tuple(rep.ops[:mid]), ack=rep.ack)],
                [Replicate(ops=tuple(rep.ops[mid:]), ack=rep.ack)]]
    return None
