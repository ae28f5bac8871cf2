"""``python -m bench.ab --base-rev REV``: the servers of two builds, in alternating rounds.

A change that saves a few percent of CPU per operation disappears in the
noise of a shared 2-core machine when its before and after figures are
minutes apart. This runs the nodes of a base build (``--base-rev``, a git
revision of this repository unpacked into a temp dir, or ``--base-dir``)
and of this working tree side by side: for each cluster shape it starts
one cluster of each build, then for ``--rounds`` rounds drives each
workload closed-loop against the base cluster and then the new one, the
order reversed every round, so both see the same machine within seconds.
Only the servers differ (``PYTHONPATH`` points the nodes at their build);
the load generator, its client and the workloads are this tree's.

Per workload it prints each build's CPU per acknowledged operation (all
nodes, from ``/proc``; per claim for send+pop) and rate, as medians over
the rounds, the median of the per-round ratios new / base, the
anti-entropy ops pushed per operation (``sync_ops_pushed_total``) and the
load average at the start and the end.

    .venv/bin/python -m bench.ab --base-rev main --rounds 6 --seconds 5
    .venv/bin/python -m bench.ab --base-rev HEAD~1 --workloads notify1,sendpop3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.hotpath import work_counters
from bench.loadgen import LoadJob, LoadPool
from bench.machine import describe, host
from bench.phases import result_dict, setup_projects
from bench.procs import Cluster, running
from bench.workloads import WorkloadSpec

REPO = Path(__file__).resolve().parent.parent
PROJECTS = tuple(f"bench-p{i}" for i in range(8))
# name -> (nodes, workload)
SHAPES: dict[str, tuple[int, str]] = {
    "notify1": (1, "notify"), "notify3": (3, "notify"),
    "sendpop1": (1, "sendpop"), "sendpop3": (3, "sendpop"),
    "mix3": (3, "mix"),
    "notify1lanes2": (1, "notify"),  # one node of `serve --lanes 2`: about half the notifies handed over
}
LANES = {"notify1lanes2": 2}  # shapes whose nodes run lanes
COUNTERS = ("sync_ops_pushed_total", "peer_batches_total", "mailbox_forwards_total")


@dataclass
class Sample:
    build: str
    round: int
    cpu_ms: float
    rate: float
    counters: dict[str, float]  # per operation


@contextmanager
def unpacked(rev: str) -> Iterator[Path]:
    """``rev`` of this repository as a plain directory tree, removed after."""
    where = Path(tempfile.mkdtemp(prefix="ai-memory-ab-base-"))
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def _measure(pool: LoadPool, cluster: Cluster, name: str,
             args: argparse.Namespace) -> tuple[float, float, dict[str, float]]:
    workload = SHAPES[name][1]
    spec = WorkloadSpec(workload, projects=PROJECTS if workload in ("sendpop", "mix") else ())
    before = [work_counters(n.url) for n in cluster.nodes]
    rate = args.rates.get(name)
    if rate:  # open loop: the same work per second for both builds
        job = LoadJob(spec, cluster.urls, mode="open", rate=rate, duration_s=args.seconds,
                      warmup_s=args.warmup, max_inflight=max(args.concurrency * 16, 256),
                      connections=args.concurrency, cpu_pids=cluster.pids(), client=args.client)
    else:  # closed loop: each build at its own maximum
        job = LoadJob(spec, cluster.urls, mode="closed", concurrency=args.concurrency,
                      duration_s=args.seconds, warmup_s=args.warmup, cpu_pids=cluster.pids(),
                      client=args.client)
    r = pool.run(job, start_delay_s=0.0)
    after = [work_counters(n.url) for n in cluster.nodes]
    res = result_dict(r, claims=workload == "sendpop")
    cpu = res["cpu"]
    if not cpu or cpu.get("ms_per_op") is None or not cpu.get("ops"):
        raise RuntimeError(f"no CPU reading for {workload} on {cluster.label}")
    ops = cpu["ops"]
    counters = {k: sum(a.get(k, 0.0) - b.get(k, 0.0) for a, b in zip(after, before, strict=True)) / ops
                for k in COUNTERS}
    rate = res["ops_per_s"] if res.get("ops_per_s") is not None else res["rps"]
    return float(cpu["ms_per_op"]), float(rate), counters


def run(args: argparse.Namespace, base: Path) -> dict[str, list[Sample]]:
    trees = {"base": base, "new": REPO}
    samples: dict[str, list[Sample]] = {w: [] for w in args.workloads}
    by_nodes: dict[tuple[int, int], list[str]] = {}
    for w in args.workloads:
        by_nodes.setdefault((SHAPES[w][0], LANES.get(w, 0)), []).append(w)
    work = Path(tempfile.mkdtemp(prefix="ai-memory-ab-"))
    try:
        with LoadPool(1) as pool:
            for (nodes, lanes), names in sorted(by_nodes.items()):
                with ExitStack() as stack:
                    clusters = {}
                    for build, tree in trees.items():
                        c = Cluster(work / f"{build}{nodes}l{lanes}", nodes, 2 if nodes > 1 else 1,
                                    env=_env(tree), lanes=lanes)
                        clusters[build] = stack.enter_context(running(c))
                        if any(SHAPES[n][1] in ("sendpop", "mix") for n in names):
                            setup_projects(c.urls, WorkloadSpec("sendpop", projects=PROJECTS))
                    for rnd in range(args.rounds):
                        order = ["base", "new"] if rnd % 2 == 0 else ["new", "base"]
                        for name in names:
                            for build in order:
                                cpu, rate, counters = _measure(pool, clusters[build], name, args)
                                samples[name].append(Sample(build, rnd, cpu, rate, counters))
                                print(f"  round {rnd + 1} {name:<9} {build:<4} {cpu:.3f} ms/op "
                                      f"{rate:8,.0f}/s  pushed {counters['sync_ops_pushed_total']:.3f}/op  "
                                      f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return samples


def summary(samples: dict[str, list[Sample]]) -> list[dict[str, Any]]:
    rows = []
    for name, ss in samples.items():
        by = {b: [s for s in ss if s.build == b] for b in ("base", "new")}
        rounds = sorted({s.round for s in ss})
        ratios = []
        for r in rounds:
            pair = {s.build: s for s in ss if s.round == r}
            if "base" in pair and "new" in pair and pair["base"].cpu_ms > 0:
                ratios.append(pair["new"].cpu_ms / pair["base"].cpu_ms)
        row: dict[str, Any] = {"workload": name, "rounds": len(rounds),
                               "ratio_new_over_base": statistics.median(ratios) if ratios else None,
                               "ratios": ratios}
        for b, bs in by.items():
            row[b] = {"cpu_ms_per_op": statistics.median(s.cpu_ms for s in bs),
                      "rate": statistics.median(s.rate for s in bs),
                      **{k: statistics.median(s.counters[k] for s in bs) for k in COUNTERS}}
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"Machine: {describe(meta)}.",
             f"base {meta['base']} against this tree ({meta['new']}); medians over rounds, "
             "CPU per op summed over the nodes (per claim for send+pop).", "",
             "| workload | base CPU ms/op | new CPU ms/op | new / base (median of rounds) | base rate/s | "
             "new rate/s | AE ops pushed per op, base → new |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ratio = r["ratio_new_over_base"]
        each = ", ".join(f"{x:.2f}" for x in r["ratios"])
        lines.append(f"| {r['workload']} | {r['base']['cpu_ms_per_op']:.3f} | {r['new']['cpu_ms_per_op']:.3f} | "
                     f"{'-' if ratio is None else f'{ratio:.3f}'} ({each}) | {r['base']['rate']:,.0f} | "
                     f"{r['new']['rate']:,.0f} | {r['base']['sync_ops_pushed_total']:.3f} → "
                     f"{r['new']['sync_ops_pushed_total']:.3f} |")
    return "\n".join(lines)


def _git(*argv: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--base-rev", help="a git revision of this repository: the base build")
    src.add_argument("--base-dir", type=Path, help="a directory holding the base build's packages")
    ap.add_argument("--workloads", default="notify1,notify3,sendpop3",
                    help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=5.0, help="measured window per burst")
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--client", choices=("raw", "aiohttp"), default="raw")
    ap.add_argument("--rates", default="",
                    help="open loop at a fixed rate per workload, e.g. notify1=1000,sendpop3=200 (claims/s "
                         "for send+pop): CPU per op at equal work, without the batching a faster build's "
                         "higher maximum buys; the others run closed loop")
    ap.add_argument("--json", type=Path, help="also write the samples and summary here")
    args = ap.parse_args(argv)
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    args.rates = {k.strip(): float(v) for k, _, v in (x.partition("=") for x in args.rates.split(",") if x)}
    unknown = [w for w in [*args.workloads, *args.rates] if w not in SHAPES]
    if unknown:
        ap.error(f"unknown workload(s): {', '.join(unknown)}")
    meta: dict[str, Any] = {**host(), "loadavg_start": list(os.getloadavg()),
                            "base": args.base_rev or str(args.base_dir),
                            "new": _git("rev-parse", "--short", "HEAD") + (
                                "+dirty" if _git("status", "--porcelain", "--untracked-files=no") else "")}
    with ExitStack() as stack:
        base = stack.enter_context(unpacked(args.base_rev)) if args.base_rev else args.base_dir
        samples = run(args, base)
    meta["loadavg_end"] = list(os.getloadavg())
    rows = summary(samples)
    print(render(rows, meta))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "summary": rows, "samples": {
            k: [s.__dict__ for s in v] for k, v in samples.items()}}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
