"""The read quorum's pure decisions: whom to ask first, when to ask another."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from common import limits
from federation.read import ReadRound, hedge_delay, pull_order

PEERS = ["n2", "n3", "n4", "n5"]


def test_without_round_trips_alive_peers_first_in_rotation() -> None:
    alive = {"n2": True, "n3": False, "n4": True, "n5": True}.__getitem__
    assert pull_order(PEERS, 0, alive) == ["n2", "n4", "n5", "n3"]
    assert pull_order(PEERS, 1, alive) == ["n4", "n5", "n2", "n3"]
    assert pull_order(PEERS, 2, alive) == ["n4", "n5", "n2", "n3"]


def test_a_member_across_a_wan_is_asked_after_the_near_ones() -> None:
    trips = {"n2": 0.080, "n3": 0.0004, "n4": 0.0009, "n5": None}.__getitem__
    orders = {tuple(pull_order(PEERS, r, lambda p: True, trips)) for r in range(4)}
    # n3, n4 and n5 (not measured yet) share the nearest band, in rotation; n2 is last
    assert all(order[-1] == "n2" for order in orders)
    assert {order[0] for order in orders} == {"n3", "n4", "n5"}


def test_a_near_peer_that_seems_down_goes_after_a_far_one_that_is_up() -> None:
    trips = {"n2": 0.080, "n3": 0.0004, "n4": 0.0009, "n5": 0.0005}.__getitem__
    alive = {"n2": True, "n3": False, "n4": False, "n5": False}.__getitem__
    assert pull_order(PEERS, 0, alive, trips)[0] == "n2"


def test_the_hedge_waits_twice_the_round_trip_of_a_far_peer() -> None:
    base = limits.read_hedge_ms / 1000
    assert hedge_delay(["n2"]) == base
    assert hedge_delay(["n2"], lambda p: None) == base
    assert hedge_delay(["n2"], lambda p: 0.001) == base  # near: the usual 100 ms
    assert hedge_delay(["n2", "n3"], {"n2": 0.001, "n3": 0.150}.__getitem__) == 0.300


@given(st.lists(st.one_of(st.none(), st.floats(0, 1)), min_size=1, max_size=6),
       st.integers(0, 10), st.lists(st.booleans(), min_size=6, max_size=6))
def test_every_peer_is_asked_once_alive_before_down_and_near_bands_before_far(
        trips: list[float | None], rotation: int, up: list[bool]) -> None:
    peers = [f"p{i}" for i in range(len(trips))]
    trip = dict(zip(peers, trips, strict=True)).__getitem__
    alive = dict(zip(peers, up, strict=False)).__getitem__
    order = pull_order(peers, rotation, alive, trip)
    assert sorted(order) == sorted(peers)
    keys = [(not alive(p), 0 if trip(p) is None else int(trip(p) * 1000 // limits.read_near_band_ms))
            for p in order]
    assert keys == sorted(keys)
    rnd = ReadRound(order, 1)
    assert rnd.start() == order[:1]
