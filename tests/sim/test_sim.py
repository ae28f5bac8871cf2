"""The simulator in CI: thousands of seeded runs, every invariant checked.

The seeds run in batches of ``BATCH``, one test each, so a run shows its
progress and a failure names its batch. The first batch is in the fast lane
(``make test-fast``); the others are marked slow. Inside a batch the seeds
are split over up to two worker processes, shared by the whole module. A
failure names the seed and the command that replays it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest

from tests.sim.__main__ import summarize
from tests.sim.runner import Result, run_seed

SEEDS = int(os.environ.get("AI_MEMORY_SIM_SEEDS", "2000"))
BATCH = 100


def _run(seed: int) -> Result:
    return run_seed(seed)


def _report(results: list[Result]) -> str:
    lines = []
    for r in results:
        if not r.ok:
            lines.append(f"seed {r.seed}: {r.violations[0]}\n    replay: {r.replay()}")
    return "\n".join(lines[:10])


def _batches() -> list[object]:
    firsts = range(0, SEEDS, BATCH)
    return [pytest.param(first, id=f"seeds{first}-{min(first + BATCH, SEEDS) - 1}",
                         marks=() if first == 0 else (pytest.mark.slow,))
            for first in firsts]


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    jobs = max(1, min(2, os.cpu_count() or 1))
    with ProcessPoolExecutor(max_workers=jobs) as workers:
        yield workers


@pytest.mark.timeout(120)
@pytest.mark.parametrize("first", _batches())
def test_invariants_hold_on_many_seeds(pool: ProcessPoolExecutor, first: int) -> None:
    seeds = range(first, min(first + BATCH, SEEDS))
    results = list(pool.map(_run, seeds, chunksize=10))
    failed = [r for r in results if not r.ok]
    assert not failed, f"{len(failed)} of {len(seeds)} seeds failed:\n{_report(results)}"
    # Each run also failed itself had it converged slower than the documented
    # bound (SimConfig.converge_bound_ms); here: the faults and the load
    # really happened, since a run without them proves nothing. Each count
    # below averages about 0.45 per seed or more (join_crashes, the rarest),
    # so a tenth of the batch's seeds leaves a wide margin. Purges are
    # rarer (about 0.22 acknowledged per seed, 8 in the leanest batch of
    # 100 seen): a fiftieth of the seeds.
    totals = summarize(results)["totals"]
    for key in ("crashes", "pauses", "partitions", "retries", "forwarded", "gc_ops",
                "reads_checked", "decided_sends", "minted_sends_owned", "minted_failovers",
                "keyless_resends", "push_batches_cut", "bootstraps", "join_waits",
                "join_crashes", "seeded", "approvals_decided", "approved_popped"):
        assert totals.get(key, 0) > len(seeds) // 10, key
    # Rarer in some batches (10 rejections in seeds 1600-1699 once leases
    # shifted the timing): present, not frequent, is what this asks.
    for key in ("purges_acked", "purged_messages", "rejections_decided"):
        assert totals.get(key, 0) > len(seeds) // 50, key
    # Leases (issue 26): the leanest of 20 batches of 100 seeds had 242
    # acknowledged leased pops, 134 expiries, 41 redeliveries, 23 renews
    # acknowledged and 17 refused, 18 completions acknowledged and 9
    # refused, and 231 sweep requests (1 of which expired a lease itself:
    # too few to count on; without the sweep, 8 of 400 seeds fail rule 8).
    for key in ("leased_pops_acked", "expiries", "redeliveries", "renews_acked",
                "completions_acked", "sweep_requests"):
        assert totals.get(key, 0) > len(seeds) // 10, key
    # 9 in seeds 400-499; 2 in seeds 0-99 once members checked their copies at a start
    for key in ("completes_refused", "renews_refused"):
        assert totals.get(key, 0) >= len(seeds) // 50, key
    assert totals.get("two_holder_violations", -1) == 0


def test_a_run_replays_exactly() -> None:
    a, b = run_seed(7), run_seed(7)
    assert (a.violations, a.converge_ms, a.stats) == (b.violations, b.converge_ms, b.stats)


@pytest.mark.slow
def test_five_node_runs_hold() -> None:
    for seed in range(40):
        r = run_seed(seed, nodes=5)
        assert r.ok, f"{r.violations[:3]} (replay: {r.replay()})"


@pytest.mark.parametrize("seed", [196, 332, 392])
def test_a_member_put_back_on_a_backup_older_than_what_was_collected_is_seeded(
        seed: int) -> None:
    """Seeds in which a crashed member comes back on an old backup of its own
    disk (ai-memory restore) that lacks ops every other member had already
    collected: the copy is set aside and the member seeded, and the run
    holds. With the copy kept, each of them never converges (it waits for
    ops no log holds)."""
    r = run_seed(seed)
    assert r.ok, f"{r.violations[:3]} (replay: {r.replay()})"
    assert r.stats.get("restores", 0) >= 1 and r.stats.get("copies_set_aside", 0) >= 1
