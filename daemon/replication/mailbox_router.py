"""Mailbox routing: every mailbox request runs at the mailbox's owner.

The owner of a mailbox is the first live member in rendezvous order for its
key (:meth:`federation.core.NodeCore.owner_for`). :meth:`MailboxRouter.route`
runs a request here when this node is the owner, and otherwise forwards it
to the owner's ``/peer/v1/mailbox`` (:mod:`daemon.replication.forwarding` is the wire
form); an unreachable owner is reported to the core and the next member in
rendezvous order is tried, ending with this node. Which member is asked
next, the answer to a send of an already decided message and the op the
entry node applies after a forwarded send are :mod:`federation.routing`'s
decisions, shared with the simulator.

The forward travels on the batched per-peer channel (:mod:`daemon.peer.link`)
as a :class:`federation.messages.Forward`, beside replication and claim
rounds, and its answer comes back the same way as a ``ForwardResult``
(echoing the forward's random ``fid``), so many forwards and answers share
one signed HTTP request instead of one request each. What a lost HTTP
exchange meant still holds: a batch to the owner that fails (this one or a
later one) fails every forward waiting on that owner with
:class:`PeerUnreachable`, an answer not back within
``limits.forward_timeout_secs`` is a timeout, and an owner that could not
answer (an unexpected error) sends neither result nor error; in all three
cases the next member is asked with the same request. A peer that has not
spoken protocol 3 to this node yet gets the forward as its own request to
``/peer/v1/mailbox``, as before.

Read-your-writes through the entry node: a forwarded send answers with the
stored op, and the entry node applies that op itself (as replicated from the
owner) before it answers the client. Without that, a cancel by id sent right
after the send, through the same node, could read a local copy the owner's
replication had not reached yet and answer 404.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from common import limits
from common.errors import AiMemoryError, MemberRecovering, Unavailable
from daemon.peer.client import PeerClient, PeerUnreachable
from daemon.replication.effect_runner import EffectRunner
from daemon.replication.forwarding import (
    decode_error,
    decode_forward,
    decode_result,
    encode_error,
    encode_request,
    encode_result,
)
from daemon.runtime.logs import request_id
from daemon.runtime.metrics import Metrics
from federation import routing
from federation.messages import Forward, ForwardResult, Replicate

log = logging.getLogger("ai_memory.node")

FORWARD_PROTOCOL = 3  # the first peer protocol that carries Forward on the batched channel
_fids = random.Random()  # forward ids: unique enough to match answers, not a secret


class LinkPort(Protocol):
    def send(self, msg: Any) -> bool: ...


class MessageLookup(Protocol):
    async def message(self, message_id: str) -> dict[str, Any] | None: ...
    async def sent_body(self, message_id: str) -> dict[str, Any] | None: ...


class MailboxRouter:
    def __init__(self, node_id: str, *, runner: EffectRunner, store: MessageLookup,
                 peers: PeerClient, metrics: Metrics, now_ms: Callable[[], int],
                 admit: Callable[[], None], links: dict[str, LinkPort] | None = None,
                 spawn: Callable[[Coroutine[Any, Any, Any]], Any] | None = None) -> None:
        self.node_id = node_id
        self.runner = runner
        self.store = store
        self.peers = peers
        self.metrics = metrics
        self.now_ms = now_ms
        self._admit = admit  # refuses new work when the node is overloaded or stopping
        self.links: dict[str, LinkPort] = links or {}
        self._spawn = spawn
        self.peer_protocols: dict[str, int] = {}  # the protocol each peer last spoke to us
        # fid -> (owner, its answer): forwards sent on the channel, not answered yet
        self._pending: dict[int, tuple[str, asyncio.Future[tuple[Any, Any, str]]]] = {}

    async def route(self, req: Any, hops: int = 0) -> Any:
        """Run a mailbox request at the mailbox's owner. The entry node stamps
        it with its clock; an owner refuses copies older than
        ``limits.mailbox_request_ttl_secs``. A forward that times out is
        tried at the next member with the same request (and request id): the
        owner decides each pop's request id once, "nothing pending"
        included, so a copy that arrives late meets the same answer."""
        if req.sent_at_ms is None:
            req = dataclasses.replace(req, sent_at_ms=self.now_ms())
        route = routing.Route(self.runner.core, req.mailbox, hops)
        while (owner := route.next(self.now_ms())) is not None:
            try:
                result, incarnation = await self._forward(owner, req, hops)
            except PeerUnreachable:
                route.failed(owner)
                await self.runner.send_failed(owner)
                continue
            except MemberRecovering:
                route.failed(owner)  # it lost its state and is catching up: ask the next one
                continue
            await self._hold_sent(owner, result, incarnation)
            return result
        return await self.own(req)

    async def own(self, req: Any) -> Any:
        """Serve ``req`` as its owner (becoming the owner first if needed)."""
        self._admit()
        message_id = routing.needs_decided_check(req)
        if message_id is not None:
            # A send retried with the id of a message decided long ago (beyond
            # the history an owner loads) must not become a second pending copy.
            row = await self.store.message(message_id)
            sent = None if row is None else await self.store.sent_body(message_id)
            decided = routing.decided_send(req, row, sent)
            if decided is not None:
                return decided
        token, fut = self.runner.waiter()
        await self.runner.run(self.runner.core.mailbox_request(token, req, self.now_ms()))
        return await fut

    async def _hold_sent(self, owner: str, result: Any, incarnation: str) -> None:
        """Apply a forwarded send's stored op here before answering, so a
        read or cancel through this node sees it at once (as from the
        owner's process of ``incarnation``, which answered)."""
        op = routing.sent_op(result)
        if op is not None:
            await self.runner.run(self.runner.core.on_message(
                owner, Replicate(ops=(op,), ack=False), self.now_ms(), incarnation))

    async def _forward(self, owner: str, req: Any, hops: int) -> tuple[Any, str]:
        """The owner's result, and the incarnation of the owner's process
        that gave it ("": unsaid)."""
        self.metrics.inc("mailbox_forwards_total", peer=owner)
        link = self.links.get(owner)
        if (link is None or self._spawn is None
                or self.peer_protocols.get(owner, 1) < FORWARD_PROTOCOL):
            return await self._forward_http(owner, req, hops)
        fid = _fids.getrandbits(62)
        fut: asyncio.Future[tuple[Any, Any, str]] = asyncio.get_running_loop().create_future()
        self._pending[fid] = (owner, fut)
        try:
            if not link.send(Forward(fid, encode_request(req), hops + 1, request_id.get())):
                raise PeerUnreachable(owner, "unreachable")  # its queue is full
            try:
                async with asyncio.timeout(limits.forward_timeout_secs):
                    ok, err, incarnation = await fut
            except TimeoutError:
                raise PeerUnreachable(owner, "timeout") from None
        finally:
            self._pending.pop(fid, None)
        if err is not None:
            try:
                exc = decode_error(err)
            except (KeyError, TypeError, ValueError):
                raise Unavailable("the mailbox owner's answer was unreadable; retry with the "
                                  "same request id", retry_after=0.5) from None
            raise exc
        if ok is None:
            raise PeerUnreachable(owner, "rejected (owner failed)")
        return decode_result(ok, type(req)), incarnation

    # -- the batched channel's forwards ----------------------------------
    def take_forwards(self, peer: str, msgs: list[Any], incarnation: str = "") -> list[Any]:
        """Serve the forwards and answers in a batch from ``peer`` (its
        process of ``incarnation``); returns the rest (the core's
        messages), in order."""
        rest: list[Any] = []
        for msg in msgs:
            if isinstance(msg, Forward):
                if self._spawn is not None:
                    self._spawn(self._serve(peer, msg))
            elif isinstance(msg, ForwardResult):
                entry = self._pending.get(msg.fid)
                if entry is not None and entry[0] == peer and not entry[1].done():
                    entry[1].set_result((msg.ok, msg.err, incarnation))
            else:
                rest.append(msg)
        return rest

    def peer_lost(self, peer: str) -> None:
        """A batch to ``peer`` failed: what a dropped connection meant for a
        forward on its own request, for every forward waiting on ``peer``."""
        for owner, fut in list(self._pending.values()):
            if owner == peer and not fut.done():
                fut.set_exception(PeerUnreachable(peer, "unreachable"))

    def fail_forwards(self, exc: BaseException) -> None:
        """Shutdown: every forward still waiting for its answer fails now."""
        for _, fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(exc)

    async def _serve(self, peer: str, msg: Forward) -> None:
        if msg.rid is not None:
            request_id.set(msg.rid)  # this task's own context: the owner's log lines
        answer: dict[str, Any]
        try:
            answer = await self.handle_forwarded({"req": msg.req, "hops": msg.hops})
        except AiMemoryError as exc:  # a malformed request
            answer = {"err": encode_error(exc)}
        except Exception:
            log.exception("serving a forwarded mailbox request from %s failed", peer)
            answer = {}
        link = self.links.get(peer)
        if link is not None:
            link.send(ForwardResult(msg.fid, answer.get("ok"), answer.get("err")))

    async def _forward_http(self, owner: str, req: Any, hops: int) -> tuple[Any, str]:
        raw, incarnation = await self.peers.call_from(
            owner, "/peer/v1/mailbox", {"req": encode_request(req), "hops": hops + 1},
            timeout_s=limits.forward_timeout_secs)
        if isinstance(raw, dict) and "err" in raw:
            raise decode_error(raw["err"])
        if not isinstance(raw, dict) or not isinstance(raw.get("ok"), dict):
            raise Unavailable("the mailbox owner's answer was unreadable; retry with the same "
                              "request id", retry_after=0.5)
        return decode_result(raw["ok"], type(req)), incarnation

    async def handle_forwarded(self, raw: dict[str, Any]) -> dict[str, Any]:
        req, hops = decode_forward(raw)
        try:
            return {"ok": encode_result(await self.route(req, hops=hops))}
        except AiMemoryError as exc:
            return {"err": encode_error(exc)}
