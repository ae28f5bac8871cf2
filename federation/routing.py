"""Mailbox routing decisions: which member runs a request, and two answers
an entry node gives without the core.

The daemon (``daemon/replication/mailbox_router.py``, forwards over
``/peer/v1/mailbox``) and the simulator (``tests/sim/entry.py``, forwards
over the simulated network) both route with :class:`Route`, so the
simulator's seeds cover the failover path:

* the owner of a mailbox is the first live member in rendezvous order
  (:meth:`federation.core.NodeCore.owner_for`); an owner that is
  unreachable, times out or answers that it is recovering is marked tried
  and the next untried member in rendezvous order is asked, ending with this
  node; a recovering node owns nothing, so it starts with itself tried; a
  request forwarded ``limits.forward_hops_max`` times runs where it is.
  Epochs, not agreement on who the owner is, keep claims safe, so asking
  another member is harmless;
* :func:`decided_send` -- a send retried with the id of a message decided
  long ago (claimed, cancelled or rejected, beyond the history an owner
  loads) is answered from the store as the message is, with a synthetic op (``seq=0, epoch=0``: never logged,
  never replicated), instead of becoming a second pending copy;
* :func:`sent_op` -- a forwarded send's answer is the stored op; the entry
  node applies it itself (as replicated from the owner) before answering,
  so a cancel by id through the same node right after sees it.
"""

from __future__ import annotations

import uuid
from typing import Any

from common import limits
from common.lifecycle import TERMINAL
from common.ops import MSG_SEND, Op
from federation.core import NodeCore
from federation.requests import MailSend


class Route:
    """Where one mailbox request goes next, as forwards fail."""

    def __init__(self, core: NodeCore, key: str, hops: int = 0) -> None:
        self.core = core
        self.key = key
        self.hops = hops
        self.tried: set[str] = set()
        self.order = core.membership.rendezvous(key)
        self._left = len(self.order)
        if core.recovering:
            self.tried.add(core.node_id)  # a recovering member owns nothing; a peer serves it

    def next(self, now_ms: int) -> str | None:
        """The member to forward to, or None: run the request here."""
        me = self.core.node_id
        if self._left <= 0:
            return None
        self._left -= 1
        owner = self.core.owner_for(self.key, now_ms)
        if owner in self.tried:
            owner = next((m for m in self.order if m not in self.tried), me)
        if owner == me or self.hops >= limits.forward_hops_max:
            return None
        return owner

    def failed(self, peer: str) -> None:
        """``peer`` was unreachable, timed out, or is recovering."""
        self.tried.add(peer)


FRESH_ID_VERSIONS = frozenset({4, 7})  # random (older builds) and time-ordered ids


def is_retryable_id(value: Any) -> bool:
    """Only idempotency-key ids (uuid5) can repeat; fresh ones are uuid7
    (uuid4 from older builds), minted once for one send."""
    try:
        return uuid.UUID(str(value)).version not in FRESH_ID_VERSIONS
    except ValueError:
        return True


def needs_decided_check(req: Any) -> str | None:
    """The message id to look up before ``req`` reaches the core, if any."""
    if isinstance(req, MailSend) and is_retryable_id(req.body.get("id")):
        return str(req.body.get("id"))
    return None


def decided_send(req: MailSend, row: dict[str, Any] | None,
                 sent: dict[str, Any] | None) -> Op | None:
    """The answer to a send whose message ``row`` (the store's view) is
    already decided, or None to let the owner's core decide. Its body is the
    message as sent (``sent``, the store's ``sent_body``), as the owner's
    core answers a retried send: a saved edit is the editor's text, not the
    sender's (the simulator found retries answered with the edit)."""
    # Only a terminal state is final. A message awaiting approval (or held
    # for an edit) may be known here from a send no majority holds yet (a
    # failed round replicated by anti-entropy): the owner must decide that
    # send, or its answer would acknowledge what a lost disk can take back
    # (simulator seed 495).
    if row is None or row.get("state") not in TERMINAL:
        return None
    fields = row if sent is None else sent
    return Op(origin=row["order"][1], seq=0, hlc=row["order"][0], kind=MSG_SEND,
              key=req.mailbox, body={k: fields.get(k) for k in req.body}, epoch=0)


def sent_op(result: Any) -> Op | None:
    """The stored op of a forwarded send's answer, to apply at the entry node."""
    if isinstance(result, Op) and result.kind == MSG_SEND and result.seq > 0:
        return result
    return None
