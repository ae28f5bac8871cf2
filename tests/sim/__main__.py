"""Command line: ``python -m tests.sim --seeds 5000`` or ``--seed N`` to replay.

Runs seeds (in parallel with ``--jobs``), prints failures with their replay
command, and a summary with the measured convergence bound: the slowest
time, over all seeds, from the heal until every node held the same state.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from tests.sim.runner import Result, run_seed


def _one(args: tuple[int, int | None]) -> Result:
    return run_seed(*args)


def summarize(results: list[Result]) -> dict[str, Any]:
    conv = sorted(r.converge_ms for r in results if r.converge_ms is not None)
    ticks = sorted(r.converge_ticks for r in results if r.converge_ticks is not None)
    totals: dict[str, int] = {}
    for r in results:
        for k, v in r.stats.items():
            totals[k] = totals.get(k, 0) + v
    return {
        "seeds": len(results),
        "failed": sum(1 for r in results if not r.ok),
        "converge_ms_max": conv[-1] if conv else None,
        "converge_ms_p99": conv[int(len(conv) * 0.99)] if conv else None,
        "converge_ms_p50": conv[len(conv) // 2] if conv else None,
        "converge_ticks_max": ticks[-1] if ticks else None,
        "totals": totals,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    p.add_argument("--seeds", type=int, default=1000, help="how many seeds to run")
    p.add_argument("--first", type=int, default=0, help="first seed")
    p.add_argument("--seed", type=int, help="replay one seed and print its details")
    p.add_argument("--nodes", type=int, choices=(3, 5), help="force the cluster size")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    if args.seed is not None:
        r = run_seed(args.seed, args.nodes)
        print(f"seed {r.seed}: {'ok' if r.ok else 'FAILED'}; {r.cfg}")
        print(f"converged {r.converge_ms} ms ({r.converge_ticks} ticks) after the heal")
        print(f"stats {r.stats}")
        for v in r.violations:
            print("  violation:", v)
        return 0 if r.ok else 1
    started = time.monotonic()
    seeds = [(s, args.nodes) for s in range(args.first, args.first + args.seeds)]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(_one, seeds, chunksize=16))
    for r in results:
        if not r.ok:
            print(f"seed {r.seed} FAILED: {r.violations[0]}")
            print(f"  replay: {r.replay()}")
    s = summarize(results)
    print(f"{s['seeds']} seeds, {s['failed']} failed, {time.monotonic() - started:.1f}s; "
          f"convergence after heal: max {s['converge_ms_max']} ms "
          f"({s['converge_ticks_max']} ticks), p99 {s['converge_ms_p99']} ms, "
          f"p50 {s['converge_ms_p50']} ms")
    print("totals:", dict(sorted(s["totals"].items())))
    return 1 if s["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
