"""Where the cluster spends its CPU under one workload (py-spy, sampled).

``python -m bench.hotpath --workload sendpop`` starts a cluster like the
harness does, drives one workload closed-loop from the load-generator
process for ``--seconds``, and meanwhile samples every node with
``py-spy record --format raw --function`` (needs py-spy, which the bench
extra installs, and ptrace allowed). By default it samples the thread
holding the GIL (``--threads gil``), which is the event loop's Python work
and the store threads' Python work; ``--threads cpu`` samples every thread
py-spy thinks is running, which on a busy machine also counts threads
that are blocked in C (a queue wait, epoll). Samples only ever share out
CPU that /proc measured: per node, the main thread's samples share out the
main thread's CPU and the other threads' samples theirs. The load job reads every node's CPU from /proc
over its measured window (:mod:`bench.cpu`), which turns sample shares
into milliseconds: it prints the cluster's CPU per operation, then, summed
over the nodes, the functions with the most inclusive and self cost in
**CPU ms per operation** (project frames kept apart from library ones),
then each node's own top frames. Because samples of a busy machine also
land on threads that wait for a core, the split of that CPU between the
event-loop (main) thread and the other threads (SQLite writer, aiosqlite,
executor) is read exactly from ``/proc/<pid>/task/*/stat`` and printed
first, in user and system time per operation, followed by the work each
operation causes across the cluster, counted by the daemons themselves
(HTTP requests per route, peer batches, SQLite commits, forwards), which
contention cannot distort. It leaves the raw collapsed stacks in
``--out`` for a flame graph (``flamegraph.pl nodeX.txt > nodeX.svg`` or
speedscope). For ``inbox`` it first fills the inbox to ``--inbox-size``
without sampling.

This is a diagnosis tool for the daemon's owners: it changes nothing.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cpu import CLK_TCK, thread_times
from bench.loadgen import LoadJob, LoadPool
from bench.phases import result_dict, setup_projects
from bench.procs import Cluster, http_json, running
from bench.workloads import WORKLOADS, WorkloadSpec

OWN_CODE = re.compile(r"\((?:[^()]*/)?(?:daemon|store|federation|common|cli)/[^()]*\)")
FRAME = re.compile(r"^(?P<fn>.*) \((?P<loc>[^()]*)\)$")
_PROJECTS = tuple(f"bench-p{i}" for i in range(8))  # sendpop/mix claim across these


Tally = dict[str, float]  # frame, category or counter name -> amount


def _tally() -> Tally:
    return defaultdict(float)


def most_common(t: Tally, n: int | None = None) -> list[tuple[str, float]]:
    """``t``'s items, largest first (Counter.most_common for float tallies)."""
    return sorted(t.items(), key=lambda kv: -kv[1])[:n]


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


def _split_by_thread(text: str) -> dict[bool, str]:
    """Collapsed stacks of the main thread (True) and of the others (False)."""
    parts: dict[bool, list[str]] = {True: [], False: []}
    for line in text.splitlines():
        stack = line.rpartition(" ")[0]
        parts[_is_main_thread(stack.split(";"))].append(line)
    return {k: "\n".join(v) for k, v in parts.items()}


def cluster_costs(
    profiles: dict[str, str], cpu_s: dict[str, tuple[float, float]], ops: int
) -> tuple[Tally, Tally]:
    """Inclusive and self cost per frame in CPU ms per operation, over all nodes.

    Per node, the main thread's samples share out the main thread's CPU over
    the window and the other threads' samples theirs (``cpu_s``: (main,
    other) seconds from /proc), so the nodes' figures add up.
    """
    inc_ms = _tally()
    own_ms = _tally()
    for name, text in profiles.items():
        if ops <= 0 or name not in cpu_s:
            continue
        for main, part in _split_by_thread(text).items():
            inclusive, own, total = parse_collapsed(part)
            if total == 0:
                continue
            per_sample = cpu_s[name][0 if main else 1] * 1000.0 / ops / total
            for f, n in inclusive.items():
                inc_ms[f] += n * per_sample
            for f, n in own.items():
                own_ms[f] += n * per_sample
    return inc_ms, own_ms


def _is_main_thread(stack: list[str]) -> bool:
    return not any(f.startswith("Thread._bootstrap (") for f in stack)


# Where a sampled stack belongs, first match wins. The peer endpoints run
# inside aiohttp's request handler too, so they are matched before the
# public API; aiohttp's own parsing and response writing (outside any
# handler) is one bucket for every route.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("store threads (SQLite writer, aiosqlite readers, executor)",
     ("Thread._bootstrap (threading.py", "_connection_worker_thread (aiosqlite")),
    ("store on the event loop (small batches committed inline, writer task batching, executor hand-offs, reads)",
     ("Writer._run (", "(store/", "_chain_future")),
    ("peer client (sending batches/forwards to peers, reading their answers)",
     ("PeerLink.", "PeerClient.", "(aiohttp/client", "(aiohttp/connector.py", "Node._forward (")),
    ("peer endpoints /peer/v1/* (decode, core, apply, reply)", ("(daemon/api/peer.py",)),
    ("public API handlers (daemon/api: middlewares, validation, core)", ("(daemon/api/",)),
    ("aiohttp server machinery (parse, route, write responses to sockets)", ("(aiohttp/",)),
    ("background (ticks, anti-entropy pushes, purges)", ("Node._ticker (", "Node._purger (", "Node._push_missing (")),
)


def categorize(stack: list[str]) -> str:
    for name, needles in CATEGORIES:
        if any(n in f for f in stack for n in needles):
            return name
    if stack and stack[-1].startswith("Runner.run ("):
        return "event loop itself (uvloop callbacks, no Python frame)"
    return "other"


def category_costs(profiles: dict[str, str], cpu_s: dict[str, tuple[float, float]], ops: int) -> Tally:
    """CPU ms per op by category, over all nodes.

    ``cpu_s`` is each node's (main thread, other threads) CPU seconds over
    the window, from /proc: the main thread's samples share out the main
    thread's CPU and the other threads' samples theirs, so a thread that
    waits for a core while holding the GIL distorts shares only within its
    own thread. Other-thread CPU that no sample saw (SQLite's C code runs
    without the GIL) is its own row.
    """
    out = _tally()
    for name, text in profiles.items():
        counts: dict[bool, Counter[str]] = {True: Counter(), False: Counter()}
        for line in text.splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = [f for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
            if frames:
                counts[_is_main_thread(frames)][categorize(frames)] += int(count)
        if ops <= 0 or name not in cpu_s:
            continue
        for main, seconds in ((True, cpu_s[name][0]), (False, cpu_s[name][1])):
            total = sum(counts[main].values())
            if total == 0:
                if seconds > 0:
                    out["threads without a sample (C code outside the GIL: SQLite, fsync)"] += (
                        seconds * 1000.0 / ops)
                continue
            for k, n in counts[main].items():
                out[k] += n * seconds * 1000.0 / ops / total
    return out


def node_thread_cpu(before: dict[str, dict[int, tuple[int, int]]], after: dict[str, dict[int, tuple[int, int]]],
                    mains: dict[str, int]) -> dict[str, tuple[float, float]]:
    """Each node's (main thread, other threads) CPU seconds between two readings."""
    out: dict[str, tuple[float, float]] = {}
    for node, threads in after.items():
        main = other = 0
        for tid, (u, s) in threads.items():
            u0, s0 = before.get(node, {}).get(tid, (0, 0))
            if tid == mains[node]:
                main += u + s - u0 - s0
            else:
                other += u + s - u0 - s0
        out[node] = (main / CLK_TCK, other / CLK_TCK)
    return out


def format_costs(inc_ms: Tally, own_ms: Tally, per_op_ms: float, top: int = 25) -> str:
    def row(f: str, ms: float) -> str:
        return f"    {ms:7.3f} ms  {100 * ms / per_op_ms:5.1f}%  {_short(f)}"

    lines = ["  inclusive, project code (CPU ms per op, share of the cluster's CPU per op):"]
    lines += [row(f, ms) for f, ms in most_common(inc_ms) if OWN_CODE.search(f)][:top]
    lines.append("  inclusive, library code:")
    lines += [row(f, ms) for f, ms in most_common(inc_ms) if not OWN_CODE.search(f)][:top]
    lines.append("  self (where the CPU is), any code:")
    lines += [row(f, ms) for f, ms in most_common(own_ms, top)]
    return "\n".join(lines)


def thread_split(
    before: dict[str, dict[int, tuple[int, int]]], after: dict[str, dict[int, tuple[int, int]]],
    mains: dict[str, int], ops: int,
) -> str:
    """CPU ms per op of the event-loop thread and of all other threads, in
    user and system time, summed over the nodes (threads that ended during
    the window are missed; threads that started count from zero)."""
    acc = {"event loop (main thread)": [0, 0], "other threads": [0, 0]}
    for node, threads in after.items():
        for tid, (u, s) in threads.items():
            u0, s0 = before.get(node, {}).get(tid, (0, 0))
            k = "event loop (main thread)" if tid == mains[node] else "other threads"
            acc[k][0] += u - u0
            acc[k][1] += s - s0
    if ops <= 0:
        return "  (no operations)"
    lines = ["CPU per op by thread, all nodes (from /proc/<pid>/task/*/stat):"]
    for k, (u, s) in acc.items():
        lines.append(f"  {k:<25} {(u + s) * 1000 / CLK_TCK / ops:6.3f} ms  "
                     f"(user {u * 1000 / CLK_TCK / ops:.3f}, system {s * 1000 / CLK_TCK / ops:.3f})")
    return "\n".join(lines)


METRIC_LINE = re.compile(r"^ai_memory_(?P<name>[a-z_]+?)(?:_count)?(?P<labels>\{[^}]*\})? (?P<v>[0-9.e+-]+)$")


def work_counters(url: str) -> Tally:
    """What a node has done so far, as counters: HTTP requests per route
    (the latency histogram's counts), the daemon's own counters, and the
    writer's commits (batches) and jobs from /api/v1/cluster/status."""
    import urllib.request

    out = _tally()
    with urllib.request.urlopen(url + "/api/v1/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if "_bucket{" in line:
            continue
        is_sum = line.startswith("ai_memory_http_request_seconds_sum{")
        m = METRIC_LINE.match(line.replace("_seconds_sum{", "_seconds{", 1) if is_sum else line)
        if not m or ("_sum{" in line and not is_sum):
            continue
        labels = m["labels"] or ""
        if m["name"] == "http_request_seconds":
            route = re.search(r'route="([^"]*)"', labels)
            method = re.search(r'method="([^"]*)"', labels)
            key = f"HTTP {method[1] if method else '?'} {route[1] if route else '?'}"
            if is_sum:
                key = "seconds " + key
        else:
            key = m["name"] + re.sub(r'peer="[^"]*",?', "", labels).replace("{}", "")
        out[key] += float(m["v"])
    writer = http_json(url + "/api/v1/cluster/status").get("oplog", {}).get("writer", {})
    out["SQLite commits (writer batches)"] += writer.get("batches", 0)
    out["writer jobs"] += writer.get("jobs", 0)
    return out


def format_anatomy(before: dict[str, Tally], after: dict[str, Tally], ops: int) -> str:
    """Per acknowledged op, summed over the nodes: what the cluster did."""
    total = _tally()
    for node, c in after.items():
        for k, v in c.items():
            total[k] += v - before[node].get(k, 0)
    skip = ("HTTP GET /api/v1/metrics", "HTTP GET /api/v1/cluster/status", "HTTP GET /api/v1/health")
    rows = [(k, v) for k, v in sorted(total.items())
            if v > 0 and k not in skip and not k.startswith("seconds ")]
    if ops <= 0 or not rows:
        return "  (nothing counted)"
    lines = ["work per op, all nodes (from /api/v1/metrics and /api/v1/cluster/status):"]
    lines += [f"  {v / ops:8.3f}  {k}" for k, v in rows]
    timed = [(k, total["seconds " + k] / v) for k, v in rows if k.startswith("HTTP ") and total["seconds " + k] > 0]
    if timed:
        lines.append("mean wall time inside the node per request (timing middleware), ms:")
        lines += [f"  {1000 * s:8.2f}  {k}" for k, s in timed]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=[w for w in WORKLOADS if w != "echo"], default="sendpop")
    ap.add_argument("--nodes", type=int, choices=(1, 3), default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--inbox-size", type=int, default=20_000)
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--threads", choices=("cpu", "gil"), default="gil",
                    help="sample the thread holding the GIL (default) or every thread py-spy thinks is running")
    ap.add_argument("--open-rate", type=float, default=0.0,
                    help="offer this many ops/s open-loop instead of the closed loop (CPU per op at equal "
                         "rates, e.g. 1 node against 3, without the amortization a higher rate buys)")
    ap.add_argument("--client", choices=("raw", "aiohttp"), default="aiohttp",
                    help="the load generator's HTTP client")
    ap.add_argument("--top", type=int, default=25, help="frames per list")
    ap.add_argument("--out", type=Path, default=None, help="where the raw stacks go (default: a temp dir)")
    return ap


@dataclass
class _Window:
    """One measured window: the load result and the nodes' counters at both ends."""

    res: dict[str, Any]
    t_before: dict[str, dict[int, tuple[int, int]]]  # node -> thread id -> (user, system) ticks
    t_after: dict[str, dict[int, tuple[int, int]]]
    w_before: dict[str, Tally]  # node -> work counters
    w_after: dict[str, Tally]
    mains: dict[str, int]  # node -> pid, which is also its main thread's id


def _prepare(args: argparse.Namespace, pool: LoadPool, cluster: Cluster) -> WorkloadSpec:
    """The workload to measure, after filling the inbox or opening the projects it needs."""
    if args.workload == "inbox":
        agent = f"bench-inbox-{args.inbox_size}"
        pool.run(LoadJob(WorkloadSpec("notify", notify_target=agent), cluster.urls, mode="count",
                         total=args.inbox_size, concurrency=128, client=args.client))
        spec = WorkloadSpec("inbox", inbox_agent=agent)
    else:
        spec = WorkloadSpec(args.workload, projects=_PROJECTS if args.workload in ("sendpop", "mix") else ())
    if args.workload in ("sendpop", "mix"):
        setup_projects(cluster.urls, spec)
    return spec


def _start_samplers(
    args: argparse.Namespace, pyspy: str, cluster: Cluster, out: Path
) -> list[subprocess.Popen[bytes]]:
    """One py-spy per node, recording for the load window and a second more."""
    flags = ["--gil"] if args.threads == "gil" else []
    flags.append("--nonblocking")
    return [
        subprocess.Popen([pyspy, "record", "--pid", str(n.pid), "--duration", str(int(args.seconds) + 1),
                          "--rate", str(args.rate), "--format", "raw", "--function",
                          *flags, "--output", str(out / f"{n.name}.txt")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for n in cluster.nodes
    ]


def _load_job(args: argparse.Namespace, spec: WorkloadSpec, cluster: Cluster) -> LoadJob:
    """Closed loop at ``--concurrency``, or open loop at ``--open-rate`` when given."""
    job = LoadJob(spec, cluster.urls, mode="closed", concurrency=args.concurrency,
                  duration_s=args.seconds, warmup_s=0.0, cpu_pids=cluster.pids(), client=args.client)
    if args.open_rate > 0:
        job = LoadJob(spec, cluster.urls, mode="open", rate=args.open_rate, duration_s=args.seconds,
                      warmup_s=0.0, max_inflight=max(args.concurrency * 16, 256), cpu_pids=cluster.pids(),
                      client=args.client)
    return job


def _measure(args: argparse.Namespace, pyspy: str, out: Path) -> _Window:
    """Start a cluster, drive the workload while py-spy samples every node, and read the counters around it."""
    work = Path(tempfile.mkdtemp(prefix="ai-memory-hotpath-data-"))
    claims = args.workload == "sendpop"
    try:
        with LoadPool(1) as pool, running(Cluster(work, args.nodes, 2 if args.nodes > 1 else 1)) as cluster:
            spec = _prepare(args, pool, cluster)
            samplers = _start_samplers(args, pyspy, cluster, out)
            job = _load_job(args, spec, cluster)
            w_before = {n.name: work_counters(n.url) for n in cluster.nodes}
            t_before = {n.name: thread_times(n.pid) for n in cluster.nodes}
            r = pool.run(job, start_delay_s=0.0)
            t_after = {n.name: thread_times(n.pid) for n in cluster.nodes}
            w_after = {n.name: work_counters(n.url) for n in cluster.nodes}
            mains = {n.name: n.pid for n in cluster.nodes}
            res = result_dict(r, claims=claims)
            for s in samplers:
                _, err = s.communicate(timeout=args.seconds + 30)
                if s.returncode != 0:
                    print(f"py-spy failed: {err.decode(errors='replace')[-500:]}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _Window(res, t_before, t_after, w_before, w_after, mains)


def _print_load(args: argparse.Namespace, res: dict[str, Any]) -> dict[str, Any] | None:
    """The load result and the cluster's CPU per op; the CPU reading, or None without one."""
    claims = args.workload == "sendpop"
    unit = "claims/s" if claims else "ops/s"
    tp = res["ops_per_s"] if res.get("ops_per_s") is not None else res["rps"]
    print(f"{args.workload} on {args.nodes} node(s): {tp:,.0f} {unit}, p50 {res['p50_ms']:.1f} ms, "
          f"p99 {res['p99_ms']:.1f} ms, errors {res['http_errors'] + res['transport_errors']}, "
          f"503 {res['unavailable']}")
    cpu: dict[str, Any] | None = res.get("cpu")
    if not cpu or cpu.get("ms_per_op") is None:
        print("no CPU reading for the window (a node exited?)", file=sys.stderr)
        return None
    print(f"cluster CPU per {'claim' if claims else 'op'}: {cpu['ms_per_op']:.3f} ms "
          f"({cpu['server_cores']:.2f} cores busy over {cpu['window_s']:.1f} s); cores per node: "
          + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu["process_cores"].items()))
          + f"; load generator {cpu['client_ms_per_op']:.3f} ms per op")
    return cpu


def _print_profiles(args: argparse.Namespace, win: _Window, cpu: dict[str, Any], out: Path) -> None:
    """The sampled stacks in CPU ms per op: by category, whole cluster, then node by node."""
    profiles = {f.stem: f.read_text() for f in sorted(out.glob("node*.txt"))}
    by_thread = node_thread_cpu(win.t_before, win.t_after, win.mains)
    inc_ms, own_ms = cluster_costs(profiles, by_thread, cpu["ops"])
    print(f"\nby category, whole cluster, {args.threads} threads sampled:")
    for k, ms in most_common(category_costs(profiles, by_thread, cpu["ops"])):
        print(f"    {ms:7.3f} ms  {100 * ms / cpu['ms_per_op']:5.1f}%  {k}")
    print(f"\nwhole cluster, {args.threads} threads sampled (raw stacks in {out}):")
    print(format_costs(inc_ms, own_ms, cpu["ms_per_op"], args.top))
    for name, text in profiles.items():
        print(f"\n{name} ({out / (name + '.txt')}):")
        print(summarize_profile(text, args.top))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(pyspy).exists():
        print("py-spy is not installed (.venv/bin/pip install -e '.[bench]')", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="ai-memory-hotpath-"))
    out.mkdir(parents=True, exist_ok=True)
    win = _measure(args, pyspy, out)
    cpu = _print_load(args, win.res)
    if cpu is None:
        return 1
    print(thread_split(win.t_before, win.t_after, win.mains, cpu["ops"]))
    print(format_anatomy(win.w_before, win.w_after, cpu["ops"]))
    _print_profiles(args, win, cpu, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
