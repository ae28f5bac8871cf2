"""How many batches a peer link keeps in flight: one to a near peer, more to a far one.

One request in flight makes a link gather like Nagle's algorithm: whatever
queues while the request is out leaves in the next one. On loopback or a
LAN a round trip is about a millisecond, so the wait is short and the
batching halves the peer requests per claim. Across a WAN the same rule
costs a queued message up to one extra round trip (it waits for the
request ahead of it to come back, then makes its own), and it caps a link
at one batch per round trip.

So the link measures how far its peer is: the fastest request of the last
one to two windows (``limits.peer_link_rtt_window_secs``) is its floor. A
request's time includes the peer's work on it, which grows with load, but
the fastest one in a window is close to the network's round trip alone
(the "minimum RTT" estimate of delay-based congestion control). While the
floor is below ``limits.peer_link_far_rtt_ms`` the link keeps one request
in flight; at or above it, up to ``limits.peer_link_inflight_far_max``, so
a message queued while others are out leaves at once. A link with no
measurement yet counts as near. An idle link keeps its last floor.

Pure: the caller gives the time of each sample.
"""

from __future__ import annotations

from common import limits


class LinkPacer:
    """The request slots a link may use, from the round trips it measured."""

    __slots__ = ("_cur", "_prev", "_since", "far_max", "far_s", "near_max", "window_s")

    def __init__(self, *, near_max: int = limits.peer_link_inflight_max,
                 far_max: int = limits.peer_link_inflight_far_max,
                 far_ms: float = limits.peer_link_far_rtt_ms,
                 window_s: float = limits.peer_link_rtt_window_secs) -> None:
        if near_max < 1 or far_max < near_max:
            raise ValueError(f"slots must satisfy 1 <= near ({near_max}) <= far ({far_max})")
        self.near_max = near_max
        self.far_max = far_max
        self.far_s = far_ms / 1000
        self.window_s = window_s
        self._cur: float | None = None  # the fastest request of the current window
        self._prev: float | None = None  # ... and of the window before it
        self._since = 0.0  # when the current window began

    def sample(self, now: float, seconds: float) -> None:
        """A request that took ``seconds`` came back at ``now``."""
        if self._cur is None or now - self._since >= self.window_s:
            if self._cur is not None:
                self._prev = self._cur
            self._cur, self._since = seconds, now
        elif seconds < self._cur:
            self._cur = seconds

    def floor(self) -> float | None:
        """The fastest round trip of the last one or two windows (None: none yet)."""
        if self._prev is None:
            return self._cur
        if self._cur is None:
            return self._prev
        return min(self._cur, self._prev)

    def slots(self) -> int:
        floor = self.floor()
        return self.far_max if floor is not None and floor >= self.far_s else self.near_max
