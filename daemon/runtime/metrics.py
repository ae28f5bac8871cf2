"""Counters, gauges and latency histograms in Prometheus text format.

Deliberately small: the daemon is single-threaded on its event loop, so
plain dicts suffice. Names get the ``ai_memory_`` prefix on output.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
Labels = tuple[tuple[str, str], ...]


def _fmt(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return "{" + inner + "}"


class Metrics:
    def __init__(self) -> None:
        self.counters: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
        self.hists: dict[str, dict[Labels, list[float]]] = defaultdict(dict)
        self.gauges: dict[str, Callable[[], float]] = {}

    def inc(self, name: str, amount: float = 1, **labels: str) -> None:
        self.counters[name][tuple(sorted(labels.items()))] += amount

    def observe(self, name: str, seconds: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        row = self.hists[name].get(key)
        if row is None:
            row = self.hists[name][key] = [0.0] * (len(_BUCKETS) + 2)  # buckets, +Inf, sum
        row[bisect.bisect_left(_BUCKETS, seconds)] += 1
        row[-1] += seconds

    def gauge(self, name: str, fn: Callable[[], float]) -> None:
        self.gauges[name] = fn

    def render(self) -> str:
        lines: list[str] = []
        for name, series in sorted(self.counters.items()):
            lines.append(f"# TYPE ai_memory_{name} counter")
            for labels, value in sorted(series.items()):
                lines.append(f"ai_memory_{name}{_fmt(labels)} {value:g}")
        for name, fn in sorted(self.gauges.items()):
            lines.append(f"# TYPE ai_memory_{name} gauge")
            lines.append(f"ai_memory_{name} {fn():g}")
        for name, hseries in sorted(self.hists.items()):
            lines.append(f"# TYPE ai_memory_{name} histogram")
            for labels, row in sorted(hseries.items()):
                cum = 0.0
                for i, bound in enumerate(_BUCKETS):
                    cum += row[i]
                    lines.append(f"ai_memory_{name}_bucket{_fmt((*labels, ('le', str(bound))))} {cum:g}")
                cum += row[len(_BUCKETS)]
                lines.append(f"ai_memory_{name}_bucket{_fmt((*labels, ('le', '+Inf')))} {cum:g}")
                lines.append(f"ai_memory_{name}_sum{_fmt(labels)} {row[-1]:.6f}")
                lines.append(f"ai_memory_{name}_count{_fmt(labels)} {cum:g}")
        return "\n".join(lines) + "\n"
