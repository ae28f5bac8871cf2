"""A simulated node's client side: routing, read quorums, idempotent sends.

What ``daemon/replication/mailbox_router.py`` and ``daemon/replication/read_quorum.py`` do over
HTTP, done over the simulated network with the same decisions
(:mod:`federation.routing`, :mod:`federation.read`):

* a mailbox request goes to the owner in rendezvous order; a forward that
  is refused (a cut link, learnt after a while) or not answered within the
  forward timeout, or answered "recovering", marks that member tried and
  the next one is asked, ending with this node; a re-forwarded request
  answers back along its path; a forwarded send's stored op is applied at
  each node on the way back before it answers;
* a send whose id names a message already decided here is answered from the
  disk (the synthetic ``seq=0`` op) without reaching the core;
* an inbox read pulls the key from R - 1 peers (hedging to the next after a
  delay, failing over on refusals, ``QuorumNotMet`` at the deadline),
  applies what they send, waits for the persist barriers
  :func:`federation.read.barriers_to_wait` names, then reads the disk.

Every node's core sees its own tokens (a request that reaches one owner
twice, along two routes, is two waiters there, as in the daemon).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from common.errors import MemberRecovering
from common.ops import Op, inbox_key
from federation import read, routing
from federation.messages import Replicate
from federation.requests import MailSend

if TYPE_CHECKING:
    from tests.sim.node import Barrier, SimNode

READS_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Forward:
    token: int
    req: Any
    hops: int


@dataclass(frozen=True, slots=True)
class Answer:
    token: int
    value: Any


@dataclass(frozen=True, slots=True)
class Pull:
    token: int
    key: str
    vv: dict[str, int]


@dataclass(frozen=True, slots=True)
class Pulled:
    token: int
    ops: tuple[Op, ...]


@dataclass(slots=True)
class _Routing:
    route: routing.Route
    req: Any
    reply_to: str | None  # the node that forwarded it here; None: this node's client
    target: str | None = None


@dataclass(slots=True)
class _Reading:
    round: read.ReadRound
    agent: str
    at_start: list[Barrier]
    vv: dict[str, int]


class Entry:
    """The client side of one node's current process (lost in a crash)."""

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.sim = node.sim
        self.incarnation = node.incarnation
        self._local = itertools.count(1)
        self.waiting: dict[int, tuple[int, str | None]] = {}  # core token -> (token, reply to)
        self.routing: dict[int, _Routing] = {}
        self.reading: dict[int, _Reading] = {}
        self._rotation = 0

    @property
    def live(self) -> bool:
        return self.node.core is not None and self.node.entry is self

    def _later(self, delay_ms: int, fn: Any, *args: Any) -> None:
        """Run ``fn`` after ``delay_ms`` in this process (a paused one runs it
        when it resumes; a crashed one never)."""
        def fire(now_ms: int) -> None:
            if not self.live:
                return
            if self.node.paused:
                self.sim.later(now_ms + 10, fire)
                return
            fn(*args)
        self.sim.later(self.sim.now + delay_ms, fire)

    # -- answers ---------------------------------------------------------------------
    def deliver(self, token: int, value: Any, reply_to: str | None) -> None:
        if reply_to is None:
            self.sim.answer_client(token, value)
        else:
            self.sim.transmit(self.node.id, reply_to, Answer(token, value))

    def core_token(self, token: int, reply_to: str | None) -> int:
        local = next(self._local)
        self.waiting[local] = (token, reply_to)
        return local

    def core_answered(self, local: int, value: Any) -> None:
        """The core's ``Reply`` for one of this node's waiters."""
        found = self.waiting.pop(local, None)
        if found is not None:
            self.deliver(found[0], value, found[1])

    # -- mailbox requests ------------------------------------------------------------
    def route(self, token: int, req: Any, hops: int = 0, reply_to: str | None = None) -> None:
        core = self.node.core
        assert core is not None
        self.routing[token] = _Routing(routing.Route(core, req.mailbox, hops), req, reply_to)
        self._next(token)

    def _next(self, token: int) -> None:
        r = self.routing[token]
        target = r.route.next(self.node.now_ms())
        r.target = target
        if target is None:
            del self.routing[token]
            self.own(token, r.req, r.reply_to)
            return
        self.sim.stats["forwarded"] += 1
        if not self.sim.transmit(self.node.id, target, Forward(token, r.req, r.route.hops + 1)):
            self._later(self.sim.rng.randint(5, 200), self._forward_failed, token, target)
        self._later(self.sim.cfg.forward_timeout_ms, self._forward_failed, token, target)
        if r.req.__class__.__name__ == "MailPop" and r.reply_to is None:
            self.sim.maybe_hold(self.node.id, target)

    def _forward_failed(self, token: int, target: str) -> None:
        r = self.routing.get(token)
        if r is None or r.target != target:
            return  # answered, or already given up on that member
        r.route.failed(target)
        if isinstance(r.req, MailSend) and not routing.is_retryable_id(r.req.body["id"]):
            self.sim.stats["minted_failovers"] += 1  # the same minted id, to another member
        self.node.run(self.node.core_call("on_send_failed", target), self.sim.now)
        if token in self.routing:
            self._next(token)

    def own(self, token: int, req: Any, reply_to: str | None) -> None:
        """Serve ``req`` here, as its owner (``MailboxRouter.own``)."""
        core = self.node.core
        assert core is not None
        message_id = routing.needs_decided_check(req)
        if message_id is None and isinstance(req, MailSend):
            self.sim.stats["minted_sends_owned"] += 1  # decided by the core, no lookup
        if message_id is not None:
            disk = self.node.disk
            decided = routing.decided_send(req, disk.message(message_id),
                                           disk.sent_body(message_id))
            if decided is not None:
                self.sim.stats["decided_sends"] += 1
                self.deliver(token, decided, reply_to)
                return
        local = self.core_token(token, reply_to)
        self.node.run(core.mailbox_request(local, req, self.node.now_ms()), self.sim.now)

    def on_forward(self, src: str, msg: Forward) -> None:
        self.route(msg.token, msg.req, msg.hops, reply_to=src)

    def on_answer(self, src: str, msg: Answer, incarnation: str = "") -> None:
        r = self.routing.get(msg.token)
        if r is None or r.target != src:
            return  # a late answer: this node stopped waiting for that member
        if isinstance(msg.value, MemberRecovering):
            r.route.failed(src)
            self._next(msg.token)
            return
        del self.routing[msg.token]
        op = routing.sent_op(msg.value)
        if op is None:
            self.deliver(msg.token, msg.value, r.reply_to)
            return
        core = self.node.core
        assert core is not None
        self.node.run(core.on_message(src, Replicate(ops=(op,), ack=False), self.node.now_ms(),
                                      incarnation),
                      self.sim.now, then=lambda: self.deliver(msg.token, msg.value, r.reply_to))

    # -- reads -----------------------------------------------------------------------
    def read(self, token: int, agent: str) -> None:
        core = self.node.core
        assert core is not None
        members = core.membership.n
        need = read.peers_needed(members, core.write_quorum)
        peers = list(core.membership.peers)
        if need <= 0 or not peers:
            self._answer_read(token, agent)
            return
        self._rotation += 1
        now = self.node.now_ms()
        order = read.pull_order(peers, self._rotation, lambda p: core.detector.alive(p, now),
                                self._round_trip)
        rnd = read.ReadRound(order, need)
        self.reading[token] = _Reading(rnd, agent, list(self.node.barriers), dict(core.vv))
        self._pull(token, rnd.start())
        self._later(self._hedge_ms(rnd), self._hedge, token)
        self._later(self.sim.cfg.quorum_timeout_ms, self._deadline, token)

    def _pull(self, token: int, peers: list[str]) -> None:
        r = self.reading[token]
        for peer in peers:
            if not self.sim.transmit(self.node.id, peer,
                                     Pull(token, inbox_key(r.agent), r.vv)):
                self._later(self.sim.rng.randint(5, 200), self._pull_failed, token, peer)

    def _pull_failed(self, token: int, peer: str) -> None:
        self.node.run(self.node.core_call("on_send_failed", peer), self.sim.now)
        r = self.reading.get(token)
        if r is not None:
            self._pull(token, r.round.failed(peer, "unreachable"))
            self._maybe_done(token)

    def _hedge(self, token: int) -> None:
        r = self.reading.get(token)
        if r is None or r.round.done:
            return
        self._pull(token, r.round.hedge())
        if r.round.can_hedge:
            self._later(self._hedge_ms(r.round), self._hedge, token)

    def _round_trip(self, peer: str) -> float:
        """What this member's link to ``peer`` would measure (seconds)."""
        return self.sim.net.least_round_trip_ms(self.node.id, peer) / 1000

    def _hedge_ms(self, rnd: read.ReadRound) -> int:
        cfg = self.sim.cfg
        seconds = read.hedge_delay(sorted(rnd.inflight), self._round_trip,
                                   base_s=cfg.read_hedge_ms / 1000,
                                   cap_s=cfg.quorum_timeout_ms / 2000)
        return max(1, round(seconds * 1000))

    def _deadline(self, token: int) -> None:
        r = self.reading.get(token)
        if r is not None and not r.round.done:
            r.round.timed_out()
            self._maybe_done(token)

    def on_pull(self, src: str, msg: Pull) -> None:
        ops = tuple(self.node.disk.ops_for_key(msg.key, dict(msg.vv)))
        self.sim.transmit(self.node.id, src, Pulled(msg.token, ops))

    def on_pulled(self, src: str, msg: Pulled, incarnation: str = "") -> None:
        """Apply what a peer sent (even after the read finished, as the
        daemon does), then count the answer."""
        def counted() -> None:
            r = self.reading.get(msg.token)
            if r is not None:
                r.round.answered(src)
                self._maybe_done(msg.token)
        core = self.node.core
        assert core is not None
        if msg.ops:
            self.node.run(core.on_message(src, Replicate(ops=msg.ops, ack=False),
                                          self.node.now_ms(), incarnation),
                          self.sim.now, then=counted)
        else:
            counted()

    def _maybe_done(self, token: int) -> None:
        r = self.reading.get(token)
        if r is None or not r.round.done:
            return
        del self.reading[token]
        error = r.round.error()
        if error is not None:
            self.deliver(token, error, None)
            return
        from tests.sim.node import when_released
        barriers = read.barriers_to_wait(r.at_start, list(self.node.barriers))
        when_released(barriers, lambda: self._answer_read(token, r.agent))

    def _answer_read(self, token: int, agent: str) -> None:
        if not self.live:
            return
        rows = self.node.disk.inbox(agent, unread_only=False, limit=READS_MAX,
                                    now_ms=self.node.now_ms())
        self.deliver(token, [row["id"] for row in rows], None)
