"""Cluster membership and rendezvous placement.

Every node is configured with the same list of member ids. This module turns
that list into the few facts the protocol needs: how many members there are,
how many make a majority, who the peers are, which members a key prefers
(highest-random-weight order) and a fingerprint of the whole set.

Rendezvous hashing scores each member for a key with
``blake2b(member + "\\0" + key)`` and sorts by descending score, so every
process computes the same order without coordination, and removing one
member only moves the keys it was first for. The fingerprint lets two nodes
notice that they were started with different member lists: such nodes must
not exchange data, because their majorities would not intersect.

A member's position in the sorted list is its *index*; mailbox epochs embed
it (``round * EPOCH_STRIDE + index``) so two nodes never pick the same epoch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

EPOCH_STRIDE: Final = 1024  # epochs are round * EPOCH_STRIDE + member index
RENDEZVOUS_CACHE_MAX: Final = 4096  # keys whose rendezvous order a Membership keeps


def _weight(member: str, key: str) -> int:
    digest = hashlib.blake2b(f"{member}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class Membership:
    """An immutable, validated view of the member set from one node."""

    __slots__ = ("_index", "_orders", "members", "peers", "self_id")

    def __init__(self, self_id: str, members: Sequence[str]) -> None:
        names = [str(m) for m in members]
        if any(not m for m in names):
            raise ValueError("member ids must be non-empty")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate member ids in {names!r}")
        if self_id not in names:
            raise ValueError(f"node {self_id!r} is not one of the members {names!r}")
        if len(names) > EPOCH_STRIDE:
            raise ValueError(f"at most {EPOCH_STRIDE} members are supported")
        self.self_id: str = self_id
        self.members: tuple[str, ...] = tuple(sorted(names))
        self.peers: tuple[str, ...] = tuple(m for m in self.members if m != self_id)
        self._index: dict[str, int] = {m: i for i, m in enumerate(self.members)}
        self._orders: dict[str, tuple[str, ...]] = {}  # key -> rendezvous order (bounded)

    @property
    def n(self) -> int:
        return len(self.members)

    @property
    def majority(self) -> int:
        return self.n // 2 + 1

    def index_of(self, member: str) -> int:
        return self._index[member]

    def is_member(self, member: str) -> bool:
        return member in self._index

    def rendezvous(self, key: str) -> list[str]:
        """Members in preference order for ``key`` (highest weight first).

        The order of a key never changes for a member set, and every mailbox
        request asks for it, so recent keys keep theirs (up to
        ``RENDEZVOUS_CACHE_MAX``; the cache starts over when full)."""
        order = self._orders.get(key)
        if order is None:
            if len(self._orders) >= RENDEZVOUS_CACHE_MAX:
                self._orders.clear()
            order = self._orders[key] = tuple(
                sorted(self.members, key=lambda m: (-_weight(m, key), m)))
        return list(order)

    def fingerprint(self) -> str:
        """A stable digest of the member set (order-insensitive)."""
        joined = "\n".join(self.members).encode()
        return hashlib.blake2b(joined, digest_size=12).hexdigest()

    def epoch_for_round(self, round_no: int) -> int:
        """This node's epoch in ``round_no``: unique across members."""
        return round_no * EPOCH_STRIDE + self._index[self.self_id]

    def __repr__(self) -> str:
        return f"Membership(self_id={self.self_id!r}, members={list(self.members)!r})"
