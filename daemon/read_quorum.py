"""The read quorum: before an inbox or mailbox read, hear from R-1 peers.

With R = N - W + 1, R + W > N, so at least one of the members heard from
holds any write acknowledged anywhere. :meth:`ReadQuorum.barrier` sends the
node's version vector to peers (``/peer/v1/pull``); each answers with the
ops it holds for the key that this node lacks, and they are applied here.
Peers believed alive are asked first, in rotation; one that has not
answered within ``limits.read_hedge_ms`` (or fails) gets a second peer asked
beside it. A pull is never cancelled: one that answers after the read
finished is still applied, and a cancelled request would cost its pooled
connection.

Why it then settles the effect runner: the vector sent with the pull counts
ops whose persist may still be in flight (a concurrent intake counted them
when it handed them over). A peer told "I hold it" sends nothing, so the
local query must wait for every persist handed over up to the moment after
the pulls were applied (``EffectRunner.settle``), not only those in flight
when the read began.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from common import limits
from common.errors import QuorumNotMet
from common.ops import Op
from common.vocab import CONSISTENCY_DEFAULT, LOCAL, Consistency
from daemon.effect_runner import EffectRunner
from daemon.metrics import Metrics
from daemon.peer_client import PeerClient, PeerUnreachable
from daemon.settings import ClusterSettings
from federation.messages import Replicate


def _consume(task: asyncio.Task[Any]) -> None:
    """Retrieve a background task's outcome so it is never reported as lost."""
    if not task.cancelled():
        task.exception()


class ReadQuorum:
    def __init__(self, cluster: ClusterSettings, *, runner: EffectRunner, peers: PeerClient,
                 metrics: Metrics, now_ms: Callable[[], int]) -> None:
        self.cluster = cluster
        self.runner = runner
        self.peers = peers
        self.metrics = metrics
        self.now_ms = now_ms
        self._rr = 0  # rotation over peers for pulls

    @property
    def peers_needed(self) -> int:
        """Peers to hear from besides this node: R - 1."""
        c = self.cluster
        return (len(c.member_ids) - c.w + 1) - 1

    def _order(self) -> list[str]:
        c = self.cluster
        now = self.now_ms()
        self._rr = (self._rr + 1) % len(c.peers)
        rotated = [p.node_id for p in c.peers[self._rr:] + c.peers[:self._rr]]
        return sorted(rotated, key=lambda p: not self.runner.core.detector.alive(p, now))

    async def barrier(self, key: str, consistency: Consistency = CONSISTENCY_DEFAULT) -> None:
        need = self.peers_needed
        if consistency == LOCAL or need <= 0 or not self.cluster.peers:
            return
        got, reasons = await self._hear_from(need, key)
        if got < need:
            self.metrics.inc("read_quorum_failures_total")
            reason = "timeout" if "timeout" in reasons else "unreachable"
            raise QuorumNotMet(got + 1, need + 1, reason)
        await self.runner.settle()

    async def _hear_from(self, need: int, key: str) -> tuple[int, set[str]]:
        """Pull from peers until ``need`` answered or none is left to ask."""
        loop = asyncio.get_running_loop()
        order = self._order()
        payload = {"key": key, "vv": dict(self.runner.core.vv)}
        timeout = self.cluster.quorum_timeout_ms / 1000
        deadline = loop.time() + timeout
        inflight: dict[asyncio.Task[None], str] = {}
        got, reasons, nxt = 0, set[str](), 0

        def launch() -> None:
            nonlocal nxt
            peer = order[nxt]
            nxt += 1
            inflight[asyncio.ensure_future(self._pull(peer, payload, timeout))] = peer

        for _ in range(min(need, len(order))):
            launch()
        while got < need and inflight:
            wait = limits.read_hedge_ms / 1000 if nxt < len(order) else deadline - loop.time()
            done, _ = await asyncio.wait(inflight, timeout=max(0.0, wait),
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                if loop.time() >= deadline:
                    reasons.add("timeout")
                    break
                launch()  # hedge: the slow peer may be paused or cut off
                continue
            for task in done:
                inflight.pop(task)
                try:
                    task.result()
                    got += 1
                except PeerUnreachable as exc:
                    reasons.add(exc.reason)
                    if nxt < len(order):
                        launch()
        for task in inflight:
            task.add_done_callback(_consume)
        return got, reasons

    async def _pull(self, peer: str, payload: dict[str, Any], timeout_s: float) -> None:
        try:
            raw = await self.peers.call(peer, "/peer/v1/pull", payload, timeout_s=timeout_s)
        except PeerUnreachable:
            await self.runner.send_failed(peer)
            raise
        ops = tuple(Op.from_wire(w) for w in raw or [])
        if ops:
            await self.runner.run(self.runner.core.on_message(
                peer, Replicate(ops=ops, ack=False), self.now_ms()))
