"""Effects: what the pure core asks its adapter to do.

Every input to :class:`federation.core.NodeCore` returns a list of these.
The adapter executes them **in order**, and executes the lists of
successive calls in call order too: a :class:`Persist` or
:class:`PersistPromise` is durable before any effect after it runs, and a
read (:class:`SendPromise`, :class:`LoadMailbox`, :class:`PushMissing`)
sees every op persisted by an earlier effect. The claim protocol's safety
rests on that order (docs/federation.md, "What the adapter must keep").

Effects carry data only; the core never learns whether one succeeded
except through later inputs (``on_send_failed``, ``on_mailbox_loaded``,
messages from peers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.ops import Op
from federation.messages import Message


@dataclass(frozen=True, slots=True)
class Persist:
    """Apply these ops to the store (op log + state), durably."""

    ops: tuple[Op, ...]


@dataclass(frozen=True, slots=True)
class PersistPromise:
    """Durably record that this node promised ``epoch`` for ``mailbox``."""

    mailbox: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Send:
    """Deliver ``msg`` to ``peer`` (best effort; the adapter may batch)."""

    peer: str
    msg: Message


@dataclass(frozen=True, slots=True)
class PushMissing:
    """Anti-entropy: send ``peer`` the ops it lacks given its ``vv``, as
    ``Replicate(ack=False)`` batches of ``limits.sync_batch_ops_max``."""

    peer: str
    vv: dict[str, int]


@dataclass(frozen=True, slots=True)
class SendPromise:
    """Read this node's ops for ``mailbox`` not covered by ``vv`` and send
    ``Promise(mailbox, epoch, ops)`` to ``peer``."""

    peer: str
    mailbox: str
    epoch: int
    vv: dict[str, int]


@dataclass(frozen=True, slots=True)
class LoadMailbox:
    """Read every op this node holds for ``mailbox`` and hand them to
    ``NodeCore.on_mailbox_loaded``."""

    mailbox: str


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer the caller waiting on ``token``: a result, or an
    :class:`common.errors.AiMemoryError` instance to raise."""

    token: Any
    value: Any


@dataclass(frozen=True, slots=True)
class Collect:
    """Every member holds every op covered by ``floor_vv``: those ops may
    leave the op log (their ids stay in the version vector, memory
    tombstones stay). Mailbox ops go too: ``LoadMailbox`` rebuilds a mailbox
    from the merged state tables, and a ``SendPromise`` only needs ops the
    candidate's vector does not cover, which collection never removes."""

    floor_vv: dict[str, int]


@dataclass(frozen=True, slots=True)
class MembershipMismatch:
    """``peer`` runs with a different member set; no data is exchanged with
    it. Log it and count it."""

    peer: str
    theirs: str
    ours: str


@dataclass(frozen=True, slots=True)
class StaleSender:
    """A message (``kind``, its class name) from ``peer`` came from a
    process of an incarnation the member has since replaced
    (``incarnation``; the member's current one is ``current``): its previous
    disk's process, whose ops may share ids with the new process's. It was
    dropped. Count it; a ``RecoveryQuery`` of a replaced disk is worth a
    warning (a member started on a disk that was already replaced, which
    cannot recover under that incarnation)."""

    peer: str
    incarnation: str
    current: str
    kind: str


@dataclass(frozen=True, slots=True)
class Recovering:
    """This member must recover before it votes again: it found that peers
    hold more of its own ops than it does (its disk was lost or rolled
    back). Record it durably, so a restart in the middle recovers again."""

    reason: str


@dataclass(frozen=True, slots=True)
class Recovered:
    """Recovery finished (every member's state merged, promises raised and
    persisted before this effect): clear the durable mark."""


Effect = (Persist | PersistPromise | Send | PushMissing | SendPromise | LoadMailbox | Reply
          | Collect | MembershipMismatch | StaleSender | Recovering | Recovered)
