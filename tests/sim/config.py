"""The knobs of one simulated run, all drawn from the seed.

A seed fixes everything: cluster size, write quorum, clock skews, fault
rates and the workload mix. Timeouts are scaled down from production
(hundreds of ms rather than seconds) so one run covers many failovers in a
few simulated seconds; their ratios match the real defaults.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from common import limits


@dataclass(frozen=True, slots=True)
class SimConfig:
    seed: int
    nodes: int
    write_quorum: int
    tick_ms: int = 10
    fault_ms: int = 3_000  # phase 1: faults and client load
    settle_max_ms: int = 60_000  # phase 2: must converge within this after the heal
    quorum_timeout_ms: int = 300
    claim_timeout_ms: int = 300
    catchup_interval_ms: int = 200
    down_after_ms: int = 450
    gc_interval_ms: int = 500
    skew_max_ms: int = 180_000  # clock skew: up to three minutes either way
    delay_min_ms: int = 1
    delay_max_ms: int = 30
    # The last member is this much farther each way from the others (two
    # sites, one member across a WAN): reads then ask the nearest first
    # (federation/read.py). Drawn from a stream of its own, so a seed
    # without it runs as it did before.
    far_node_ms: int = 0
    loss_max: float = 0.25
    dup_max: float = 0.10
    fault_every_ms: int = 150  # mean gap between fault events
    client_every_ms: int = 15  # mean gap between client requests
    hold_pop_p: float = 0.05  # a forwarded pop's link is held (one-way, loses nothing)
    wipe_p: float = 0.3  # a crashed member comes back without its disk (when that loses no ack)
    # A crashed member comes back on an old backup of its own disk, put back
    # with `ai-memory restore` (when a lost disk would lose no ack). Drawn,
    # with the backups' times, from a stream of its own: a seed without
    # restores runs as it did before them.
    restore_p: float = 0.0
    mailboxes: int = 2
    pending_cap: int = 6
    read_hedge_ms: int = 100  # a read's pull not answered by then: ask the next peer too
    read_p: float = 0.08  # share of client requests that are quorum reads of an inbox
    disk_delay_max_ms: int = 0  # a store write completes after up to this long (a slow disk)
    # The byte budget of an anti-entropy push's batches. The daemon's 8 MiB
    # never binds on the simulator's small ops; a few hundred bytes cuts a
    # push into batches of a few ops, as large ops cut a real one.
    push_bytes_max: int = limits.peer_batch_bytes_max
    # The run begins as a new cluster does: no member has a disk, each starts
    # within start_spread_ms of the first and joins by daemon/replication/joining.py's
    # rule (federation.bootstrap.decide), crashing and losing disks meanwhile.
    first_start: bool = False
    start_spread_ms: int = 1_500
    # Share of client requests that purge a mailbox (issue 27). Drawn from a
    # stream of its own, so a seed without purges runs as it did before them.
    purge_p: float = 0.0
    # Leases (issue 26): every node sweeps its disk this often for leases
    # past their deadline by more than the grace (by its own clock) and asks
    # the mailbox's owner to expire them (daemon: limits.lease_sweep_secs,
    # limits.lease_sweep_grace_ms, scaled down like the timeouts).
    lease_sweep_ms: int = 1_000
    lease_grace_ms: int = 300
    # Phase 4 begins with every member restarting (then only the sweep gets
    # an owner for a mailbox nobody asks for); in the other half of the
    # seeds the owners stay, with whatever their models hold.
    lease_tail_restart: bool = False

    @property
    def delay_worst_ms(self) -> int:
        """The longest one-way delay of any link (a far member's included)."""
        return self.delay_max_ms + self.far_node_ms

    @property
    def forward_timeout_ms(self) -> int:
        """A forwarded mailbox request unanswered this long: try the next
        member (the daemon's claim timeout plus a peer request's timeout)."""
        return self.claim_timeout_ms + 2 * self.delay_worst_ms + 100

    @property
    def lease_slack_ms(self) -> int:
        """How long after every node's clock passed a lease's deadline plus
        the grace a healed cluster may take to show it expired everywhere:
        two sweeps, two forwards that time out (a request whose owner just
        changed) and the convergence bound (the expiry reaching every
        replica)."""
        return 2 * self.lease_sweep_ms + 2 * self.forward_timeout_ms + self.converge_bound_ms

    @property
    def converge_bound_ms(self) -> int:
        """The documented bound: all replicas equal within two catch-up
        intervals plus two worst-case one-way delays of the heal (one offer
        out, one push back, and an offer that had just been sent stale), plus
        two of the slowest disk writes (the pushed ops' write, and the one an
        offer waits for: offers carry only what is durable)."""
        return 2 * self.catchup_interval_ms + 2 * self.delay_worst_ms + 2 * self.disk_delay_max_ms

    @classmethod
    def from_seed(cls, seed: int, nodes: int | None = None) -> SimConfig:
        rng = random.Random(f"config:{seed}")
        n = nodes if nodes is not None else rng.choice((3, 3, 3, 5))
        majority = n // 2 + 1
        w = rng.choice((majority, majority, n, 1))
        return cls(seed=seed, nodes=n, write_quorum=w,
                   delay_max_ms=rng.choice((5, 30, 30, 150)),
                   loss_max=rng.choice((0.0, 0.05, 0.25)),
                   dup_max=rng.choice((0.0, 0.1)),
                   mailboxes=rng.choice((1, 1, 2)),
                   pending_cap=rng.choice((3, 6, 256)),
                   disk_delay_max_ms=rng.choice((0, 2, 10, 40)),
                   push_bytes_max=rng.choice((limits.peer_batch_bytes_max, 500)),
                   first_start=rng.random() < 0.5,
                   start_spread_ms=rng.choice((0, 300, 1500)),
                   purge_p=random.Random(f"purge:{seed}").choice((0.0, 0.0, 0.01, 0.03)),
                   lease_tail_restart=random.Random(f"leases:{seed}").random() < 0.5,
                   restore_p=random.Random(f"restore:{seed}").choice((0.0, 0.0, 0.5)),
                   far_node_ms=random.Random(f"sites:{seed}").choice((0, 0, 0, 60)))
