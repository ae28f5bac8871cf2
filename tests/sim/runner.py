"""One simulated run: faults, then heal, then the invariant checks.

``run_seed(seed)`` builds a 3- or 5-node cluster from the seed, drives it in
steps of ``tick_ms`` of simulated time and returns a :class:`Result`:

* phase 1 (``fault_ms``): clients send requests while the fault scheduler
  partitions links (both ways or one way), sets per-link loss and
  duplication, crashes nodes (restarting them from disk later) and pauses
  them for longer than every timeout; every node's clock is skewed by up to
  minutes for the whole run. A targeted nemesis cuts one way, in hold mode,
  the link a pop was just forwarded over (or the way back), so the client
  gives up and retries elsewhere while its first copy arrives much later;
* phase 2: everything heals (partitions, loss, crashed and paused nodes)
  and the run continues until every node's replica snapshot is equal; the
  time this took, from the heal or from the last op a node wrote after it
  (requests in flight at the heal fail over and write later), is the
  measured convergence bound;
* phase 3: clients retry, once, every pop and send whose outcome they never
  learned, and the cluster must converge again (lease holders act in phase
  1 and from here on);
* phase 4 (leases, issue 26): on half the seeds every member restarts with
  its disk (no node owns a mailbox afterwards; on the others the owners
  keep their terms and models), and the run goes on, for at most
  ``LEASE_TAIL_MS``, until every lease a node shows would be well past its
  deadline by every node's clock (:func:`tests.sim.checker.overdue_leases`),
  so that those leases are expired, redelivered or completed by the end;
  then it converges once more.

Throughout, every up node sweeps its disk for leases past their deadline
(``SimConfig.lease_sweep_ms``, ``lease_grace_ms``) and sends a
``MailExpire`` for each such mailbox, entering at itself like a client
request, as the daemon's sweep does.

Invariants are checked by :mod:`tests.sim.checker`; step-by-step
monotonicity (state never reverts) is sampled every ``CHECK_EVERY_MS``.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from common.errors import AiMemoryError
from common.ops import mailbox_key
from federation.batching import fold, mailbox_of
from federation.bootstrap import (
    CHECKING,
    SERVING,
    WAITING,
    Bootstrap,
    KeepCopy,
    PeerView,
    Refuse,
    Seed,
    Wait,
    decide,
    decide_copy,
)
from federation.membership import EPOCH_STRIDE
from federation.messages import Accept, Message, Reseeding
from federation.requests import MailExpire
from tests.sim import checker
from tests.sim.config import SimConfig
from tests.sim.disk import SimDisk
from tests.sim.entry import Answer, Forward, Pull, Pulled
from tests.sim.network import Network
from tests.sim.node import SimNode
from tests.sim.workload import Attempt, Workload

EPOCH_MS = 1_700_000_000_000  # simulated wall time starts here
SIM_CLUSTER_ID = "c-sim"


def _holds_cluster_data(node: SimNode) -> bool:
    """Does the node's disk hold what a member that lost it must not forget:
    an op of another member, or a promise to another member's candidacy?
    (Its own candidacies' epochs, which nobody promised, and its own ops,
    which nobody holds, are forgotten harmlessly: anything acknowledged
    was held by a majority.)"""
    seqs = node.disk.max_seqs()
    me = sorted(node.members).index(node.id)
    return any(seq > 0 and origin != node.id for origin, seq in seqs.items()) or any(
        epoch % EPOCH_STRIDE != me for epoch in node.disk.promises().values())
CHECK_EVERY_MS = 100
# Phase 4 waits at most this long for leases to fall due (the longest lease
# the workload asks, with every renew it may make, is well inside it; a
# lease whose deadline an owner ahead by minutes stamped is not waited for).
LEASE_TAIL_MS = 12_000


@dataclass(slots=True)
class Result:
    seed: int
    cfg: SimConfig
    violations: list[str]
    converge_ms: int | None
    converge_ticks: int | None
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def replay(self) -> str:
        return f"python -m tests.sim --seed {self.seed}" + (
            f" --nodes {self.cfg.nodes}" if self.cfg.nodes != SimConfig.from_seed(self.seed).nodes
            else "")


class Sim:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(f"sim:{cfg.seed}")
        self.ids = [f"n{i}" for i in range(cfg.nodes)]
        self.now = EPOCH_MS
        self.net = Network(random.Random(f"net:{cfg.seed}"), self.ids, cfg.delay_min_ms,
                           cfg.delay_max_ms)
        if cfg.far_node_ms:  # the last member across a WAN from the others
            far = self.ids[-1]
            for other in self.ids[:-1]:
                self.net.base_ms[(far, other)] = self.net.base_ms[(other, far)] = cfg.far_node_ms
        self.stats: Counter[str] = Counter()
        self._timers: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._timer_serial = 0
        self.workload = Workload(random.Random(f"load:{cfg.seed}"), cfg.mailboxes, cfg.pending_cap,
                                 cfg.read_p, purge_p=cfg.purge_p)
        self.history = self.workload.history
        self.monitor = checker.Monitor(self)
        self.nodes = {
            i: SimNode(self, i, self.ids, self.rng.randint(-cfg.skew_max_ms, cfg.skew_max_ms),
                       start=not cfg.first_start)
            for i in self.ids
        }
        self._tokens = 0
        self._heal_at = self.now + cfg.fault_ms
        self._next_check = self.now + CHECK_EVERY_MS
        self._wiping: set[str] = set()  # crashed members that come back without their disk
        self._joining: set[str] = set()  # processes without a database, deciding (they answer probes)
        self._join_gen: Counter[str] = Counter()  # per member: its joining process (a crash ends one)
        self._had_data: set[str] = set()  # wiped members whose lost disk held the cluster's data
        # Backups of members' own disks (the latest per member), and the
        # crashed members that come back on theirs (ai-memory restore).
        self._restore_rng = random.Random(f"restores:{cfg.seed}")
        self._backups: dict[str, SimDisk] = {}
        self._restoring: dict[str, SimDisk] = {}
        self._checking: set[str] = set()  # processes whose disk must recover, asking if it can
        self._check_gen: Counter[str] = Counter()
        if cfg.first_start:
            for i in self.ids:
                self.later(self.now + self.rng.randint(0, cfg.start_spread_ms), self._restart, i)
        self.last_write_ms = 0  # when a node last wrote an op of its own
        self._holding: set[tuple[str, str, int]] = set()  # (message, token, delivery) held
        # Lease holders act in phase 1 and again from phase 3 until the last
        # settle (not while phase 2 measures convergence): a holder whose
        # step falls outside goes silent.
        self._holders_open = True
        self._renews: dict[int, int] = {}  # a holder's attempt -> renews acknowledged before it

    # -- plumbing used by nodes ------------------------------------------------------
    def later(self, at_ms: int, fn: Callable[..., None], *args: Any) -> None:
        self._timer_serial += 1
        heapq.heappush(self._timers, (at_ms, self._timer_serial, fn, args))

    def send(self, src: str, dst: str, msg: Message, now_ms: int) -> None:
        """A core message; a refused one is reported to the sender's core
        after a while (the adapter learns of a cut link when its request fails)."""
        if not self.transmit(src, dst, msg):
            self.later(now_ms + self.rng.randint(5, 200), self._send_failed, src, dst)

    def transmit(self, src: str, dst: str, msg: Any) -> bool:
        """Put ``msg`` on the network; False if the link refused it."""
        core = self.nodes[src].core
        if self.net.send(src, dst, msg, self.now, "" if core is None else core.incarnation):
            return True
        self.stats["send_refused"] += 1
        return False

    def _send_failed(self, src: str, dst: str, now_ms: int) -> None:
        node = self.nodes[src]
        if node.core is not None and not node.paused:
            node.run(node.core.on_send_failed(dst, node.clock(now_ms)), now_ms)

    def answer_client(self, token: int, value: Any) -> None:
        """The entry node answers the client of attempt ``token``."""
        self._answer(self.history.attempts[token], value, self.now)

    def _answer(self, attempt: Attempt, value: Any, now_ms: int) -> None:
        if attempt.done:
            raise AssertionError(f"token {attempt.token} answered twice")
        attempt.done = True
        attempt.answered_ms = now_ms
        attempt.ok = not isinstance(value, AiMemoryError)
        attempt.value = value
        self.stats["acked" if attempt.ok else f"err_{type(value).__name__}"] += 1
        self.monitor.on_answer(attempt)
        self._follow_lease(attempt)

    # -- clients -------------------------------------------------------------------------
    def submit(self, kind: str, payload: Any, now_ms: int, *, entry: str | None = None,
               rng: random.Random | None = None) -> Attempt | None:
        """A client's request entering at ``entry`` (else an up node drawn
        from ``rng``, the run's own stream unless another is given)."""
        up = [i for i in self.ids if self.nodes[i].up]
        if not up or (entry is not None and entry not in up):
            return None
        if entry is None:
            entry = (rng or self.rng).choice(up)
        self._tokens += 1
        attempt = Attempt(self._tokens, kind, payload, entry, now_ms)
        self.history.attempts[attempt.token] = attempt
        node = self.nodes[entry]
        if node.paused:
            self.stats["lost_to_pause"] += 1
            return attempt  # the client times out; the outcome stays unknown
        core, client = node.core, node.entry
        assert core is not None and client is not None
        if kind == "write":
            local = client.core_token(attempt.token, None)
            node.run(core.write(local, payload, node.now_ms()), now_ms)
        elif kind == "read":
            client.read(attempt.token, payload)
        else:
            if payload.sent_at_ms is None:
                # The entry node stamps a request once; retries keep the stamp.
                payload = attempt.req = replace(payload, sent_at_ms=node.now_ms())
            client.route(attempt.token, payload)
        return attempt

    def maybe_hold(self, entry: str, owner: str) -> None:
        """Right after a client's pop is forwarded, maybe hold one way of its link."""
        if self.now < self._heal_at and self.rng.random() < self.cfg.hold_pop_p:
            self._hold_link(entry, owner, self.now)

    def _hold_link(self, entry: str, owner: str, now_ms: int) -> None:
        """The one-way cut of issue 14: the forwarded pop (or its answer) is
        held in the network past the client's patience, then delivered."""
        link = (entry, owner) if self.rng.random() < 0.7 else (owner, entry)
        self.net.hold(*link)
        self.stats["held_links"] += 1
        self.later(now_ms + self.rng.randint(self.cfg.claim_timeout_ms, 1500),
                   self._release_link, link)

    def _release_link(self, link: tuple[str, str], now_ms: int) -> None:
        self.net.release(now_ms, link)

    def _retry(self, attempt: Attempt, now_ms: int) -> None:
        """Retry an attempt whose outcome the client never learned."""
        self.stats["retries"] += 1
        req = attempt.req
        if attempt.kind == "send":
            req = self.workload.resend(req, now_ms)
            if req is not attempt.req:
                self.stats["keyless_resends"] += 1
        self.submit(attempt.kind, req, now_ms)

    # -- leases ------------------------------------------------------------------------------
    def _follow_lease(self, a: Attempt) -> None:
        """The holder of an acknowledged leased pop or renew plans its next
        step (:meth:`Workload.holder_next`); one whose renew or completion
        failed for another reason than a lost lease may try it again."""
        if not self._holders_open:
            return
        if a.kind == "pop" and a.ok and a.value is not None and a.req.token is not None:
            claim = a.value["claim"]
            held = (str(claim["id"]), str(claim.get("token")), int(claim.get("delivery") or 0))
            if claim.get("token") == a.req.token and held not in self._holding:
                self._holding.add(held)
                self._plan_holder(a.req.mailbox, claim, 0)
        elif a.kind in ("renew", "complete"):
            renews = self._renews.pop(a.token, 0)
            if a.ok:
                if a.kind == "renew":
                    self._plan_holder(a.req.mailbox, a.value["claim"], renews + 1)
            elif getattr(a.value, "code", None) != "lease_lost":
                leases = self.workload.leases
                if leases.random() < 0.5:
                    self.later(self.now + leases.randint(50, 300), self._holder_asks,
                               a.kind, a.req, renews)

    def _plan_holder(self, mailbox: str, claim: dict[str, Any], renews: int) -> None:
        step = self.workload.holder_next(mailbox, claim, renews)
        if step is None:
            self.stats["leases_let_run_out"] += 1
            return
        delay, kind, req = step
        self.later(self.now + delay, self._holder_asks, kind, req, renews)

    def _holder_asks(self, kind: str, req: Any, renews: int, now_ms: int) -> None:
        if not self._holders_open:
            return
        a = self.submit(kind, req, now_ms, rng=self.workload.leases)
        if a is not None:
            self._renews[a.token] = renews

    def _sweep(self, node_id: str, now_ms: int) -> None:
        """The node's lease sweep: for each mailbox its disk shows with a
        lease past its deadline by more than the grace (by this node's
        clock), a ``MailExpire`` entering here (nobody checks its answer)."""
        node = self.nodes[node_id]
        if node.up and not node.paused:
            before = node.now_ms() - self.cfg.lease_grace_ms
            for ws, proj in node.disk.due_lease_mailboxes(before):
                self.stats["sweep_requests"] += 1
                self.submit("expire", MailExpire(mailbox_key(ws, proj)), now_ms, entry=node_id)
        self.later(now_ms + self.cfg.lease_sweep_ms, self._sweep, node_id)

    def _lease_tail(self) -> None:
        """Phase 4: on half the seeds every member restarts (its disk kept,
        as in a rolling upgrade), so no node owns a mailbox and only the
        sweep, or a holder's request, gets an owner to expire a lease; then
        step until every lease a node shows is well past its deadline on
        every clock, or ``LEASE_TAIL_MS`` passed."""
        for node in self.nodes.values():
            if node.up and self.cfg.lease_tail_restart:
                node.crash()
                node.restart()
                self.stats["tail_restarts"] += 1
        cap = self.now + LEASE_TAIL_MS
        while self.now < cap:
            waits = [t for t in checker.lease_due_times(self) if t <= cap]
            if not waits or self.now >= max(waits):
                return
            for _ in range(CHECK_EVERY_MS // self.cfg.tick_ms):
                self.step()
            self.monitor.sample()

    # -- delivery ----------------------------------------------------------------------------
    def _deliver(self, env: Any) -> None:
        node = self.nodes[env.dst]
        if node.core is None:
            return
        if node.paused:  # held in the socket buffer until the process resumes
            node.inbox.append(env)
            return
        msg, client = env.payload, node.entry
        assert client is not None
        if isinstance(msg, Forward):
            client.on_forward(env.src, msg)
        elif isinstance(msg, Answer):
            client.on_answer(env.src, msg, env.incarnation)
        elif isinstance(msg, Pull):
            client.on_pull(env.src, msg)
        elif isinstance(msg, Pulled):
            client.on_pulled(env.src, msg, env.incarnation)
        else:
            node.run(node.core.on_message(env.src, msg, node.clock(self.now), env.incarnation),
                     self.now)

    def _fold(self, envs: list[Any]) -> list[Any]:
        """What a daemon's peer link does to a burst: the ``Accept`` rounds
        one process sent one mailbox at one epoch, due together on one
        link, arrive as one (:func:`federation.batching.fold`), ahead only
        of messages about other mailboxes."""
        out: list[Any] = []
        open_at: dict[tuple[str, str, str, str], int] = {}
        for env in envs:
            msg, mailbox = env.payload, mailbox_of(env.payload)
            key = (env.src, env.dst, env.incarnation, mailbox or "")
            if mailbox is not None and isinstance(msg, Accept):
                i = open_at.get(key)
                merged = None if i is None else fold(out[i].payload, msg)
                if merged is not None and i is not None:
                    out[i] = replace(out[i], payload=merged)
                    self.stats["accepts_folded"] += 1
                    continue
                open_at[key] = len(out)
            elif mailbox is not None:
                open_at.pop(key, None)
            out.append(env)
        return out

    def step(self) -> None:
        self.now += self.cfg.tick_ms
        while self._timers and self._timers[0][0] <= self.now:
            _, _, fn, args = heapq.heappop(self._timers)
            fn(*args, self.now)
        for env in self._fold(self.net.due(self.now)):
            self._deliver(env)
        for node in self.nodes.values():
            if node.core is not None and not node.paused:
                node.run(node.core.tick(node.clock(self.now)), self.now)

    # -- faults ------------------------------------------------------------------------------
    def _fault(self, now_ms: int) -> None:
        cfg, rng = self.cfg, self.rng
        r = rng.random()
        if r < 0.25:
            size = rng.randint(1, max(1, cfg.nodes // 2))
            side = set(rng.sample(self.ids, size))
            one_way = rng.random() < 0.3
            self.net.partition(side, one_way)
            self.stats["partitions"] += 1
        elif r < 0.45:
            self.net.blocked.clear()
        elif r < 0.62:
            victim = rng.choice(self.ids)
            node = self.nodes[victim]
            if node.up:
                node.crash()
                self.stats["crashes"] += 1
                wipe = rng.random() < cfg.wipe_p and self._may_wipe()
                restore = (not wipe and victim in self._backups and self._may_wipe()
                           and self._restore_rng.random() < cfg.restore_p)
                if wipe or restore:
                    self._wiping.add(victim)
                    if _holds_cluster_data(node):
                        self._had_data.add(victim)
                    self.monitor.disk_lost()
                    self.stats["disks_lost" if wipe else "restores"] += 1
                if restore:
                    self._restoring[victim] = self._backups.pop(victim)
                self.later(now_ms + rng.randint(50, 1000), self._restart, victim)
            elif victim in self._joining or victim in self._checking:
                # A crash while it decides: a later process starts deciding anew.
                self._joining.discard(victim)
                self._checking.discard(victim)
                self.stats["join_crashes"] += 1
                self.later(now_ms + rng.randint(50, 1000), self._restart, victim)
        elif r < 0.77:
            victim = rng.choice(self.ids)
            node = self.nodes[victim]
            if node.up and not node.paused:
                node.paused = True
                self.stats["pauses"] += 1
                self.later(now_ms + rng.randint(cfg.claim_timeout_ms + 100, 1500), self._resume,
                           victim)
        else:
            for a in self.ids:
                for b in self.ids:
                    if a != b:
                        self.net.loss[(a, b)] = rng.random() * cfg.loss_max
                        self.net.dup[(a, b)] = rng.random() * cfg.dup_max
        if cfg.restore_p and self._restore_rng.random() < 0.3:  # a member backs itself up
            nid = self._restore_rng.choice(self.ids)
            if self.nodes[nid].up:
                self._backups[nid] = self.nodes[nid].disk.backup()
        self.later(now_ms + rng.randint(1, 2 * cfg.fault_every_ms), self._fault_if_running)

    def _fault_if_running(self, now_ms: int) -> None:
        if now_ms < self._heal_at:
            self._fault(now_ms)

    def _may_wipe(self) -> bool:
        """A disk may be lost only while every acknowledged write is on two
        live disks at least: W >= 2, and no other member is still without
        its data (down with a lost disk, recovering, or still deciding at its
        first start: a member that never joined holds nothing either, so
        the writes acknowledged meanwhile are on the other two disks only;
        losing one of those is two faults, beyond what the design covers)."""
        return (self.cfg.write_quorum >= 2 and not self._wiping and not self._joining
                and not self._checking
                and not any(n.recovering for n in self.nodes.values()))

    def _restart(self, node_id: str, now_ms: int) -> None:
        node = self.nodes[node_id]
        if node.up:
            return
        copy = self._restoring.pop(node_id, None)
        if copy is not None:  # ai-memory restore put the backup in place
            self._wiping.discard(node_id)
            self.monitor.forget(node_id)
            node.put_back(copy)
        if node_id not in self._wiping and node.has_disk and node.recovering:
            # A database that must still recover is checked at every start.
            self._check_gen[node_id] += 1
            self._checking.add(node_id)
            self._check(node_id, self._check_gen[node_id], now_ms)
            return
        if node_id not in self._wiping and node.has_disk:
            node.restart()
            self.stats["restarts"] += 1
            return
        # No database (a first start, or a lost disk): a new process joins.
        self._join_gen[node_id] += 1
        self._joining.add(node_id)
        self._join(node_id, self._join_gen[node_id], now_ms)

    def _check(self, node_id: str, gen: int, now_ms: int) -> None:
        """One round of a process whose disk must still recover, as
        daemon/replication/joining.py's ``_check_copy``: Reseeding to every
        member that answers (the daemon waits for their answers; one in ten
        times out, and that member is not counted as having taken it), what
        each collected, and :func:`federation.bootstrap.decide_copy`."""
        node = self.nodes[node_id]
        if node.up or node_id not in self._checking or gen != self._check_gen[node_id]:
            return  # started already, or that process crashed
        views, took = [], set()
        for peer in self.ids:
            if peer == node_id:
                continue
            view = self._probe(node_id, peer)
            p = self.nodes[peer]
            if view.answered and view.state == SERVING and p.core is not None:
                if self._restore_rng.random() >= 0.1:  # else its Reseeding timed out
                    p.run(p.core.on_message(node_id, Reseeding(""), p.clock(now_ms)), now_ms)
                    took.add(peer)
                floors = p.disk.collected_floor()  # and a GC the core handed over, not yet run
                for origin, seq in p.core.collect_floor.items():
                    floors[origin] = max(floors.get(origin, 0), seq)
                view = replace(view, collected=floors)
            views.append(view)
        decision = decide_copy(node.disk.version_vector(), views, took)
        if isinstance(decision, Wait):
            self.stats["check_waits"] += 1
            self.later(now_ms + self._restore_rng.randint(50, 200), self._check, node_id, gen)
            return
        self._checking.discard(node_id)
        if isinstance(decision, KeepCopy):
            self._had_data.discard(node_id)  # it has its data back
            node.restart()
            self.stats["restarts"] += 1
            return
        # Set aside: it starts as a member that lost its disk.
        self.stats["copies_set_aside"] += 1
        node.has_disk = False
        self._join_gen[node_id] += 1
        self._joining.add(node_id)
        self._join(node_id, self._join_gen[node_id], now_ms)

    def _probe(self, me: str, peer: str) -> PeerView:
        """What ``peer`` answers ``me``'s /peer/v1/hello (daemon/replication/joining.py)."""
        p = self.nodes[peer]
        if (me, peer) in self.net.blocked or (peer, me) in self.net.blocked or p.paused:
            return PeerView(peer, False, why="cut or paused")
        if p.core is not None:
            return PeerView(peer, True, SERVING, SIM_CLUSTER_ID, fresh=p.core.pristine)
        if peer in self._joining:
            return PeerView(peer, True, WAITING)
        if peer in self._checking:
            return PeerView(peer, True, CHECKING)
        return PeerView(peer, False, why="down")

    def _join(self, node_id: str, gen: int, now_ms: int) -> None:
        """One round of a joining process: probe every member, then do what
        :func:`federation.bootstrap.decide` says, as daemon/replication/joining.py does."""
        node = self.nodes[node_id]
        if node.up or node_id not in self._joining or gen != self._join_gen[node_id]:
            return  # joined already, or that process crashed
        views = [self._probe(node_id, p) for p in self.ids if p != node_id]
        decision = decide(views, cluster_id=SIM_CLUSTER_ID, member_ids=self.ids)
        if isinstance(decision, Bootstrap):
            if node_id in self._had_data:
                self.monitor.fail(f"{node_id} lost a disk that held the cluster's data and "
                                  f"bootstrapped as new ({views})")
            self._joining.discard(node_id)
            self._wiping.discard(node_id)
            self._had_data.discard(node_id)
            self.monitor.forget(node_id)
            node.bootstrap()
            self.stats["bootstraps"] += 1
            self.stats["restarts"] += 1
            return
        if isinstance(decision, Seed):
            self._joining.discard(node_id)
            self._had_data.discard(node_id)
            self._seed(node_id, self.rng.choice(decision.donors), now_ms)
            return
        if isinstance(decision, Refuse):  # one cluster id for all: never
            self.monitor.fail(f"{node_id} refused to join: {decision.reason}")
            return
        self.stats["join_waits"] += 1
        self.later(now_ms + self.rng.randint(50, 200), self._join, node_id, gen)

    def _seed(self, node_id: str, donor: str, now_ms: int) -> None:
        """A member without a database starts from a copy of ``donor``'s
        replicated state (the daemon downloads a backup) and recovers."""
        node = self.nodes[node_id]
        self._wiping.discard(node_id)
        self.monitor.forget(node_id)
        # As daemon/replication/seeding.py: Reseeding reaches the donor before its copy is
        # taken (the download waits for its answer); the others hear it on
        # the network, or not.
        for peer in self.ids:
            if peer != node_id and peer != donor:
                self.transmit(node_id, peer, Reseeding(donor))
        d = self.nodes[donor]
        assert d.core is not None
        d.run(d.core.on_message(node_id, Reseeding(donor), d.clock(now_ms)), now_ms)
        node.restart(seed=d.disk.seed_copy())
        self.stats["restarts"] += 1
        self.stats["seeded"] += 1

    def _resume(self, node_id: str, now_ms: int) -> None:
        node = self.nodes[node_id]
        node.paused = False
        held, node.inbox = node.inbox, []
        for env in held:
            self._deliver(env)

    def _client(self, now_ms: int) -> None:
        if now_ms >= self._heal_at:
            return
        h = self.history
        unknown = [a for a in h.attempts.values()
                   if a.kind in ("pop", "send", "hold", "release", "decide")
                   and (not a.done or not a.ok)]
        if unknown and self.rng.random() < 0.15:
            self._retry(self.rng.choice(unknown), now_ms)
        else:
            kind, payload = self.workload.draw(now_ms)
            self.submit(kind, payload, now_ms)
        self.later(now_ms + self.rng.randint(1, 2 * self.cfg.client_every_ms), self._client)

    def heal(self) -> None:
        self._holders_open = False
        self.net.heal(self.now)
        for node in self.nodes.values():
            if node.paused:
                self._resume(node.id, self.now)
        for node in self.nodes.values():
            if not node.up:
                self._restart(node.id, self.now)

    def retry_unknown(self) -> None:
        """Clients retry, once, every pop and send they never heard back about."""
        for a in list(self.history.attempts.values()):
            if a.kind in ("pop", "send") and not (a.done and a.ok):
                self.later(self.now + self.rng.randint(0, 300), self._retry, a)

    def _settle(self, limit_ms: int) -> int | None:
        """Step until every snapshot is equal; the ms from the later of the
        start and the last op written (requests still in flight at the heal,
        failing over to another member, write after it), or None."""
        began = self.now
        while self.now - began <= limit_ms:
            self.step()
            if self.now >= self._next_check:
                self.monitor.sample()
                self._next_check = self.now + CHECK_EVERY_MS
            if self._converged():
                return self.now - max(began, self.last_write_ms)
        return None

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> Result:
        """Phase 1 (faults + load), phase 2 (heal, measure convergence), then
        phase 3 (clients retry what they never learned; converge again)."""
        cfg = self.cfg
        start = self.now
        self._heal_at = start + cfg.fault_ms
        self.later(start + self.rng.randint(50, 300), self._fault_if_running)
        self.later(start + 1, self._client)
        for i, node_id in enumerate(self.ids):
            offset = (i + 1) * cfg.lease_sweep_ms // len(self.ids)
            self.later(start + offset, self._sweep, node_id)
        self._next_check = start + CHECK_EVERY_MS
        while self.now < self._heal_at:
            self.step()
            if self.now >= self._next_check:
                self.monitor.sample()
                self._next_check = self.now + CHECK_EVERY_MS
        self.heal()
        converge_ms = self._settle(cfg.settle_max_ms)
        violations: list[str] = []
        if converge_ms is None:
            violations.append(f"no convergence within {cfg.settle_max_ms} ms of the heal")
        elif converge_ms > cfg.converge_bound_ms:
            violations.append(f"converged {converge_ms} ms after the heal, over the documented "
                              f"bound of {cfg.converge_bound_ms} ms")
        else:
            self._holders_open = True
            self.retry_unknown()
            for _ in range((300 + 2 * cfg.claim_timeout_ms) // cfg.tick_ms):
                self.step()
            if self._settle(cfg.settle_max_ms) is None:
                violations.append("no convergence after the clients' retries")
            else:
                self._lease_tail()
                self._holders_open = False
                if self._settle(cfg.settle_max_ms) is None:
                    violations.append("no convergence after the leases fell due")
        self.monitor.sample()
        violations = list(self.monitor.violations) + violations
        if not violations:
            violations += checker.final_checks(self)
        ticks = None if converge_ms is None else converge_ms // cfg.tick_ms
        return Result(cfg.seed, cfg, violations, converge_ms, ticks, dict(self.stats))

    def _converged(self) -> bool:
        disks = [n.disk for n in self.nodes.values()]
        first = disks[0].version_vector()
        if any(d.version_vector() != first for d in disks[1:]):
            return False
        snap = disks[0].snapshot()
        return all(d.snapshot() == snap for d in disks[1:])


def run_seed(seed: int, nodes: int | None = None) -> Result:
    return Sim(SimConfig.from_seed(seed, nodes)).run()
