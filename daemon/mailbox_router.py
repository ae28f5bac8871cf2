"""Mailbox routing: every mailbox request runs at the mailbox's owner.

The owner of a mailbox is the first live member in rendezvous order for its
key (:meth:`federation.core.NodeCore.owner_for`). :meth:`MailboxRouter.route`
runs a request here when this node is the owner, and otherwise forwards it
to the owner's ``/peer/v1/mailbox`` (:mod:`daemon.forwarding` is the wire
form); an unreachable owner is reported to the core and the next member in
rendezvous order is tried, ending with this node. Which member is asked
next, the answer to a send of an already decided message and the op the
entry node applies after a forwarded send are :mod:`federation.routing`'s
decisions, shared with the simulator.

Read-your-writes through the entry node: a forwarded send answers with the
stored op, and the entry node applies that op itself (as replicated from the
owner) before it answers the client. Without that, a cancel by id sent right
after the send, through the same node, could read a local copy the owner's
replication had not reached yet and answer 404.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from common import limits
from common.errors import AiMemoryError, MemberRecovering, Unavailable
from daemon.effect_runner import EffectRunner
from daemon.forwarding import (
    decode_error,
    decode_forward,
    decode_result,
    encode_error,
    encode_request,
    encode_result,
)
from daemon.metrics import Metrics
from daemon.peer_client import PeerClient, PeerUnreachable
from federation import routing
from federation.messages import Replicate


class MessageLookup(Protocol):
    async def message(self, message_id: str) -> dict[str, Any] | None: ...
    async def sent_body(self, message_id: str) -> dict[str, Any] | None: ...


class MailboxRouter:
    def __init__(self, node_id: str, *, runner: EffectRunner, store: MessageLookup,
                 peers: PeerClient, metrics: Metrics, now_ms: Callable[[], int],
                 admit: Callable[[], None]) -> None:
        self.node_id = node_id
        self.runner = runner
        self.store = store
        self.peers = peers
        self.metrics = metrics
        self.now_ms = now_ms
        self._admit = admit  # refuses new work when the node is overloaded or stopping

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
                result = await self._forward(owner, req, hops)
            except PeerUnreachable:
                route.failed(owner)
                await self.runner.send_failed(owner)
                continue
            except MemberRecovering:
                route.failed(owner)  # it lost its state and is catching up: ask the next one
                continue
            await self._hold_sent(owner, result)
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

    async def _hold_sent(self, owner: str, result: Any) -> None:
        """Apply a forwarded send's stored op here before answering, so a
        read or cancel through this node sees it at once."""
        op = routing.sent_op(result)
        if op is not None:
            await self.runner.run(self.runner.core.on_message(
                owner, Replicate(ops=(op,), ack=False), self.now_ms()))

    async def _forward(self, owner: str, req: Any, hops: int) -> Any:
        self.metrics.inc("mailbox_forwards_total", peer=owner)
        raw = await self.peers.call(
            owner, "/peer/v1/mailbox", {"req": encode_request(req), "hops": hops + 1},
            timeout_s=limits.forward_timeout_secs)
        if isinstance(raw, dict) and "err" in raw:
            raise decode_error(raw["err"])
        if not isinstance(raw, dict) or not isinstance(raw.get("ok"), dict):
            raise Unavailable("the mailbox owner's answer was unreadable; retry with the same "
                              "request id", retry_after=0.5)
        return decode_result(raw["ok"], type(req))

    async def handle_forwarded(self, raw: dict[str, Any]) -> dict[str, Any]:
        req, hops = decode_forward(raw)
        try:
            return {"ok": encode_result(await self.route(req, hops=hops))}
        except AiMemoryError as exc:
            return {"err": encode_error(exc)}
