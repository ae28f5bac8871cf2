"""Messages between peers, and their msgpack-able wire form.

Each message is a frozen dataclass with a short ``TAG``; its wire form is
derived from its fields by :mod:`federation.wire` (the :data:`PEER`
registry, built from the :data:`Message` union): ``[tag, field1, field2,
...]`` in field order. ``to_wire()`` makes it, :func:`decode_msg`
dispatches on the tag and checks every field's shape and type. Ops travel
as :meth:`common.ops.Op.to_wire` lists, op ids as ``[origin, seq]`` pairs
and version vectors as ``{origin: seq}`` maps, so a whole message is plain
lists, maps, strings and ints. A new kind is a new dataclass added to
:data:`Message`; nothing else is written by hand.

The vocabulary, by protocol:

* quorum writes and anti-entropy: ``Replicate`` (``ack`` asks for an
  ``Ack``), ``Ack``, ``SyncOffer`` (a periodic "this is what I hold");
* mailbox ownership (a Paxos-like prepare/accept over epochs, see
  docs/federation.md): ``Prepare`` -> ``Promise`` | ``PromiseNack``, then
  ``Accept`` -> ``Accepted`` | ``Rejected``;
* recovery of a member that lost its state: ``Reseeding`` (sent before it
  downloads a donor's copy), then ``RecoveryQuery`` -> ``RecoveryState``
  (docs/federation.md, "A member that lost its disk");
* mailbox requests forwarded to the owner on the batched channel:
  ``Forward`` -> ``ForwardResult`` (protocol 3). These are the adapter's
  (:mod:`daemon.replication.mailbox_router`), not the core's: it takes them out of a
  batch before the core sees the rest.

A malformed message raises :class:`ValueError`; the adapter turns that into
a 400 for the sending peer.

Versions: every peer request says which protocol its sender speaks
(:data:`PROTOCOL_VERSION`; the HTTP adapter sends it as ``X-AIM-Protocol``,
absent means 1). 1 is the protocol before versions were sent; 2 adds the
header and the forward-compatibility rules: an op of an unknown kind is kept
and forwarded, not refused (:mod:`common.ops`), and a message whose tag this
version does not know is skipped and counted (:func:`is_known_tag`) rather
than failing the batch it came in. 3 adds ``Forward``/``ForwardResult``: a
node sends a forward on the batched channel only to a peer that spoke 3 or
later to it, and uses ``/peer/v1/mailbox`` otherwise. 4 adds ``Reseeding``;
an older peer skips it (it then keeps GC floors as protocol 3 did). A receiver refuses
senders older than :data:`PROTOCOL_MIN`.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from common.ops import Op
from federation.wire import Registry

OpId = tuple[str, int]

PROTOCOL_VERSION = 4
PROTOCOL_MIN = 1


class _Wire:
    """What every peer message shares: its wire form, derived by :data:`PEER`
    from the dataclass fields (:mod:`federation.wire`)."""

    __slots__ = ()
    TAG: ClassVar[str]

    def to_wire(self) -> list[Any]:
        out: list[Any] = PEER.encode(self)
        return out

    @classmethod
    def from_wire(cls, raw: Any) -> Self:
        msg = PEER.by_class[cls].decode(raw)
        assert isinstance(msg, cls)
        return msg


@dataclass(frozen=True, slots=True)
class Replicate(_Wire):
    """Ops for the receiver to persist; ``ack`` (quorum writes) asks for an
    :class:`Ack` of every op id, anti-entropy pushes set it False."""

    ops: tuple[Op, ...]
    ack: bool
    TAG = "rep"


@dataclass(frozen=True, slots=True)
class Ack(_Wire):
    """The sender now durably holds these ops."""

    op_ids: tuple[OpId, ...]
    TAG = "ack"


@dataclass(frozen=True, slots=True)
class SyncOffer(_Wire):
    """Periodic anti-entropy offer: the sender's version vector and the
    fingerprint of its member set."""

    vv: dict[str, int]
    fingerprint: str
    TAG = "sync"


@dataclass(frozen=True, slots=True)
class Prepare(_Wire):
    """A candidate asks for a promise of ``epoch`` on ``mailbox``; ``vv`` is
    what the candidate already holds, so the promise carries only the rest."""

    mailbox: str
    epoch: int
    vv: dict[str, int]
    TAG = "prep"


@dataclass(frozen=True, slots=True)
class Promise(_Wire):
    """The sender promised ``epoch`` and sends its mailbox ops the candidate lacks."""

    mailbox: str
    epoch: int
    ops: tuple[Op, ...]
    TAG = "prom"


@dataclass(frozen=True, slots=True)
class PromiseNack(_Wire):
    """The sender has already promised a higher (or equal, foreign) epoch."""

    mailbox: str
    promised: int
    TAG = "pnack"


@dataclass(frozen=True, slots=True)
class Accept(_Wire):
    """The owner at ``epoch`` asks the receiver to hold these mailbox ops."""

    mailbox: str
    epoch: int
    ops: tuple[Op, ...]
    TAG = "acc"


@dataclass(frozen=True, slots=True)
class Accepted(_Wire):
    """The sender durably holds ``op_ids`` and accepted ``epoch``."""

    mailbox: str
    epoch: int
    op_ids: tuple[OpId, ...]
    TAG = "accd"


@dataclass(frozen=True, slots=True)
class Rejected(_Wire):
    """The sender promised ``promised`` > the Accept's epoch and refused it."""

    mailbox: str
    promised: int
    TAG = "rej"


@dataclass(frozen=True, slots=True)
class Reseeding(_Wire):
    """The sender lost its disk and is about to be seeded from a member's copy:
    the last offer the receiver holds from it describes a disk that is gone.
    The receiver stops taking GC floors over the sender until the new process
    has announced itself (its :class:`RecoveryQuery`), so a donor cannot
    collect an op its copy lacks (docs/federation.md, "A member that lost its
    disk"). ``donor`` names the member whose copy it is about to take
    (for the receivers' logs; every receiver drops the floor)."""

    donor: str
    TAG = "reseed"


@dataclass(frozen=True, slots=True)
class RecoveryQuery(_Wire):
    """A member that lost its disk (or came back from a backup) asks what the
    receiver holds before it votes in claim rounds again; ``incarnation`` is
    its database's new incarnation id."""

    incarnation: str
    round: str  # echoed by the answer: an answer to an earlier process's query is ignored
    vv: dict[str, int]  # what the asker holds: the peer pushes it the rest
    TAG = "recq"


@dataclass(frozen=True, slots=True)
class RecoveryState(_Wire):
    """The answer: the receiver's version vector, the asker's own op seqs it
    holds beyond that vector's watermark and, per mailbox, the highest epoch
    it has promised or seen."""

    round: str
    vv: dict[str, int]
    promises: dict[str, int]
    held_yours: tuple[int, ...]  # the asker's op seqs held beyond its watermark here
    TAG = "recs"


@dataclass(frozen=True, slots=True)
class Forward(_Wire):
    """A mailbox request for the receiver, its owner, to run: ``req`` and
    ``hops`` are the ``/peer/v1/mailbox`` body (:mod:`daemon.replication.forwarding`),
    ``fid`` a random id the answer echoes, ``rid`` the client's request id
    (for the owner's logs)."""

    fid: int
    req: dict[str, Any]
    hops: int
    rid: str | None
    TAG = "fwd"


@dataclass(frozen=True, slots=True)
class ForwardResult(_Wire):
    """The owner's answer to the :class:`Forward` ``fid``: ``ok`` (a result,
    :func:`daemon.replication.forwarding.encode_result`) or ``err`` (an error,
    ``encode_error``); neither means the owner failed to answer (what a 500
    of ``/peer/v1/mailbox`` means: ask the next member)."""

    fid: int
    ok: dict[str, Any] | None
    err: dict[str, Any] | None
    TAG = "fwdr"


Message = (Replicate | Ack | SyncOffer | Prepare | Promise | PromiseNack | Accept | Accepted
           | Rejected | Reseeding | RecoveryQuery | RecoveryState | Forward | ForwardResult)

PEER = Registry("peer message", typing.get_args(Message))


def is_known_tag(raw: Any) -> bool:
    """True if ``raw`` looks like a message of a tag this version decodes."""
    return (isinstance(raw, list | tuple) and bool(raw) and isinstance(raw[0], str)
            and raw[0] in PEER.by_tag)


def decode_msg(raw: Any) -> Message:
    """The message a ``to_wire()`` list describes; ValueError if malformed."""
    msg: Message = PEER.decode(raw)
    return msg
