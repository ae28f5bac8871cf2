"""The performance targets, checked against one run's results.

Each target reads figures out of the results document and says PASS or
MISS; a target whose figures are missing (a phase failed or was skipped)
says SKIP with the reason, never PASS. The harness prints these; tests do
not assert them, because they are properties of a machine and a build,
not of correctness. Where the quick profile measured a smaller size than
the target is stated for, the row says which size it measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

THREE = "3 nodes W=2"


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


def evaluate(results: dict[str, Any]) -> list[Target]:
    out: list[Target] = []

    def notify_ratio() -> tuple[float, str, bool]:
        if not results.get("echo"):
            raise KeyError("echo ceiling")
        echo = results["echo"]["max"]["rps"]
        w = _workload(results, THREE, "notify")
        rps = w["max"]["rps"]
        ratio = rps / echo
        return ratio, f"{rps:,.0f}/s = {ratio:.0%} of echo {echo:,.0f}/s", ratio >= 0.5

    out.append(_check("notify throughput, 3 nodes W=2", ">= 50% of echo", notify_ratio))

    def notify_p99_half() -> tuple[float, str, bool]:
        w = _workload(results, THREE, "notify")
        p = _point_at(w, 0.5)
        p99 = p["p99_ms"]
        return p99, f"p99 {p99:.1f} ms at {p['offered_rps']:,.0f}/s offered", p99 <= 20.0

    out.append(_check("notify p99 at half of max, 3 nodes", "<= 20 ms", notify_p99_half))

    def claims() -> tuple[float, str, bool]:
        w = _workload(results, THREE, "sendpop")
        c = w["max"]["ops_per_s"]
        return c, f"{c:,.0f} claims/s", c >= 1000.0

    out.append(_check("send+pop claims, 3 nodes", ">= 1000 claims/s", claims))

    sc = results.get("scenario") or {}  # a missing figure raises KeyError -> SKIP

    def inbox() -> tuple[float, str, bool]:
        rows = [r for r in sc["inbox"] if r["consistency"] == "default" and r["sequential"]["ok"] > 0]
        small = min(rows, key=lambda r: r["size"])
        big = max(rows, key=lambda r: r["size"])
        p99b, p99s = big["sequential"]["p99_ms"], small["sequential"]["p99_ms"]
        ok = p99b <= 10.0 and p99b <= 2.0 * p99s
        held_b, held_s = big.get("stored", big["size"]), small.get("stored", small["size"])
        text = (f"{held_b:,} inbox p99 {p99b:.1f} ms vs {held_s:,} inbox p99 {p99s:.1f} ms "
                f"(x{p99b / p99s:.2f}; one client, {big['sequential']['requests']} reads)")
        return p99b, text, ok

    out.append(_check("inbox read p99, largest inbox (limit 50)", "<= 10 ms and <= 2x the 1k inbox", inbox))

    def catchup() -> tuple[float, str, bool]:
        c = sc["catchup"]
        t = c["restart_to_converged_s"]
        if t is None:
            return float("inf"), f"not converged within {c['timeout_s']:.0f} s ({c['missed_ops']:,} ops)", False
        return t, f"{t:.1f} s for {c['missed_ops']:,} missed ops (restart to equal vv)", t <= 10.0

    out.append(_check("catch-up of missed ops", "<= 10 s for 100k ops", catchup))

    def rss() -> tuple[float, str, bool]:
        r = sc["rss_bytes"]
        worst = max(r.values()) / 2**20
        per = ", ".join(f"{k} {v / 2**20:.0f} MB" for k, v in sorted(r.items()))
        return worst, f"{per} with {sc['messages_stored']:,} inbox messages", worst < 150.0

    out.append(_check("RSS per node", "< 150 MB with 100k messages", rss))
    return out
