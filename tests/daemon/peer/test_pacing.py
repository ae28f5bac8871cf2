"""The slots a peer link may use, from the round trips it measured (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.peer.pacing import LinkPacer


def _pacer() -> LinkPacer:
    return LinkPacer(near_max=1, far_max=4, far_ms=10, window_s=10)


def test_a_link_without_a_measurement_is_near() -> None:
    pacer = _pacer()
    assert pacer.floor() is None and pacer.slots(0.0) == 1 and not pacer.far()


def test_slow_requests_make_a_peer_far_and_one_fast_one_near_again() -> None:
    pacer = _pacer()
    pacer.sample(0.0, 0.050)
    pacer.sample(1.0, 0.030)
    assert pacer.floor() == 0.030 and pacer.slots(1.0) == 4
    pacer.sample(2.0, 0.010)  # exactly the threshold: far
    assert pacer.slots(2.0) == 4
    pacer.sample(3.0, 0.002)  # one fast request: the network is near
    assert pacer.slots(3.0) == 1


def test_a_slow_spell_on_a_near_link_changes_nothing_while_the_fast_request_is_recent() -> None:
    """Under load each request takes longer (the peer's work), but the
    fastest one of the window still says where the peer is."""
    pacer = _pacer()
    pacer.sample(0.0, 0.001)
    for i in range(1, 100):
        pacer.sample(i * 0.1, 0.040)
    assert pacer.slots(10.0) == 1


def test_a_floor_ages_out_after_two_windows() -> None:
    pacer = _pacer()
    pacer.sample(0.0, 0.001)
    pacer.sample(10.0, 0.050)  # a new window: the old one's floor still counts
    assert pacer.slots(10.0) == 1
    pacer.sample(20.0, 0.050)  # two windows on: the 1 ms request is forgotten
    assert pacer.floor() == 0.050 and pacer.slots(20.0) == 4


def test_a_far_link_without_a_sample_for_a_window_drains_to_measure() -> None:
    pacer = _pacer()
    pacer.sample(0.0, 0.050)
    assert pacer.slots(9.9) == 4 and not pacer.probing(9.9)
    assert pacer.probing(10.0) and pacer.slots(10.0) == 1  # one request alone, to be timed
    pacer.sample(10.2, 0.048)  # still far: back to every slot for another window
    assert pacer.slots(10.2) == 4 and pacer.slots(20.1) == 4
    assert pacer.slots(20.2) == 1


def test_a_near_link_never_drains() -> None:
    pacer = _pacer()
    pacer.sample(0.0, 0.001)
    assert not pacer.probing(1e6) and pacer.slots(1e6) == 1


def test_bad_slot_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        LinkPacer(near_max=0, far_max=4)
    with pytest.raises(ValueError):
        LinkPacer(near_max=4, far_max=2)


@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0, 0.2)), min_size=1, max_size=60))
def test_the_floor_is_the_fastest_sample_of_the_last_two_windows(
        steps: list[tuple[float, float]]) -> None:
    """Against a direct model: windows start at the first sample at least
    a window after the current one began; the floor is the minimum over the
    current window and the one before it."""
    pacer = _pacer()
    now = 0.0
    windows: list[list[float]] = []
    start = None
    for gap, seconds in steps:
        now += gap
        if start is None or now - start >= pacer.window_s:
            windows.append([])
            start = now
        windows[-1].append(seconds)
        pacer.sample(now, seconds)
        floor = min(windows[-1] + (windows[-2] if len(windows) > 1 else []))
        assert pacer.floor() == floor
        assert pacer.slots(now) == (4 if floor >= 0.010 else 1)
