"""Failure detector: which peers this node believes it can reach.

A peer counts as alive when this node heard from it (any message) within
``down_after_ms`` and no transport failure to it was reported since. A node
that has just started has heard from nobody, so the clock for "within" starts
at the first time the detector sees (its *birth*): for ``down_after_ms`` after
start every peer gets the benefit of the doubt, which keeps all members from
claiming every mailbox for themselves during a cluster start.

Only liveness decisions use this (owner placement, fail-fast on writes and
claims). Safety never depends on it: a wrong guess costs a retry or a
timeout, never a second claim.
"""

from __future__ import annotations

from collections.abc import Iterable


class FailureDetector:
    __slots__ = ("_born", "_failed", "_heard", "down_after_ms", "peers")

    def __init__(self, peers: Iterable[str], down_after_ms: int) -> None:
        self.peers: tuple[str, ...] = tuple(peers)
        self.down_after_ms = down_after_ms
        self._heard: dict[str, int] = {}
        self._failed: set[str] = set()
        self._born: int | None = None

    def observe_time(self, now_ms: int) -> None:
        if self._born is None:
            self._born = now_ms

    def heard(self, peer: str, now_ms: int) -> None:
        self.observe_time(now_ms)
        if peer in self.peers:
            prev = self._heard.get(peer)
            self._heard[peer] = now_ms if prev is None else max(prev, now_ms)
            self._failed.discard(peer)

    def failed(self, peer: str, now_ms: int) -> None:
        self.observe_time(now_ms)
        if peer in self.peers:
            self._failed.add(peer)

    def is_failed(self, peer: str) -> bool:
        """A transport failure was reported and nothing was heard since."""
        return peer in self._failed

    def failing(self) -> set[str]:
        return set(self._failed)

    def alive(self, peer: str, now_ms: int) -> bool:
        self.observe_time(now_ms)
        if peer not in self.peers or peer in self._failed:
            return False
        born = self._born if self._born is not None else now_ms
        since = max(self._heard.get(peer, born), born)
        return now_ms - since <= self.down_after_ms

    def reachable_count(self, now_ms: int) -> int:
        """Members this node believes it reaches, itself included."""
        return 1 + sum(1 for p in self.peers if self.alive(p, now_ms))

    def last_heard(self, peer: str) -> int | None:
        return self._heard.get(peer)
