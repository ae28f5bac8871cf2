"""One simulated node: a NodeCore, its disk, and an effect executor.

The executor is the simulator's stand-in for ``daemon/node.py``: it runs
effects synchronously and in order, so every ``Persist`` is durable before
the next effect and every read sees all earlier writes. Reads for
``LoadMailbox`` happen at once; the answer comes back after a simulated
disk delay (a crash in between loses it, like a killed process).

A crash drops the core and everything in memory and keeps the disk; a
restart builds a new core from the disk with the same constructor the
daemon uses. A paused node neither ticks nor receives: its messages wait
in the network and arrive when it resumes, with everything it believed
now stale.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from common import limits
from federation.core import NodeCore
from federation.effects import (
    Collect,
    Effect,
    LoadMailbox,
    MembershipMismatch,
    Persist,
    PersistPromise,
    PushMissing,
    Recovered,
    Recovering,
    Reply,
    Send,
    SendPromise,
)
from federation.messages import Promise, Replicate
from tests.sim.config import SimConfig
from tests.sim.disk import SimDisk

if TYPE_CHECKING:
    from tests.sim.runner import Sim


class SimNode:
    def __init__(self, sim: Sim, node_id: str, members: list[str], skew_ms: int) -> None:
        self.sim = sim
        self.id = node_id
        self.members = members
        self.skew_ms = skew_ms
        self.disk = SimDisk()
        self.core: NodeCore | None = None
        self.paused = False
        self.inbox: list[Any] = []  # messages that arrived while paused
        self.incarnation = 0
        self.recovering = False  # the disk was lost: the core must recover before it votes
        self.restart()

    @property
    def up(self) -> bool:
        return self.core is not None

    def clock(self, now_ms: int) -> int:
        return now_ms + self.skew_ms

    def restart(self, *, seed: SimDisk | None = None) -> None:
        """Start a core from the disk; with ``seed``: from a copy of another
        member's replicated state, as a member whose disk was lost and that
        was seeded from a peer (it recovers before it votes)."""
        cfg: SimConfig = self.sim.cfg
        if seed is not None:
            self.disk = seed
            self.recovering = True
        d = self.disk
        self.incarnation += 1
        self.core = NodeCore(
            self.id, self.members, cfg.write_quorum,
            quorum_timeout_ms=cfg.quorum_timeout_ms, claim_timeout_ms=cfg.claim_timeout_ms,
            catchup_interval_ms=cfg.catchup_interval_ms,
            vv=d.version_vector(), last_hlc=d.max_hlc(), own_max_seq=d.max_seq(self.id),
            promises=d.promises(),
            rng=random.Random(f"{cfg.seed}:{self.id}:{self.incarnation}"),
            gc_interval_ms=cfg.gc_interval_ms, down_after_ms=cfg.down_after_ms,
            recovering=self.recovering, incarnation=f"{self.id}-{self.incarnation}",
            recovery_grace_ms=2 * cfg.delay_max_ms + cfg.tick_ms)

    def crash(self) -> None:
        self.core = None
        self.paused = False
        self.inbox = []

    def run(self, effects: list[Effect], now_ms: int) -> None:
        """Carry out effects in order (the adapter's job in the daemon)."""
        local = self.clock(now_ms)
        for eff in effects:
            if self.core is None:
                return
            if isinstance(eff, Persist):
                self.disk.apply(eff.ops, local)
                self.sim.monitor.on_persist(self.id, eff.ops)
            elif isinstance(eff, PersistPromise):
                self.disk.set_promised(eff.mailbox, eff.epoch)
            elif isinstance(eff, Send):
                self.sim.send(self.id, eff.peer, eff.msg, now_ms)
            elif isinstance(eff, Reply):
                self.sim.reply(self.id, eff.token, eff.value, now_ms)
            elif isinstance(eff, SendPromise):
                found = tuple(self.disk.ops_for_key(eff.mailbox, dict(eff.vv)))
                self.sim.send(self.id, eff.peer, Promise(eff.mailbox, eff.epoch, found), now_ms)
            elif isinstance(eff, LoadMailbox):
                ops = self.disk.load_mailbox(eff.mailbox)
                self.sim.later(now_ms + self.sim.rng.randint(0, 20), self._loaded,
                               self.incarnation, eff.mailbox, ops)
            elif isinstance(eff, PushMissing):
                self._push(eff.peer, dict(eff.vv), now_ms)
            elif isinstance(eff, Collect):
                self.sim.stats["gc_ops"] += self.disk.gc(dict(eff.floor_vv))
            elif isinstance(eff, MembershipMismatch):
                raise AssertionError(f"membership mismatch on {self.id}: {eff}")
            elif isinstance(eff, Recovering):
                self.recovering = True
                self.sim.stats["recoveries"] += 1
            elif isinstance(eff, Recovered):
                self.recovering = False
                self.sim.stats["recovered"] += 1
            else:
                raise AssertionError(f"unknown effect {eff!r}")

    def _loaded(self, incarnation: int, mailbox: str, ops: list[Any], now_ms: int) -> None:
        if self.core is None or incarnation != self.incarnation:
            return
        if self.paused:  # a paused process finishes its read when it resumes
            self.sim.later(now_ms + 10, self._loaded, incarnation, mailbox, ops)
            return
        self.run(self.core.on_mailbox_loaded(mailbox, ops, self.clock(now_ms)), now_ms)

    def _push(self, peer: str, vv: dict[str, int], now_ms: int) -> None:
        while True:
            ops = self.disk.ops_missing(vv, limits.sync_batch_ops_max)
            if not ops:
                return
            self.sim.send(self.id, peer, Replicate(tuple(ops), ack=False), now_ms)
            for op in ops:
                vv[op.origin] = max(vv.get(op.origin, 0), op.seq)
            if len(ops) < limits.sync_batch_ops_max:
                return
