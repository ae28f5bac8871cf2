"""Anti-entropy pushes: stream a peer what it lacks.

The core notices from a peer's ``SyncOffer`` that the peer lacks ops this
node holds and emits ``PushMissing(peer, vv)``. :class:`Pusher` runs at most
one push per peer at a time, reading batches of at most
``limits.sync_batch_ops_max`` ops and about ``limits.peer_batch_bytes_max``
bytes from the store, none past what this node held when the push began,
until the peer holds all of that. A request while a push runs is dropped:
what the node took in meanwhile (its own writes, which the link replicates,
and ops other peers sent it) is offered again by the peer's next
``SyncOffer``, at most one catch-up interval after the push ends. The byte bound is what lets
a member that missed large writes catch up at all: 82 memories of 900 KB
were one push of 74 MB, which the receiver refuses
(``limits.peer_body_max_bytes``), every time it was tried.

A push waits while the peer lacks only what is in flight to it. An offer
is the peer's *durable* vector, so under load it always trails what this
node holds by the ops that the link, an accept round or the peer's writer
queue are still carrying; pushing those was most of anti-entropy's
traffic (0.58 ops per claim at 1,246 claims/s, each one read from the
store, sent, decoded and dropped as a duplicate). So every request records
what this node held then (:meth:`Store.max_seqs`, in memory), as does
the node's ticker every quarter of ``grace_s`` (:meth:`Pusher.tick`), and
a request whose vector covers what this node held ``grace_s`` ago (the
newest record at least that old) pushes nothing: the ops the peer lacks
are younger than that. Its next offer, one catch-up interval later, asks
again and finds them older, so a lost message still reaches it one
interval late at most. Without a record between ``grace_s`` and
``horizon_s`` old (within ``grace_s`` of the start, or a ticker that
stalled) the push runs as before. A member coming back after downtime
lacks ops older than that, so it is pushed to at once, as before.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from common import limits
from common.ops import Op
from daemon.peer.client import PeerClient, PeerUnreachable
from daemon.peer.link import Spawn
from daemon.runtime.metrics import Metrics
from federation.messages import Replicate, decode_msg

_HELD_RECORDS_MAX = 64  # records of what this node held, newest kept (the ticker adds 4 per grace_s)


class MissingOps(Protocol):
    async def ops_missing(self, vv: dict[str, int], limit: int,
                          bytes_max: int | None = None,
                          upto: Mapping[str, int] | None = None) -> list[Op]: ...
    def max_seqs(self) -> dict[str, int]: ...


class Pusher:
    def __init__(self, *, store: MissingOps, peers: PeerClient, metrics: Metrics, spawn: Spawn,
                 on_failed: Callable[[str], Awaitable[None]],
                 on_replies: Callable[[str, list[Any], str], Awaitable[Any]],
                 grace_s: float = limits.sync_push_grace_secs,
                 horizon_s: float = 2 * limits.catchup_interval_secs_default,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._peers = peers
        self._metrics = metrics
        self._spawn = spawn
        self._on_failed = on_failed
        self._on_replies = on_replies
        self._pushing: set[str] = set()
        self._grace_s = grace_s
        self._horizon_s = max(horizon_s, grace_s)
        self._clock = clock
        # (when, what this node held then), oldest first: one record at least
        # grace_s old (the newest such) and every newer one.
        self._held: deque[tuple[float, dict[str, int]]] = deque()

    def request(self, peer: str, vv: dict[str, int]) -> None:
        held_then = self._held_grace_ago()
        if peer in self._pushing:
            return
        if held_then is not None and all(vv.get(o, 0) >= s for o, s in held_then.items()):
            # It lacks only ops this node took in since: they are in flight to it.
            self._metrics.inc("sync_pushes_waited_total", peer=peer)
            return
        self._pushing.add(peer)
        self._spawn(self._push(peer, dict(vv)))

    def tick(self) -> None:
        """The node's ticker: record what this node holds at least every
        quarter of ``grace_s``, so a request finds a record about
        ``grace_s`` old even after a spell without requests."""
        now = self._clock()
        if not self._held or now - self._held[-1][0] >= self._grace_s / 4:
            self._record(now)

    def _record(self, now: float) -> None:
        held = self._held
        held.append((now, self._store.max_seqs()))
        while len(held) > 1 and now - held[1][0] >= self._grace_s:
            held.popleft()  # older than the newest record past the grace
        while len(held) > _HELD_RECORDS_MAX:
            held.popleft()

    def _held_grace_ago(self) -> dict[str, int] | None:
        """Record what this node holds now; return what it held ``grace_s``
        ago (the newest record at least that old, if not older than
        ``horizon_s``), or None."""
        now = self._clock()
        self._record(now)
        when, then = self._held[0]
        return then if self._grace_s <= now - when <= self._horizon_s else None

    async def _push(self, peer: str, vv: dict[str, int]) -> None:
        store = self._store
        # What this node holds now, gaps included: the push streams no op
        # past it and ends once the peer has it all, so writes arriving
        # meanwhile (replicated on their own) neither ride along nor keep it
        # going.
        target = store.max_seqs()
        try:
            while True:
                ops = await store.ops_missing(vv, limits.sync_batch_ops_max,
                                              limits.peer_batch_bytes_max, upto=target)
                if not ops:
                    return
                msg = Replicate(ops=tuple(ops), ack=False)
                try:
                    raw, incarnation = await self._peers.call_from(
                        peer, "/peer/v1/msgs", [msg.to_wire()])
                except PeerUnreachable:
                    await self._on_failed(peer)
                    return
                self._metrics.inc("sync_ops_pushed_total", len(ops), peer=peer)
                await self._on_replies(peer, [decode_msg(m) for m in raw or []], incarnation)
                for op in ops:
                    if op.seq > vv.get(op.origin, 0):
                        vv[op.origin] = op.seq
                if all(vv.get(origin, 0) >= seq for origin, seq in target.items()):
                    return
        finally:
            self._pushing.discard(peer)
