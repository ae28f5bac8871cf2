"""`python -m bench --tls` end to end, tiny: two real three-node clusters
(plain and TLS), one round, a few notifies and claims each."""

from __future__ import annotations

import pytest

from bench.__main__ import main

pytestmark = [pytest.mark.slow]


def test_bench_tls_runs_and_prints_both_figures(capsys: pytest.CaptureFixture[str]) -> None:
    # Enough notifies for a few CPU ticks on each trio: 30 at 0.3 ms on three
    # nodes read 0 ticks once (a ratio divided by zero, 2026-12-05).
    assert main(["--tls", "--tls-rounds", "1", "--tls-notifies", "200",
                 "--tls-claims", "20"]) == 0
    out = capsys.readouterr().out
    assert "round 1 plain:" in out and "round 1 tls:" in out
    assert "| notify |" in out and "| claim |" in out
