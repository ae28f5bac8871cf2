"""The effect runner: carries out the pure core's effects, in order.

The core (:class:`federation.core.NodeCore`) decides; this module does.
What each effect means is written once, in :func:`federation.driver.carry`,
which the simulator and the test cluster drive too; this module drives it
with awaits and keeps the barriers. Its interface:

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
from daemon.runtime.metrics import Metrics
from federation import driver
from federation.batching import coalesce
from federation.core import NodeCore

log = logging.getLogger("ai_memory.node")

Barrier = asyncio.Future[None]


class EffectStore(Protocol):
    """What the runner needs of the store: :class:`federation.driver.Store`
    (the contract the simulator's store keeps too), as coroutines."""

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
        self._stale_warned: set[tuple[str, str]] = set()  # (peer, incarnation) warned of once
        self._tokens = itertools.count(1)
        self._waiters: dict[int, asyncio.Future[Any]] = {}
        self._barriers: list[Barrier] = []
        self._host = _RunnerHost(self)

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
        if driver.persists(listed):
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

    def barriers(self) -> list[Barrier]:
        """The barriers of every list handed over and not yet persisted."""
        return list(self._barriers)

    async def settle(self, barriers: Sequence[Barrier] | None = None) -> None:
        """Wait until every persist handed over so far (or those of
        ``barriers``) has committed: after this, the store holds every op
        the core counted before the call."""
        await self._after(list(self._barriers) if barriers is None else barriers)

    # -- running ----------------------------------------------------------
    async def run(self, effects: Iterable[Any], *, reply_peer: str | None = None,
                  replies: list[Any] | None = None) -> None:
        """Carry out the core's effects, in order (see the module docstring)."""
        await self._carry(self._begin(effects), reply_peer, replies)

    async def _carry(self, started: _Started, reply_peer: str | None,
                     replies: list[Any] | None) -> None:
        """Drive :func:`federation.driver.carry` for one list: await each
        store call, wait on the older barriers when it asks, release this
        list's barrier after its last persist."""
        barrier = started.barrier
        gen = driver.carry(self.core, self._host, started.effects,
                           reply_peer=reply_peer, replies=replies)
        value: Any = None
        try:
            while True:
                try:
                    step = gen.send(value)
                except StopIteration:
                    return
                value = None
                if isinstance(step, driver.StoreCall):
                    value = await self._store_call(step)
                elif isinstance(step, driver.AfterEarlier):
                    await self._after(started.earlier)
                elif isinstance(step, driver.PersistsDone):
                    if barrier is not None:
                        self._release(barrier)
                else:
                    await self._carry(self._begin(step.effects, started.earlier),
                                      reply_peer, replies)
        finally:
            if barrier is not None:
                self._release(barrier)

    async def receive(self, peer: str, msgs: list[Any], incarnation: str = "") -> list[Any]:
        """Feed messages from a peer (its process of ``incarnation``; "":
        unsaid) to the core; returns the replies meant for that peer (the
        HTTP response carries them back)."""
        replies: list[Any] = []
        # The core sees the batch in order; the lists that only persist and
        # answer become one store write (driver.merge_persists), and the
        # lists then run side by side, so their persists share one group
        # commit instead of queueing one behind another. Every list registers its barrier here, in the
        # step in which the core counted its ops, so no reader can see those
        # ops in the version vector without also waiting for their commit.
        now = self.now_ms()
        lists = driver.merge_persists([self.core.on_message(peer, msg, now, incarnation)
                                       for msg in coalesce(msgs)])
        started = [self._begin(effects) for effects in lists]
        if len(started) == 1:
            await self._carry(started[0], peer, replies)
        else:
            await asyncio.gather(*(self._carry(s, peer, replies) for s in started))
        return replies

    async def send_failed(self, peer: str) -> None:
        await self.run(self.core.on_send_failed(peer, self.now_ms()))

    async def _store_call(self, step: driver.StoreCall) -> Any:
        if step.method == "mailbox_state_ops":
            return await self._load_mailbox(step)
        try:
            return await driver.call(self.store, step)
        except Exception:
            if step.method not in driver.WRITES:
                raise
            log.critical("store write failed; stopping this node to stay consistent",
                         exc_info=True)
            self.metrics.inc("fatal_store_failures_total")
            self.on_fatal()
            raise Unavailable("node stopping after a store failure") from None

    def _applied(self, new: list[Op]) -> None:
        self.metrics.inc("ops_applied_total", len(new))
        unknown = sum(1 for op in new if not known_kind(op.kind))
        if unknown:  # kept and forwarded, applied by a later version (store/deferred.py)
            self.metrics.inc("ops_unknown_kind_total", unknown)
        for listener in self.applied_listeners:
            listener(new)

    def _report(self, event: str, detail: Any) -> None:
        if event == "collected":
            self.metrics.inc("gc_ops_removed_total", detail)
        elif event == "stale_sender":
            self.metrics.inc("peer_stale_incarnation_total", peer=detail.peer)
            if detail.kind == "RecoveryQuery" and len(self._stale_warned) < 64 and (
                    (detail.peer, detail.incarnation) not in self._stale_warned):
                self._stale_warned.add((detail.peer, detail.incarnation))
                log.warning("%s asks to recover as incarnation %s, which incarnation %s replaced:"
                            " it runs on a disk that was already replaced and cannot recover"
                            " under it; give it a new one (ai-memory restore, or an empty"
                            " database to seed)", detail.peer, detail.incarnation, detail.current)
            else:
                log.debug("dropped a %s from %s's replaced incarnation %s (now %s)",
                          detail.kind, detail.peer, detail.incarnation, detail.current)
        elif event == "membership_mismatch":
            self.metrics.inc("membership_mismatch_total", peer=detail.peer)
            log.error("membership mismatch with %s: theirs %s, ours %s",
                      detail.peer, detail.theirs, detail.ours)
        elif event == "recovering":
            self.metrics.inc("recoveries_total")
            log.warning("this member lost state (%s): recovering from every other member "
                        "before it votes in claim rounds again", detail)
        elif event == "recovered":
            log.info("recovered: every member's state merged; voting in claim rounds again")

    def _reply(self, token: Any, value: Any) -> None:
        fut = self._waiters.pop(token, None)
        if fut is not None and not fut.done():
            if isinstance(value, BaseException):
                fut.set_exception(value)
            else:
                fut.set_result(value)

    async def _load_mailbox(self, step: driver.StoreCall) -> list[Op]:
        """The mailbox's merged state as ops. Every LoadMailbox must be
        answered, so a failing read is retried; if the store stays broken
        the node stops (fail-stop) rather than answer with a partial view."""
        for attempt in range(limits.mailbox_load_attempts_max):
            try:
                ops: list[Op] = await driver.call(self.store, step)
                return ops
            except Exception:
                log.exception("loading mailbox %s/%s failed (attempt %d)", *step.args,
                              attempt + 1)
                await asyncio.sleep(limits.mailbox_load_retry_base_secs * 2 ** attempt)
        self.on_fatal()
        raise Unavailable("node stopping after a store failure")

    def _send(self, peer: str, msg: Any, reply_peer: str | None = None,
              replies: list[Any] | None = None) -> None:
        if replies is not None and peer == reply_peer:
            replies.append(msg)
            return
        self._transport_send(peer, msg)


class _RunnerHost:
    """The runner as the driver's :class:`federation.driver.Host`."""

    def __init__(self, runner: EffectRunner) -> None:
        self._r = runner

    def now_ms(self) -> int:
        return self._r.now_ms()

    def transmit(self, peer: str, msg: Any) -> None:
        self._r._send(peer, msg, None, None)

    def answer(self, token: Any, value: Any) -> None:
        self._r._reply(token, value)

    def push_missing(self, peer: str, vv: dict[str, int]) -> None:
        self._r._push_missing(peer, vv)

    def applied(self, new: list[Op]) -> None:
        self._r._applied(new)

    def report(self, event: str, detail: Any) -> None:
        self._r._report(event, detail)
