from __future__ import annotations

from federation.quorum import QuorumTracker

IDS = [("a", 1), ("a", 2)]


def test_success_when_enough_members_hold_every_op() -> None:
    q = QuorumTracker("a", ["b", "c"])
    assert q.start("t", IDS, 2, deadline_ms=100) == []
    assert q.ack("b", [("a", 1)]) == []  # half of the write is not a holder
    [done] = q.ack("b", [("a", 2)])
    assert (done.token, done.error) == ("t", None)
    assert len(q) == 0
    assert q.ack("c", IDS) == []  # late acks are ignored


def test_quorum_of_one_completes_at_once() -> None:
    q = QuorumTracker("a", ["b"])
    [done] = q.start("t", IDS, 1, deadline_ms=100)
    assert done.error is None


def test_timeout_reports_what_was_held() -> None:
    q = QuorumTracker("a", ["b", "c"])
    q.start("t", IDS, 3, deadline_ms=100)
    q.ack("b", IDS)
    assert q.expire(99) == []
    [done] = q.expire(100)
    assert done.error is not None
    assert done.error.to_body() == {"error": "quorum_not_met", "code": "quorum_not_met",
                                    "got": 2, "needed": 3,
                                    "reason": "timeout"}
    assert q.expire(10_000) == []


def test_unreachable_as_soon_as_success_is_impossible() -> None:
    q = QuorumTracker("a", ["b", "c"])
    q.start("t", IDS, 3, deadline_ms=100)
    [done] = q.fail("c")
    assert done.error is not None and done.error.details["reason"] == "unreachable"
    assert done.error.details["got"] == 1


def test_failure_of_one_peer_leaves_room_for_the_other() -> None:
    q = QuorumTracker("a", ["b", "c"])
    q.start("t", IDS, 2, deadline_ms=100)
    assert q.fail("b") == []
    [done] = q.ack("c", IDS)
    assert done.error is None


def test_an_ack_after_a_failure_still_counts() -> None:
    q = QuorumTracker("a", ["b", "c"])
    q.start("t", IDS, 3, deadline_ms=100)
    q.ack("c", IDS)
    assert q.start("u", [("a", 3)], 2, deadline_ms=100) == []
    q.fail("b")  # fails write t (impossible), not u (c may still ack)
    [done] = q.ack("c", [("a", 3)])
    assert done.token == "u" and done.error is None


def test_down_peers_at_start_fail_fast() -> None:
    q = QuorumTracker("a", ["b", "c"])
    [done] = q.start("t", IDS, 3, deadline_ms=100, down={"b"})
    assert done.error is not None and done.error.details["reason"] == "unreachable"


def test_acks_from_strangers_are_ignored_and_tokens_never_collide() -> None:
    q = QuorumTracker("a", ["b"])
    q.start(1, IDS, 2, deadline_ms=100)
    assert q.ack("z", IDS) == []
    [done] = q.ack("b", IDS)
    assert done.token == 1
    # A token reused after completion is a new write with its own deadline.
    q.start(1, [("a", 9)], 2, deadline_ms=500)
    assert q.expire(100) == []
    assert len(q.expire(500)) == 1
