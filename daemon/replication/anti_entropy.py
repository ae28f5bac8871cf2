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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from common import limits
from common.ops import Op
from daemon.peer.client import PeerClient, PeerUnreachable
from daemon.peer.link import Spawn
from daemon.runtime.metrics import Metrics
from federation.messages import Replicate, decode_msg


class MissingOps(Protocol):
    async def ops_missing(self, vv: dict[str, int], limit: int,
                          bytes_max: int | None = None,
                          upto: Mapping[str, int] | None = None) -> list[Op]: ...
    def max_seqs(self) -> dict[str, int]: ...


class Pusher:
    def __init__(self, *, store: MissingOps, peers: PeerClient, metrics: Metrics, spawn: Spawn,
                 on_failed: Callable[[str], Awaitable[None]],
                 on_replies: Callable[[str, list[Any], str], Awaitable[Any]]) -> None:
        self._store = store
        self._peers = peers
        self._metrics = metrics
        self._spawn = spawn
        self._on_failed = on_failed
        self._on_replies = on_replies
        self._pushing: set[str] = set()

    def request(self, peer: str, vv: dict[str, int]) -> None:
        if peer not in self._pushing:
            self._pushing.add(peer)
            self._spawn(self._push(peer, dict(vv)))

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
