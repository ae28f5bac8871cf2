"""Run profiles: how long, how hard and how big each phase is.

``quick`` is what ``make bench`` runs and must finish in under three
minutes on a 2-core machine, so it shortens every window and fills smaller
inboxes (the largest inbox, and with it the number of operations the
catch-up node missed, is ``QUICK_BIG_INBOX`` instead of 100k; the report
says so next to every figure that depends on it). ``full`` runs the sizes
the targets are stated for: 1k/10k/100k inboxes, 100k missed operations,
ten sweep points. Both run the NATS JetStream comparison (skipped, and
reported as such, where ``nats-server`` or ``nats-py`` is missing).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

QUICK_BIG_INBOX = 20_000


@dataclass(frozen=True)
class Profile:
    name: str
    concurrency: int  # closed-loop clients (keep-alive connections)
    loadgen_procs: int  # load-generator processes (the machine has 2 cores)
    warmup_s: float
    max_duration_s: float  # closed-loop window that finds the maximum
    sweep_fractions: tuple[float, ...]  # open-loop rates, as fractions of the maximum
    sweep_duration_s: float
    workloads: tuple[str, ...]  # measured on every cluster
    inbox_sizes: tuple[int, ...]  # ascending; the last one is the "100k" inbox
    inbox_consistencies: tuple[str, ...]  # "default" and/or "local"
    inbox_duration_s: float
    inbox_concurrency: int  # clients reading inboxes for the maximum read rate
    inbox_reads: int  # sequential reads by one client, for the latency percentiles
    inbox_max_s: float  # ...unless this much time has passed
    fill_concurrency: int
    projects: int  # mailboxes the send+pop workload spreads over
    converge_timeout_s: float
    nats: bool
    # Rounds of the paired phase: echo, 1 node and 3 nodes notify at their
    # maximum one right after another, the order reversed every round (even:
    # the ratios are taken over a round and its reverse).
    paired_rounds: int
    # The load generator's HTTP client (bench.loadgen.CLIENTS). "raw" costs
    # 30-44 % of "aiohttp"'s CPU per request, CPU the servers would otherwise lose;
    # "aiohttp" stays the default: "raw" would double the echo yardstick the
    # notify targets are written against (docs/performance.md, sixth session).
    client: str = "aiohttp"
    # Rounds of the lanes phase (bench/lanes.py): 1 lane, 2 lanes and 2 lanes
    # with a lane-aware client, order reversed every round (even).
    lanes_rounds: int = 4

    @property
    def big_inbox(self) -> int:
        return self.inbox_sizes[-1]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


QUICK = Profile(
    name="quick",
    concurrency=64,
    loadgen_procs=1,
    warmup_s=0.5,
    max_duration_s=2.5,
    sweep_fractions=(0.1, 0.5, 0.75, 1.0),
    sweep_duration_s=1.5,
    workloads=("notify", "sendpop", "mix"),
    inbox_sizes=(1_000, 10_000, QUICK_BIG_INBOX),
    inbox_consistencies=("default",),
    inbox_duration_s=2.0,
    inbox_concurrency=16,
    inbox_reads=200,
    inbox_max_s=3.0,
    fill_concurrency=128,
    projects=8,
    converge_timeout_s=60.0,
    nats=True,
    paired_rounds=4,
)

FULL = Profile(
    name="full",
    concurrency=64,
    loadgen_procs=1,
    warmup_s=2.0,
    max_duration_s=10.0,
    sweep_fractions=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    sweep_duration_s=5.0,
    workloads=("notify", "sendpop", "mix"),
    inbox_sizes=(1_000, 10_000, 100_000),
    inbox_consistencies=("default", "local"),
    inbox_duration_s=5.0,
    inbox_concurrency=16,
    inbox_reads=1000,
    inbox_max_s=60.0,
    fill_concurrency=128,
    projects=8,
    converge_timeout_s=300.0,
    nats=True,
    paired_rounds=6,
    lanes_rounds=6,
)

PROFILES = {p.name: p for p in (QUICK, FULL)}
