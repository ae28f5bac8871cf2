"""`python -m bench --tls` end to end, tiny: two real three-node clusters
(plain and TLS), one round, a few notifies and claims each."""

from __future__ import annotations

import pytest

from bench.__main__ import main

pytestmark = [pytest.mark.slow]


def test_bench_tls_runs_and_prints_both_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--tls", "--tls-rounds", "1", "--tls-notifies", "30",
                 "--tls-claims", "20"]) == 0
    out = capsys.readouterr().out
    assert "round 1 plain:" in out and "round 1 tls:" in out
    assert "| notify |" in out and "| claim |" in out
