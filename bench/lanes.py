"""The lanes phase: one node with 2 lanes against one node without, notify at the maximum.

Issue 25 asks that one node with 2 lanes (``ai-memory serve --lanes 2``)
notify at least 1.5 times as fast as one lane (a node started plain), with
the lean client (:mod:`bench.rawhttp`). Both nodes run side by side and
are driven one right after another in rounds whose order is reversed every
round, as the paired phase does, and a third system is measured in the
same rounds: the same 2-lane node driven by a *lane-aware* client, which
sends each notify to the port of the lane that owns its recipient
(docs/lanes.md, "Three ways on", option 2), so no lane hands a request on.

Per burst it keeps, beside the notify rate and the CPU per notify of every
process of the node (the supervisor and each lane process, found as the
supervisor's children: :func:`bench.procs.node_pids`):

* ``handoffs``: the notifies one lane handed to another over the local link
  (the lanes' ``lane_handoffs_total``, read on each lane's own port before
  and after the burst), and ``handoff_share``, their share of the
  notifies the burst sent (warm-up included on both sides);
* from the rounds: the CPU per *handed* notify, i.e. the 2-lane node's CPU
  per notify with the plain client minus that with the lane-aware client,
  over the share handed (:func:`summary`).

The verdicts are in :mod:`bench.targets` (``_lanes_ratio``): medians over
pairs of rounds of the ratio of the pair's mean figures.
"""

from __future__ import annotations

import statistics
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from bench.loadgen import LoadJob, LoadPool
from bench.phases import result_dict
from bench.procs import Cluster
from bench.profiles import Profile
from bench.progress import Progress
from bench.workloads import WorkloadSpec

ONE_LANE = "1 lane"
TWO_LANES = "2 lanes"
TWO_LANES_DIRECT = "2 lanes, lane-aware client"
LANES = 2  # the lane count issue 25's target is stated for
HANDOFFS_METRIC = "ai_memory_lane_handoffs_total"


@dataclass(frozen=True)
class System:
    label: str
    urls: tuple[str, ...]
    pids: Callable[[], tuple[tuple[str, int], ...]]  # read afresh per burst
    spec: WorkloadSpec
    lane_urls: tuple[str, ...] = ()  # each lane's own port, for its counters


def handoffs(lane_urls: tuple[str, ...]) -> int:
    """The hand-offs every lane of a node counted so far (0 without lanes): one
    node's ``/metrics`` gathers every lane's, each sample labelled with its lane."""
    total = 0
    for url in lane_urls[:1]:
        with urllib.request.urlopen(url + "/metrics", timeout=5.0) as resp:
            for line in resp.read().decode().splitlines():
                name, _, value = line.partition(" ")
                if name == HANDOFFS_METRIC or name.startswith(HANDOFFS_METRIC + "{"):
                    total += int(float(value))
    return total


def systems(one: Cluster, two: Cluster) -> list[System]:
    notify = WorkloadSpec("notify")
    direct = replace(notify, direct_lanes=two.lanes)
    lanes = two.lane_urls()
    return [
        System(ONE_LANE, one.urls, one.pids, notify),
        System(TWO_LANES, two.urls, two.pids, notify, lanes),
        System(TWO_LANES_DIRECT, two.urls, two.pids, direct, lanes),
    ]


def rounds(pool: LoadPool, progress: Progress, profile: Profile, which: list[System],
           n_rounds: int) -> dict[str, Any]:
    """Every system at its maximum, one right after another, ``n_rounds``
    times, the order reversed every round; always the lean client."""
    out: list[dict[str, Any]] = []
    for i in range(n_rounds):
        order = which if i % 2 == 0 else which[::-1]
        this: dict[str, Any] = {"order": [s.label for s in order], "max": {}}
        for s in order:
            job = LoadJob(s.spec, s.urls, mode="closed", concurrency=profile.concurrency,
                          duration_s=profile.max_duration_s, warmup_s=profile.warmup_s,
                          cpu_pids=s.pids(), client="raw")
            before = handoffs(s.lane_urls)
            with progress.step(f"lanes {i + 1}/{n_rounds} · {s.label} · notify") as update:
                r = pool.run(job, update)
            handed = handoffs(s.lane_urls) - before
            res = result_dict(r)
            res.pop("kinds", None)
            res["handoffs"] = handed
            res["sent"] = r.ops_started
            res["handoff_share"] = handed / r.ops_started if r.ops_started else None
            this["max"][s.label] = res
        out.append(this)
    result: dict[str, Any] = {"workload": "notify", "client": "raw", "lanes": LANES,
                              "concurrency": profile.concurrency, "rounds": out}
    result["summary"] = summary(result)
    return result


def pair_series(section: dict[str, Any], num: str, den: str,
                figure: Callable[[dict[str, Any]], float]) -> list[float]:
    """``figure`` of ``num`` over that of ``den``, one per pair of rounds
    (a round and the reversed one after it; each side's figure is the mean
    of its two bursts, so a steady drift cancels out)."""
    rs = section["rounds"]
    out = []
    for i in range(0, len(rs), 2):
        pair = rs[i:i + 2]
        out.append(statistics.fmean(figure(r["max"][num]) for r in pair)
                   / statistics.fmean(figure(r["max"][den]) for r in pair))
    return out


def _cpu(d: dict[str, Any]) -> float:
    cpu = d.get("cpu")
    if not cpu or cpu.get("ms_per_op") is None:
        raise KeyError("CPU per notify")
    return float(cpu["ms_per_op"])


def _rps(d: dict[str, Any]) -> float:
    return float(d["rps"])


def _share(d: dict[str, Any]) -> float:
    share = d.get("handoff_share")
    if share is None:
        raise KeyError("hand-off share")
    return float(share)


def summary(section: dict[str, Any]) -> dict[str, Any]:
    """The medians the report and the targets quote."""
    out: dict[str, Any] = {}
    for label in (TWO_LANES, TWO_LANES_DIRECT):
        key = "plain" if label == TWO_LANES else "direct"
        try:
            rate = pair_series(section, label, ONE_LANE, _rps)
            cpu = pair_series(section, label, ONE_LANE, _cpu)
        except (KeyError, ZeroDivisionError):
            continue
        out[key] = {"rate_ratio": rate, "rate_ratio_median": statistics.median(rate),
                    "cpu_ratio": cpu, "cpu_ratio_median": statistics.median(cpu)}
    per_handed = []
    try:
        for r in section["rounds"]:
            m = r["max"]
            share = _share(m[TWO_LANES])
            if share > 0:
                per_handed.append((_cpu(m[TWO_LANES]) - _cpu(m[TWO_LANES_DIRECT])) / share)
        shares = [_share(r["max"][TWO_LANES]) for r in section["rounds"]]
        direct_shares = [_share(r["max"][TWO_LANES_DIRECT]) for r in section["rounds"]]
    except KeyError:
        return out
    out["handoff_share_median"] = statistics.median(shares) if shares else None
    out["direct_handoff_share_median"] = statistics.median(direct_shares) if direct_shares else None
    out["cpu_ms_per_handed_notify"] = per_handed
    out["cpu_ms_per_handed_notify_median"] = statistics.median(per_handed) if per_handed else None
    return out
