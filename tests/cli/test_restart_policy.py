"""The restart rules of `cluster up` (cli/restart_policy.py), without processes."""

from __future__ import annotations

from cli.restart_policy import NodeRecord, RestartPolicy, after_exit, give_up, restart_delay

POLICY = RestartPolicy(first=0.5, cap=8.0, reset_after=30.0, report_after=3, report_every=8,
                       give_up_after=3)


def test_backoff_doubles_per_exit_in_a_row_up_to_the_cap() -> None:
    failures, delays = 0, []
    for _ in range(7):
        decision = after_exit(POLICY, failures, uptime=0.2)
        failures = decision.failures
        delays.append(decision.delay)
    assert delays == [0.5, 1, 2, 4, 8, 8, 8]
    assert failures == 7
    assert restart_delay(10_000, 0.5, 8.0) == 8.0  # no overflow however long it fails


def test_a_node_that_stayed_up_long_enough_starts_over() -> None:
    assert after_exit(POLICY, 6, uptime=30.0).failures == 1
    assert after_exit(POLICY, 6, uptime=30.0).delay == 0.5
    assert after_exit(POLICY, 6, uptime=29.9).failures == 7


def test_a_node_that_keeps_failing_is_reported_at_the_third_exit_then_every_eighth() -> None:
    reported = [n for n in range(1, 30) if after_exit(POLICY, n - 1, uptime=0.1).report]
    assert reported == [3, 11, 19, 27]
    assert not after_exit(POLICY, 2, uptime=31).report  # a fresh failure after a long life


def test_giving_up_needs_every_node_failing_and_none_ever_healthy() -> None:
    failing = NodeRecord(ever_healthy=False, running=False, failures=3)
    assert give_up(POLICY, [failing, failing, failing])
    # One node still has a start to fail before the verdict.
    assert not give_up(POLICY, [failing, failing, NodeRecord(False, False, 2)])
    # One is running (maybe slow to answer): keep trying.
    assert not give_up(POLICY, [failing, failing, NodeRecord(False, True, 3)])
    # One served once: the configuration works, this is a crash loop to retry forever.
    assert not give_up(POLICY, [failing, failing, NodeRecord(True, False, 9)])
    assert not give_up(POLICY, [])
