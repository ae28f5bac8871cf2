"""The read quorum: before an inbox or mailbox read, hear from R-1 peers.

With R = N - W + 1, R + W > N, so at least one of the members heard from
holds any write acknowledged anywhere. :meth:`ReadQuorum.barrier` sends the
node's version vector to peers (``/peer/v1/pull``); each answers with the
ops it holds for the key that this node lacks, and they are applied here.
Peers believed alive are asked first, the nearer first (by their links'
round trips), in rotation among equally near ones; one that has not
answered within ``limits.read_hedge_ms`` or twice its round trip (or fails)
gets a second peer asked beside it. A pull is never cancelled: one that answers after the read
finished is still applied, and a cancelled request would cost its pooled
connection.

The decisions (whom to ask, when to hedge, which persist barriers the local
query then waits for) are :mod:`federation.read`'s, shared with the
simulator; this module carries them out over ``/peer/v1/pull``. Why the
query waits for every persist handed over until the pulls were applied, not
only those in flight when the read began, is written there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from common.errors import QuorumNotMet
from common.ops import Op
from common.vocab import CONSISTENCY_DEFAULT, LOCAL, Consistency
from daemon.peer.client import PeerClient, PeerUnreachable
from daemon.replication.effect_runner import EffectRunner
from daemon.runtime.metrics import Metrics
from daemon.settings import ClusterSettings
from federation import read
from federation.messages import Replicate


def _consume(task: asyncio.Task[Any]) -> None:
    """Retrieve a background task's outcome so it is never reported as lost."""
    if not task.cancelled():
        task.exception()


class ReadQuorum:
    def __init__(self, cluster: ClusterSettings, *, runner: EffectRunner, peers: PeerClient,
                 metrics: Metrics, now_ms: Callable[[], int],
                 round_trip: read.RoundTrip | None = None) -> None:
        self.cluster = cluster
        self.round_trip = round_trip  # a peer link's estimate (daemon/peer/pacing.py)
        self.runner = runner
        self.peers = peers
        self.metrics = metrics
        self.now_ms = now_ms
        self._rr = 0  # rotation over peers for pulls

    @property
    def peers_needed(self) -> int:
        """Peers to hear from besides this node: R - 1."""
        return read.peers_needed(len(self.cluster.member_ids), self.cluster.w)

    def _order(self) -> list[str]:
        now = self.now_ms()
        peers = [p.node_id for p in self.cluster.peers]
        self._rr = (self._rr + 1) % len(peers)
        return read.pull_order(peers, self._rr,
                               lambda p: self.runner.core.detector.alive(p, now), self.round_trip)

    async def barrier(self, key: str, consistency: Consistency = CONSISTENCY_DEFAULT) -> None:
        need = self.peers_needed
        if consistency == LOCAL or need <= 0 or not self.cluster.peers:
            return
        at_start = self.runner.barriers()
        error = await self._hear_from(need, key)
        if error is not None:
            self.metrics.inc("read_quorum_failures_total")
            raise error
        await self.runner.settle(read.barriers_to_wait(at_start, self.runner.barriers()))

    async def _hear_from(self, need: int, key: str) -> QuorumNotMet | None:
        """Pull from peers as :class:`federation.read.ReadRound` decides."""
        loop = asyncio.get_running_loop()
        rnd = read.ReadRound(self._order(), need)
        payload = {"key": key, "vv": dict(self.runner.core.vv)}
        timeout = self.cluster.quorum_timeout_ms / 1000
        deadline = loop.time() + timeout
        inflight: dict[asyncio.Task[None], str] = {}

        def launch(peers: list[str]) -> None:
            for peer in peers:
                inflight[asyncio.ensure_future(self._pull(peer, payload, timeout))] = peer

        launch(rnd.start())
        while not rnd.done:
            wait = deadline - loop.time()
            if rnd.can_hedge:
                wait = min(wait, read.hedge_delay(sorted(rnd.inflight), self.round_trip))
            done, _ = await asyncio.wait(inflight, timeout=max(0.0, wait),
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                if loop.time() >= deadline:
                    rnd.timed_out()
                    break
                launch(rnd.hedge())  # the slow peer may be paused or cut off
                continue
            for task in done:
                peer = inflight.pop(task)
                try:
                    task.result()
                    rnd.answered(peer)
                except PeerUnreachable as exc:
                    launch(rnd.failed(peer, exc.reason))
        for task in inflight:
            task.add_done_callback(_consume)
        return rnd.error()

    async def _pull(self, peer: str, payload: dict[str, Any], timeout_s: float) -> None:
        try:
            raw, incarnation = await self.peers.call_from(peer, "/peer/v1/pull", payload,
                                                          timeout_s=timeout_s)
        except PeerUnreachable:
            await self.runner.send_failed(peer)
            raise
        ops = tuple(Op.from_wire(w) for w in raw or [])
        if ops:
            await self.runner.run(self.runner.core.on_message(
                peer, Replicate(ops=ops, ack=False), self.now_ms(), incarnation))
