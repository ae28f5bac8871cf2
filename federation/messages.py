"""Messages between peers, and their msgpack-able wire form.

Each message is a frozen dataclass with ``to_wire() -> list`` whose first
element is a short tag, and a ``from_wire(list)`` that validates shape and
types; :func:`decode_msg` dispatches on the tag. Ops travel as
:meth:`store.ops.Op.to_wire` lists, op ids as ``[origin, seq]`` pairs and
version vectors as ``{origin: seq}`` maps, so a whole message is plain
lists, maps, strings and ints.

The vocabulary, by protocol:

* quorum writes and anti-entropy: ``Replicate`` (``ack`` asks for an
  ``Ack``), ``Ack``, ``SyncOffer`` (a periodic "this is what I hold");
* mailbox ownership (a Paxos-like prepare/accept over epochs, see
  docs/federation.md): ``Prepare`` -> ``Promise`` | ``PromiseNack``, then
  ``Accept`` -> ``Accepted`` | ``Rejected``.

A malformed message raises :class:`ValueError`; the adapter turns that into
a 400 for the sending peer.

Versions: every peer request says which protocol its sender speaks
(:data:`PROTOCOL_VERSION`; the HTTP adapter sends it as ``X-AIM-Protocol``,
absent means 1). 1 is the protocol before versions were sent; 2 adds the
header and the forward-compatibility rules: an op of an unknown kind is kept
and forwarded, not refused (:mod:`store.ops`), and a message whose tag this
version does not know is skipped and counted (:func:`is_known_tag`) rather
than failing the batch it came in. A receiver refuses senders older than
:data:`PROTOCOL_MIN`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from store.ops import Op

OpId = tuple[str, int]

PROTOCOL_VERSION = 2
PROTOCOL_MIN = 1


def _ops_to_wire(ops: tuple[Op, ...]) -> list[Any]:
    return [op.to_wire() for op in ops]


def _ops_from_wire(raw: Any) -> tuple[Op, ...]:
    if not isinstance(raw, list | tuple):
        raise ValueError("ops must be a list")
    return tuple(Op.from_wire(list(item)) for item in raw)


def _ids_from_wire(raw: Any) -> tuple[OpId, ...]:
    if not isinstance(raw, list | tuple):
        raise ValueError("op ids must be a list")
    out: list[OpId] = []
    for item in raw:
        if not isinstance(item, list | tuple) or len(item) != 2:
            raise ValueError("an op id is [origin, seq]")
        out.append((_str(item[0]), _int(item[1])))
    return tuple(out)


def _vv_from_wire(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        raise ValueError("a version vector is a map")
    return {_str(k): _int(v) for k, v in raw.items()}


def _str(raw: Any) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"expected a string, got {type(raw).__name__}")
    return raw


def _int(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValueError(f"expected an int, got {type(raw).__name__}")
    return raw


def _fields(raw: Any, tag: str, count: int) -> list[Any]:
    if not isinstance(raw, list | tuple) or len(raw) != count + 1 or raw[0] != tag:
        raise ValueError(f"malformed {tag!r} message")
    return list(raw[1:])


@dataclass(frozen=True, slots=True)
class Replicate:
    """Ops for the receiver to persist; ``ack`` (quorum writes) asks for an
    :class:`Ack` of every op id, anti-entropy pushes set it False."""

    ops: tuple[Op, ...]
    ack: bool
    TAG = "rep"

    def to_wire(self) -> list[Any]:
        return [self.TAG, _ops_to_wire(self.ops), self.ack]

    @classmethod
    def from_wire(cls, raw: list[Any]) -> Replicate:
        ops, ack = _fields(raw, cls.TAG, 2)
        if not isinstance(ack, bool):
            raise ValueError("ack must be a bool")
        return cls(ops=_ops_from_wire(ops), ack=ack)


@dataclass(frozen=True, slots=True)
class Ack:
    """The sender now durably holds these ops."""

    op_ids: tuple[OpId, ...]
    TAG = "ack"

    def to_wire(self) -> list[Any]:
        return [self.TAG, [list(i) for i in self.op_ids]]

    @classmethod
    def from_wire(cls, raw: list[Any]) -> Ack:
        (ids,) = _fields(raw, cls.TAG, 1)
        return cls(op_ids=_ids_from_wire(ids))


@dataclass(frozen=True, slots=True)
class SyncOffer:
    """Periodic anti-entropy offer: the sender's version vector and the
    fingerprint of its member set."""

    vv: dict[str, int]
    fingerprint: str
    TAG = "sync"

    def to_wire(self) -> list[Any]:
        return [self.TAG, dict(self.vv), self.fingerprint]

    @classmethod
    def from_wire(cls, raw: list[Any]) -> SyncOffer:
        vv, fp = _fields(raw, cls.TAG, 2)
        return cls(vv=_vv_from_wire(vv), fingerprint=_str(fp))


@dataclass(frozen=True, slots=True)
class Prepare:
    """A candidate asks for a promise of ``epoch`` on ``mailbox``; ``vv`` is
    what the candidate already holds, so the promise carries only the rest."""

    mailbox: str
    epoch: int
    vv: dict[str, int]
    TAG = "prep"

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.mailbox, self.epoch, dict(self.vv)]

    @classmethod
    def from_wire(cls, raw: list[Any]) -> Prepare:
        mailbox, epoch, vv = _fields(raw, cls.TAG, 3)
        return cls(mailbox=_str(mailbox), epoch=_int(epoch), vv=_vv_from_wire(vv))


@dataclass(frozen=True, slots=True)
class Promise:
    """The sender promised ``epoch`` and sends its mailbox ops the candidate lacks."""

    mailbox: str
    epoch: int
    ops: tuple[Op, ...]
    TAG = "prom"

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.mailbox, self.epoch, _ops_to_wire(self.ops)]

    @classmethod
    def from_wire(cls, raw: list[Any]) -> Promise:
        mailbox, epoch, ops = _fields(raw, cls.TAG, 3)
        return cls(mailbox=_str(mailbox), epoch=_int(epoch), ops=_ops_from_wire(ops))


@dataclass(frozen=True, slots=True)
class PromiseNack:
    """The sender has already promised a higher (or equal, foreign) epoch."""

    mailbox: str
    promised: int
    TAG = "pnack"

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.mailbox, self.promised]

    @classmethod
    def from_wire(cls, raw: list[Any]) -> PromiseNack:
        mailbox, promised = _fields(raw, cls.TAG, 2)
        return cls(mailbox=_str(mailbox), promised=_int(promised))


@dataclass(frozen=True, slots=True)
class Accept:
    """The owner at ``epoch`` asks the receiver to hold these mailbox ops."""

    mailbox: str
    epoch: int
    ops: tuple[Op, ...]
    TAG = "acc"

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.mailbox, self.epoch, _ops_to_wire(self.ops)]

    @classmethod
    def from_wire(cls, raw: list[Any]) -> Accept:
        mailbox, epoch, ops = _fields(raw, cls.TAG, 3)
        return cls(mailbox=_str(mailbox), epoch=_int(epoch), ops=_ops_from_wire(ops))


@dataclass(frozen=True, slots=True)
class Accepted:
    """The sender durably holds ``op_ids`` and accepted ``epoch``."""

    mailbox: str
    epoch: int
    op_ids: tuple[OpId, ...]
    TAG = "accd"

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.mailbox, self.epoch, [list(i) for i in self.op_ids]]

    @classmethod
    def from_wire(cls, raw: list[Any]) -> Accepted:
        mailbox, epoch, ids = _fields(raw, cls.TAG, 3)
        return cls(mailbox=_str(mailbox), epoch=_int(epoch), op_ids=_ids_from_wire(ids))


@dataclass(frozen=True, slots=True)
class Rejected:
    """The sender promised ``promised`` > the Accept's epoch and refused it."""

    mailbox: str
    promised: int
    TAG = "rej"

    def to_wire(self) -> list[Any]:
        return [self.TAG, self.mailbox, self.promised]

    @classmethod
    def from_wire(cls, raw: list[Any]) -> Rejected:
        mailbox, promised = _fields(raw, cls.TAG, 2)
        return cls(mailbox=_str(mailbox), promised=_int(promised))


Message = Replicate | Ack | SyncOffer | Prepare | Promise | PromiseNack | Accept | Accepted | Rejected

_DECODERS: dict[str, Callable[[list[Any]], Message]] = {
    cls.TAG: cls.from_wire
    for cls in (Replicate, Ack, SyncOffer, Prepare, Promise, PromiseNack, Accept, Accepted, Rejected)
}


def is_known_tag(raw: Any) -> bool:
    """True if ``raw`` looks like a message of a tag this version decodes."""
    return isinstance(raw, list | tuple) and bool(raw) and raw[0] in _DECODERS


def decode_msg(raw: Any) -> Message:
    """The message a ``to_wire()`` list describes; ValueError if malformed."""
    if not isinstance(raw, list | tuple) or not raw or not isinstance(raw[0], str):
        raise ValueError("a peer message is a list starting with its tag")
    decoder = _DECODERS.get(raw[0])
    if decoder is None:
        raise ValueError(f"unknown peer message tag {raw[0]!r}")
    try:
        return decoder(list(raw))
    except (TypeError, KeyError) as exc:
        raise ValueError(f"malformed {raw[0]!r} message: {exc}") from exc
