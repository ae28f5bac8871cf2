"""The two-build comparisons: bench.ab's summary of alternating rounds, and
bench.inproc measuring a real node and the lean client in one process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench import ab, inproc


def _s(build: str, rnd: int, cpu: float, pushed: float = 0.0) -> ab.Sample:
    return ab.Sample(build, rnd, cpu, 100.0, {k: (pushed if k == "sync_ops_pushed_total" else 0.0)
                                              for k in ab.COUNTERS})


def test_the_summary_takes_the_median_of_per_round_ratios() -> None:
    samples = {"notify3": [_s("base", 0, 1.0, 0.1), _s("new", 0, 0.8), _s("new", 1, 1.2), _s("base", 1, 2.0, 0.3),
                           _s("base", 2, 1.0, 0.2), _s("new", 2, 1.1)]}
    [row] = ab.summary(samples)
    assert row["ratios"] == pytest.approx([0.8, 0.6, 1.1])
    assert row["ratio_new_over_base"] == pytest.approx(0.8)
    assert row["base"]["cpu_ms_per_op"] == pytest.approx(1.0)
    assert row["base"]["sync_ops_pushed_total"] == pytest.approx(0.2)
    text = ab.render([row], {"cores": 2, "cpu_model": "Test CPU", "loadavg_start": [1.0], "loadavg_end": [2.0],
                             "base": "abc", "new": "def"})
    assert "| notify3 | 1.000 | 1.100 | 0.800 (0.80, 0.60, 1.10) |" in text
    assert "Machine: 2 cores, Test CPU" in text


@pytest.mark.parametrize("workload", ["notify", "sendpop"])
def test_inproc_measures_a_real_node_in_one_process(tmp_path: Path, workload: str) -> None:
    res = asyncio.run(inproc._child(workload, 60, 4, tmp_path / "node.db"))
    assert res["failed"] == 0 and res["ops"] == 60  # every send+pop claimed its message
    assert res["cpu_us_per_op"] > 0 and res["rate"] > 0
