"""``python -m bench.lanes_memory``: memories on a node with lanes.

Memories are spread over a laned node's lanes (docs/lanes.md, "Memories over
the lanes"): a new memory is made on the lane of its namespace, and a
listing asks every lane and merges. This measures what that costs and gives
on this machine, against one node started plain, in rounds whose order is
reversed every round (as the lanes phase of ``make bench`` does):

* ``memory``: one store per operation, in one of 64 namespaces, through the
  node's one port (the kernel spreads connections over the lanes; a store
  that reaches the other lane is handed over as one frame) and, for the
  2-lane node, by a lane-aware client sending each store to the port of its
  namespace's lane (nothing handed over);
* ``memlist``: the newest 20 memories of one namespace, after the stores
  above (with lanes: every lane answers its share, the lane the request
  reached merges).

Per burst: operations per second, CPU per operation of every process of the
node (supervisor and lanes, from /proc), and the share of requests handed
to another lane. The client is the lean one (:mod:`bench.rawhttp`), in one
load-generator process. Where the load generator shares the node's cores
(a 2-core machine) the rates measure contention as much as the lanes; the
CPU per operation is the figure to compare there.

    .venv/bin/python -m bench.lanes_memory --rounds 4 --seconds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import lanes
from bench.loadgen import LoadJob, LoadPool
from bench.phases import result_dict
from bench.procs import Cluster, running
from bench.workloads import WorkloadSpec


def _systems(one: Cluster, two: Cluster, workload: str) -> list[lanes.System]:
    spec = WorkloadSpec(workload)
    out = [lanes.System(lanes.ONE_LANE, one.urls, one.pids, spec),
           lanes.System(lanes.TWO_LANES, two.urls, two.pids, spec, two.lane_urls())]
    if workload == "memory":
        out.append(lanes.System(lanes.TWO_LANES_DIRECT, two.urls, two.pids,
                                replace(spec, direct_lanes=two.lanes), two.lane_urls()))
    return out


def _burst(pool: LoadPool, s: lanes.System, seconds: float, concurrency: int) -> dict[str, Any]:
    job = LoadJob(s.spec, s.urls, mode="closed", concurrency=concurrency, duration_s=seconds,
                  warmup_s=1.0, cpu_pids=s.pids(), client="raw")
    before = lanes.handoffs(s.lane_urls)
    r = pool.run(job, None)
    handed = lanes.handoffs(s.lane_urls) - before
    res = result_dict(r)
    cpu = res.get("cpu") or {}
    return {"rps": res["rps"], "cpu_ms_per_op": cpu.get("ms_per_op"),
            "errors": res.get("errors"), "handoff_share": handed / r.ops_started
            if r.ops_started else None}


def run(rounds: int, seconds: float, concurrency: int) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": rounds, "seconds": seconds, "concurrency": concurrency}
    with tempfile.TemporaryDirectory(prefix="ai-memory-lanemem-") as tmp:
        one = Cluster(Path(tmp) / "one", size=1, write_quorum=1, name=lanes.ONE_LANE)
        two = Cluster(Path(tmp) / "two", size=1, write_quorum=1, lanes=lanes.LANES,
                      name=lanes.TWO_LANES)
        with running(one), running(two), LoadPool(1) as pool:
            for workload in ("memory", "memlist"):
                which = _systems(one, two, workload)
                seen: dict[str, list[dict[str, Any]]] = {s.label: [] for s in which}
                for i in range(rounds):
                    for s in (which if i % 2 == 0 else which[::-1]):
                        seen[s.label].append(_burst(pool, s, seconds, concurrency))
                        print(f"{workload} round {i + 1} {s.label}: {seen[s.label][-1]}",
                              file=sys.stderr)
                out[workload] = {label: {
                    "bursts": bursts,
                    "rps_median": statistics.median(b["rps"] for b in bursts),
                    "cpu_ms_per_op_median": statistics.median(
                        b["cpu_ms_per_op"] for b in bursts if b["cpu_ms_per_op"] is not None),
                    "handoff_share_median": statistics.median(
                        b["handoff_share"] or 0.0 for b in bursts),
                } for label, bursts in seen.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.lanes_memory", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--json", action="store_true", help="print every burst as JSON")
    args = ap.parse_args(argv)
    result = run(args.rounds, args.seconds, args.concurrency)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for workload in ("memory", "memlist"):
        base = result[workload][lanes.ONE_LANE]
        for label, m in result[workload].items():
            print(f"{workload:8} {label:28} {m['rps_median']:8,.0f}/s  "
                  f"{m['cpu_ms_per_op_median']:.3f} ms CPU/op "
                  f"(x{m['cpu_ms_per_op_median'] / base['cpu_ms_per_op_median']:.2f})  "
                  f"handed over {m['handoff_share_median']:.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
