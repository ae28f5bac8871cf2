"""A tiny hand-driven cluster for unit tests of the core.

Unlike ``tests/sim`` nothing here is random: messages wait in one FIFO
until the test delivers them (optionally dropping some), effects run
synchronously through the shared driver (:func:`federation.driver.run_now`,
every store call completing at once), and replies land in a dict by token.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from common.ops import Op
from common.randomid import incarnation_id
from federation import driver
from federation.core import NodeCore
from federation.effects import Effect
from federation.messages import Message, Replicate, Reseeding
from store.in_memory import Replica

Drop = Callable[[str, str, Message], bool]
Queued = tuple[str, str, Message, str]  # sender, receiver, message, the sender's incarnation


class Cluster:
    def __init__(self, n: int = 3, w: int = 2, *, timeout_ms: int = 1000) -> None:
        self.ids = [f"n{i}" for i in range(n)]
        self.w = w
        self.timeout_ms = timeout_ms
        self.disks = {i: Replica() for i in self.ids}
        self.disk_serial = {i: 1 for i in self.ids}  # a new disk, a new incarnation
        self.cores = {i: self._core(i) for i in self.ids}
        self.queue: list[Queued] = []
        self.replies: dict[Any, Any] = {}
        self.effects: dict[str, list[Effect]] = {i: [] for i in self.ids}
        self.now = 1_000_000

    def _core(self, node: str, recovering: bool = False) -> NodeCore:
        d = self.disks[node]
        return NodeCore(node, self.ids, self.w, quorum_timeout_ms=self.timeout_ms,
                        claim_timeout_ms=self.timeout_ms, catchup_interval_ms=500,
                        vv=d.version_vector(), last_hlc=d.max_hlc(),
                        own_max_seq=d.max_seq(node), promises=d.promises(),
                        rng=random.Random(node), gc_interval_ms=0, down_after_ms=3000,
                        recovering=recovering,
                        incarnation=incarnation_id(self.disk_serial[node], f"{node.encode().hex():0>16}"),
                        recovery_grace_ms=0)

    def restart(self, node: str) -> None:
        self.cores[node] = self._core(node)
        self.queue = [m for m in self.queue if node not in (m[0], m[1])]

    def wipe(self, node: str, disk: Replica | None = None) -> None:
        """The node comes back with an empty disk (or ``disk``), recovering."""
        self.disks[node] = disk if disk is not None else Replica()
        self.disk_serial[node] += 1
        self.cores[node] = self._core(node, recovering=disk is None)
        self.queue = [m for m in self.queue if node not in (m[0], m[1])]

    def seed(self, node: str, donor: str) -> None:
        """The node lost its disk and comes back seeded from ``donor``'s copy,
        recovering, as ``daemon/replication/seeding.py`` does it: ``Reseeding`` reaches
        the donor first, then the copy is taken."""
        self.queue = [m for m in self.queue if node not in (m[0], m[1])]
        self.run(donor, self.cores[donor].on_message(node, Reseeding(donor), self.now))
        self.disks[node] = self.disks[donor].seed_copy()
        self.disk_serial[node] += 1
        self.cores[node] = self._core(node, recovering=True)

    def run(self, node: str, effects: list[Effect]) -> None:
        """Carry ``effects`` with the shared driver, every store call at once."""
        self.effects[node].extend(effects)
        driver.run_now(self.cores[node], _Host(self, node), self.disks[node], effects)

    def call(self, node: str, method: str, *args: Any) -> None:
        self.run(node, getattr(self.cores[node], method)(*args, self.now))

    def deliver(self, drop: Drop | None = None, rounds: int = 100) -> int:
        """Deliver queued messages (and what they cause) until quiet."""
        n = 0
        for _ in range(rounds):
            if not self.queue:
                break
            batch, self.queue = self.queue, []
            for src, dst, msg, incarnation in batch:
                if drop is not None and drop(src, dst, msg):
                    continue
                n += 1
                self.run(dst, self.cores[dst].on_message(src, msg, self.now, incarnation))
        return n

    def tick(self, ms: int) -> None:
        self.now += ms
        for node in self.ids:
            self.call(node, "tick")


class _Host:
    """One node of the cluster as the driver's host."""

    def __init__(self, cluster: Cluster, node: str) -> None:
        self.cluster = cluster
        self.node = node

    def now_ms(self) -> int:
        return self.cluster.now

    def transmit(self, peer: str, msg: Message) -> None:
        self.cluster.queue.append((self.node, peer, msg, self._incarnation()))

    def answer(self, token: Any, value: Any) -> None:
        assert token not in self.cluster.replies, f"token {token} answered twice"
        self.cluster.replies[token] = value

    def push_missing(self, peer: str, vv: dict[str, int]) -> None:
        ops = tuple(self.cluster.disks[self.node].ops_missing(dict(vv), 10_000))
        self.cluster.queue.append((self.node, peer, Replicate(ops, ack=False),
                                   self._incarnation()))

    def _incarnation(self) -> str:
        return self.cluster.cores[self.node].incarnation

    def applied(self, new: list[Op]) -> None:
        pass

    def report(self, event: str, detail: Any) -> None:
        pass
