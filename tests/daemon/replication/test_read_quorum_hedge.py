"""The read quorum's hedge against a stalled peer, whatever its link measured.

The first peer asked is alive to the failure detector but paused: its pull
answers only at its timeout. The read must ask the other peer within the
hedge delay, which grows with a far peer's round trip but never past
``limits.read_hedge_max_ms``: a review found a round trip inflated by a
stall (an idle link keeps its floor) pushing the hedge past the quorum
timeout, so the read waited 2 s or failed though the other peer answers
at once.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from common import limits
from daemon.peer.client import PeerUnreachable
from daemon.replication.read_quorum import ReadQuorum
from daemon.runtime.metrics import Metrics
from daemon.settings import ClusterSettings, Member


class _Peers:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def call_from(self, peer: str, path: str, payload: Any, *,
                        timeout_s: float | None = None) -> tuple[Any, str]:
        self.asked.append(peer)
        if peer == "n2":  # paused
            await asyncio.sleep(timeout_s or 2.0)
            raise PeerUnreachable(peer, "timeout")
        return [], ""


def _quorum(peers: _Peers, round_trip: Any) -> ReadQuorum:
    cluster = ClusterSettings(node_id="n1", peers=(Member("n2", "http://x"),
                                                   Member("n3", "http://y")),
                              quorum_timeout_ms=2000)

    async def nothing(*_a: Any) -> None:
        return None

    core = SimpleNamespace(detector=SimpleNamespace(alive=lambda p, now: True), vv={})
    runner = SimpleNamespace(core=core, barriers=lambda: [], settle=nothing,
                             send_failed=nothing, run=nothing)
    return ReadQuorum(cluster, runner=runner, peers=peers,  # type: ignore[arg-type]
                      metrics=Metrics(), now_ms=lambda: 0, round_trip=round_trip)


@pytest.mark.parametrize(("trip", "within"), [
    (None, limits.read_hedge_ms / 1000),  # nothing measured: the usual delay
    (0.0005, limits.read_hedge_ms / 1000),  # near
    (0.150, 0.300),  # a WAN peer: twice its round trip
    (1.2, limits.read_hedge_max_ms / 1000),  # inflated by a stall: capped
])
async def test_a_stalled_first_peer_is_hedged_in_time(trip: float | None, within: float) -> None:
    peers = _Peers()
    q = _quorum(peers, lambda p: trip)
    q._rr = 1  # the next rotation asks n2 first (both peers in one band)
    started = time.monotonic()
    await q.barrier("inbox:a")
    took = time.monotonic() - started
    assert peers.asked == ["n2", "n3"]
    assert within <= took < within + 0.4, took
