"""Peer links: one batching queue per peer.

The core emits one ``Send`` per message; a :class:`PeerLink` turns a burst
of them into one signed HTTP request (up to ``limits.replicate_batch_ops_max``
ops, with runs of quorum ``Replicate`` merged and each mailbox's ``Accept``
rounds folded into one message (:mod:`federation.batching`)), keeps a
few requests in flight, and hands the replies the peer sends back in the
HTTP response to the node.

Batching policy: the link waits for a free request slot *before* it takes
what is queued, so everything that arrives while the slots are busy leaves
in the next request. A near peer gets one slot (``limits.peer_link_inflight_max``):
the link sends at once when it is idle and otherwise gathers for exactly
one round trip, the way Nagle's algorithm does: under load a request
carries many messages (sends, accepts, forwards and their answers), and a
lone message never waits for a timer. A far peer (its fastest recent
lone request took ``limits.peer_link_far_rtt_ms`` or more, :mod:`daemon.peer.pacing`
says which requests it times) gets up to ``limits.peer_link_inflight_far_max``,
so that across a WAN a queued message does not wait a whole round trip for
the request ahead of it. On the peer channel the receiver still hands the
frames to its core in the order they come; over plain HTTP (a peer without
the channel), and for the parts of a split batch, a later request may
overtake an earlier one. The core does not depend on that order: the
simulator delivers every message of a link with its own random delay. A failed
request is reported to the core like a lost packet (``on_send_failed``):
quorum waits time out and anti-entropy repairs the rest.

A batch is also bounded in bytes: one whose packed size exceeds
``limits.peer_batch_bytes_max`` (many large memories written at once) is
halved (:func:`federation.batching.halve`) until each part fits, and the
parts go one after the other in the same slot, counted in
``peer_batches_split_total``. Without this, such a batch exceeded what the
receiver accepts (``limits.peer_body_max_bytes``) and failed as a whole.

The queue is bounded in *ops* (``limits.replicate_queue_ops_max``). A send
that would overflow it is not queued: it is counted in the metric
``peer_queue_dropped_total`` (labelled by peer) and logged once per burst,
and recovered like any lost message. This is the one documented place a
message to a peer may be shed; nothing a client was promised depends on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from common import limits
from daemon.peer.client import MSGS_PATH, PeerClient, PeerUnreachable, pack
from daemon.peer.pacing import LinkPacer
from daemon.runtime.metrics import Metrics
from federation.batching import coalesce, halve, merge_accepts
from federation.messages import decode_msg

log = logging.getLogger("ai_memory.peer_link")

Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


def op_count(msg: Any) -> int:
    """What a message weighs against the ops limits: its ops, at least 1."""
    return len(getattr(msg, "ops", ())) or 1


class PeerLink:
    """Batches messages to one peer: many core ``Send``s become one request."""

    def __init__(self, peer: str, *, peers: PeerClient, metrics: Metrics, spawn: Spawn,
                 on_failed: Callable[[str], Awaitable[None]],
                 on_replies: Callable[[str, list[Any], str], Awaitable[Any]],
                 queue_ops_max: int = limits.replicate_queue_ops_max,
                 inflight_max: int = limits.peer_link_inflight_max,
                 pacer: LinkPacer | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.peer = peer
        self._peers = peers
        self._metrics = metrics
        self._spawn = spawn
        self._on_failed = on_failed
        self._on_replies = on_replies
        self.queue_ops_max = queue_ops_max
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.queued_ops = 0
        self._shedding = False
        self.pacer = pacer or LinkPacer(
            near_max=inflight_max, far_max=max(inflight_max, limits.peer_link_inflight_far_max))
        self._clock = clock
        self.inflight = 0
        self._slot_freed = asyncio.Event()
        self._fresh = True  # the next request may open the channel: not a sample
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"peer-link-{self.peer}")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def send(self, msg: Any) -> bool:
        """Queue ``msg``; False (counted, logged) if the queue is full."""
        weight = op_count(msg)
        if self.queued_ops + weight > self.queue_ops_max:
            self._metrics.inc("peer_queue_dropped_total", peer=self.peer)
            if not self._shedding:
                self._shedding = True
                log.warning("queue to %s is full (limits.replicate_queue_ops_max = %d ops): "
                            "shedding messages; anti-entropy repairs them", self.peer,
                            self.queue_ops_max)
            return False
        self._shedding = False
        self.queued_ops += weight
        self.queue.put_nowait(msg)
        return True

    def _take(self) -> Any:
        msg = self.queue.get_nowait()
        self.queued_ops -= op_count(msg)
        return msg

    def _slots(self) -> int:
        slots = self.pacer.slots(self._clock())
        if slots > 1 and self._peers.over_http(self.peer):
            # each request holds a pooled connection the node's reads and
            # forwards to this peer also need
            slots = min(slots, limits.peer_link_inflight_http_max)
        return slots

    async def _acquire(self) -> None:
        while self.inflight >= self._slots():
            self._slot_freed.clear()
            await self._slot_freed.wait()
        self.inflight += 1
        if self.inflight > 1:
            self._metrics.inc("peer_batches_overlapped_total", peer=self.peer)

    def _release(self) -> None:
        self.inflight -= 1
        self._slot_freed.set()

    async def _loop(self) -> None:
        while True:
            first = await self.queue.get()
            self.queued_ops -= op_count(first)
            # Wait for a free slot *before* taking the rest: whatever queues
            # while every slot is busy joins this batch instead of the next.
            await self._acquire()
            batch = [first]
            ops_in_batch = op_count(first)
            while not self.queue.empty() and ops_in_batch < limits.replicate_batch_ops_max:
                msg = self._take()
                batch.append(msg)
                ops_in_batch += op_count(msg)
            batch, folded = merge_accepts(coalesce(batch))
            if folded:
                self._metrics.inc("peer_accepts_folded_total", folded, peer=self.peer)
            self._spawn(self._deliver(batch))

    async def _deliver(self, batch: list[Any]) -> None:
        parts = [batch]  # a stack: the next part to send is last
        released = False
        try:
            while parts:
                msgs = parts.pop()
                body = pack([m.to_wire() for m in msgs])
                if len(body) > limits.peer_batch_bytes_max:
                    halves = halve(msgs)
                    if halves is not None:
                        self._metrics.inc("peer_batches_split_total", peer=self.peer)
                        parts += reversed(halves)
                        continue
                started = self._clock()
                timed = (self.inflight == 1 and not self._fresh
                         and len(body) <= limits.peer_link_sample_bytes_max)
                self._fresh = False
                try:
                    raw, incarnation = await self._peers.call_packed(self.peer, MSGS_PATH, body)
                except PeerUnreachable:
                    self._fresh = True
                    released = True
                    self._release()
                    self._metrics.inc("peer_send_failures_total", peer=self.peer)
                    await self._on_failed(self.peer)  # what is left of the batch is lost too
                    return
                if timed and self.inflight == 1:  # alone all the way: the network's time
                    now = self._clock()
                    self.pacer.sample(now, now - started)
                    self._slot_freed.set()  # the peer may have turned far: more slots
                if not parts:  # the last part is back: the next batch may go
                    released = True
                    self._release()
                self._metrics.inc("peer_batches_total", peer=self.peer)
                replies = [decode_msg(m) for m in raw or []]
                if not parts:
                    await self._on_replies(self.peer, replies, incarnation)
                    continue
                try:  # a part's replies failing must not lose the parts after it
                    await self._on_replies(self.peer, replies, incarnation)
                except Exception:
                    log.exception("handling the replies of %s to part of a batch failed",
                                  self.peer)
        finally:
            if not released:
                self._release()
