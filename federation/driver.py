"""The effect driver: what each effect of the core means, written once.

The core (:class:`federation.core.NodeCore`) returns effects; this module
says how an effect list is carried out, for every adapter: the daemon
(``daemon/replication/effect_runner.py``), the simulator (``tests/sim/node.py``) and the
in-process test cluster (``tests/federation/cluster.py``). It is sans-I/O
in the way h11 is: :func:`carry` is a generator that does the effects that
need no I/O itself, through the :class:`Host` callbacks (send, answer, hand
to anti-entropy, report), and *yields* a :data:`Step` whenever it needs the
store or the persist barrier. The adapter executes the step (awaiting it in
the daemon, at once or after a simulated disk delay in the simulator) and
sends the result back in. So the order rules live here, once:

* every ``Persist``/``PersistPromise`` completes before any later effect of
  the same list (the generator does not go on until the host answers), and
  after the list's last one the generator yields :class:`PersistsDone`, on
  which the host releases the list's *persist barrier*;
* ``SendPromise`` and ``LoadMailbox`` first yield :class:`AfterEarlier`:
  the host waits for the barriers of lists handed over before this one, so
  the read sees every op the core counted before it;
* ``LoadMailbox`` reads the mailbox's merged state
  (:meth:`Store.mailbox_state_ops`, never the op log, which ``Collect``
  truncates), feeds it to the core and yields :class:`Nested` with the
  core's answer: the host registers that list's barrier and carries it
  before this list goes on;
* a message addressed to ``reply_peer`` is appended to ``replies`` instead
  of sent, when the caller passes them: the daemon carries the replies to a
  peer's batch back in the HTTP response (one round trip per batch).

:class:`Store` is the storage contract every adapter's store keeps, with the
same garbage collection and mailbox rebuild (``store.db.Store`` as
coroutines, ``store.in_memory.Replica`` as plain calls; the hypothesis tests in
``tests/store/test_equivalence.py`` hold the two equal through GC and
rebuild).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from common import limits
from common.ops import Op
from federation.core import NodeCore
from federation.effects import (
    Collect,
    LoadMailbox,
    MembershipMismatch,
    Persist,
    PersistPromise,
    PushMissing,
    Recovered,
    Recovering,
    Reply,
    Send,
    SendPromise,
    StaleSender,
)
from federation.messages import Message, Promise


class Store(Protocol):
    """What the driver needs of a node's storage (the SQLite store has the
    same methods as coroutines)."""

    def apply_ops(self, ops: list[Op], now_ms: int) -> list[Op]:
        """Apply and log ``ops`` durably; return the ones that were new."""
    def set_promised(self, mailbox: str, epoch: int) -> None:
        """Durably record a promise (never lowers a recorded one)."""
    def ops_for_key(self, key: str, vv: dict[str, int]) -> list[Op]:
        """Logged ops of ``key`` that a holder of ``vv`` lacks."""
    def mailbox_state_ops(self, workspace: str, project: str, *,
                          history_max: int) -> list[Op]:
        """The mailbox's merged state as ops (what an owner rebuilds from)."""
    def gc(self, floor_vv: dict[str, int]) -> int:
        """Drop every logged op ``floor_vv`` covers, mailbox ops included."""
    def set_recovering(self, recovering: bool) -> None:
        """Durably mark (or clear) that this member must recover."""


STORE_METHODS = ("apply_ops", "set_promised", "ops_for_key", "mailbox_state_ops", "gc",
                 "set_recovering")
WRITES = frozenset({"apply_ops", "set_promised"})
"""Store calls that must not fail: the core already counts what they write."""


@dataclass(frozen=True, slots=True)
class StoreCall:
    """Call ``Store.<method>(*args, **kwargs)``; send the result back in."""

    method: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class AfterEarlier:
    """Wait until every list handed over before this one has persisted."""


@dataclass(frozen=True, slots=True)
class PersistsDone:
    """This list's last persist is durable: release its barrier."""


@dataclass(frozen=True, slots=True)
class Nested:
    """Carry ``effects`` (the core's answer to a load) as a list of its own,
    handed over now, before this list goes on."""

    effects: list[Any]


Step = StoreCall | AfterEarlier | PersistsDone | Nested


class Host(Protocol):
    """The effects that need no store, and the adapter's clock."""

    def now_ms(self) -> int: ...
    def transmit(self, peer: str, msg: Message) -> None: ...
    def answer(self, token: Any, value: Any) -> None: ...
    def push_missing(self, peer: str, vv: dict[str, int]) -> None: ...
    def applied(self, new: list[Op]) -> None: ...
    def report(self, event: str, detail: Any) -> None:
        """``membership_mismatch``, ``recovering``, ``recovered`` or
        ``collected`` (with the number of ops removed)."""


def persists(effects: Sequence[Any]) -> int:
    """How many of ``effects`` write to the store (a list with any holds a barrier)."""
    return sum(isinstance(e, (Persist, PersistPromise)) for e in effects)


def merge_persists(lists: Sequence[list[Any]]) -> list[list[Any]]:
    """One store write for the effect lists of a peer's batch that only
    persist and then answer.

    Lists of the shape ``[Persist(ops), then Send and Reply effects only]``
    (what a batch of ``Accept`` and ``Replicate`` messages gives) become one
    list: a ``Persist`` of all their ops, then each list's sends and replies
    in their order. Every message still goes out only after its ops are
    durable (after the others' too, which only ever delays it by the same
    commit); lists of any other shape are returned unchanged, after it."""
    mergeable = [i for i, effects in enumerate(lists)
                 if len(effects) > 1 and isinstance(effects[0], Persist)
                 and all(isinstance(e, (Send, Reply)) for e in effects[1:])]
    if len(mergeable) < 2:
        return list(lists)
    taken = set(mergeable)
    ops = tuple(op for i in mergeable for op in lists[i][0].ops)
    merged: list[Any] = [Persist(ops)]
    for i in mergeable:
        merged += lists[i][1:]
    return [merged] + [effects for i, effects in enumerate(lists) if i not in taken]


def mailbox_scope(mailbox: str) -> tuple[str, str]:
    ws, _, proj = mailbox.removeprefix("mbox:").partition("/")
    return ws, proj


def carry(core: NodeCore, host: Host, effects: Sequence[Any], *,
          reply_peer: str | None = None,
          replies: list[Any] | None = None) -> Generator[Step, Any, None]:
    """Carry out ``effects`` in order (see the module docstring)."""
    left = persists(effects)

    def send(peer: str, msg: Message) -> None:
        if replies is not None and peer == reply_peer:
            replies.append(msg)
        else:
            host.transmit(peer, msg)

    for eff in effects:
        if isinstance(eff, Persist):
            if eff.ops:
                new = yield StoreCall("apply_ops", (list(eff.ops), host.now_ms()))
                core.on_persisted(eff.ops)
                if new:
                    host.applied(new)
            left -= 1
            if left == 0:
                yield PersistsDone()
        elif isinstance(eff, PersistPromise):
            yield StoreCall("set_promised", (eff.mailbox, eff.epoch))
            left -= 1
            if left == 0:
                yield PersistsDone()
        elif isinstance(eff, Send):
            send(eff.peer, eff.msg)
        elif isinstance(eff, Reply):
            host.answer(eff.token, eff.value)
        elif isinstance(eff, SendPromise):
            yield AfterEarlier()
            ops = yield StoreCall("ops_for_key", (eff.mailbox, dict(eff.vv)))
            send(eff.peer, Promise(mailbox=eff.mailbox, epoch=eff.epoch, ops=tuple(ops)))
        elif isinstance(eff, LoadMailbox):
            yield AfterEarlier()
            ops = yield StoreCall("mailbox_state_ops", mailbox_scope(eff.mailbox),
                                  (("history_max", limits.mailbox_history_load_max),))
            yield Nested(core.on_mailbox_loaded(eff.mailbox, ops, host.now_ms()))
        else:
            yield from _bookkeeping(host, eff)


def _bookkeeping(host: Host, eff: Any) -> Generator[Step, Any, None]:
    if isinstance(eff, PushMissing):
        host.push_missing(eff.peer, dict(eff.vv))
    elif isinstance(eff, Collect):
        removed = yield StoreCall("gc", (dict(eff.floor_vv),))
        host.report("collected", removed)
    elif isinstance(eff, MembershipMismatch):
        host.report("membership_mismatch", eff)
    elif isinstance(eff, StaleSender):
        host.report("stale_sender", eff)
    elif isinstance(eff, Recovering):
        host.report("recovering", eff.reason)
        yield StoreCall("set_recovering", (True,))
    elif isinstance(eff, Recovered):
        yield StoreCall("set_recovering", (False,))
        host.report("recovered", None)
    else:
        raise TypeError(f"unknown effect {eff!r}")


def call(store: Any, step: StoreCall) -> Any:
    """Make the store call ``step`` names (a coroutine for an async store)."""
    return getattr(store, step.method)(*step.args, **dict(step.kwargs))


def run_now(core: NodeCore, host: Host, store: Store, effects: Sequence[Any]) -> None:
    """Carry ``effects`` with a store whose every call completes at once
    (the in-process test cluster): barriers are released as soon as they
    are made, so waits never wait."""
    gen = carry(core, host, effects)
    value: Any = None
    while True:
        try:
            step = gen.send(value)
        except StopIteration:
            return
        value = None
        if isinstance(step, StoreCall):
            value = call(store, step)
        elif isinstance(step, Nested):
            run_now(core, host, store, step.effects)
