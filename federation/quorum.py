"""Tracking of in-flight quorum writes.

A write is a set of op ids that must be held by ``needed`` members, the
coordinator included. The coordinator holds them once it has persisted them,
so a write starts with one holder; a peer becomes a holder once its
``Ack``\\ s have covered every op id of the write (acks may arrive split
across several messages when the adapter batches).

A write completes exactly once:

* success, as soon as ``needed`` members hold it;
* ``QuorumNotMet(reason="unreachable")`` as soon as success is impossible:
  the holders plus the peers not known to have failed are fewer than
  ``needed`` (a transport failure to a peer marks it failed for every write
  it has not acknowledged yet; an ack afterwards still counts);
* ``QuorumNotMet(reason="timeout")`` at the deadline.

Pure: the caller passes ``now_ms`` to :meth:`QuorumTracker.expire`. Deadlines
sit in a heap with lazy deletion, so expiry costs O(log n) per write.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from common.errors import QuorumNotMet

OpId = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Completion:
    """The outcome of one write: ``error`` is None on success."""

    token: Any
    error: QuorumNotMet | None


@dataclass(slots=True)
class _Write:
    token: Any
    op_ids: frozenset[OpId]
    needed: int
    deadline_ms: int
    holders: set[str]
    partial: dict[str, set[OpId]] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    serial: int = 0


class QuorumTracker:
    """In-flight writes coordinated by ``self_id`` towards ``peers``."""

    def __init__(self, self_id: str, peers: Iterable[str]) -> None:
        self.self_id = self_id
        self.peers: frozenset[str] = frozenset(peers)
        self._writes: dict[Any, _Write] = {}
        self._by_op: dict[OpId, Any] = {}
        self._deadlines: list[tuple[int, int, Any]] = []
        self._counter = 0

    def __len__(self) -> int:
        return len(self._writes)

    def start(self, token: Any, op_ids: Iterable[OpId], needed: int, deadline_ms: int,
              down: Iterable[str] = ()) -> list[Completion]:
        """Track a write this node already holds; ``down`` are peers known to
        be failing right now (they may still ack)."""
        if token in self._writes:
            raise ValueError(f"token {token!r} is already in flight")
        self._counter += 1
        w = _Write(token, frozenset(op_ids), needed, deadline_ms, {self.self_id},
                   failed=set(down) & self.peers, serial=self._counter)
        self._writes[token] = w
        for op_id in w.op_ids:
            self._by_op[op_id] = token
        heapq.heappush(self._deadlines, (deadline_ms, w.serial, token))
        return self._settle(w)

    def ack(self, peer: str, op_ids: Iterable[OpId]) -> list[Completion]:
        if peer not in self.peers:
            return []
        touched: dict[Any, _Write] = {}
        for op_id in op_ids:
            token = self._by_op.get(op_id)
            w = self._writes.get(token) if token is not None else None
            if w is None or peer in w.holders:
                continue
            got = w.partial.setdefault(peer, set())
            got.add(op_id)
            if len(got) == len(w.op_ids):
                w.holders.add(peer)
                w.partial.pop(peer, None)
                touched[token] = w
        out: list[Completion] = []
        for w in touched.values():
            out.extend(self._settle(w))
        return out

    def fail(self, peer: str) -> list[Completion]:
        """A transport failure to ``peer``: it will not ack what is in flight."""
        out: list[Completion] = []
        for w in list(self._writes.values()):
            if peer in self.peers and peer not in w.holders:
                w.failed.add(peer)
                out.extend(self._settle(w))
        return out

    def expire(self, now_ms: int) -> list[Completion]:
        out: list[Completion] = []
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, serial, token = heapq.heappop(self._deadlines)
            w = self._writes.get(token)
            if w is not None and w.serial == serial:
                out.append(self._finish(w, QuorumNotMet(len(w.holders), w.needed, "timeout")))
        return out

    def _settle(self, w: _Write) -> list[Completion]:
        if len(w.holders) >= w.needed:
            return [self._finish(w, None)]
        possible = len(w.holders) + len(self.peers - w.holders - w.failed)
        if possible < w.needed:
            return [self._finish(w, QuorumNotMet(len(w.holders), w.needed, "unreachable"))]
        return []

    def _finish(self, w: _Write, error: QuorumNotMet | None) -> Completion:
        del self._writes[w.token]
        for op_id in w.op_ids:
            if self._by_op.get(op_id) == w.token:
                del self._by_op[op_id]
        return Completion(w.token, error)
