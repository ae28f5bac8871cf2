"""One running node: its parts, its lifecycle, and the quorum write.

:func:`daemon.wiring.build_node` builds a :class:`Node` complete (store
open, core loaded, links, runner, read quorum, mailbox router, webhooks,
admission); ``start()`` starts what runs in the background and ``stop()``
ends it in order. The jobs live in their own modules:

* :mod:`daemon.replication.effect_runner` -- carries out the core's effects (persist,
  send, reply) with the persist barrier;
* :mod:`daemon.peer.link` -- one batching queue per peer;
* :mod:`daemon.replication.anti_entropy` -- pushes of what a peer lacks;
* :mod:`daemon.replication.read_quorum` -- the R-quorum pull before inbox/mailbox reads;
* :mod:`daemon.replication.mailbox_router` -- mailbox requests run at the owner;
* :mod:`daemon.runtime.status` -- what ``cluster status`` shows.

This module keeps only what needs all of them: ``write`` (a quorum write:
the core stamps the ops, the runner persists and sends them, the caller
wakes when W members hold them), backpressure, the ticker and the purger.

Shutdown is ordered: stop accepting (the server does that), cancel the
background tasks and peer links, fail waiters, drain webhooks, close peer
sessions, drain and close the store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from common import limits
from common.errors import QuorumNotMet, ServerError, Unavailable
from common.lanes import GLOBAL_KINDS, lane_of
from common.ops import ALL_KEYS, IDENT_KEY, Op
from common.policy import Directory
from common.vocab import CONSISTENCY_DEFAULT, Consistency
from daemon.http.admission import Admission
from daemon.http.backpressure import Backpressure
from daemon.http.stream_hub import StreamHub
from daemon.identity.replicated_directory import ReplicatedDirectory
from daemon.lanes.hop import Siblings
from daemon.lanes.split import split_items
from daemon.peer.auth import Verifier
from daemon.peer.client import PeerClient
from daemon.peer.link import PeerLink
from daemon.replication.anti_entropy import Pusher
from daemon.replication.effect_runner import EffectRunner
from daemon.replication.forwarding import decode_result, encode_request
from daemon.replication.mailbox_router import MailboxRouter
from daemon.replication.read_quorum import ReadQuorum
from daemon.runtime.clock import Clock
from daemon.runtime.metrics import Metrics
from daemon.runtime.status import node_status
from daemon.runtime.tasks import Background
from daemon.services import leases, purge
from daemon.services.agents import SeenThrottle
from daemon.settings import Settings
from daemon.webhooks.service import Webhooks
from federation.core import NodeCore
from store.db import Store

log = logging.getLogger("ai_memory.node")


class Node:
    def __init__(self, settings: Settings, *, clock: Clock, metrics: Metrics, store: Store,
                 core: NodeCore, peers: PeerClient, links: dict[str, PeerLink],
                 background: Background, runner: EffectRunner, pusher: Pusher,
                 backpressure: Backpressure,
                 reads: ReadQuorum, router: MailboxRouter, admission: Admission,
                 webhooks: Webhooks, verifier: Verifier, seen_throttle: SeenThrottle,
                 directory: Directory, identity: ReplicatedDirectory,
                 streams: StreamHub, siblings: Siblings | None = None) -> None:
        self.settings = settings
        self.node_id = settings.cluster.node_id
        self.clock = clock
        self.metrics = metrics
        self.store = store
        self.core = core
        self.peers = peers
        self.links = links
        self.background = background
        self.runner = runner
        self.pusher = pusher
        self.backpressure = backpressure
        self.reads = reads
        self.router = router
        self.admission = admission
        self.webhooks = webhooks
        self.verifier = verifier
        self.peer_protocols = router.peer_protocols  # the protocol each peer last spoke to us
        self.seen_throttle = seen_throttle
        self.directory = directory  # where keys resolve to principals (daemon/http/auth.py)
        self.identity = identity  # the replicated users, keys and grants (daemon/identity/)
        self.streams = streams  # push streams (SSE), fed by the applied-ops listeners
        self.siblings = siblings  # the node's other lanes (daemon/lanes/), None without lanes
        self.started_at_ms = clock.now_ms()

    # -- lifecycle ------------------------------------------------------
    def now_ms(self) -> int:
        return self.clock.now_ms()

    async def start(self) -> None:
        self.started_at_ms = self.now_ms()
        if self.settings.cluster.enabled and not self.settings.cluster.secret:
            log.warning("no cluster secret configured: peer requests are not authenticated")
        await self.admission.start()
        await self.peers.start()
        await self.webhooks.start()
        for link in self.links.values():
            link.start()
        self.spawn(self._ticker())
        self.spawn(self._purger())
        self.spawn(purge.cleanup_loop(self))
        self.spawn(leases.sweep_loop(self))

    async def stop(self) -> None:
        self.background.stopping = True
        self.streams.shutdown()
        for link in self.links.values():
            await link.stop()
        await self.background.stop()
        self.runner.fail_waiters(Unavailable("node shutting down"))
        self.router.fail_forwards(Unavailable("node shutting down"))
        await self.webhooks.stop()
        await self.peers.close()
        if self.siblings is not None:
            await self.siblings.close()
        await self.admission.close()
        await self.store.close()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return self.background.spawn(coro)

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(limits.tick_secs)
            try:
                await self.runner.run(self.core.tick(self.now_ms()))
                self.pusher.tick()
            except Exception:
                log.exception("tick failed")

    async def _purger(self) -> None:
        while True:
            await asyncio.sleep(limits.expired_purge_interval_secs)
            try:
                now = self.now_ms()
                await self.store.purge_expired(
                    now, empty_before_ms=now - int(limits.pop_empty_keep_secs * 1000))
            except Exception:
                log.exception("purge of expired notifications failed")

    # -- the ports services use -----------------------------------------
    async def write(self, items: list[tuple[str, str, dict[str, Any]]]) -> list[Op]:
        """A quorum write: returns the stamped ops once W members hold them.

        With lanes, each item goes to the lane that keeps it
        (:func:`common.lanes.lanes_of_item`; a record every lane keeps, to
        all), each lane's share a quorum write of its own group, all at
        once. The answer is the ops in the items' order (of a record on
        every lane, this lane's copy); a failure of any share fails the
        write, and a retry with the same ids completes it."""
        if self.siblings is None:
            return await self.write_here(items)
        items = self.ranked(items)
        shares = split_items(items, self.siblings.lanes)
        if len(shares) == 1 and self.siblings.lane in shares:
            return await self.write_here(items)
        return await self._write_shares(items, shares)

    async def _write_shares(self, items: list[tuple[str, str, dict[str, Any]]],
                            shares: dict[int, list[int]]) -> list[Op]:
        siblings = self.siblings
        assert siblings is not None
        own = siblings.lane

        async def share(lane: int, idx: list[int]) -> list[Op]:
            part = [items[i] for i in idx]
            if lane == own:
                return await self.write_here(part)
            raw = await siblings.call(lane, "write", [list(i) for i in part])
            return [Op.from_wire(r) for r in raw]

        lanes = sorted(shares)
        results = await asyncio.gather(*(share(lane, shares[lane]) for lane in lanes),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        out: dict[int, Op] = {}
        for lane, ops in zip(lanes, results, strict=True):
            assert not isinstance(ops, BaseException)
            for i, op in zip(shares[lane], ops, strict=True):
                if lane == own or i not in out:
                    out[i] = op
        return [out[i] for i in range(len(items))]

    def ranked(self, items: list[tuple[str, str, dict[str, Any]]]
               ) -> list[tuple[str, str, dict[str, Any]]]:
        """``items``, each record every lane keeps given one stamp of this
        lane's clock as its ``rank`` (once: a retry keeps it), so that every
        lane's group ranks the body alike (``store.records.body_rank``)."""
        if self.siblings is None:
            return items
        out = []
        for kind, key, body in items:
            if kind in GLOBAL_KINDS and "rank" not in body:
                stamp = self.core.mint_stamp(self.now_ms())
                body = {**body, "rank": [stamp, f"{self.node_id}/{self.siblings.lane}"]}
            out.append((kind, key, body))
        return out

    async def write_here(self, items: list[tuple[str, str, dict[str, Any]]]) -> list[Op]:
        """A quorum write of this lane's group (the node's, without lanes)."""
        self.backpressure.check()
        token, fut = self.runner.waiter()
        await self.runner.run(self.core.write(token, items, self.now_ms()))
        try:
            result: list[Op] = await fut
        except QuorumNotMet:
            self.metrics.inc("quorum_failures_total")
            raise
        self.metrics.inc("writes_total", len(items))
        return result

    async def read_barrier(self, key: str, consistency: Consistency = CONSISTENCY_DEFAULT) -> None:
        if self.siblings is not None:
            self._check_lane(key)
        await self.reads.barrier(key, consistency)

    def _check_lane(self, key: str) -> None:
        """A read of a key another lane keeps would read nothing here: a routing bug."""
        assert self.siblings is not None
        if key in (ALL_KEYS, IDENT_KEY) or key.startswith("proj:"):
            return  # every lane keeps them (ALL_KEYS: this lane's share)
        lane = lane_of(key, self.siblings.lanes)
        if lane != self.siblings.lane:
            self.metrics.inc("lane_misrouted_total")
            raise ServerError(f"lane {self.siblings.lane} was asked to read {key!r}, which lane "
                              f"{lane} keeps (a lane routing bug; docs/lanes.md)")

    # -- the node's other lanes (daemon/ports.py LaneCalls) ----------------------------
    def lane_elsewhere(self, key: str) -> int | None:
        if self.siblings is None:
            return None
        lane = lane_of(key, self.siblings.lanes)
        return None if lane == self.siblings.lane else lane

    async def lane_call(self, lane: int, name: str, payload: Any) -> Any:
        assert self.siblings is not None
        return await self.siblings.call(lane, name, payload)

    async def every_other_lane(self, name: str, payload: Any) -> list[Any]:
        if self.siblings is None:
            return []
        answers = await self.siblings.call_all(name, payload)
        for lane in sorted(answers):
            found = answers[lane]
            if isinstance(found, BaseException):
                raise found
        return [answers[lane] for lane in sorted(answers)]

    async def mailbox(self, req: Any) -> Any:
        """Run a mailbox request at its owner (with lanes: at its lane's)."""
        siblings = self.siblings
        if siblings is not None:
            lane = lane_of(req.mailbox, siblings.lanes)
            if lane != siblings.lane:
                raw = await siblings.call(lane, "mailbox", encode_request(req))
                return decode_result(raw, type(req))
        return await self.router.route(req)

    async def run(self, effects: Any, *, reply_peer: str | None = None,
                  replies: list[Any] | None = None) -> None:
        await self.runner.run(effects, reply_peer=reply_peer, replies=replies)

    async def receive(self, peer: str, msgs: list[Any], incarnation: str = "") -> list[Any]:
        return await self.runner.receive(peer, msgs, incarnation)

    def status(self) -> dict[str, Any]:
        return node_status(self.settings, self.core, self.now_ms(), self.started_at_ms,
                           {peer: (link.pacer.recent_floor(time.monotonic()), link.pacer.far())
                            for peer, link in self.links.items()})
