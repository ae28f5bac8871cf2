from __future__ import annotations

from federation.detector import FailureDetector


def test_grace_period_after_start_then_down_without_contact() -> None:
    d = FailureDetector(["b", "c"], down_after_ms=100)
    d.observe_time(1_000)
    assert d.alive("b", 1_100) and d.reachable_count(1_100) == 3
    assert not d.alive("b", 1_101)
    d.heard("b", 1_050)
    assert d.alive("b", 1_150) and not d.alive("c", 1_150)
    assert d.reachable_count(1_150) == 2


def test_a_transport_failure_marks_down_until_heard_again() -> None:
    d = FailureDetector(["b"], down_after_ms=100)
    d.heard("b", 10)
    d.failed("b", 20)
    assert not d.alive("b", 20) and d.is_failed("b") and d.failing() == {"b"}
    d.heard("b", 30)
    assert d.alive("b", 30) and not d.is_failed("b")


def test_strangers_and_clock_going_backwards() -> None:
    d = FailureDetector(["b"], down_after_ms=100)
    d.heard("zz", 10)
    assert not d.alive("zz", 10) and d.last_heard("zz") is None
    d.heard("b", 500)
    d.heard("b", 400)  # an older message processed late does not move time back
    assert d.last_heard("b") == 500
