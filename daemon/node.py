"""The composition root: one function of a Settings object builds a node.

A :class:`Node` owns the store, the pure federation core, the peer links and
the background tasks, and is the only object services talk to. It runs the
core's effects in order -- persist, then send, then reply (the order
``docs/federation.md`` relies on) -- and translates between the core's
messages and HTTP:

* ``write(items)``: a quorum write. The core stamps the ops, the node
  persists them (the store's writer folds concurrent writes into one
  transaction), sends them to every peer through per-peer batching links,
  and the caller wakes when W members hold them.
* ``read_barrier(key)``: before an inbox or mailbox read, pull from R-1
  peers (R + W > N) whatever they hold for that key that this node lacks.
* ``mailbox(req)``: forwarded to the mailbox's owner (first live member in
  rendezvous order), or run here when this node is the owner.

Shutdown is ordered: stop accepting (the server does that), cancel the
background tasks, fail waiters, close peer sessions, drain and close the
store.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import signal
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from common import limits
from common.errors import (
    AiMemoryError,
    QuorumNotMet,
    Unavailable,
)
from daemon.admission import Admission
from daemon.forwarding import (
    decode_error,
    decode_request,
    decode_result,
    encode_error,
    encode_request,
    encode_result,
)
from daemon.metrics import Metrics
from daemon.peer_client import PeerClient, PeerUnreachable
from daemon.settings import Settings
from daemon.webhooks.ssrf import AddressPolicy
from federation import claim as claim_mod
from federation.core import NodeCore
from federation.effects import (
    Collect,
    LoadMailbox,
    MembershipMismatch,
    Persist,
    PersistPromise,
    PushMissing,
    Reply,
    Send,
    SendPromise,
)
from federation.messages import Promise, Replicate, decode_msg
from store.db import Store
from store.ops import Op, known_kind

log = logging.getLogger("ai_memory.node")


def _is_retryable_id(value: Any) -> bool:
    try:
        return uuid.UUID(str(value)).version != 4
    except ValueError:
        return True


def _consume(task: asyncio.Task[Any]) -> None:
    """Retrieve a background task's outcome so it is never reported as lost."""
    if not task.cancelled():
        task.exception()


def _terminate_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


TICK_SECS = 0.02
PEER_LINK_INFLIGHT = 4

class PeerLink:
    """Batches messages to one peer: many core ``Send``s become one request."""

    def __init__(self, node: Node, peer: str) -> None:
        self.node = node
        self.peer = peer
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self._slots = asyncio.Semaphore(PEER_LINK_INFLIGHT)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"peer-link-{self.peer}")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def send(self, msg: Any) -> None:
        if self.queue.qsize() >= limits.replicate_queue_ops_max:
            # The core treats a lost message like a dropped packet: quorum
            # waits time out and anti-entropy repairs the rest.
            self.node.metrics.inc("peer_queue_dropped_total", peer=self.peer)
            return
        self.queue.put_nowait(msg)

    async def _loop(self) -> None:
        while True:
            first = await self.queue.get()
            batch = [first]
            ops_in_batch = _op_count(first)
            while not self.queue.empty() and ops_in_batch < limits.replicate_batch_ops_max:
                msg = self.queue.get_nowait()
                batch.append(msg)
                ops_in_batch += _op_count(msg)
            await self._slots.acquire()
            self.node.spawn(self._deliver(coalesce(batch)))

    async def _deliver(self, batch: list[Any]) -> None:
        try:
            raw = await self.node.peers.call(
                self.peer, "/peer/v1/msgs", [m.to_wire() for m in batch])
        except PeerUnreachable:
            self.node.metrics.inc("peer_send_failures_total", peer=self.peer)
            await self.node.run(self.node.core.on_send_failed(self.peer, self.node.now_ms()))
            return
        finally:
            self._slots.release()
        self.node.metrics.inc("peer_batches_total", peer=self.peer)
        await self.node.receive(self.peer, [decode_msg(m) for m in raw or []])


def _op_count(msg: Any) -> int:
    return len(getattr(msg, "ops", ())) or 1


def coalesce(msgs: Iterable[Any]) -> list[Any]:
    """Merge runs of quorum ``Replicate`` messages into one, so a batch of
    writes costs the receiver one transaction and one ``Ack``."""
    out: list[Any] = []
    for msg in msgs:
        prev = out[-1] if out else None
        if (isinstance(msg, Replicate) and isinstance(prev, Replicate)
                and msg.ack == prev.ack and len(prev.ops) < limits.replicate_batch_ops_max):
            out[-1] = Replicate(ops=tuple(prev.ops) + tuple(msg.ops), ack=msg.ack)
        else:
            out.append(msg)
    return out


class Node:
    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.node_id = settings.cluster.node_id
        self._clock = clock
        self.metrics = Metrics()
        self.store: Store = None  # type: ignore[assignment]
        self.core: NodeCore = None  # type: ignore[assignment]
        self.peers = PeerClient(
            self.node_id, {p.node_id: p.url for p in settings.cluster.peers}, settings.cluster.secret)
        self.links: dict[str, PeerLink] = {}
        self.admission: Admission | None = None
        self._tokens = itertools.count(1)
        self._waiters: dict[int, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pushing: set[str] = set()
        self.applied_listeners: list[Callable[[list[Op]], None]] = []
        self.started_at_ms = 0
        self._stopping = False
        self._barriers: list[asyncio.Future[None]] = []
        self._rr = 0  # rotation over peers for read-quorum pulls
        # What a fatal store failure does: by default, stop the process
        # (systemd restarts it; it recovers from its database and peers).
        self.on_fatal: Callable[[], None] = _terminate_self

    # -- lifecycle ------------------------------------------------------
    def now_ms(self) -> int:
        return int(self._clock() * 1000) + self.settings.clock_offset_ms

    async def start(self) -> None:
        self.started_at_ms = self.now_ms()
        hooks = self.settings.webhooks
        self.admission = Admission(
            self.settings.mail.admission,
            AddressPolicy(allow_loopback=hooks.allow_loopback_webhooks,
                          allow_private=hooks.allow_private_webhooks),
            self.metrics)
        await self.admission.start()
        self.store = await Store.open(self.settings.store.db_path, self.node_id)
        state = await self.store.load_core_state()
        c = self.settings.cluster
        self.core = NodeCore(
            self.node_id,
            list(c.member_ids),
            c.w,
            quorum_timeout_ms=c.quorum_timeout_ms,
            claim_timeout_ms=limits.claim_timeout_ms,
            catchup_interval_ms=int(c.catchup_interval_secs * 1000),
            vv=dict(state.vv),
            last_hlc=state.max_hlc,
            own_max_seq=state.own_max_seq,
            promises=dict(state.promises),
            rng=random.Random(),
        )
        if c.enabled and not c.secret:
            log.warning("no cluster secret configured: peer requests are not authenticated")
        await self.peers.start()
        for peer in c.peers:
            link = PeerLink(self, peer.node_id)
            link.start()
            self.links[peer.node_id] = link
        self.spawn(self._ticker())
        self.spawn(self._purger())

    async def stop(self) -> None:
        self._stopping = True
        for link in self.links.values():
            await link.stop()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(Unavailable("node shutting down"))
        self._waiters.clear()
        await self.peers.close()
        if self.admission is not None:
            await self.admission.close()
        if self.store is not None:
            await self.store.close()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and not self._stopping:
            log.error("background task failed", exc_info=task.exception())

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECS)
            try:
                await self.run(self.core.tick(self.now_ms()))
            except Exception:
                log.exception("tick failed")

    async def _purger(self) -> None:
        while True:
            await asyncio.sleep(limits.expired_purge_interval_secs)
            try:
                await self.store.purge_expired(self.now_ms())
            except Exception:
                log.exception("purge of expired notifications failed")

    # -- effects --------------------------------------------------------
    async def run(self, effects: Iterable[Any], *, reply_peer: str | None = None,
                  replies: list[Any] | None = None,
                  _earlier: list[asyncio.Future[None]] | None = None) -> None:
        """Carry out the core's effects, in order.

        Persist barrier: the core assumes that whatever it emitted earlier is
        on disk before a later ``SendPromise`` or ``LoadMailbox`` reads the
        store, even when the earlier effects run in another request's
        coroutine. So each effect list that persists registers a barrier
        before its first await, released when its last persist commits, and
        those two reads wait for the barriers that existed when the list (or
        the list it was nested in) started. Waits only ever point at older
        lists, whose persists wait on nothing, so there is no cycle.

        A persist that fails is fatal: the core already counts those ops as
        held (and has numbered its own), so carrying on would leave a hole
        no peer could ever fill. The node stops instead (fail-stop).
        """
        effects = list(effects)
        earlier = list(self._barriers) if _earlier is None else _earlier
        persists = sum(isinstance(e, (Persist, PersistPromise)) for e in effects)
        barrier: asyncio.Future[None] | None = None
        if persists:
            barrier = asyncio.get_running_loop().create_future()
            self._barriers.append(barrier)
        try:
            for eff in effects:
                if isinstance(eff, (Persist, PersistPromise)):
                    await self._persist(eff)
                    persists -= 1
                    if persists == 0 and barrier is not None:
                        self._release(barrier)
                else:
                    await self._effect(eff, reply_peer, replies, earlier)
        finally:
            if barrier is not None:
                self._release(barrier)

    def _release(self, barrier: asyncio.Future[None]) -> None:
        if not barrier.done():
            barrier.set_result(None)
        if barrier in self._barriers:
            self._barriers.remove(barrier)

    @staticmethod
    async def _after(earlier: list[asyncio.Future[None]]) -> None:
        pending = [b for b in earlier if not b.done()]
        if pending:
            await asyncio.gather(*pending)

    async def _persist(self, eff: Any) -> None:
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
                      earlier: list[asyncio.Future[None]]) -> None:
        if isinstance(eff, Send):
            self._send(eff.peer, eff.msg, reply_peer, replies)
        elif isinstance(eff, Reply):
            fut = self._waiters.pop(eff.token, None)
            if fut is not None and not fut.done():
                if isinstance(eff.value, BaseException):
                    fut.set_exception(eff.value)
                else:
                    fut.set_result(eff.value)
        elif isinstance(eff, SendPromise):
            await self._after(earlier)
            ops = await self.store.ops_for_key(eff.mailbox, dict(eff.vv))
            self._send(eff.peer, Promise(mailbox=eff.mailbox, epoch=eff.epoch, ops=tuple(ops)),
                       reply_peer, replies)
        elif isinstance(eff, LoadMailbox):
            await self._after(earlier)
            ops = await self._load_mailbox(eff.mailbox)
            await self.run(self.core.on_mailbox_loaded(eff.mailbox, ops, self.now_ms()),
                           reply_peer=reply_peer, replies=replies, _earlier=earlier)
        elif isinstance(eff, PushMissing):
            if eff.peer not in self._pushing:
                self._pushing.add(eff.peer)
                self.spawn(self._push_missing(eff.peer, dict(eff.vv)))
        elif isinstance(eff, Collect):
            removed = await self.store.gc(dict(eff.floor_vv))
            self.metrics.inc("gc_ops_removed_total", removed)
        elif isinstance(eff, MembershipMismatch):
            self.metrics.inc("membership_mismatch_total", peer=eff.peer)
            log.error("membership mismatch with %s: theirs %s, ours %s",
                      eff.peer, eff.theirs, eff.ours)
        else:
            log.error("unknown effect %r", eff)

    async def _load_mailbox(self, mailbox: str) -> list[Op]:
        """The mailbox's merged state as ops. Every LoadMailbox must be
        answered, so a failing read is retried; if the store stays broken
        the node stops (fail-stop) rather than answer with a partial view."""
        ws, _, proj = mailbox.removeprefix("mbox:").partition("/")
        for attempt in range(5):
            try:
                return await self.store.mailbox_state_ops(
                    ws, proj, history_max=limits.mailbox_history_load_max)
            except Exception:
                log.exception("loading mailbox %s failed (attempt %d)", mailbox, attempt + 1)
                await asyncio.sleep(0.05 * 2 ** attempt)
        self.on_fatal()
        raise Unavailable("node stopping after a store failure")

    def _send(self, peer: str, msg: Any, reply_peer: str | None, replies: list[Any] | None) -> None:
        if replies is not None and peer == reply_peer:
            replies.append(msg)
            return
        link = self.links.get(peer)
        if link is not None:
            link.send(msg)

    async def _push_missing(self, peer: str, vv: dict[str, int]) -> None:
        """Anti-entropy push: stream what the peer lacks, batch by batch,
        until it has everything we held when it asked."""
        try:
            while True:
                ops = await self.store.ops_missing(vv, limits.sync_batch_ops_max)
                if not ops:
                    return
                msg = Replicate(ops=tuple(ops), ack=False)
                try:
                    raw = await self.peers.call(peer, "/peer/v1/msgs", [msg.to_wire()])
                except PeerUnreachable:
                    await self.run(self.core.on_send_failed(peer, self.now_ms()))
                    return
                self.metrics.inc("sync_ops_pushed_total", len(ops), peer=peer)
                await self.receive(peer, [decode_msg(m) for m in raw or []])
                for op in ops:
                    if op.seq > vv.get(op.origin, 0):
                        vv[op.origin] = op.seq
                if len(ops) < limits.sync_batch_ops_max:
                    return
        finally:
            self._pushing.discard(peer)

    async def receive(self, peer: str, msgs: list[Any]) -> list[Any]:
        """Feed messages from a peer to the core; returns the replies meant
        for that peer (the HTTP response carries them back)."""
        replies: list[Any] = []
        # The core sees the batch in order; the effect lists then run side by
        # side, so their persists share one group commit instead of queueing
        # one behind another (each list still runs in its own order, and the
        # persist barrier keeps promise reads behind earlier persists).
        now = self.now_ms()
        lists = [self.core.on_message(peer, msg, now) for msg in coalesce(msgs)]
        if len(lists) == 1:
            await self.run(lists[0], reply_peer=peer, replies=replies)
        else:
            await asyncio.gather(*(self.run(effects, reply_peer=peer, replies=replies)
                                   for effects in lists))
        return replies

    def _waiter(self) -> tuple[int, asyncio.Future[Any]]:
        token = next(self._tokens)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[token] = fut
        return token, fut

    # -- what services call ---------------------------------------------
    def _check_backpressure(self) -> None:
        """Refuse new work before the core numbers any op for it, so the store
        queue never overflows on a persist the core already counts on."""
        if self._stopping:
            raise Unavailable("node shutting down")
        if self.store.writer_queue_depth() >= limits.writer_queue_max // 2:
            self.metrics.inc("overload_refusals_total")
            raise Unavailable("node overloaded: the store's write queue is half full "
                              "(limits.writer_queue_max)", retry_after=0.5)

    async def write(self, items: list[tuple[str, str, dict[str, Any]]]) -> list[Op]:
        self._check_backpressure()
        token, fut = self._waiter()
        await self.run(self.core.write(token, items, self.now_ms()))
        try:
            result: list[Op] = await fut
        except QuorumNotMet:
            self.metrics.inc("quorum_failures_total")
            raise
        self.metrics.inc("writes_total", len(items))
        return result

    async def read_barrier(self, key: str, consistency: str = "quorum") -> None:
        """Before a read of ``key``: hear from R-1 peers (R = N - W + 1, so
        R + W > N) and apply whatever they hold for the key that this node
        lacks. Peers believed alive are asked first, in rotation; if one has
        not answered within ``limits.read_hedge_ms`` (or fails), the next is
        asked too. A pull is never cancelled: one that answers after the read
        finished is still applied, and a cancelled request would cost its
        pooled connection."""
        c = self.settings.cluster
        need = (len(c.member_ids) - c.w + 1) - 1  # peers to hear from besides ourselves
        if consistency == "local" or need <= 0 or not c.peers:
            return
        loop = asyncio.get_running_loop()
        now = self.now_ms()
        # The core counts an op in its vector as soon as it emits the persist;
        # the read below must not run before those persists commit, or a peer
        # told "I hold it" would send nothing and the local query would miss it.
        in_flight = list(self._barriers)
        self._rr = (self._rr + 1) % len(c.peers)
        rotated = [p.node_id for p in c.peers[self._rr:] + c.peers[:self._rr]]
        order = sorted(rotated, key=lambda p: not self.core.detector.alive(p, now))
        payload = {"key": key, "vv": dict(self.core.vv)}
        timeout = c.quorum_timeout_ms / 1000
        deadline = loop.time() + timeout
        inflight: dict[asyncio.Task[None], str] = {}
        got, reasons, nxt = 0, set(), 0

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
        if got < need:
            self.metrics.inc("read_quorum_failures_total")
            reason = "timeout" if "timeout" in reasons else "unreachable"
            raise QuorumNotMet(got + 1, need + 1, reason)
        await self._after(in_flight)

    async def _pull(self, peer: str, payload: dict[str, Any], timeout_s: float) -> None:
        try:
            raw = await self.peers.call(peer, "/peer/v1/pull", payload, timeout_s=timeout_s)
        except PeerUnreachable:
            await self.run(self.core.on_send_failed(peer, self.now_ms()))
            raise
        ops = tuple(Op.from_wire(w) for w in raw or [])
        if ops:
            await self.run(self.core.on_message(peer, Replicate(ops=ops, ack=False), self.now_ms()))

    async def mailbox(self, req: Any, hops: int = 0) -> Any:
        """Run a mailbox request at the mailbox's owner."""
        key = req.mailbox
        tried: set[str] = set()
        order = self.core.membership.rendezvous(key)
        for _ in range(len(order)):
            owner = self.core.owner_for(key, self.now_ms())
            if owner in tried:
                owner = next((m for m in order if m not in tried), self.node_id)
            if owner == self.node_id or hops >= limits.forward_hops_max:
                return await self.own_mailbox(req)
            try:
                return await self._forward(owner, req, hops)
            except PeerUnreachable:
                tried.add(owner)
                await self.run(self.core.on_send_failed(owner, self.now_ms()))
        return await self.own_mailbox(req)

    async def own_mailbox(self, req: Any) -> Any:
        self._check_backpressure()
        if isinstance(req, claim_mod.MailSend) and _is_retryable_id(req.body.get("id")):
            # A send retried with the id of a message decided long ago (beyond
            # the history an owner loads) must not become a second pending copy.
            # Only idempotency-key ids (uuid5) can repeat; fresh ones are uuid4.
            row = await self.store.message(str(req.body.get("id")))
            if row is not None and row.get("state") != "pending":
                return Op(origin=row["order"][1], seq=0, hlc=row["order"][0], kind="msg.send",
                          key=req.mailbox, body={k: row.get(k) for k in req.body}, epoch=0)
        token, fut = self._waiter()
        await self.run(self.core.mailbox_request(token, req, self.now_ms()))
        return await fut

    async def _forward(self, owner: str, req: Any, hops: int) -> Any:
        self.metrics.inc("mailbox_forwards_total", peer=owner)
        raw = await self.peers.call(
            owner, "/peer/v1/mailbox", {"req": encode_request(req), "hops": hops + 1},
            timeout_s=limits.claim_timeout_ms / 1000 + limits.peer_request_timeout_secs)
        if "err" in raw:
            raise decode_error(raw["err"])
        return decode_result(raw["ok"])

    async def handle_forwarded(self, raw: dict[str, Any]) -> dict[str, Any]:
        req = decode_request(raw["req"])
        try:
            return {"ok": encode_result(await self.mailbox(req, hops=int(raw.get("hops", 1))))}
        except AiMemoryError as exc:
            return {"err": encode_error(exc)}

    def status(self) -> dict[str, Any]:
        """What ``ai-memory cluster status`` shows for this member: the core's
        view, plus addresses and the contract's field names."""
        now = self.now_ms()
        out: dict[str, Any] = dict(self.core.status(now))
        urls = {p.node_id: p.url for p in self.settings.cluster.peers}
        for peer_id, view in out.get("peers", {}).items():
            view["url"] = urls.get(peer_id)
            view["reachable"] = bool(view.get("alive"))
            view["last_contact_ms_ago"] = view.get("last_heard_ms_ago")
        reachable = int(out.get("reachable", 1))
        c = self.settings.cluster
        out.update(
            node_id=self.node_id,
            url=f"http://{self.settings.server.host}:{self.settings.server.port}",
            version=self.settings.version,
            write_quorum=c.w,
            quorum_healthy=reachable >= max(c.w, len(c.member_ids) // 2 + 1),
            oplog_position=sum(out.get("vv", {}).values()),
            uptime_secs=(now - self.started_at_ms) / 1000,
        )
        return out

