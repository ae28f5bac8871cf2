"""The simulator in CI: thousands of seeded runs, every invariant checked.

The seeds are split over up to two worker processes. A failure names the
seed and the command that replays it.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

import pytest

from tests.sim.__main__ import summarize
from tests.sim.runner import Result, run_seed

SEEDS = int(os.environ.get("AI_MEMORY_SIM_SEEDS", "2000"))


def _run(seed: int) -> Result:
    return run_seed(seed)


def _report(results: list[Result]) -> str:
    lines = []
    for r in results:
        if not r.ok:
            lines.append(f"seed {r.seed}: {r.violations[0]}\n    replay: {r.replay()}")
    return "\n".join(lines[:10])


@pytest.mark.timeout(600)
def test_invariants_hold_on_many_seeds() -> None:
    jobs = max(1, min(2, os.cpu_count() or 1))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(_run, range(SEEDS), chunksize=25))
    failed = [r for r in results if not r.ok]
    assert not failed, f"{len(failed)} of {SEEDS} seeds failed:\n{_report(results)}"
    # Each run also failed itself had it converged slower than the documented
    # bound (SimConfig.converge_bound_ms); here: the faults and the load
    # really happened, since a run without them proves nothing.
    totals = summarize(results)["totals"]
    # The faults and the load really happened (a run without them proves nothing).
    for key in ("crashes", "pauses", "partitions", "retries", "forwarded", "gc_ops",
                "reads_checked", "decided_sends", "minted_sends_owned", "minted_failovers",
                "keyless_resends", "push_batches_cut", "bootstraps", "join_waits",
                "join_crashes", "seeded", "approvals_decided", "rejections_decided",
                "approved_popped"):
        assert totals.get(key, 0) > SEEDS // 10, key


def test_a_run_replays_exactly() -> None:
    a, b = run_seed(7), run_seed(7)
    assert (a.violations, a.converge_ms, a.stats) == (b.violations, b.converge_ms, b.stats)


def test_five_node_runs_hold() -> None:
    for seed in range(40):
        r = run_seed(seed, nodes=5)
        assert r.ok, f"{r.violations[:3]} (replay: {r.replay()})"
