"""The performance targets, checked against one run's results.

Each target reads figures out of the results document and says PASS or
MISS; a target whose figures are missing (a phase failed or was skipped)
says SKIP with the reason, never PASS. The harness prints these; tests do
not assert them, because they are properties of a machine and a build,
not of correctness. Where the quick profile measured a smaller size than
the target is stated for, the row says which size it measured. Most
targets are ratios between phases of the same run (3 nodes against 1
node, against the echo server, against NATS JetStream) and the CPU bounds
are per operation, so they mean the same on a noisy machine; the absolute
claims/s and p99 bounds do not, and the report says so.

The three notify ratios (1 node against echo, 3 nodes against 1 node, and
CPU per notify against echo's CPU per request) are read from the paired
rounds when that phase ran: each round measures the systems seconds apart,
the next one in the reverse order, and the verdict is the median of the
ratios of those pairs of rounds. The phases' own
figures, minutes apart, are printed beside it and used when the paired
rounds are missing.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

THREE = "3 nodes W=2"
ONE = "1 node"


@dataclass
class Target:
    name: str
    goal: str
    measured: str
    verdict: str  # PASS | MISS | SKIP
    value: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["value"] is not None and not math.isfinite(d["value"]):
            d["value"] = None
        return d


def _workload(results: dict[str, Any], cluster: str, name: str) -> dict[str, Any]:
    for w in results.get("workloads", []):
        if w.get("cluster") == cluster and w.get("workload") == name:
            return dict(w)
    raise KeyError(f"{name} on {cluster}")


def _point_at(w: dict[str, Any], fraction: float) -> dict[str, Any]:
    pts = [p for p in w.get("sweep", []) if p.get("fraction") is not None]
    if not pts:
        raise LookupError(f"no sweep for {w.get('workload')}")
    return dict(min(pts, key=lambda p: abs(p["fraction"] - fraction)))


def _check(name: str, goal: str, fn: Callable[[], tuple[float, str, bool]]) -> Target:
    try:
        value, measured, ok = fn()
    except (KeyError, TypeError, LookupError, ZeroDivisionError) as e:
        return Target(name, goal, f"not measured ({type(e).__name__}: {e})", "SKIP")
    return Target(name, goal, measured, "PASS" if ok else "MISS", value)


def _cpu_ms(d: dict[str, Any]) -> float:
    """Servers' CPU milliseconds per acknowledged operation of a summary."""
    cpu = d.get("cpu")
    if not cpu or cpu.get("ms_per_op") is None:
        raise KeyError("CPU per operation (no /proc readings for this phase)")
    return float(cpu["ms_per_op"])


def _tp(d: dict[str, Any]) -> float:
    """A summary's throughput in its own unit: claims/s when counted, else ok ops/s."""
    ops = d.get("ops_per_s")
    return float(ops if ops is not None else d["rps"])


Measured = tuple[float, str, bool]  # the figure, how it reads, whether it meets the goal


def _echo_max(results: dict[str, Any]) -> dict[str, Any]:
    if not results.get("echo"):
        raise KeyError("echo ceiling")
    return dict(results["echo"]["max"])


def _nats_max(results: dict[str, Any]) -> dict[str, Any]:
    nats = results.get("nats")
    if not nats:
        raise KeyError("NATS JetStream phase not run")
    if nats.get("skipped"):
        raise KeyError(f"NATS JetStream skipped: {nats['skipped']}")
    return dict(nats["max"])


def _scenario(results: dict[str, Any]) -> dict[str, Any]:
    return results.get("scenario") or {}  # a missing figure raises KeyError -> SKIP


def _claims_vs_nats(results: dict[str, Any]) -> Measured:
    ours = _tp(_workload(results, THREE, "sendpop")["max"])
    theirs = _tp(_nats_max(results))
    ratio = ours / theirs
    return ratio, f"{ours:,.0f} claims/s = {ratio:.0%} of NATS JetStream R3 {theirs:,.0f}/s", ratio >= 0.5


def _claims(results: dict[str, Any]) -> Measured:
    c = _tp(_workload(results, THREE, "sendpop")["max"])
    return c, f"{c:,.0f} claims/s", c >= 1500.0


def _claim_cpu(results: dict[str, Any]) -> Measured:
    m = _workload(results, THREE, "sendpop")["max"]
    ms = _cpu_ms(m)
    return ms, f"{ms:.2f} ms of cluster CPU per claim ({m['cpu']['server_cores']:.2f} cores busy)", ms <= 1.0


ECHO = "echo server"


def _rps(d: dict[str, Any]) -> float:
    return float(d["rps"])


def paired_series(results: dict[str, Any], num: str, den: str,
                  figure: Callable[[dict[str, Any]], float]) -> list[float]:
    """``figure`` of system ``num`` over that of ``den``, one per pair of
    rounds. A pair is a round and the next one, run in the reverse order, so
    every system's two bursts sit at the same mean time: a drift that runs
    the same way through the pair cancels out of the pair's ratio (the
    figures of each system are averaged over its two bursts first)."""
    paired = results.get("paired")
    if not paired or not paired.get("rounds"):
        raise KeyError("paired rounds not run")
    rounds = paired["rounds"]
    out = []
    for i in range(0, len(rounds), 2):
        pair = rounds[i:i + 2]
        out.append(statistics.fmean(figure(r["max"][num]) for r in pair)
                   / statistics.fmean(figure(r["max"][den]) for r in pair))
    return out


def _prefer_paired(results: dict[str, Any], num: str, den: str,
                   figure: Callable[[dict[str, Any]], float], fmt: Callable[[float], str],
                   ok: Callable[[float], bool],
                   phases: Callable[[dict[str, Any]], Measured]) -> Measured:
    try:
        series = paired_series(results, num, den, figure)
    except KeyError as e:
        if not results.get("paired"):
            return phases(results)  # the paired rounds did not run
        value, text, ok_ = phases(results)
        return value, f"{text} (paired rounds unusable: {e})", ok_
    except (TypeError, ZeroDivisionError) as e:
        value, text, ok_ = phases(results)
        return value, f"{text} (paired rounds unusable: {type(e).__name__})", ok_
    median = statistics.median(series)
    text = (f"{fmt(median)}, median of {len(series)} pairs of paired rounds"
            f" ({', '.join(fmt(x) for x in series)})")
    try:
        text += f"; the phases, minutes apart: {phases(results)[1]}"
    except (KeyError, TypeError, LookupError, ZeroDivisionError):
        pass
    return median, text, ok(median)


def _times(x: float) -> str:
    return f"x{x:.1f}"


def _share(x: float) -> str:
    return f"{x:.0%}"


def _notify_cpu_ratio_phases(results: dict[str, Any]) -> Measured:
    ours = _cpu_ms(_workload(results, THREE, "notify")["max"])
    echo = _cpu_ms(_echo_max(results))
    ratio = ours / echo
    return ratio, (f"{ours:.2f} ms per notify vs {echo:.3f} ms per echo request = x{ratio:.1f}"), ratio <= 4.0


def _notify_3_vs_1_phases(results: dict[str, Any]) -> Measured:
    three = _workload(results, THREE, "notify")["max"]["rps"]
    one = _workload(results, ONE, "notify")["max"]["rps"]
    ratio = three / one
    return ratio, f"{three:,.0f}/s = {ratio:.0%} of 1 node's {one:,.0f}/s", ratio >= 0.7


def _notify_1_vs_echo_phases(results: dict[str, Any]) -> Measured:
    echo = _echo_max(results)["rps"]
    one = _workload(results, ONE, "notify")["max"]["rps"]
    ratio = one / echo
    return ratio, f"{one:,.0f}/s = {ratio:.0%} of echo {echo:,.0f}/s", ratio >= 0.6


def _notify_cpu_ratio(results: dict[str, Any]) -> Measured:
    return _prefer_paired(results, THREE, ECHO, _cpu_ms, _times, lambda r: r <= 4.0,
                          _notify_cpu_ratio_phases)


def _notify_3_vs_1(results: dict[str, Any]) -> Measured:
    return _prefer_paired(results, THREE, ONE, _rps, _share, lambda r: r >= 0.7,
                          _notify_3_vs_1_phases)


def _notify_1_vs_echo(results: dict[str, Any]) -> Measured:
    return _prefer_paired(results, ONE, ECHO, _rps, _share, lambda r: r >= 0.6,
                          _notify_1_vs_echo_phases)


def _p99_half(results: dict[str, Any], workload: str, limit: float) -> Measured:
    p = _point_at(_workload(results, THREE, workload), 0.5)
    p99 = p["p99_ms"]
    return p99, f"p99 {p99:.1f} ms at {p['offered_rps']:,.0f}/s offered", p99 <= limit


def _inbox(results: dict[str, Any]) -> Measured:
    sc = _scenario(results)
    rows = [r for r in sc["inbox"] if r["consistency"] == "default" and r["sequential"]["ok"] > 0]
    if not rows:
        raise KeyError("no inbox size answered a quorum read")  # reported as SKIP
    small = min(rows, key=lambda r: r["size"])
    big = max(rows, key=lambda r: r["size"])
    p99b, p99s = big["sequential"]["p99_ms"], small["sequential"]["p99_ms"]
    ok = p99b <= 10.0 and p99b <= 2.0 * p99s
    held_b, held_s = big.get("stored", big["size"]), small.get("stored", small["size"])
    text = (f"{held_b:,} inbox p99 {p99b:.1f} ms vs {held_s:,} inbox p99 {p99s:.1f} ms "
            f"(x{p99b / p99s:.2f}; one client, {big['sequential']['requests']} reads)")
    return p99b, text, ok


def _catchup(results: dict[str, Any]) -> Measured:
    c = _scenario(results)["catchup"]
    t = c["restart_to_converged_s"]
    if t is None:
        return float("inf"), f"not converged within {c['timeout_s']:.0f} s ({c['missed_ops']:,} ops)", False
    return t, f"{t:.1f} s for {c['missed_ops']:,} missed ops (restart to equal vv)", t <= 10.0


def _rss(results: dict[str, Any]) -> Measured:
    sc = _scenario(results)
    r = sc["rss_bytes"]
    worst = max(r.values()) / 2**20
    per = ", ".join(f"{k} {v / 2**20:.0f} MB" for k, v in sorted(r.items()))
    return worst, f"{per} with {sc['messages_stored']:,} inbox messages", worst < 150.0


# (name, goal, measure) in report order; measure reads its figures out of the results.
TARGETS: tuple[tuple[str, str, Callable[[dict[str, Any]], Measured]], ...] = (
    ("send+pop vs NATS JetStream R3, 3 nodes", ">= 50% of NATS in the same run", _claims_vs_nats),
    ("send+pop claims, 3 nodes", ">= 1500 claims/s", _claims),
    ("cluster CPU per claim, 3 nodes", "<= 1.0 ms", _claim_cpu),
    ("cluster CPU per notify vs echo CPU per request, 3 nodes W=2", "<= 4x", _notify_cpu_ratio),
    ("notify throughput, 3 nodes W=2 vs 1 node", ">= 70% of 1 node", _notify_3_vs_1),
    ("notify throughput, 1 node vs echo", ">= 60% of echo", _notify_1_vs_echo),
    ("notify p99 at half of max, 3 nodes", "<= 20 ms", functools.partial(_p99_half, workload="notify", limit=20.0)),
    ("send+pop p99 at half of max, 3 nodes", "<= 30 ms",
     functools.partial(_p99_half, workload="sendpop", limit=30.0)),
    ("inbox read p99, largest inbox (limit 50)", "<= 10 ms and <= 2x the 1k inbox", _inbox),
    ("catch-up of missed ops", "<= 10 s for 100k ops", _catchup),
    ("RSS per node", "< 150 MB with 100k messages", _rss),
)


def evaluate(results: dict[str, Any]) -> list[Target]:
    """Every target of issue 10 plus the inbox, catch-up and memory ones,
    each as a ratio or a bound measured in this one run."""
    return [_check(name, goal, functools.partial(measure, results)) for name, goal, measure in TARGETS]
