"""NodeCore: the whole federation protocol of one node, as a state machine.

Inputs are method calls that carry ``now_ms``; each returns the effects
(:mod:`federation.effects`) that the adapter executes in order. The core
never awaits, never reads a clock, never touches a socket or a file, and
draws randomness only from the seeded ``rng`` it is given, which is what
lets ``tests/sim`` run several of them through partitions, crashes and clock
skew deterministically.

What it composes:

* :class:`~federation.versions.VersionVector` -- which ops this node holds.
  Every op that passes through the core (created here, or received in a
  ``Replicate``, ``Promise`` or ``Accept``) is observed by the HLC and, if
  new, persisted; so the core always knows its own version vector.
* :class:`~federation.quorum.QuorumTracker` -- quorum writes: a write is
  persisted, sent to every peer at once and answered when ``write_quorum``
  members (this one included) hold it, or with ``QuorumNotMet``.
* anti-entropy -- every ``catchup_interval_ms`` a ``SyncOffer`` (version
  vector + membership fingerprint) goes to each peer; a peer that lacks ops
  this node holds gets a ``PushMissing``. Once every member's offered vector
  covers some prefix, ``Collect`` lets the store drop it from the op log.
* :class:`~federation.detector.FailureDetector` -- who seems reachable, for
  owner placement and fail-fast answers.
* :class:`~federation.claim.Claims` -- mailbox ownership and claim-once.

* recovery -- a member whose store was created empty or restored from a
  backup (``recovering=True``), or that finds peers holding more of its own
  ops than it does, has forgotten promises and accepts. Until it has the
  state of every other member (their version vectors, caught up through
  anti-entropy, and their promise tables) it gives no promise and no accept,
  coordinates no write and owns no mailbox; then it raises its promises to
  the highest any member knows and its op counter past every op of its own
  the others hold (docs/federation.md, "A member that lost its disk").
  A member about to be seeded from a copy sends ``Reseeding`` first; a peer
  then takes no GC floor from its offers until its new process's
  ``RecoveryQuery``, so nobody collects an op the copy lacks. The state and
  rules of recovery, and the fence against a replaced process of a peer,
  are :mod:`federation.recovery`.

Peer messages reach their handler through one table
(:attr:`NodeCore._HANDLERS`, message type to method) after the fences of
:meth:`NodeCore.on_message`.

Constructor state comes from the store at start (``vv``, ``last_hlc``,
``own_max_seq``, ``promises``, ``recovering``); nothing else survives a
restart, by design.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from common import limits
from common.errors import BadRequest
from common.lanes import GLOBAL_KINDS
from common.ops import MAILBOX_KINDS, OP_GAP, Op, known_kind
from federation.claim import Claims
from federation.detector import FailureDetector
from federation.effects import (
    Collect,
    Effect,
    MembershipMismatch,
    Persist,
    PersistPromise,
    PushMissing,
    Recovered,
    Recovering,
    Reply,
    Send,
    StaleSender,
)
from federation.hlc import HLC
from federation.membership import Membership
from federation.messages import (
    Accept,
    Accepted,
    Ack,
    Message,
    Prepare,
    Promise,
    PromiseNack,
    RecoveryQuery,
    RecoveryState,
    Rejected,
    Replicate,
    Reseeding,
    SyncOffer,
)
from federation.quorum import Completion, QuorumTracker
from federation.recovery import IncarnationFence, Recovery
from federation.requests import MailRequest
from federation.versions import VersionVector, vv_floor, vv_lag

# A peer message's handler: (core, peer, message, now_ms) -> effects.
Handler = Callable[["NodeCore", str, Any, int], list[Effect]]


class NodeCore:
    def __init__(self, node_id: str, members: Sequence[str], write_quorum: int, *,
                 quorum_timeout_ms: int, claim_timeout_ms: int, catchup_interval_ms: int,
                 vv: dict[str, int], last_hlc: int, own_max_seq: int,
                 promises: dict[str, int], rng: random.Random,
                 gc_interval_ms: int = int(limits.gc_interval_secs * 1000),
                 down_after_ms: int = int(limits.peer_down_after_secs * 1000),
                 recovering: bool = False, incarnation: str = "",
                 recovery_grace_ms: int = limits.recovery_grace_ms,
                 reseeding_hold_ms: int = limits.reseeding_hold_ms) -> None:
        self.node_id = node_id
        self.membership = Membership(node_id, members)
        if not 1 <= write_quorum <= self.membership.n:
            raise ValueError(f"write quorum {write_quorum} is not within 1..{self.membership.n}")
        self.write_quorum = write_quorum
        self.quorum_timeout_ms = quorum_timeout_ms
        self.catchup_interval_ms = max(1, catchup_interval_ms)
        self.gc_interval_ms = gc_interval_ms
        self.reseeding_hold_ms = reseeding_hold_ms
        self.rng = rng
        self._seen = VersionVector(vv)
        # Own ops are persisted in seq order, so 1..own_max_seq are all held --
        # unless the store is a copy seeded from another member (recovering),
        # which may miss some of ours: those must still be asked for.
        if not recovering:
            for seq in range(self._seen.mark(node_id) + 1, own_max_seq + 1):
                self._seen.add(node_id, seq)
        self._seq = max(own_max_seq, self._seen.mark(node_id))
        # What the store is known to hold: advanced by on_persisted once a
        # Persist completes. Offers and GC floors use it, never _seen, which
        # counts ops whose write may still be in flight (see durable_vv).
        self._durable = VersionVector(self._seen.to_dict())
        self.hlc = HLC(last_hlc)
        self.promises: dict[str, int] = dict(promises)
        peers = self.membership.peers
        self.detector = FailureDetector(peers, down_after_ms)
        self.quorum = QuorumTracker(node_id, peers)
        self.claims = Claims(self.membership, self.promises, claim_timeout_ms=claim_timeout_ms,
                             rng=rng, new_op=self._new_op,
                             reachable=self._reachable, vv=self._seen.to_dict)
        self._fingerprint = self.membership.fingerprint()
        self._writes: dict[Any, tuple[Op, ...]] = {}
        self.peer_vv: dict[str, dict[str, int]] = {}
        self._mismatched: set[str] = set()
        self._next_sync_ms: int | None = None
        self._collected: dict[str, int] = {}
        self._last_collect_ms: int | None = None
        self.recovering = recovering and bool(self.membership.peers)  # alone: nothing to recover
        self.incarnation = incarnation
        self.recovery = Recovery(rng, recovery_grace_ms)
        self.peers_recovering: dict[str, int] = {}  # peer -> when it last asked to recover
        # Members being seeded from a copy (they sent Reseeding): their last
        # offer describes a lost disk, and until their new process announces
        # itself (RecoveryQuery) no offer of theirs sets a GC floor.
        self._reseeded: dict[str, int] = {}  # member -> when its Reseeding was taken (ms)
        self.fence = IncarnationFence()

    # -- small accessors ------------------------------------------------------
    @property
    def collect_floor(self) -> dict[str, int]:
        """The floor of the last ``Collect`` this core emitted: what its op
        log holds no more once that GC has run (it may not have yet)."""
        return dict(self._collected)

    @property
    def vv(self) -> dict[str, int]:
        """This node's version vector (contiguous watermark per origin)."""
        return self._seen.to_dict()

    @property
    def pristine(self) -> bool:
        """Has this member never held an op of another member, never promised
        an epoch, and nothing to recover? Then no member can have given it
        anything that a member with no database must not forget
        (:mod:`federation.bootstrap`)."""
        return (not self.recovering and not self.promises
                and self._seen.origins() <= {self.node_id})

    @property
    def durable_vv(self) -> dict[str, int]:
        """The ops this node's store is known to hold (their persist
        completed). ``SyncOffer`` carries this vector and the ``Collect``
        floor is taken over it: were they taken over :attr:`vv`, which
        counts an op as soon as its persist is handed over, every member
        could collect an op from its log while this node's write of it is
        still in flight, and a crash before that write lands would lose the
        op here for good (no log left anywhere to push it from)."""
        return self._durable.to_dict()

    def on_persisted(self, ops: Sequence[Op]) -> None:
        """The adapter finished a ``Persist`` of ``ops``: they are durable."""
        for op in ops:
            self._durable.add(op.origin, op.seq)

    def _reachable(self, now_ms: int) -> int:
        return 1 + sum(1 for p in self.membership.peers
                       if p not in self._mismatched and self.detector.alive(p, now_ms))

    def _new_op(self, kind: str, key: str, body: dict[str, Any], epoch: int, now_ms: int) -> Op:
        self._seq += 1
        op = Op(origin=self.node_id, seq=self._seq, hlc=self.hlc.now(now_ms), kind=kind,
                key=key, body=body, epoch=epoch)
        self._seen.add(self.node_id, self._seq)
        return op

    def _peers(self) -> list[str]:
        return [p for p in self.membership.peers if p not in self._mismatched]

    # -- quorum writes ----------------------------------------------------------
    def _refuse_recovering(self, token: Any, now_ms: int) -> list[Effect]:
        return [Reply(token, self.recovery.refusal(self.membership.peers, now_ms))]

    def write(self, token: Any, items: list[tuple[str, str, dict[str, Any]]],
              now_ms: int) -> list[Effect]:
        self.detector.observe_time(now_ms)
        if self.recovering:
            return self._refuse_recovering(token, now_ms)
        for kind, _key, body in items:
            if not known_kind(kind) or kind in MAILBOX_KINDS:
                return [Reply(token, BadRequest(
                    f"op kind {kind!r} cannot be written directly"
                    + (" (mailbox ops go through the owner)" if kind in MAILBOX_KINDS else "")))]
            if kind in GLOBAL_KINDS:
                self._observe_rank(body.get("rank"), now_ms)
        if not items:
            return [Reply(token, [])]
        ops = tuple(self._new_op(kind, key, dict(body), 0, now_ms) for kind, key, body in items)
        out: list[Effect] = [Persist(ops)]
        out += [Send(p, Replicate(ops, ack=True)) for p in self._peers()]
        self._writes[token] = ops
        # Only a mismatched member is written off up front. A peer whose last
        # send failed may be back already (a restart, a sync offer sent before
        # it listened); this write's own send to it reports quickly either way.
        done = self.quorum.start(token, (op.op_id for op in ops), self.write_quorum,
                                 now_ms + self.quorum_timeout_ms,
                                 down=self._mismatched)
        return out + self._complete(done)

    def mint_stamp(self, now_ms: int) -> int:
        """A stamp of this node's clock for a body that other clocks write
        too: a record every lane keeps carries one as its ``rank``
        (``store.records.body_rank``), so every lane's group ranks it alike."""
        return self.hlc.now(now_ms)

    def observe_stamp(self, stamp: int, now_ms: int) -> None:
        """Move the clock past ``stamp`` (one read from a record, such as the
        rank of the latest grant a revocation must outrank)."""
        self.hlc.observe(stamp, now_ms)

    def _observe_rank(self, rank: Any, now_ms: int) -> None:
        """Move the clock past a body's ``rank`` (minted by a sibling lane's
        clock), so that what this lane mints after it ranks above it."""
        if isinstance(rank, (list, tuple)) and rank and type(rank[0]) is int:
            self.hlc.observe(rank[0], now_ms)

    def _complete(self, done: list[Completion]) -> list[Effect]:
        out: list[Effect] = []
        for c in done:
            ops = self._writes.pop(c.token, ())
            out.append(Reply(c.token, list(ops) if c.error is None else c.error))
        return out

    # -- mailbox requests -------------------------------------------------------
    def mailbox_request(self, token: Any, req: MailRequest, now_ms: int) -> list[Effect]:
        """Serve ``req`` as the owner of ``req.mailbox`` (becoming it first if needed)."""
        self.detector.observe_time(now_ms)
        if self.recovering:
            return self._refuse_recovering(token, now_ms)
        return self.claims.request(token, req, now_ms)

    def on_mailbox_loaded(self, mailbox: str, ops: Sequence[Op], now_ms: int) -> list[Effect]:
        return self.claims.on_loaded(mailbox, ops, now_ms)

    def owner_for(self, mailbox: str, now_ms: int) -> str:
        """The first member in rendezvous order that seems alive (this node
        always does)."""
        for member in self.membership.rendezvous(mailbox):
            if member == self.node_id:
                return member
            if member not in self._mismatched and self.detector.alive(member, now_ms):
                return member
        return self.node_id

    # -- peers ----------------------------------------------------------------------
    def _intake(self, ops: Sequence[Op], now_ms: int) -> list[Effect]:
        """Observe, persist (if new) and model ops received from a peer."""
        new = [op for op in ops if self._seen.add(op.origin, op.seq)]
        for op in new:
            self.hlc.observe(op.hlc, now_ms)
        out: list[Effect] = [Persist(tuple(new))] if new else []
        return out + self.claims.observe_ops(ops)

    def on_message(self, peer: str, msg: Message, now_ms: int,
                   incarnation: str | None = None) -> list[Effect]:
        """``msg`` from ``peer``; ``incarnation`` is the sending process's
        (the adapter's envelope: None or "" when the sender did not say,
        as an older build does not). A member's message goes to its
        handler in :attr:`_HANDLERS` once the fences pass: not from a
        replaced process of the peer (:class:`IncarnationFence`), and, but
        for a ``SyncOffer`` (which is how a mismatch is found and cleared),
        not from a member whose membership differs from ours."""
        if peer == self.node_id or not self.membership.is_member(peer):
            return []
        if incarnation and self.fence.stale(peer, incarnation, msg):
            return [StaleSender(peer, incarnation, self.fence.current(peer),
                                type(msg).__name__)]
        if isinstance(msg, SyncOffer):
            return self._on_sync_offer(peer, msg, now_ms)
        if peer in self._mismatched:
            return []
        self.detector.heard(peer, now_ms)
        handler = self._HANDLERS.get(type(msg))
        return [] if handler is None else handler(self, peer, msg, now_ms)

    def _on_ack(self, peer: str, msg: Ack, now_ms: int) -> list[Effect]:
        return self._complete(self.quorum.ack(peer, msg.op_ids))

    def _on_prepare(self, peer: str, msg: Prepare, now_ms: int) -> list[Effect]:
        if self.recovering:
            return []  # no vote until recovered: it may have forgotten what it promised
        return self.claims.on_prepare(peer, msg)

    def _on_promise(self, peer: str, msg: Promise, now_ms: int) -> list[Effect]:
        return self._intake(msg.ops, now_ms) + self.claims.on_promise(peer, msg, now_ms)

    def _on_promise_nack(self, peer: str, msg: PromiseNack, now_ms: int) -> list[Effect]:
        return self.claims.on_promise_nack(msg)

    def _on_accept(self, peer: str, msg: Accept, now_ms: int) -> list[Effect]:
        if self.recovering:
            return []  # no vote until recovered, as for a Prepare
        ok, out = self.claims.on_accept(peer, msg)
        if ok:
            out += self._intake(msg.ops, now_ms)
            out.append(Send(peer, Accepted(msg.mailbox, msg.epoch,
                                           tuple(op.op_id for op in msg.ops))))
        return out

    def _on_accepted(self, peer: str, msg: Accepted, now_ms: int) -> list[Effect]:
        return self.claims.on_accepted(peer, msg, now_ms)

    def _on_rejected(self, peer: str, msg: Rejected, now_ms: int) -> list[Effect]:
        return self.claims.on_rejected(msg)

    # -- recovery (state and rules: federation/recovery.py) -----------------------
    def _on_recovery_query(self, peer: str, msg: RecoveryQuery, now_ms: int) -> list[Effect]:
        if not self.fence.moves_on(peer, msg.incarnation):  # a replaced disk's query, late
            return [StaleSender(peer, msg.incarnation, self.fence.current(peer),
                                type(msg).__name__)]
        self.peers_recovering[peer] = now_ms
        self._reseeded.pop(peer, None)
        if self.fence.adopt(peer, msg.incarnation):
            # A new process on a new or restored disk: the offer held for
            # the member may be its previous process's and claim ops this
            # disk lacks. The next offer (from this process) replaces it.
            self.peer_vv.pop(peer, None)
        # The answer, and every op the asker lacks, held seqs past a gap
        # included (a SyncOffer's watermark would not show those).
        return [Send(peer, RecoveryState(msg.round, self.vv, self._promise_table(),
                                         tuple(self._seen.held(peer)))),
                PushMissing(peer, dict(msg.vv))]

    def _on_recovery_state(self, peer: str, msg: RecoveryState, now_ms: int) -> list[Effect]:
        if self.recovering and self.recovery.record(peer, msg):
            return self._maybe_recovered(now_ms)
        return []

    def _promise_table(self) -> dict[str, int]:
        """Per mailbox, the highest epoch this node promised or saw."""
        table = dict(self.claims.seen_epochs())
        for key, epoch in self.promises.items():
            table[key] = max(table.get(key, 0), epoch)
        return table

    def _on_reseeding(self, peer: str, msg: Reseeding, now_ms: int) -> list[Effect]:
        """``peer`` lost its disk and is about to be seeded from a copy (of
        this node's database, maybe). Its last offer described the lost disk:
        taken as a GC floor it would let every member collect an op the copy
        lacks (one this node receives after making the copy, say), and the
        seeded member could then never get it back, since anti-entropy pushes
        only logged ops. So the offer is dropped and none is taken until the
        member's new process announces itself with a ``RecoveryQuery``; an
        offer its previous process still had in flight cannot bring the old
        floor back. A donor that keeps this rule keeps in its log every op
        its copy lacks until the member's own offers show it, so no member
        can collect it either: their floors need the donor's offer too."""
        self.peer_vv.pop(peer, None)
        self._reseeded[peer] = now_ms
        return []

    def _start_recovery(self, reason: str) -> list[Effect]:
        self.recovering = True
        self.recovery.restart(self.rng)
        return [Recovering(reason), *self.claims.abandon_all()]

    def _maybe_recovered(self, now_ms: int) -> list[Effect]:
        """Done once every other member's state is in and caught up with."""
        peers = self.membership.peers  # every member, a mismatched one included
        if not self.recovery.complete(self._seen, self.node_id, peers):
            return []
        out: list[Effect] = []
        for key, epoch in sorted(self.recovery.merged_promises().items()):
            self.claims.see(key, epoch)
            if epoch > self.promises.get(key, 0):
                self.promises[key] = epoch
                out.append(PersistPromise(key, epoch))
        out += self._fill_lost_ids(now_ms)
        self.recovering = False
        self.recovery.finish()
        return [*out, Recovered()]

    def _fill_lost_ids(self, now_ms: int) -> list[Effect]:
        """Ops of our own that no member holds were lost with our disk (they
        were never acknowledged). Their ids get ``op.gap`` fillers, so every
        version vector can move past them; new ops are numbered after every
        op of ours anyone holds, never over one."""
        me = self.node_id
        lost, top = self.recovery.lost_seqs(self._seen, me)
        self._seq = max(self._seq, top)
        fillers = []
        for seq in lost:
            self._seen.add(me, seq)
            fillers.append(Op(origin=me, seq=seq, hlc=self.hlc.now(now_ms), kind=OP_GAP,
                              key="gap:", body={}, epoch=0))
        return [Persist(tuple(fillers))] if fillers else []

    def _recovery_tick(self, now_ms: int) -> list[Effect]:
        if not self.recovering:
            return []
        out = self._maybe_recovered(now_ms)
        if not self.recovering or not self.recovery.query_due(now_ms):
            return out
        query = RecoveryQuery(self.incarnation, self.recovery.round, self.vv)
        return out + [Send(p, query) for p in self.recovery.waiting_for(self.membership.peers)]

    def on_foreign_push(self, peer: str, msg: Message, now_ms: int) -> list[Effect]:
        """A standalone node (started with no peers) accepts replication pushed
        by a node that lists it as a peer, as upstream harnesses start their
        clusters. It stores and acks the ops; it takes no part in claims and
        does not offer anti-entropy to nodes outside its own membership."""
        if self.membership.n != 1 or peer == self.node_id or not isinstance(msg, Replicate):
            return []
        return self._on_replicate(peer, msg, now_ms)

    def _on_replicate(self, peer: str, msg: Replicate, now_ms: int) -> list[Effect]:
        out = self._intake(msg.ops, now_ms)
        if msg.ack:
            out.append(Send(peer, Ack(tuple(op.op_id for op in msg.ops))))
        return out

    def _on_sync_offer(self, peer: str, msg: SyncOffer, now_ms: int) -> list[Effect]:
        if msg.fingerprint != self._fingerprint:
            if peer in self._mismatched:
                return []
            self._mismatched.add(peer)
            self.peer_vv.pop(peer, None)
            return [MembershipMismatch(peer, msg.fingerprint, self._fingerprint)]
        self._mismatched.discard(peer)
        self.detector.heard(peer, now_ms)
        since = self._reseeded.get(peer)
        if since is not None and now_ms - since >= self.reseeding_hold_ms:
            # A Reseeding that arrived after the member's query (sent before
            # it, delivered late) would otherwise stop this node's GC for
            # good; by now no offer of a lost disk is still in flight.
            del self._reseeded[peer]
            since = None
        if since is None:  # else maybe its previous process's offer (_on_reseeding)
            self.peer_vv[peer] = dict(msg.vv)
        if not self.recovering and msg.vv.get(self.node_id, 0) > self._seq:
            # The peer holds ops of ours we do not: our disk was lost or
            # rolled back behind our back. Stop voting until we recover.
            out = self._start_recovery(
                f"{peer} holds our ops up to {msg.vv[self.node_id]}, we only up to {self._seq}")
            if self._seen.lacks_from(msg.vv):
                out.append(PushMissing(peer, dict(msg.vv)))
            return out
        if self._seen.lacks_from(msg.vv):
            return [PushMissing(peer, dict(msg.vv))]
        return []

    def on_send_failed(self, peer: str, now_ms: int) -> list[Effect]:
        """A transport failure to ``peer`` (after the adapter's own retries)."""
        if peer not in self.membership.peers:
            return []
        self.detector.failed(peer, now_ms)
        return self._complete(self.quorum.fail(peer))

    # -- time -------------------------------------------------------------------------
    def tick(self, now_ms: int) -> list[Effect]:
        self.detector.observe_time(now_ms)
        out = self._complete(self.quorum.expire(now_ms))
        out += self._recovery_tick(now_ms)
        out += self.claims.tick(now_ms)
        if self._next_sync_ms is None:
            # Spread the members' offers over the interval instead of in lockstep.
            self._next_sync_ms = now_ms + self.rng.randrange(self.catchup_interval_ms // 4 + 1)
        if now_ms >= self._next_sync_ms:
            self._next_sync_ms = now_ms + self.catchup_interval_ms
            offer = SyncOffer(self.durable_vv, self._fingerprint)
            out += [Send(p, offer) for p in self.membership.peers]
        out += self._maybe_collect(now_ms)
        return out

    def _maybe_collect(self, now_ms: int) -> list[Effect]:
        if self._mismatched or len(self.peer_vv) < len(self.membership.peers):
            return []
        if self._last_collect_ms is not None and now_ms - self._last_collect_ms < self.gc_interval_ms:
            return []
        floor = vv_floor([self.durable_vv, *self.peer_vv.values()])
        if not floor or floor == self._collected:
            return []
        self._collected = floor
        self._last_collect_ms = now_ms
        return [Collect(floor)]

    # -- introspection ---------------------------------------------------------------
    def status(self, now_ms: int) -> dict[str, Any]:
        ours = self.vv
        peers = {}
        for p in self.membership.peers:
            theirs = self.peer_vv.get(p)
            heard = self.detector.last_heard(p)
            peers[p] = {
                "alive": self.detector.alive(p, now_ms) and p not in self._mismatched,
                "membership_mismatch": p in self._mismatched,
                "last_heard_ms_ago": None if heard is None else now_ms - heard,
                "vv": theirs,
                "lag_ops": None if theirs is None else vv_lag(ours, theirs),
                "ahead_ops": None if theirs is None else vv_lag(theirs, ours),
                "recovering": (p in self.peers_recovering and now_ms - self.peers_recovering[p]
                               <= 3 * limits.recovery_query_interval_ms),
                "reseeding": p in self._reseeded,
            }
        return {
            "node_id": self.node_id,
            "members": list(self.membership.members),
            "fingerprint": self._fingerprint,
            "write_quorum": self.write_quorum,
            "majority": self.membership.majority,
            "reachable": self._reachable(now_ms),
            "vv": ours,
            "held_out_of_order": self._seen.held_count(),
            "hlc": self.hlc.last,
            "peers": peers,
            "owned_mailboxes": self.claims.owned(),
            "candidacies": self.claims.candidacies(),
            "promises": dict(self.promises),
            "writes_in_flight": len(self.quorum),
            "claims_in_flight": self.claims.in_flight(),
            "gc_floor": dict(self._collected),
            "recovering": self.recovering,
            "recovery_waiting_for": (self.recovery.waiting_for(self.membership.peers)
                                     if self.recovering else []),
        }

    # -- the message table ------------------------------------------------------------
    # Every peer message but SyncOffer (handled before the membership fence,
    # in on_message) to its handler; a type not named here is ignored.
    _HANDLERS: ClassVar[dict[type[Any], Handler]] = {
        Replicate: _on_replicate,
        Ack: _on_ack,
        Reseeding: _on_reseeding,
        RecoveryQuery: _on_recovery_query,
        RecoveryState: _on_recovery_state,
        Prepare: _on_prepare,
        Promise: _on_promise,
        PromiseNack: _on_promise_nack,
        Accept: _on_accept,
        Accepted: _on_accepted,
        Rejected: _on_rejected,
    }
