"""The effect runner: carries out the pure core's effects, in order.

The core (:class:`federation.core.NodeCore`) decides; this module does. Its
interface is small on purpose, so one driver can serve the daemon and, later,
the simulator:

* inputs: ``run(effects)`` for a list the caller got from the core, and
  ``receive(peer, msgs)`` to feed a peer's messages to the core and run what
  it answers (returning the replies addressed back to that peer);
* the world it acts on, given at construction: a store (persist, reads for
  promises and mailbox loads, GC), ``send(peer, msg)`` for the transport,
  ``push_missing(peer, vv)`` for anti-entropy, and ``now_ms``;
* ``waiter()`` for a caller that waits on a ``Reply``, and ``settle()`` for a
  reader that must see every op the core already counts as held.

Order: within one list, a ``Persist`` is awaited before any later effect (so
a peer never acks or accepts an op its sender does not hold). Across lists,
the *persist barrier*: each list that persists registers a barrier when it
is handed over (synchronously, in the same step in which the core counted
its ops), released when its last persist commits. ``SendPromise`` and
``LoadMailbox`` wait for the barriers older than their list; ``settle()``
waits for every barrier registered so far. Waits only point at older lists,
whose persists wait on nothing, so there is no cycle.

A persist that fails is fatal: the core already counts those ops as held
(and has numbered its own), so carrying on would leave a hole no peer could
ever fill. The node stops instead (fail-stop, ``on_fatal``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from common import limits
from common.errors import Unavailable
from common.ops import Op, known_kind
from daemon.metrics import Metrics
from daemon.peer_link import coalesce
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
)
from federation.messages import Promise

log = logging.getLogger("ai_memory.node")

Barrier = asyncio.Future[None]


class EffectStore(Protocol):
    """What the runner needs of the store."""

    async def apply_ops(self, ops: list[Op], now_ms: int) -> list[Op]: ...
    async def set_promised(self, mailbox: str, epoch: int) -> None: ...
    async def ops_for_key(self, key: str, vv: dict[str, int]) -> list[Op]: ...
    async def mailbox_state_ops(self, workspace: str, project: str, *,
                                history_max: int) -> list[Op]: ...
    async def gc(self, floor_vv: dict[str, int]) -> int: ...
    async def set_recovering(self, recovering: bool) -> None: ...


@dataclass(slots=True)
class _Started:
    """An effect list handed to the runner: its barrier and the older ones."""

    effects: list[Any]
    barrier: Barrier | None
    earlier: list[Barrier]


class EffectRunner:
    def __init__(self, *, store: EffectStore, core: NodeCore, metrics: Metrics,
                 now_ms: Callable[[], int], send: Callable[[str, Any], None],
                 push_missing: Callable[[str, dict[str, int]], None],
                 on_fatal: Callable[[], None]) -> None:
        self.store = store
        self.core = core
        self.metrics = metrics
        self.now_ms = now_ms
        self._transport_send = send
        self._push_missing = push_missing
        self.on_fatal = on_fatal
        self.applied_listeners: list[Callable[[list[Op]], None]] = []
        self._tokens = itertools.count(1)
        self._waiters: dict[int, asyncio.Future[Any]] = {}
        self._barriers: list[Barrier] = []

    # -- waiters ----------------------------------------------------------
    def waiter(self) -> tuple[int, asyncio.Future[Any]]:
        token = next(self._tokens)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[token] = fut
        return token, fut

    def fail_waiters(self, exc: BaseException) -> None:
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(exc)
        self._waiters.clear()

    # -- barriers ---------------------------------------------------------
    def _begin(self, effects: Iterable[Any], earlier: list[Barrier] | None = None) -> _Started:
        """Register the list's barrier now, before anything awaits."""
        listed = list(effects)
        older = list(self._barriers) if earlier is None else earlier
        barrier: Barrier | None = None
        if any(isinstance(e, (Persist, PersistPromise)) for e in listed):
            barrier = asyncio.get_running_loop().create_future()
            self._barriers.append(barrier)
        return _Started(listed, barrier, older)

    def _release(self, barrier: Barrier) -> None:
        if not barrier.done():
            barrier.set_result(None)
        if barrier in self._barriers:
            self._barriers.remove(barrier)

    @staticmethod
    async def _after(earlier: Sequence[Barrier]) -> None:
        pending = [b for b in earlier if not b.done()]
        if pending:
            await asyncio.gather(*pending)

    async def settle(self) -> None:
        """Wait until every persist handed over so far has committed: after
        this, the store holds every op the core counted before the call."""
        await self._after(list(self._barriers))

    # -- running ----------------------------------------------------------
    async def run(self, effects: Iterable[Any], *, reply_peer: str | None = None,
                  replies: list[Any] | None = None) -> None:
        """Carry out the core's effects, in order (see the module docstring)."""
        await self._carry(self._begin(effects), reply_peer, replies)

    async def _carry(self, started: _Started, reply_peer: str | None,
                     replies: list[Any] | None) -> None:
        persists = sum(isinstance(e, (Persist, PersistPromise)) for e in started.effects)
        barrier = started.barrier
        try:
            for eff in started.effects:
                if isinstance(eff, (Persist, PersistPromise)):
                    await self._persist(eff)
                    persists -= 1
                    if persists == 0 and barrier is not None:
                        self._release(barrier)
                else:
                    await self._effect(eff, reply_peer, replies, started.earlier)
        finally:
            if barrier is not None:
                self._release(barrier)

    async def receive(self, peer: str, msgs: list[Any]) -> list[Any]:
        """Feed messages from a peer to the core; returns the replies meant
        for that peer (the HTTP response carries them back)."""
        replies: list[Any] = []
        # The core sees the batch in order; the effect lists then run side by
        # side, so their persists share one group commit instead of queueing
        # one behind another. Every list registers its barrier here, in the
        # step in which the core counted its ops, so no reader can see those
        # ops in the version vector without also waiting for their commit.
        now = self.now_ms()
        started = [self._begin(self.core.on_message(peer, msg, now)) for msg in coalesce(msgs)]
        if len(started) == 1:
            await self._carry(started[0], peer, replies)
        else:
            await asyncio.gather(*(self._carry(s, peer, replies) for s in started))
        return replies

    async def send_failed(self, peer: str) -> None:
        await self.run(self.core.on_send_failed(peer, self.now_ms()))

    async def _persist(self, eff: Persist | PersistPromise) -> None:
        try:
            if isinstance(eff, PersistPromise):
                await self.store.set_promised(eff.mailbox, eff.epoch)
                return
            if not eff.ops:
                return
            new = await self.store.apply_ops(list(eff.ops), self.now_ms())
        except Exception:
            log.critical("store write failed; stopping this node to stay consistent",
                         exc_info=True)
            self.metrics.inc("fatal_store_failures_total")
            self.on_fatal()
            raise Unavailable("node stopping after a store failure") from None
        if new:
            self.metrics.inc("ops_applied_total", len(new))
            unknown = sum(1 for op in new if not known_kind(op.kind))
            if unknown:  # kept and forwarded, applied by a later version (store/deferred.py)
                self.metrics.inc("ops_unknown_kind_total", unknown)
            for listener in self.applied_listeners:
                listener(new)

    async def _effect(self, eff: Any, reply_peer: str | None, replies: list[Any] | None,
                      earlier: list[Barrier]) -> None:
        if isinstance(eff, Send):
            self._send(eff.peer, eff.msg, reply_peer, replies)
        elif isinstance(eff, Reply):
            self._reply(eff)
        elif isinstance(eff, SendPromise):
            await self._after(earlier)
            ops = await self.store.ops_for_key(eff.mailbox, dict(eff.vv))
            self._send(eff.peer, Promise(mailbox=eff.mailbox, epoch=eff.epoch, ops=tuple(ops)),
                       reply_peer, replies)
        elif isinstance(eff, LoadMailbox):
            await self._after(earlier)
            ops = await self._load_mailbox(eff.mailbox)
            loaded = self.core.on_mailbox_loaded(eff.mailbox, ops, self.now_ms())
            await self._carry(self._begin(loaded, earlier), reply_peer, replies)
        elif isinstance(eff, PushMissing):
            self._push_missing(eff.peer, dict(eff.vv))
        elif isinstance(eff, Collect):
            removed = await self.store.gc(dict(eff.floor_vv))
            self.metrics.inc("gc_ops_removed_total", removed)
        elif isinstance(eff, MembershipMismatch):
            self.metrics.inc("membership_mismatch_total", peer=eff.peer)
            log.error("membership mismatch with %s: theirs %s, ours %s",
                      eff.peer, eff.theirs, eff.ours)
        elif isinstance(eff, Recovering):
            self.metrics.inc("recoveries_total")
            log.warning("this member lost state (%s): recovering from every other member "
                        "before it votes in claim rounds again", eff.reason)
            await self.store.set_recovering(True)
        elif isinstance(eff, Recovered):
            await self.store.set_recovering(False)
            log.info("recovered: every member's state merged; voting in claim rounds again")
        else:
            log.error("unknown effect %r", eff)

    def _reply(self, eff: Reply) -> None:
        fut = self._waiters.pop(eff.token, None)
        if fut is not None and not fut.done():
            if isinstance(eff.value, BaseException):
                fut.set_exception(eff.value)
            else:
                fut.set_result(eff.value)

    async def _load_mailbox(self, mailbox: str) -> list[Op]:
        """The mailbox's merged state as ops. Every LoadMailbox must be
        answered, so a failing read is retried; if the store stays broken
        the node stops (fail-stop) rather than answer with a partial view."""
        ws, _, proj = mailbox.removeprefix("mbox:").partition("/")
        for attempt in range(limits.mailbox_load_attempts_max):
            try:
                return await self.store.mailbox_state_ops(
                    ws, proj, history_max=limits.mailbox_history_load_max)
            except Exception:
                log.exception("loading mailbox %s failed (attempt %d)", mailbox, attempt + 1)
                await asyncio.sleep(limits.mailbox_load_retry_base_secs * 2 ** attempt)
        self.on_fatal()
        raise Unavailable("node stopping after a store failure")

    def _send(self, peer: str, msg: Any, reply_peer: str | None, replies: list[Any] | None) -> None:
        if replies is not None and peer == reply_peer:
            replies.append(msg)
            return
        self._transport_send(peer, msg)
