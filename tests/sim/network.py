"""A simulated network: delay, loss, duplication, reordering, partitions.

Messages are events in one priority queue keyed by (delivery time, serial),
so delivery order is a pure function of the seed. Every directed link has
its own loss and duplication rate; the delay of each copy is drawn
uniformly, which reorders messages on the same link. A partition is a set
of *blocked directed links*, so one-way partitions are just one direction
blocked; a message is dropped if its link is blocked when it is sent or
when it would arrive. A *held* link is a one-way cut that loses nothing:
like a TCP connection into a blackhole, its messages wait and are delivered
late, after the hold is released, which is how a request that its sender
gave up on can still reach the receiver.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Envelope:
    at_ms: int
    src: str
    dst: str
    payload: Any
    incarnation: str = ""  # the sending process's (its disk's), as the daemon's envelope says


class Network:
    def __init__(self, rng: random.Random, nodes: list[str], delay_min_ms: int,
                 delay_max_ms: int) -> None:
        self.rng = rng
        self.nodes = nodes
        self.delay_min_ms = delay_min_ms
        self.delay_max_ms = delay_max_ms
        self.base_ms: dict[tuple[str, str], int] = {}  # added to every copy's delay
        self.loss: dict[tuple[str, str], float] = {}
        self.dup: dict[tuple[str, str], float] = {}
        self.blocked: set[tuple[str, str]] = set()
        self.held: set[tuple[str, str]] = set()
        self._parked: list[Envelope] = []
        self._queue: list[tuple[int, int, Envelope]] = []
        self._serial = 0
        self.sent = 0
        self.dropped = 0

    def least_round_trip_ms(self, a: str, b: str) -> int:
        """The fastest a request from ``a`` to ``b`` and its answer can be:
        what a daemon's peer link measures as its floor."""
        return (self.base_ms.get((a, b), 0) + self.base_ms.get((b, a), 0)
                + 2 * self.delay_min_ms)

    def send(self, src: str, dst: str, payload: Any, now_ms: int, incarnation: str = "") -> bool:
        """Queue ``payload``; False if the link is cut right now."""
        self.sent += 1
        link = (src, dst)
        if link in self.blocked:
            self.dropped += 1
            return False
        if self.rng.random() < self.loss.get(link, 0.0):
            self.dropped += 1
            return True
        copies = 2 if self.rng.random() < self.dup.get(link, 0.0) else 1
        for _ in range(copies):
            self._serial += 1
            delay = self.base_ms.get(link, 0) + self.rng.randint(self.delay_min_ms,
                                                                 self.delay_max_ms)
            env = Envelope(now_ms + delay, src, dst, payload, incarnation)
            heapq.heappush(self._queue, (env.at_ms, self._serial, env))
        return True

    def due(self, now_ms: int) -> list[Envelope]:
        out: list[Envelope] = []
        while self._queue and self._queue[0][0] <= now_ms:
            env = heapq.heappop(self._queue)[2]
            if (env.src, env.dst) in self.blocked:
                self.dropped += 1
                continue
            if (env.src, env.dst) in self.held:
                self._parked.append(env)
                continue
            out.append(env)
        return out

    def hold(self, src: str, dst: str) -> None:
        self.held.add((src, dst))

    def release(self, now_ms: int, link: tuple[str, str] | None = None) -> None:
        """Lift the hold on ``link`` (every link if None): what waited on it
        is delivered after a fresh delay, in the order it was sent."""
        if link is None:
            self.held.clear()
        else:
            self.held.discard(link)
        keep: list[Envelope] = []
        last: dict[tuple[str, str], int] = {}
        for env in self._parked:
            link = (env.src, env.dst)
            if link in self.held:
                keep.append(env)
                continue
            # Like the bytes of a connection that was held: in order.
            self._serial += 1
            at = max(now_ms + self.base_ms.get(link, 0)
                     + self.rng.randint(self.delay_min_ms, self.delay_max_ms),
                     last.get(link, 0))
            last[link] = env.at_ms = at
            heapq.heappush(self._queue, (env.at_ms, self._serial, env))
        self._parked = keep

    def in_flight(self) -> int:
        return len(self._queue)

    def heal(self, now_ms: int) -> None:
        self.release(now_ms)
        self.blocked.clear()
        self.loss.clear()
        self.dup.clear()

    def partition(self, side: set[str], one_way: bool) -> None:
        """Cut ``side`` from the rest (only side -> rest when one_way)."""
        for a in side:
            for b in self.nodes:
                if b in side:
                    continue
                self.blocked.add((a, b))
                if not one_way:
                    self.blocked.add((b, a))
