"""Hybrid logical clock, as a pure value type.

A stamp is one int: ``(physical_ms << 16) | logical``. It never goes
backwards on a node, it moves past every stamp the node has seen, and it
stays close to wall time, so it orders operations across nodes without ever
comparing wall-clock strings. Ties between nodes are broken by origin id.

Time is an input: callers pass ``wall_ms``; this module never reads a clock.
"""

from __future__ import annotations

LOGICAL_BITS = 16
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1


def pack(physical_ms: int, logical: int) -> int:
    return (physical_ms << LOGICAL_BITS) | logical


def physical_ms(stamp: int) -> int:
    return stamp >> LOGICAL_BITS


def logical(stamp: int) -> int:
    return stamp & LOGICAL_MASK


class HLC:
    """Per-node clock state. ``now`` stamps a local event; ``observe``
    merges a stamp received from another node."""

    __slots__ = ("last",)

    def __init__(self, last: int = 0) -> None:
        self.last = last

    def now(self, wall_ms: int) -> int:
        last_phys = physical_ms(self.last)
        if wall_ms > last_phys:
            self.last = pack(wall_ms, 0)
        else:
            self.last = self._bump(last_phys, logical(self.last))
        return self.last

    def observe(self, remote: int, wall_ms: int) -> int:
        phys = max(wall_ms, physical_ms(self.last), physical_ms(remote))
        if phys == physical_ms(self.last) and phys == physical_ms(remote):
            lg = max(logical(self.last), logical(remote)) + 1
        elif phys == physical_ms(self.last):
            lg = logical(self.last) + 1
        elif phys == physical_ms(remote):
            lg = logical(remote) + 1
        else:
            lg = 0
        self.last = self._normalise(phys, lg)
        return self.last

    @staticmethod
    def _bump(phys: int, lg: int) -> int:
        return HLC._normalise(phys, lg + 1)

    @staticmethod
    def _normalise(phys: int, lg: int) -> int:
        # 65k events in one millisecond: borrow the next millisecond rather
        # than overflow into the physical bits.
        if lg > LOGICAL_MASK:
            return pack(phys + 1, 0)
        return pack(phys, lg)
