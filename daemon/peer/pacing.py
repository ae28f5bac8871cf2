"""How many batches a peer link keeps in flight: one to a near peer, more to a far one.

One request in flight makes a link gather like Nagle's algorithm: whatever
queues while the request is out leaves in the next one. On loopback or a
LAN a round trip is about a millisecond, so the wait is short and the
batching halves the peer requests per claim. Across a WAN the same rule
costs a queued message up to one extra round trip (it waits for the
request ahead of it to come back, then makes its own), and it caps a link
at one batch per round trip.

So the link measures how far its peer is. A request's time is the network
round trip plus the peer's work on it plus its wait behind the link's other
requests at the peer; only the first should decide. The link therefore
samples only requests that were alone in flight and small
(``limits.peer_link_sample_bytes_max``), never the first one of a channel
(it opens the connection, maybe with a TLS handshake), and keeps the
fastest sample of the last one to two windows (``limits.peer_link_rtt_window_secs``)
as its floor: the "minimum RTT" estimate of delay-based congestion control,
which the peer's load hardly raises. At ``limits.peer_link_far_rtt_ms`` or
more the peer is far and the link keeps up to
``limits.peer_link_inflight_far_max`` requests in flight, so a message
queued while others are out leaves at once; below it, one. A link with no
sample yet counts as near; an idle link keeps its floor.

A far link's requests are seldom alone, so it could stay far on samples
that have aged, after the peer came nearer or a slow spell of the peer
ended. Once a window has passed without a sample it drains, as BBR's
PROBE_RTT does: one slot until the next request, now alone, is measured.
That costs a queued message at most one round trip once a window.

Pure: the caller gives the time.
"""

from __future__ import annotations

from common import limits


class LinkPacer:
    """The request slots a link may use, from the round trips it measured."""

    __slots__ = (
        "_cur",
        "_last_sample",
        "_prev",
        "_since",
        "far_max",
        "far_s",
        "near_max",
        "window_s",
    )

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
        self._cur: float | None = None  # the fastest sample of the current window
        self._prev: float | None = None  # ... and of the window before it
        self._since = 0.0  # when the current window began
        self._last_sample = 0.0

    def sample(self, now: float, seconds: float) -> None:
        """A request that was alone in flight took ``seconds``, back at ``now``."""
        self._last_sample = now
        if self._cur is None or now - self._since >= self.window_s:
            if self._cur is not None:
                self._prev = self._cur
            self._cur, self._since = seconds, now
        elif seconds < self._cur:
            self._cur = seconds

    def floor(self) -> float | None:
        """The fastest sample of the last one or two windows (None: none yet)."""
        if self._prev is None:
            return self._cur
        if self._cur is None:
            return self._prev
        return min(self._cur, self._prev)

    def recent_floor(self, now: float) -> float | None:
        """:meth:`floor` if a sample came in the last two windows, else None:
        what reads and ``cluster status`` go by (the link itself keeps an
        idle floor, which costs it nothing)."""
        return self.floor() if now - self._last_sample < 2 * self.window_s else None

    def far(self) -> bool:
        floor = self.floor()
        return floor is not None and floor >= self.far_s

    def probing(self, now: float) -> bool:
        """A far link that has gone a window without a sample: it drains to measure."""
        return self.far() and now - self._last_sample >= self.window_s

    def slots(self, now: float) -> int:
        if not self.far() or self.probing(now):
            return self.near_max
        return self.far_max
