"""Latency and throughput summaries for one measured phase.

A load-generator process returns a :class:`Sample` per request kind: every
latency in milliseconds plus counts of successes, 503s (``quorum_not_met``,
overload) kept apart from other HTTP errors, transport errors, and requests
the open-loop scheduler had to drop because too many were in flight.
:func:`merge_samples` folds the samples of several processes together and
:func:`summarize` turns them into a :class:`Summary`: throughput over the
measured wall time and nearest-rank percentiles (an exact order statistic,
so p99 of 100 latencies is the 99th smallest, never an interpolation that
no request actually saw).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

PERCENTILES = (50.0, 95.0, 99.0)


@dataclass
class Sample:
    """Raw outcome of one request kind in one process."""

    latencies_ms: list[float] = field(default_factory=list)
    ok: int = 0
    unavailable: int = 0  # 503s: quorum not met, overloaded, no majority
    http_errors: int = 0  # any other non-2xx status
    transport_errors: int = 0  # connection refused/reset, timeouts
    dropped: int = 0  # open loop only: not sent, too many already in flight
    statuses: dict[int, int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)  # e.g. claims, empty pops

    def record(self, status: int, latency_ms: float) -> None:
        self.latencies_ms.append(latency_ms)
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if 200 <= status < 300:
            self.ok += 1
        elif status == 503:
            self.unavailable += 1
        else:
            self.http_errors += 1

    def record_transport_error(self, latency_ms: float) -> None:
        self.latencies_ms.append(latency_ms)
        self.transport_errors += 1

    def count(self, event: str, n: int = 1) -> None:
        self.events[event] = self.events.get(event, 0) + n


def merge_samples(parts: Iterable[Mapping[str, Sample]]) -> dict[str, Sample]:
    """Fold per-kind samples from several processes into one per kind."""
    merged: dict[str, Sample] = {}
    for part in parts:
        for kind, s in part.items():
            m = merged.setdefault(kind, Sample())
            m.latencies_ms.extend(s.latencies_ms)
            m.ok += s.ok
            m.unavailable += s.unavailable
            m.http_errors += s.http_errors
            m.transport_errors += s.transport_errors
            m.dropped += s.dropped
            for code, n in s.statuses.items():
                m.statuses[code] = m.statuses.get(code, 0) + n
            for ev, n in s.events.items():
                m.events[ev] = m.events.get(ev, 0) + n
    return merged


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (NaN when empty)."""
    if not sorted_values:
        return math.nan
    if not 0.0 < p <= 100.0:
        raise ValueError(f"percentile must be in (0, 100], got {p}")
    rank = math.ceil(p / 100.0 * len(sorted_values))
    return sorted_values[max(rank, 1) - 1]


@dataclass
class Summary:
    """What one phase measured, as reported and plotted."""

    requests: int
    ok: int
    unavailable: int
    http_errors: int
    transport_errors: int
    dropped: int
    elapsed_s: float
    rps: float  # successful requests per second
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    offered_rps: float | None = None  # open loop: the rate asked for
    ops_per_s: float | None = None  # workload unit (e.g. claims/s), if not requests
    statuses: dict[str, int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return self.http_errors + self.transport_errors

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def summarize(
    sample: Sample,
    elapsed_s: float,
    *,
    offered_rps: float | None = None,
    ops: int | None = None,
) -> Summary:
    """Summarize one (merged) sample measured over ``elapsed_s`` seconds.

    Percentiles cover every request that got an answer or failed in
    transport, so errors that return fast cannot flatter the tail unseen:
    their count is always reported beside them.
    """
    if elapsed_s <= 0:
        raise ValueError("elapsed_s must be positive")
    lat = sorted(sample.latencies_ms)
    requests = sample.ok + sample.unavailable + sample.http_errors + sample.transport_errors
    return Summary(
        requests=requests,
        ok=sample.ok,
        unavailable=sample.unavailable,
        http_errors=sample.http_errors,
        transport_errors=sample.transport_errors,
        dropped=sample.dropped,
        elapsed_s=elapsed_s,
        rps=sample.ok / elapsed_s,
        p50_ms=percentile(lat, PERCENTILES[0]),
        p95_ms=percentile(lat, PERCENTILES[1]),
        p99_ms=percentile(lat, PERCENTILES[2]),
        max_ms=lat[-1] if lat else math.nan,
        mean_ms=(sum(lat) / len(lat)) if lat else math.nan,
        offered_rps=offered_rps,
        ops_per_s=(ops / elapsed_s) if ops is not None else None,
        statuses={str(k): v for k, v in sorted(sample.statuses.items())},
        events=dict(sorted(sample.events.items())),
    )


def combined(samples: Mapping[str, Sample]) -> Sample:
    """All request kinds of one phase as a single sample."""
    return merge_samples([{"all": s} for s in samples.values()])["all"]
