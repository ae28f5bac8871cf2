"""One simulated node: a NodeCore, its disk, and the shared effect driver.

Effects are carried out by :func:`federation.driver.carry`, the code the
daemon runs; this module is its simulated host. Each effect list is a small
task: store calls run on the disk (:class:`tests.sim.disk.SimDisk`, on the
production store's GC and rebuild contract), at once, or after a simulated
delay: a mailbox load takes 0-20 ms, and on a seed with a slow disk each
write takes up to ``SimConfig.disk_delay_max_ms`` (the op is durable only
when the write completes; a crash before that loses it, like a killed
process). Barriers work as in ``daemon/replication/effect_runner.py``: a list that
persists holds one until its last persist completes, and a promise read or
mailbox load waits for the barriers of older lists, so a slow write really
is in flight while the rest of the node goes on.

A crash drops the core, its tasks and everything in memory and keeps the
disk; a restart builds a new core from the disk with the same constructor
the daemon uses. A paused node neither ticks nor receives: its messages
wait in the network and arrive when it resumes, with everything it believed
now stale, and its tasks resume then too.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from common import limits
from common.ops import Op
from common.randomid import incarnation_id
from federation import driver
from federation.core import NodeCore
from federation.effects import Effect, MembershipMismatch
from federation.messages import Message, Replicate
from tests.sim.config import SimConfig
from tests.sim.disk import SimDisk
from tests.sim.entry import Entry

if TYPE_CHECKING:
    from tests.sim.runner import Sim


@dataclass(eq=False, slots=True)
class Barrier:
    """Released when its list's last persist completes."""

    done: bool = False
    waiters: list[Callable[[], None]] = field(default_factory=list)

    def release(self) -> None:
        if not self.done:
            self.done = True
            waiters, self.waiters = self.waiters, []
            for wake in waiters:
                wake()


def when_released(barriers: list[Barrier], then: Callable[[], None]) -> None:
    """Call ``then`` once every barrier in ``barriers`` is released."""
    pending = [b for b in barriers if not b.done]
    if not pending:
        then()
        return
    pending[0].waiters.append(lambda: when_released(pending[1:], then))


@dataclass(eq=False, slots=True)
class _Task:
    gen: Generator[driver.Step, Any, None]
    barrier: Barrier | None
    earlier: list[Barrier]
    incarnation: int
    then: Callable[[], None] | None = None


class SimNode:
    def __init__(self, sim: Sim, node_id: str, members: list[str], skew_ms: int,
                 start: bool = True) -> None:
        self.sim = sim
        self.id = node_id
        self.members = members
        self.skew_ms = skew_ms
        self.disk = SimDisk()
        self.core: NodeCore | None = None
        self.barriers: list[Barrier] = []  # of the effect lists not yet persisted
        self.entry: Entry | None = None  # the client side of the running process
        self.paused = False
        self.inbox: list[Any] = []  # messages that arrived while paused
        self.incarnation = 0  # process starts (a task of an earlier process is dropped)
        self.disk_serial = 1  # disks: a seeded copy is a new incarnation of the database
        self.recovering = False  # the disk was lost: the core must recover before it votes
        self.has_disk = start  # False: no database yet (a first start, or a lost disk)
        if start:
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
            self.disk_serial += 1
        self.has_disk = True
        d = self.disk
        self.incarnation += 1
        self.barriers = []
        self.core = NodeCore(
            self.id, self.members, cfg.write_quorum,
            quorum_timeout_ms=cfg.quorum_timeout_ms, claim_timeout_ms=cfg.claim_timeout_ms,
            catchup_interval_ms=cfg.catchup_interval_ms,
            vv=d.version_vector(), last_hlc=d.max_hlc(), own_max_seq=d.max_seq(self.id),
            promises=d.promises(),
            rng=random.Random(f"{cfg.seed}:{self.id}:{self.incarnation}"),
            gc_interval_ms=cfg.gc_interval_ms, down_after_ms=cfg.down_after_ms,
            recovering=self.recovering,
            incarnation=incarnation_id(self.disk_serial, self.id.encode().hex()[:16].ljust(16, "0")),
            recovery_grace_ms=2 * cfg.delay_worst_ms + cfg.tick_ms)
        self.entry = Entry(self)

    def put_back(self, copy: SimDisk) -> None:
        """``ai-memory restore`` of a backup while the member is down: a new
        incarnation of its database, marked to recover before it votes."""
        self.disk = copy
        self.recovering = True
        self.disk_serial += 1
        self.has_disk = True

    def bootstrap(self) -> None:
        """Start on a new, empty disk as a member of a new cluster."""
        self.disk = SimDisk()
        self.recovering = False
        self.disk_serial += 1
        self.restart()

    def crash(self) -> None:
        self.core = None
        self.entry = None
        self.paused = False
        self.inbox = []

    # -- the driver's host -----------------------------------------------------------
    def now_ms(self) -> int:
        return self.clock(self.sim.now)

    def transmit(self, peer: str, msg: Message) -> None:
        self.sim.send(self.id, peer, msg, self.sim.now)

    def answer(self, token: Any, value: Any) -> None:
        assert self.entry is not None
        self.entry.core_answered(token, value)

    def push_missing(self, peer: str, vv: dict[str, int]) -> None:
        self._push(peer, dict(vv), self.sim.now)

    def applied(self, new: list[Op]) -> None:
        pass  # the monitor sees every persisted op as the disk applies it

    def report(self, event: str, detail: Any) -> None:
        if event == "collected":
            self.sim.stats["gc_ops"] += detail
        elif event == "membership_mismatch":
            assert isinstance(detail, MembershipMismatch)
            raise AssertionError(f"membership mismatch on {self.id}: {detail}")
        elif event == "recovering":
            self.recovering = True
            self.sim.stats["recoveries"] += 1
        elif event == "recovered":
            self.recovering = False
            self.sim.stats["recovered"] += 1
        elif event == "stale_sender":
            self.sim.stats["stale_dropped"] += 1

    # -- carrying effects ----------------------------------------------------------------
    def run(self, effects: list[Effect], now_ms: int,
            then: Callable[[], None] | None = None) -> None:
        """Hand an effect list to the driver (the adapter's job in the daemon);
        ``then`` runs once the list is carried out (never, after a crash)."""
        if self.core is None:
            return
        if not effects:
            if then is not None:
                then()
            return
        task = self._begin(effects, list(self.barriers))
        task.then = then
        self._step(task, None)

    def core_call(self, method: str, *args: Any) -> list[Effect]:
        """Call a core input that takes ``now_ms`` last, at this node's clock."""
        assert self.core is not None
        effects: list[Effect] = getattr(self.core, method)(*args, self.now_ms())
        return effects

    def _begin(self, effects: list[Any], earlier: list[Barrier]) -> _Task:
        assert self.core is not None
        barrier = None
        if driver.persists(effects):
            barrier = Barrier()
            self.barriers.append(barrier)
        return _Task(driver.carry(self.core, self, effects), barrier, earlier, self.incarnation)

    def _release(self, barrier: Barrier | None) -> None:
        if barrier is not None:
            barrier.release()
            if barrier in self.barriers:
                self.barriers.remove(barrier)

    def _step(self, task: _Task, value: Any) -> None:
        """Advance ``task`` until it waits on something or ends."""
        while True:
            if self.core is None or task.incarnation != self.incarnation:
                return  # the process that ran it is gone
            try:
                step = task.gen.send(value)
            except StopIteration:
                self._release(task.barrier)
                if task.then is not None:
                    task.then()
                return
            value = None
            if isinstance(step, driver.StoreCall):
                delay = self._store_delay(step)
                if delay:
                    self.sim.later(self.sim.now + delay, self._complete, task, step)
                    return
                value = self._call(step)
            elif isinstance(step, driver.AfterEarlier):
                if any(not b.done for b in task.earlier):
                    when_released(task.earlier, lambda: self._resume(task, None))
                    return
            elif isinstance(step, driver.PersistsDone):
                self._release(task.barrier)
            else:
                child = self._begin(step.effects, task.earlier)
                child.then = lambda: self._resume(task, None)
                self._step(child, None)
                return

    def _resume(self, task: _Task, value: Any) -> None:
        """Continue ``task`` from a callback (a completed wait)."""
        if self.paused:  # a paused process goes on when it resumes
            self.sim.later(self.sim.now + 10, lambda now_ms: self._resume(task, value))
            return
        self._step(task, value)

    def _store_delay(self, step: driver.StoreCall) -> int:
        if step.method == "mailbox_state_ops":
            return self.sim.rng.randint(0, 20)
        cap = self.sim.cfg.disk_delay_max_ms
        if cap and step.method in driver.WRITES:
            return self.sim.rng.randint(0, cap)
        return 0

    def _complete(self, task: _Task, step: driver.StoreCall, now_ms: int) -> None:
        if self.core is None or task.incarnation != self.incarnation:
            return  # killed before the call completed: nothing was written
        if self.paused:
            self.sim.later(now_ms + 10, self._complete, task, step)
            return
        self._step(task, self._call(step))

    def _call(self, step: driver.StoreCall) -> Any:
        if step.method != "apply_ops":
            return driver.call(self.disk, step)
        self.sim.monitor.on_persist(self.id, step.args[0])
        new: list[Op] = self.disk.apply_ops(*step.args)
        if any(op.origin == self.id for op in new):
            self.sim.last_write_ms = self.sim.now  # convergence is timed from the last write
        return new

    def _push(self, peer: str, vv: dict[str, int], now_ms: int) -> None:
        # As daemon/replication/anti_entropy.py pushes: batches bounded in ops and bytes
        # (SimConfig.push_bytes_max), up to what the disk held when the push
        # began, ops held past a gap included. Here the push is one step, so
        # nothing is written between its batches: the bound on each read
        # changes nothing in the simulator (tests/daemon/replication/test_anti_entropy.py
        # checks it against a real store).
        target = self.disk.max_seqs()
        while True:
            ops = self.disk.ops_missing(vv, limits.sync_batch_ops_max, self.sim.cfg.push_bytes_max,
                                        upto=target)
            if not ops:
                return
            if len(ops) < limits.sync_batch_ops_max and self.disk.ops_missing(
                    {**vv, **{op.origin: op.seq for op in ops}}, 1, upto=target):
                self.sim.stats["push_batches_cut"] += 1  # the budget ended it, not the ops
            self.sim.send(self.id, peer, Replicate(tuple(ops), ack=False), now_ms)
            for op in ops:
                vv[op.origin] = max(vv.get(op.origin, 0), op.seq)
            if all(vv.get(o, 0) >= seq for o, seq in target.items()):
                return
