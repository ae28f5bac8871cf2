"""The read quorum's decisions: whom to ask, when to ask another, what to wait for.

Before an inbox or mailbox read a node hears from R - 1 peers (R = N - W + 1,
so R + W > N and one of them holds any write acknowledged anywhere). The
daemon (``daemon/replication/read_quorum.py``, pulls over ``/peer/v1/pull``) and the
simulator (``tests/sim/entry.py``, pulls over the simulated network) both
take these decisions from here, so the simulator's seeds cover them (in
seeds with one member far from the others, ``SimConfig.far_node_ms``, the
simulator gives them each link's least round trip):

* :func:`pull_order` -- peers believed alive first, the nearer first (by
  the round trips the daemon's peer links measured, in bands of
  ``limits.read_near_band_ms``), in rotation among peers equally near;
* :class:`ReadRound` -- ask ``need`` peers at once; a failure, or a hedge
  timer (:func:`hedge_delay`: ``limits.read_hedge_ms``, or twice the round
  trip to the peers asked when that is longer, at most
  ``limits.read_hedge_max_ms``) with no answer yet, asks the next one;
  done when ``need`` answered or nobody is left to ask;
* :func:`barriers_to_wait` -- after the pulls are applied, which persist
  barriers the local query waits for.

Why every barrier handed over until then, not only those in flight when the
read began: the vector sent with a pull counts ops whose persist may still
be in flight, and an intake that arrives during the pull counts more. A
peer told (or by then shown) "it holds that op" sends nothing new, so the
op reaches the local store only through that intake's persist. Waiting
for the barriers of the read's start alone let a query run before that
commit: a notify acknowledged on one node was missing from a quorum read on
another, 11 ms later (issue 12).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from common import limits
from common.errors import QuorumNotMet

B = TypeVar("B")


def peers_needed(members: int, write_quorum: int) -> int:
    """Peers to hear from besides this node: R - 1 = N - W."""
    return members - write_quorum


RoundTrip = Callable[[str], float | None]  # a peer's round trip in seconds, None if unknown


def _band(round_trip: float | None) -> int:
    """Peers in one band count as equally near (unknown: the nearest band)."""
    if round_trip is None:
        return 0
    return int(round_trip * 1000 // limits.read_near_band_ms)


def pull_order(peers: Sequence[str], rotation: int, alive: Callable[[str], bool],
               round_trip: RoundTrip | None = None) -> list[str]:
    """``peers`` rotated by ``rotation``, those believed alive first, then the
    nearer first: in a cluster across sites a read asks a member of its own
    site before one across the WAN, and members of one site share the reads
    in rotation (on one site every peer is in the nearest band)."""
    k = rotation % len(peers) if peers else 0
    rotated = list(peers[k:]) + list(peers[:k])
    trip = round_trip or (lambda _p: None)
    return sorted(rotated, key=lambda p: (not alive(p), _band(trip(p))))


def hedge_delay(asked: Sequence[str], round_trip: RoundTrip | None = None, *,
                base_s: float = limits.read_hedge_ms / 1000,
                cap_s: float = limits.read_hedge_max_ms / 1000) -> float:
    """Seconds to wait for the peers ``asked`` before asking the next one
    beside them: ``limits.read_hedge_ms``, or twice the longest known round
    trip among them if that is longer (a peer across a WAN is not slow for
    taking its round trip), never more than ``limits.read_hedge_max_ms`` (a
    round trip inflated by a stall must not keep a stalled peer unhedged)."""
    trips = [t for t in (round_trip(p) for p in asked) if t is not None] if round_trip else []
    return min(max(base_s, 2 * max(trips, default=0.0)), max(cap_s, base_s))


def barriers_to_wait(at_start: list[B], now: list[B]) -> list[B]:
    """The barriers a read waits for once its pulls are applied: every one
    handed over until now (``at_start`` is what the read saw when it began;
    see the module docstring for why that is not enough)."""
    return now


class ReadRound:
    """One read's pulls, as answers, failures and hedge timers come in."""

    def __init__(self, order: Sequence[str], need: int) -> None:
        self.order = list(order)
        self.need = need
        self.got = 0
        self.reasons: set[str] = set()
        self.inflight: set[str] = set()
        self._next = 0

    def _launch(self) -> list[str]:
        if self._next >= len(self.order):
            return []
        peer = self.order[self._next]
        self._next += 1
        self.inflight.add(peer)
        return [peer]

    def start(self) -> list[str]:
        """The peers to ask at once."""
        out: list[str] = []
        for _ in range(min(self.need, len(self.order))):
            out += self._launch()
        return out

    @property
    def can_hedge(self) -> bool:
        """Is anyone left to ask beside a slow peer?"""
        return self._next < len(self.order)

    @property
    def done(self) -> bool:
        return self.got >= self.need or not self.inflight

    def answered(self, peer: str) -> None:
        if peer in self.inflight:
            self.inflight.discard(peer)
            self.got += 1

    def failed(self, peer: str, reason: str) -> list[str]:
        """``peer`` failed: the next peer to ask, if any."""
        if peer not in self.inflight:
            return []
        self.inflight.discard(peer)
        self.reasons.add(reason)
        return [] if self.got >= self.need else self._launch()

    def hedge(self) -> list[str]:
        """No answer within the hedge delay: ask the next peer beside it."""
        return [] if self.done else self._launch()

    def timed_out(self) -> None:
        self.reasons.add("timeout")
        self.inflight.clear()

    def error(self) -> QuorumNotMet | None:
        """None if enough peers answered, else the error to raise."""
        if self.got >= self.need:
            return None
        reason = "timeout" if "timeout" in self.reasons else "unreachable"
        return QuorumNotMet(self.got + 1, self.need + 1, reason)
