"""Where a node spends its time under one workload (py-spy, sampled).

``python -m bench.hotpath --workload sendpop`` starts a cluster like the
harness does, drives one workload closed-loop from the load-generator
process for ``--seconds``, and meanwhile samples every node with
``py-spy record --format raw --gil`` (collapsed stacks of the thread
holding the GIL, so an idle event loop is not counted; needs py-spy
installed and ptrace allowed), and reads each node's CPU use from /proc. It then prints, per node, the functions with the most
inclusive and self samples, with the project's own frames kept apart from
library ones, and leaves the raw stacks in ``--out`` for a flame graph
(``flamegraph.pl nodeX.txt > nodeX.svg`` or speedscope). For ``inbox`` it
first fills the inbox to ``--inbox-size`` without sampling.

This is a diagnosis tool for the daemon's owners: it changes nothing.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.cpu import cpu_seconds
from bench.loadgen import LoadJob, LoadPool
from bench.phases import result_dict, setup_projects
from bench.procs import Cluster, running
from bench.workloads import WORKLOADS, WorkloadSpec

OWN_CODE = re.compile(r"\((?:[^()]*/)?(?:daemon|store|federation|common|cli)/[^()]*\)")
FRAME = re.compile(r"^(?P<fn>.*) \((?P<loc>[^()]*)\)$")


def parse_collapsed(text: str) -> tuple[Counter[str], Counter[str], int]:
    """Inclusive and self sample counts per frame from collapsed stacks."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += n
        for f in set(frames):
            inclusive[f] += n
        own[frames[-1]] += n
    return inclusive, own, total


def _short(frame: str) -> str:
    m = FRAME.match(frame)
    if not m:
        return frame
    loc = m["loc"]
    for root in ("site-packages/", "/lib/python3.11/"):
        if root in loc:
            loc = loc.split(root, 1)[1]
    if "/work/" in loc:
        loc = loc.split("/", 3)[-1] if loc.count("/") > 3 else loc
    return f"{m['fn']} ({loc})"


def summarize_profile(text: str, top: int = 15) -> str:
    inclusive, own, total = parse_collapsed(text)
    if total == 0:
        return "  (no samples)"
    lines = [f"  {total} samples"]
    lines.append("  inclusive, project code:")
    ours = [(f, n) for f, n in inclusive.most_common() if OWN_CODE.search(f)]
    lines += [f"    {100 * n / total:5.1f}%  {_short(f)}" for f, n in ours[:top]]
    lines.append("  self (where the CPU is), any code:")
    lines += [f"    {100 * n / total:5.1f}%  {_short(f)}" for f, n in own.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__)
    ap.add_argument("--workload", choices=[w for w in WORKLOADS if w != "echo"], default="sendpop")
    ap.add_argument("--nodes", type=int, choices=(1, 3), default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--inbox-size", type=int, default=20_000)
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--out", type=Path, default=None, help="where the raw stacks go (default: a temp dir)")
    args = ap.parse_args(argv)

    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(pyspy).exists():
        print("py-spy is not installed (pip install py-spy)", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="ai-memory-hotpath-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ai-memory-hotpath-data-"))
    projects = tuple(f"bench-p{i}" for i in range(8))
    try:
        with LoadPool(1) as pool, running(Cluster(work, args.nodes, 2 if args.nodes > 1 else 1)) as cluster:
            if args.workload == "inbox":
                agent = f"bench-inbox-{args.inbox_size}"
                pool.run(LoadJob(WorkloadSpec("notify", notify_target=agent), cluster.urls, mode="count",
                                 total=args.inbox_size, concurrency=128))
                spec = WorkloadSpec("inbox", inbox_agent=agent)
            else:
                spec = WorkloadSpec(args.workload, projects=projects if args.workload in ("sendpop", "mix") else ())
            if args.workload in ("sendpop", "mix"):
                setup_projects(cluster.urls, spec)
            samplers = [
                subprocess.Popen([pyspy, "record", "--pid", str(n.pid), "--duration", str(int(args.seconds) + 1),
                                  "--rate", str(args.rate), "--format", "raw", "--nonblocking", "--gil",
                                  "--output", str(out / f"{n.name}.txt")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                for n in cluster.nodes
            ]
            job = LoadJob(spec, cluster.urls, mode="closed", concurrency=args.concurrency,
                          duration_s=args.seconds, warmup_s=0.0)
            before = {n.name: cpu_seconds(n.pid) for n in cluster.nodes}
            t0 = time.monotonic()
            res = result_dict(pool.run(job, start_delay_s=0.0), claims=args.workload == "sendpop")
            wall = time.monotonic() - t0
            cpu = {n.name: (cpu_seconds(n.pid) - before[n.name]) / wall for n in cluster.nodes}
            for s in samplers:
                _, err = s.communicate(timeout=args.seconds + 30)
                if s.returncode != 0:
                    print(f"py-spy failed: {err.decode(errors='replace')[-500:]}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    unit = "claims/s" if args.workload == "sendpop" else "ops/s"
    tp = res["ops_per_s"] if res.get("ops_per_s") is not None else res["rps"]
    print(f"{args.workload} on {args.nodes} node(s): {tp:,.0f} {unit}, p50 {res['p50_ms']:.1f} ms, "
          f"p99 {res['p99_ms']:.1f} ms, errors {res['http_errors'] + res['transport_errors']}, "
          f"503 {res['unavailable']}")
    print("CPU per node (1.0 = one core): " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu.items())))
    for f in sorted(out.glob("node*.txt")):
        print(f"\n{f.stem} ({f}), samples taken while holding the GIL:")
        print(summarize_profile(f.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
