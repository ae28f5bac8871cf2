"""The invariants of DESIGN.md section 5, checked on a simulated history.

1. No acknowledged write is lost: every op a client saw acknowledged (quorum
   writes, mail sends) is held, and visible, on every node at the end.
2. No message is claimed twice: no two acknowledged pops with different
   identities (request id, else claimer session) got the same message; all
   acknowledged pops of one request id got the same message; no message is
   both acknowledged-claimed and acknowledged-cancelled; and on every node
   the final claimer of an acknowledged claim is the acknowledged one.
   A pop's request id is decided once: every answer it got is the same
   (a message, or "nothing pending"), and at the end every node records
   that same decision for it.
3. Nothing appears that was never written: every note, memory and message
   on every node was sent by a client, with its body intact; every claim
   names a session and request id a client used together.
4. Convergence: checked by the runner (equal snapshots after the heal).
5. Nothing reverts: sampled during the run on every node's disk -- a
   claimed or cancelled message never shows pending again (unless the
   terminal op it showed was never acknowledged and a hold, release or
   approval outranks it: then it is void; a node that showed a failed
   round's cancel has not shown the acknowledged claim that a later owner
   made after voiding it), and once a node shows an acknowledged decision it keeps
   showing it; an acknowledged read mark or delete, once applied on a node,
   stays visible there. Once a hold is acknowledged, no node shows the
   message decided by an op that does not follow a release of that hold.
6. The approval queue: a message held for approval is decided once (at most
   one acknowledged approve or reject); it ends rejected exactly when the
   acknowledged decision was a rejection; no node ever shows a held message
   claimed unless its winning decision is an approval, and an acknowledged
   pop never returns a message an acknowledged rejection ended.
7. Purges (issue 27): a message may be gone from a node only if it is
   recorded there as purged and a purge of its mailbox was issued; a pop
   sent after a purge of its mailbox was acknowledged never gets a message
   that ends purged; a request id answered with a message that a purge
   then took may later be answered "nothing pending", never another message.
   A purge takes a message in any state, awaiting approval and rejected
   included: rule 6 holds for the messages no purge took.
8. Leases (issue 26). Never two live holders: per message, every
   acknowledged answer by which a client held it (a pop's claim, a renew, a
   completion, each with the rank ``[epoch, hlc, origin, seq]`` of the op
   it answers for) is ordered by rank; wherever the holder changes (another
   claim token, or the identity of a pop without a lease) the first answer
   of the new holder is a pop, the old holder had a lease, and a
   ``msg.expire`` of the old holder's token, issued by some node (every
   persisted op is watched), is ranked between the two; and an expiry ends
   no acknowledged lease early: its ``at_ms`` (the issuing owner's clock)
   is at or after the deadline of the greatest-ranked acknowledged pop or
   renew of that token it outranks (since the token's previous expiry),
   or of an unacknowledged claim or renew of the token ranked between them
   (a renew may shorten a lease). Every expired lease
   redelivered or completed: after the heal and the last phase, no node
   shows a standing, uncompleted lease whose deadline is past by more than
   the sweep's grace plus ``SimConfig.lease_slack_ms`` on every node's
   clock. An acknowledged leased pop carries the request's token and a
   deadline, a renew and a completion the token they were asked with, and
   every completion a node shows is one a holder asked for.

   The rules above that a leased claim may legitimately break allow it
   only after an expiry of that lease ranked after the holder's last
   acknowledged answer (and before what followed): a message popped by two
   identities (2), a request id answered with another message or "nothing
   pending" once its leased claim expired (2; a copy of the pop that
   arrives after the lease ended is served as a new pop, so the answers are
   ordered by rank and each change needs that expiry), the final claimer
   and the request's recorded decision (2, 2a), an acknowledged claim shown
   and then changed (2b), a claimed message shown pending again (5), a
   message popped and later cancelled or held (2, 5).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from common.lifecycle import CLAIM_KINDS, EDITABLE_FIELDS, TERMINAL
from common.ops import (
    MEM_DEL,
    MSG_CANCEL,
    MSG_EMPTY,
    MSG_EXPIRE,
    MSG_PURGE,
    MSG_RELEASE,
    NOTE_NEW,
    NOTE_READ,
    Op,
    mailbox_key,
)
from store.records import MESSAGE_FIELDS
from tests.sim.workload import Attempt

if TYPE_CHECKING:
    from tests.sim.runner import Sim

Rank = tuple[int, int, str, int]  # an op's place in the owners' order: (epoch, hlc, origin, seq)
# state, request, session, at_ms, epoch of the deciding op, and its rank
Decision = tuple[str, str | None, str | None, int | None, int | None, Rank | None]


def _rank(value: Any) -> Rank:
    epoch, hlc, origin, seq = value
    return (int(epoch), int(hlc), str(origin), int(seq))


@dataclass(frozen=True, slots=True)
class Held:
    """An acknowledged answer by which a client held a message (rule 8)."""

    rank: Rank  # of the op it answers for (a claim, a re-issued claim, a renew, a completion)
    holder: str  # the claim token, or the identity of a pop without a lease
    token: str | None
    kind: str  # pop | renew | complete
    session: str
    answered_ms: int
    until: int | None = None  # the deadline a leased pop's or renew's answer gave


def _identity(req: Any) -> str:
    if req.request_id is not None:
        return f"req:{req.request_id}"
    return f"session:{req.claimer.get('claimer_session')}"


class Monitor:
    """Watches answers as they arrive and samples node state during the run."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.violations: list[str] = []
        self.popped: dict[str, str] = {}  # message id -> identity of its acked pop
        self.popped_session: dict[str, str] = {}  # message id -> claimer session
        # message id -> (request id, session): who holds it. (A stale owner's
        # unacknowledged retry of the same request may stamp another at_ms.)
        self.popped_claim: dict[str, tuple[str | None, str]] = {}
        # message id -> the lowest epoch a claim of it was acknowledged at: a
        # node "shows" the acknowledged decision once it holds that claim (or
        # a re-issue of it at a later epoch), not a deposed owner's doomed
        # claim of the same request at an older epoch, which any later op of
        # that old epoch may outrank
        self.popped_epoch: dict[str, int] = {}
        self.by_request: dict[str, str] = {}  # request id -> message id
        # (mailbox, request id) -> every answer a pop with that id got (None: nothing pending)
        self.answers: dict[tuple[str, str], set[str | None]] = {}
        self.cancelled: set[str] = set()
        self.decided: dict[str, bool] = {}  # message id -> its acknowledged decision (approve?)
        # message id -> [(when, epoch)] of every cancel op a node issued, and
        # the lowest epoch the acknowledged cancel can have (one issued once
        # the acknowledged request was sent): a node shows that cancel once
        # its view is decided at that epoch or later, not a failed round's
        # older cancel, which a later approval or hold of that term may void
        self.cancel_ops: dict[str, list[tuple[int, int]]] = {}
        self.cancel_epoch: dict[str, int] = {}
        # message id -> acknowledged holds [(rank, session, asked at)] and fresh claims
        # [(rank, answered at)]
        self.holds: dict[str, list[tuple[list[Any], str, int]]] = {}
        self.claims: dict[str, list[tuple[list[Any], int, str | None]]] = {}
        # message id -> the rank of every release op any node issued (acked or not)
        self.releases: dict[str, list[list[Any]]] = {}
        # (node, message) -> [(sim ms, state shown)], one entry per change
        self.seen_states: dict[tuple[str, str], list[tuple[int, Decision | None]]] = {}
        self.popped_at: dict[str, int] = {}  # message id -> when its pop was acked
        self.acked_reads: list[Op] = []
        self.acked_dels: list[Op] = []
        self.acked_notes: list[tuple[int, str, str]] = []  # (acked at, to agent, note id)
        self.disk_lost_at: int | None = None  # reads after a lost disk are not checked
        self.purge_issued: set[str] = set()  # mailboxes some node stamped a msg.purge for
        # mailbox -> [(when acked, the purge's (hlc, origin, seq))]
        self.purges_acked: dict[str, list[tuple[int, tuple[int, str, int]]]] = {}
        self.popped_sent: dict[str, tuple[str, int]] = {}  # message -> (mailbox, pop sent at)
        # Leases (rule 8). Message id -> every acknowledged answer by which a
        # client held it; message id -> op id -> (rank, token) of every
        # msg.expire some node persisted; message id -> (rank, identity,
        # leased?) of its greatest-ranked acknowledged pop (the pop the
        # rules 2, 2b and 5 judge: a later holder after an expiry replaces it).
        self.held: dict[str, list[Held]] = {}
        self.expiries: dict[str, dict[tuple[str, int], tuple[Rank, str | None, int]]] = {}
        # message id -> op id -> (rank, token, deadline) of every leased claim or renew persisted
        self.lease_ops: dict[str, dict[tuple[str, int], tuple[Rank, str, int]]] = {}
        self.tenure: dict[str, tuple[Rank, str, bool]] = {}
        # (mailbox, request id) of a leased pop -> [(message or None, rank)] of its answers
        self.leased_answers: dict[tuple[str, str], list[tuple[str | None, Rank | None]]] = {}
        self.lease_tokens: dict[tuple[str, str], str] = {}  # (mailbox, request id) -> token
        # (mailbox, request id) -> ranks of every msg.empty some node persisted
        self.empties: dict[tuple[str, str], set[Rank]] = {}

    def purged(self, disk: Any, mid: str) -> bool:
        """Is ``mid`` gone from ``disk`` by a purge of its mailbox?"""
        sent = self.sim.history.send_bodies.get(mid)
        return (sent is not None and disk.is_purged(mid) and
                mailbox_key(sent["to_workspace"], sent["to_project"]) in self.purge_issued)

    def lease_ended(self, mid: str, token: str | None, before: Rank | None = None) -> bool:
        """Did an expiry of ``token``'s lease on ``mid`` follow the holder's
        last acknowledged answer ranked below ``before`` (else its last
        one), ranked below ``before`` itself?"""
        if token is None:
            return False
        mine = [h.rank for h in self.held.get(mid, [])
                if h.token == token and (before is None or h.rank < before)]
        after = max(mine) if mine else None
        return any(t == token and (after is None or after < r) and (before is None or r < before)
                   for r, t, _ in self.expiries.get(mid, {}).values())

    def _last_held(self, mid: str) -> Held | None:
        ops = self.held.get(mid)
        return None if not ops else max(ops, key=lambda h: h.rank)

    def _lease_gone(self, mid: str) -> bool:
        """Is the greatest-ranked acknowledged holder of ``mid`` a lease that expired since?"""
        last = self._last_held(mid)
        return last is not None and self.lease_ended(mid, last.token)

    def _expired_shown(self, mid: str, shown: Decision) -> bool:
        """Was ``shown`` (a node's view) a leased claim that an expiry
        outranks (so the message may show something else since)?"""
        token = self.sim.history.lease_tokens.get(str(shown[2])) if shown[0] == "claimed" else None
        return token is not None and shown[5] is not None and any(
            t == token and r > shown[5] for r, t, _ in self.expiries.get(mid, {}).values())

    def _hold(self, mid: str, held: Held) -> None:
        self.held.setdefault(mid, []).append(held)

    def disk_lost(self) -> None:
        if self.disk_lost_at is None:
            self.disk_lost_at = self.sim.now

    def _read_your_writes(self, a: Attempt) -> None:
        """A quorum read shows every notification acknowledged before it
        began (R + W > N). Not checked once a member lost its disk: the
        members that held a write may then be fewer than W."""
        if self.disk_lost_at is not None and self.disk_lost_at <= self.sim.now:
            return
        self.sim.stats["reads_checked"] += 1
        shown = set(a.value)
        for acked_at, to, nid in self.acked_notes:
            if acked_at < a.sent_ms and to == a.req and nid not in shown:
                self.fail(f"read of {to}'s inbox through {a.entry}, begun "
                          f"{a.sent_ms - acked_at} ms after {nid} was acknowledged, "
                          f"missed it")

    def fail(self, text: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(f"t={self.sim.now - 1_700_000_000_000}ms {text}")

    def on_answer(self, a: Attempt) -> None:
        if not a.ok:
            if a.kind in ("renew", "complete") and getattr(a.value, "code", None) == "lease_lost":
                self.sim.stats[f"{a.kind}s_refused"] += 1
            return
        h = self.sim.history
        if a.kind == "read":
            self._read_your_writes(a)
        elif a.kind == "write":
            for op in a.value:
                if op.kind == NOTE_NEW:
                    self.acked_notes.append((self.sim.now, op.body["to"], op.body["id"]))
                elif op.kind == NOTE_READ:
                    self.acked_reads.append(op)
                elif op.kind == MEM_DEL:
                    self.acked_dels.append(op)
        elif a.kind == "send":
            body = {k: v for k, v in a.value.body.items()}
            if body != h.send_bodies.get(body["id"]):
                self.fail(f"send of {body['id']} acked with a different body: {body}")
        elif a.kind == "pop" and a.req.request_id is not None:
            got = None if a.value is None else a.value["message"]["id"]
            slot = (a.req.mailbox, a.req.request_id)
            seen = self.answers.setdefault(slot, set())
            seen.add(got)
            if a.req.lease_ms is not None:
                # Judged at the end, in the owners' order (rule 8): a copy of
                # the pop that arrives after its lease ended is a new pop.
                self.leased_answers.setdefault(slot, []).append(
                    (got, None if a.value is None else _rank(a.value["rank"])))
                self.lease_tokens[slot] = str(a.req.token)
            else:
                # A claim a purge took is answered "nothing pending" afterwards.
                purged_since = (a.req.mailbox in self.purge_issued and len(seen) == 2
                                and None in seen)
                if len(seen) > 1 and not purged_since:
                    self.fail(f"request {a.req.request_id} answered differently: "
                              f"{sorted(seen, key=str)}")
        if a.kind == "pop" and a.value is not None:
            msg, claim = a.value["message"], a.value["claim"]
            mid = msg["id"]
            ident = _identity(a.req)
            rank, token = _rank(a.value["rank"]), claim.get("token")
            leased = a.req.lease_ms is not None
            if token != a.req.token or leased != (claim.get("lease_until_ms") is not None):
                self.fail(f"pop {ident} (lease {a.req.lease_ms}, token {a.req.token}) acked "
                          f"with claim {claim}")
            session = str(claim.get("claimer_session"))
            self._hold(mid, Held(rank, str(token) if leased else ident,
                                 str(token) if leased else None, "pop", session, self.sim.now,
                                 claim.get("lease_until_ms")))
            tenure = self.tenure.get(mid)
            if tenure is not None and tenure[1] != ident and not leased and not tenure[2]:
                # Without a lease a claim is terminal (with one: rule 8, at the end).
                self.fail(f"message {mid} popped twice: by {tenure[1]} and by {ident}")
            epoch = rank[0]
            if tenure is None or (tenure[1] != ident and rank > tenure[0]):
                # The first holder, or a later one after an expiry: its pop is the one judged.
                self.tenure[mid] = (rank, ident, leased)
                self.popped_epoch[mid] = epoch
                self.popped_at[mid] = self.sim.now
            if self.tenure[mid][1] == ident:
                self.tenure[mid] = (max(rank, self.tenure[mid][0]), ident, leased)
                self.popped[mid] = ident
                self.popped_session[mid] = session
                self.popped_claim[mid] = (claim.get("request_id"), session)
                self.popped_epoch[mid] = min(epoch, self.popped_epoch.get(mid, epoch))
                self.popped_at.setdefault(mid, self.sim.now)
            self.popped_sent[mid] = (a.req.mailbox, max(a.sent_ms, self.popped_sent.get(
                mid, (a.req.mailbox, a.sent_ms))[1]))
            if a.req.request_id is not None and not leased:
                other = self.by_request.setdefault(a.req.request_id, mid)
                if other != mid:
                    self.fail(f"request {a.req.request_id} got {other} and then {mid}")
            if leased:
                self.sim.stats["leased_pops_acked"] += 1
            if claim.get("request_id") != a.req.request_id:
                self.fail(f"pop {ident} acked with claim for request {claim.get('request_id')}")
            if not _was_written(h, mid, msg):
                self.fail(f"pop {ident} returned a body that was never sent: {msg}")
            if a.value.get("fresh"):
                self.claims.setdefault(mid, []).append(
                    (a.value["rank"], self.sim.now, str(token) if leased else None))
                if self.expiries.get(mid):
                    self.sim.stats["redeliveries"] += 1  # fresh claim of a message once expired
            if mid in self.cancelled and not (leased and self.lease_ended(mid, str(token))):
                self.fail(f"message {mid} acked as cancelled and as popped")
            if self.decided.get(mid) is False:
                self.fail(f"message {mid} acked as rejected and as popped")
            if msg.get("approval_required"):
                self.sim.stats["approved_popped"] += 1
        elif a.kind == "hold":
            mid = a.req.message_id
            if not _was_written(h, mid, a.value["message"]):
                self.fail(f"hold of {mid} returned a body that was never written")
            session = str(a.value["hold"].get("holder_session"))
            self.holds.setdefault(mid, []).append((a.value["rank"], session, a.sent_ms))
        elif a.kind == "release":
            if not _was_written(h, a.req.message_id, a.value["message"]):
                self.fail(f"release of {a.req.message_id} returned a body never written")

        elif a.kind == "decide":
            mid = a.req.message_id
            if mid in self.decided:
                self.fail(f"{mid} decided twice: {self.decided[mid]} and approve={a.req.approve}")
            self.decided[mid] = a.req.approve
            self.sim.stats["approvals_decided" if a.req.approve else "rejections_decided"] += 1
            if not a.req.approve and mid in self.popped:
                self.fail(f"{mid} acked as popped and as rejected")
        elif a.kind in ("renew", "complete"):
            self._on_lease_answer(a)
        elif a.kind == "expire":
            self.sim.stats["sweep_expired"] += len(a.value)
        elif a.kind == "purge":
            self.sim.stats["purges_acked"] += 1
            self.sim.stats["purged_messages"] += int(a.value.get("removed") or 0)
            _, hlc, origin, seq = a.value["rank"]
            self.purges_acked.setdefault(a.req.mailbox, []).append(
                (self.sim.now, (hlc, origin, seq)))
        elif a.kind == "cancel":
            for mid in a.value:
                self.cancelled.add(mid)
                issued = [e for t, e in self.cancel_ops.get(mid, []) if t >= a.sent_ms]
                if issued:
                    self.cancel_epoch[mid] = min(self.cancel_epoch.get(mid, issued[0]),
                                                 min(issued))
                if mid in self.popped and not self._lease_gone(mid):
                    self.fail(f"message {mid} acked as popped and as cancelled")

    def _on_lease_answer(self, a: Attempt) -> None:
        """An acknowledged renew or completion: it answers for the token and
        message it was asked for, and holds that message (rule 8)."""
        mid, token = a.req.message_id, a.req.token
        session = self.sim.history.lease_sessions.get(token, "?")
        if a.kind == "renew":
            claim = a.value["claim"]
            if (claim.get("id"), claim.get("token")) != (mid, token) or \
                    claim.get("lease_until_ms") is None:
                self.fail(f"renew of {mid} with {token} acked with claim {claim}")
            self.sim.stats["renews_acked"] += 1
        else:
            done, asked = a.value["completion"], a.req.body
            if (done.get("id"), done.get("token"), done.get("result"), done.get("note")) != (
                    mid, token, asked.get("result"), asked.get("note")):
                self.fail(f"completion of {mid} with {token} acked as {done}, asked {asked}")
            self.sim.stats["completions_acked"] += 1
            if a.value.get("replayed"):
                self.sim.stats["completions_replayed"] += 1
        until = a.value["claim"]["lease_until_ms"] if a.kind == "renew" else None
        self._hold(mid, Held(_rank(a.value["rank"]), token, token, a.kind, session,
                             self.sim.now, until))

    def _after_holds(self, node_id: str, mid: str, rank: Any, known_hold: Any) -> None:
        """Monotonic: once a node holds an acknowledged hold (or a later
        hold or release), it never shows the message claimed or cancelled by
        an op that does not follow a release of that hold (an older,
        unacknowledged claim must stay void). A node that has not heard of
        the hold yet may still show what it knew before, as it may for any
        decision it has not received."""
        if rank is None or known_hold is None:
            return
        rank, known_hold = list(rank), list(known_hold)
        released = self.releases.get(mid, [])
        for h_rank, session, _asked in self.holds[mid]:
            if known_hold < h_rank:
                continue
            if rank < h_rank:
                self.fail(f"{node_id}: {mid} shows a terminal op {rank} ranked below "
                          f"the acknowledged hold {h_rank} by {session}")
            elif not any(h_rank < r < rank for r in released):
                self.fail(f"{node_id}: {mid} decided at {rank} after the acknowledged hold "
                          f"{h_rank} by {session} with no release in between")

    def _shows_acked_claim(self, mid: str, shown: Decision) -> bool:
        """Did ``shown`` (a node's view) hold the acknowledged claim of
        ``mid``: its request and session, decided at the lowest epoch that
        claim was acknowledged at or later (as rule 2b judges it)? Not
        another terminal op a node showed before it heard of that claim: a
        failed round's older cancel, voided by a later approval or hold that
        the acknowledged claim followed (5-node seed 2824)."""
        acked = self.popped_claim.get(mid)
        if acked is None or shown[0] != "claimed" or (shown[1], shown[2]) != acked:
            return False
        return shown[4] is None or shown[4] >= self.popped_epoch[mid]

    def _shows_acked_cancel(self, mid: str, shown: Decision) -> bool:
        """Did ``shown`` (a node's view) hold the acknowledged cancel of ``mid``?"""
        if mid not in self.cancelled or shown[0] != "cancelled":
            return False
        epoch = self.cancel_epoch.get(mid)
        return epoch is None or shown[4] is None or shown[4] >= epoch

    def forget(self, node_id: str) -> None:
        """The node lost its disk: what it showed before is gone with it (the
        other members still hold every acknowledged state)."""
        for key in [k for k in self.seen_states if k[0] == node_id]:
            del self.seen_states[key]

    def on_persist(self, node_id: str, ops: Any) -> None:
        """Every op a node persists passes here: the releases it issues."""
        for op in ops:
            if op.kind == MSG_PURGE:
                self.purge_issued.add(op.key)
            elif op.kind == MSG_EXPIRE:
                mine = self.expiries.setdefault(str(op.body["id"]), {})
                if op.op_id not in mine:
                    self.sim.stats["expiries"] += 1
                    mine[op.op_id] = ((op.epoch, op.hlc, op.origin, op.seq), op.body.get("token"),
                                      int(op.body["at_ms"]))
            elif op.kind in CLAIM_KINDS and op.body.get("lease_until_ms") is not None:
                self.lease_ops.setdefault(str(op.body["id"]), {})[op.op_id] = (
                    (op.epoch, op.hlc, op.origin, op.seq), str(op.body["token"]),
                    int(op.body["lease_until_ms"]))
            elif op.kind == MSG_EMPTY:
                self.empties.setdefault((op.key, str(op.body["request_id"])), set()).add(
                    (op.epoch, op.hlc, op.origin, op.seq))
            if op.kind == MSG_RELEASE and op.origin == node_id:
                self.releases.setdefault(str(op.body["id"]), []).append(
                    [op.epoch, op.hlc, op.origin, op.seq])
            elif op.kind == MSG_CANCEL and op.origin == node_id:
                self.cancel_ops.setdefault(str(op.body["id"]), []).append(
                    (self.sim.now, op.epoch))

    def sample(self) -> None:
        h = self.sim.history
        for node_id, node in self.sim.nodes.items():
            disk = node.disk
            for mid in h.send_bodies:
                view = disk.message(mid)
                decided = None if view is None else disk.decided_rank(mid)
                state: Decision | None = None if view is None else (
                    view["state"], view["request_id"], view["claimed_by_session"],
                    view["claimed_at_ms"], view["epoch"],
                    None if decided is None else _rank(decided))
                seq = self.seen_states.setdefault((node_id, mid), [])
                last = seq[-1][1] if seq else None
                if seq and last == state:
                    continue
                if last is not None and last[0] in TERMINAL and not (
                        state is None and self.purged(disk, mid)) and (
                        state is None or state[0] not in TERMINAL) and (
                        state is None or disk.terminal_stands(mid)
                        or self._shows_acked_claim(mid, last)
                        or self._shows_acked_cancel(mid, last)) and not (
                        state is not None and self._expired_shown(mid, last)):
                    # Only an unacknowledged terminal op may give way, and
                    # only to a hold or release that outranks it; or a
                    # leased claim, to an expiry that outranks it (rule 8).
                    self.fail(f"{node_id}: message {mid} reverted from {last} to {state}")
                seq.append((self.sim.now, state))
                if state is not None and state[0] in TERMINAL and mid in self.holds:
                    self._after_holds(node_id, mid, disk.decided_rank(mid), disk.hold_rank(mid))
            for op in self.acked_reads:
                if op.op_id in disk.seen:
                    for note in disk.notifications(op.body["ids"]):
                        if not note["read"]:
                            self.fail(f"{node_id}: read mark {op.op_id} on {note['id']} reverted")
            for op in self.acked_dels:
                if op.op_id in disk.seen and disk.get_memory(op.body["id"], now_ms=0) is not None:
                    self.fail(f"{node_id}: memory {op.body['id']} deleted by {op.op_id} is back")


def _was_written(h: Any, mid: str, msg: dict[str, Any]) -> bool:
    """Is ``msg`` message ``mid`` as sent, or with a subject and body that an
    editor asked to save?"""
    sent = h.send_bodies.get(mid)
    if sent is None:
        return False
    fixed = [k for k in sent if k not in EDITABLE_FIELDS]
    if any(msg.get(k) != sent[k] for k in fixed):
        return False
    shown = {k: msg.get(k) for k in EDITABLE_FIELDS}
    return any(shown == {k: c.get(k) for k in EDITABLE_FIELDS}
               for c in [sent, *h.edits.get(mid, [])])


def _hold_and_pop_checks(sim: Sim, fail: Any) -> None:
    """A hold and a pop of one message never both win: in the owners' order
    of decisions (ranks), no hold follows an acknowledged claim, and a fresh
    claim follows an acknowledged hold only if a release was issued between
    them (acknowledged or not: an unanswered release still takes effect)."""
    mon = sim.monitor
    for mid, holds in mon.holds.items():
        claims = mon.claims.get(mid, [])
        released = mon.releases.get(mid, [])
        for h_rank, session, _asked_ms in holds:
            for c_rank, _answered_ms, token in claims:
                if h_rank > c_rank:
                    if mon.lease_ended(mid, token, _rank(h_rank)):
                        continue  # the claim's lease expired before the hold
                    fail(f"{mid}: hold {h_rank} by {session} granted after claim {c_rank}")
                elif not any(h_rank < r < c_rank for r in released):
                    fail(f"{mid}: claimed at {c_rank} while held at {h_rank} by {session}, "
                         "with no release asked in between")


def final_checks(sim: Sim) -> list[str]:
    mon, h = sim.monitor, sim.history
    out: list[str] = []

    def fail(text: str) -> None:
        if len(out) < 20:
            out.append(text)

    _hold_and_pop_checks(sim, fail)
    deleted = {op.body["id"] for op in mon.acked_dels}
    for node_id, node in sim.nodes.items():
        disk = node.disk
        # 1. acknowledged writes are held and visible everywhere.
        for a in h.acked("write"):
            for op in a.value:
                if op.op_id not in disk.seen:
                    fail(f"{node_id}: acked op {op.op_id} ({op.kind}) lost")
                elif op.kind == NOTE_NEW and not disk.notifications([op.body["id"]]):
                    fail(f"{node_id}: acked notification {op.body['id']} not visible")
        for a in h.acked("send"):
            mid = a.value.body["id"]
            if disk.message(mid) is None and not mon.purged(disk, mid):
                fail(f"{node_id}: acked message {mid} lost")
        # 7. no pop sent after an acknowledged purge got a message that purge took.
        for mid, (mailbox, sent_ms) in mon.popped_sent.items():
            if not mon.purged(disk, mid):
                continue
            rank = tuple(disk.purged_rank(mid))
            for t, purge_rank in mon.purges_acked.get(mailbox, []):
                if t < sent_ms and rank < purge_rank:
                    fail(f"{node_id}: {mid} was claimed by a pop sent after the purge "
                         f"{purge_rank} of {mailbox} was acknowledged, which took it")
        # 2. the acknowledged claimer is the final claimer: the holder of the
        # greatest-ranked acknowledged answer, unless its lease expired since
        # (8); an acknowledged completion stays.
        for mid in mon.held:
            last = mon._last_held(mid)
            view = disk.message(mid)
            if last is None or (view is None and mon.purged(disk, mid)):
                continue
            if mon.lease_ended(mid, last.token):
                continue
            if view is None or view["state"] != "claimed":
                fail(f"{node_id}: acked-popped {mid} ends as {view and view['state']}")
                continue
            if view["claimed_by_session"] != last.session:
                fail(f"{node_id}: {mid} acked to {last.holder} / {last.session} "
                     f"but claimed by {view['claimed_by_session']} ({view['request_id']})")
            if last.kind == "complete" and (view["completion"] or {}).get("result") is None:
                fail(f"{node_id}: {mid} acked as completed by {last.holder} but shows no "
                     f"completion: {view['completion']}")
        for mid in mon.cancelled:
            view = disk.message(mid)
            if view is None and mon.purged(disk, mid):
                continue
            if view is None or view["state"] != "cancelled":
                fail(f"{node_id}: acked-cancelled {mid} ends as {view and view['state']}")
        # 6. the approval queue: decided once, as acknowledged; claimed only if approved
        # (a message a purge took is gone in whatever state it was: 7 judges it).
        for mid, approve in mon.decided.items():
            view = disk.message(mid)
            if view is None and mon.purged(disk, mid):
                continue
            want = "approved" if approve else "rejected"
            if view is None or view["approval_decision"] != want or (
                    (view["state"] == "rejected") != (not approve)):
                fail(f"{node_id}: {mid} acked as {want} but ends as "
                     f"{view and (view['state'], view['approval_decision'])}")
        for mid, row in disk.snapshot()["messages"].items():
            view = disk.message(mid)
            if (row["approval_required"] and view is not None and view["state"] == "claimed"
                    and view["approval_decision"] != "approved"):
                fail(f"{node_id}: {mid} awaited approval but ends claimed with decision "
                     f"{view['approval_decision']}")
        # 2a. every answered request id ends decided the way it was answered
        # (a leased one: as its greatest-ranked answer, unless that lease expired).
        for (mailbox, rid), seen in mon.answers.items():
            if (mailbox, rid) in mon.leased_answers:
                _leased_decision(mon, disk, node_id, mailbox, rid, fail)
                continue
            if len(seen) != 1:
                continue
            want = next(iter(seen))
            if want is not None and mon.purged(disk, want):
                continue
            decided = disk.pop_decision(mailbox, rid)
            if decided != (("empty", None) if want is None else ("claimed", want)):
                fail(f"{node_id}: request {rid} answered {want} but recorded as {decided}")
        # 2b. once acknowledged and shown, a decision never changes.
        for mid, acked in mon.popped_claim.items():
            if mon.purged(disk, mid):
                continue
            seq = mon.seen_states.get((node_id, mid), [])
            t_ack = mon.popped_at[mid]
            current = [i for i, (t, _) in enumerate(seq) if t <= t_ack]
            after = [s for _, s in seq[current[-1] if current else 0:]]
            epoch = mon.popped_epoch[mid]
            shown = [i for i, s in enumerate(after) if s is not None and (s[1], s[2]) == acked
                     and s[4] is not None and s[4] >= epoch]
            rest = after[shown[0]:] if shown else []
            changed = next((i for i, s in enumerate(rest) if s is None or (s[1], s[2]) != acked),
                           None)
            # (a leased claim may change once an expiry outranks what was shown: 8)
            prev = rest[changed - 1] if changed is not None else None
            if prev is not None and not mon._expired_shown(mid, prev):
                fail(f"{node_id}: acked claim of {mid} changed after it was shown: {seq}")
        # 3. nothing appears that was never written.
        snap = disk.snapshot()
        for mid, row in snap["messages"].items():
            sent = h.send_bodies.get(mid)
            if sent is None or any(row.get(k) != sent.get(k) for k in MESSAGE_FIELDS):
                fail(f"{node_id}: message {mid} was never sent like this: {row}")
        for mid, rev in snap["revisions"].items():
            saved = {"subject": rev["subject"], "body": rev["body"]}
            if saved not in h.edits.get(mid, []):
                fail(f"{node_id}: message {mid} holds an edit nobody asked for: {saved}")
        for nid, row in snap["notes"].items():
            body = h.note_bodies.get(nid)
            if body is None or any(row.get(k) != body.get(k) for k in body):
                fail(f"{node_id}: notification {nid} was never written like this: {row}")
        for mem_id, row in snap["memories"].items():
            body = h.mem_bodies.get(mem_id)
            if body is None or (row["title"], row["content"]) != (body["title"], body["content"]):
                fail(f"{node_id}: memory {mem_id} was never written like this: {row}")
            if mem_id in deleted:
                fail(f"{node_id}: memory {mem_id} is visible after an acknowledged delete")
        for mid, term in snap["terminals"].items():
            if term["state"] != "claimed":
                continue
            session = term["claimed_by_session"]
            if session not in h.pop_sessions or h.pop_sessions[session] != term["request_id"]:
                fail(f"{node_id}: claim of {mid} by {session}/{term['request_id']} never asked")
            if term["token"] is not None and h.lease_sessions.get(term["token"]) != session:
                fail(f"{node_id}: claim of {mid} by {session} holds token {term['token']}, "
                     "which its pop never asked for")
        for mid, done in snap["completions"].items():
            asked = h.completions.get((mid, done["token"]), [])
            if not done["purged"] and (done["result"], done["note"]) not in asked:
                fail(f"{node_id}: completion of {mid} by {done['token']} was never asked: {done}")
        # 8. every expired lease redelivered or completed.
        for mid, until in overdue_leases(sim, node_id):
            fail(f"{node_id}: {mid} still leased until {until} (its owner's clock), past "
                 f"that by more than {sim.cfg.lease_grace_ms + sim.cfg.lease_slack_ms} ms "
                 f"on every node's clock at the end")
    _leased_requests(sim, fail)
    _holder_checks(sim, fail)
    standing = {mid for node_id in sim.nodes for mid, _ in _standing_leases(sim, node_id)}
    sim.stats["leases_standing_at_end"] += len(standing)
    return out


def _holder_checks(sim: Sim, fail: Any) -> None:
    """8. Never two live holders: wherever the holder of a message changes
    in the owners' order of acknowledged answers, the new one begins with a
    pop and an expiry of the old one's lease comes between."""
    mon = sim.monitor
    bad = 0
    for mid, ops in mon.held.items():
        ordered = sorted({h.rank: h for h in ops}.values(), key=lambda h: h.rank)
        for x, y in pairwise(ordered):
            if x.holder == y.holder:
                continue
            if y.kind != "pop" or not mon.lease_ended(mid, x.token, y.rank):
                bad += 1
                fail(f"{mid}: two live holders: {x.kind} {list(x.rank)} by {x.holder}, then "
                     f"{y.kind} {list(y.rank)} by {y.holder}, with no expiry of the first "
                     f"lease between (expiries: {sorted(mon.expiries.get(mid, {}).values())})")
    for mid, expiries in mon.expiries.items():
        for rank, token, at_ms in expiries.values():
            # the holder's acknowledged leases this expiry ends: those since its last expiry
            since = max((r for r, t, _ in expiries.values() if t == token and r < rank),
                        default=None)
            ended = [h for h in mon.held.get(mid, []) if h.token == token and h.rank < rank
                     and h.until is not None and (since is None or since < h.rank)]
            last = max(ended, key=lambda h: h.rank) if ended else None
            if last is None or last.until is None:
                continue
            # The owner knew ``last`` (acknowledged) and maybe a later,
            # unacknowledged claim or renew of the token (a renew may shorten
            # the lease): the deadline it went by is one of these.
            deadlines = [last.until] + [
                until for r, t, until in mon.lease_ops.get(mid, {}).values()
                if t == token and last.rank < r < rank]
            if at_ms < min(deadlines):
                bad += 1
                fail(f"{mid}: expiry {list(rank)} of {token} at {at_ms} (its owner's clock) "
                     f"ends the {last.kind} {list(last.rank)} acknowledged with a lease until "
                     f"{last.until}, {last.until - at_ms} ms early")
    sim.stats["two_holder_violations"] += bad


def _leased_requests(sim: Sim, fail: Any) -> None:
    """2, for the request ids of leased pops: ordered by rank, each message
    answered is followed by another answer only after its lease expired;
    "nothing pending" only once every message answered had its lease
    expire (or a purge took it), and never followed by a claim ranked above
    every recorded "nothing pending" of the request."""
    mon = sim.monitor
    for (mailbox, rid), answers in mon.leased_answers.items():
        token = mon.lease_tokens[(mailbox, rid)]
        first: dict[str, Rank] = {}
        for mid, rank in answers:
            if mid is not None and rank is not None:
                first[mid] = min(rank, first.get(mid, rank))
        got = sorted(first, key=lambda m: first[m])
        for a, b in pairwise(got):
            if not mon.lease_ended(a, token, first[b]):
                fail(f"request {rid} answered {a}, then {b} at {list(first[b])} with no "
                     f"expiry of its lease on {a} between")
        if any(mid is None for mid, _ in answers):
            empties = mon.empties.get((mailbox, rid), set())
            for mid in got:
                if not mon.lease_ended(mid, token) and mailbox not in mon.purge_issued:
                    fail(f"request {rid} answered {mid} and nothing pending, with no expiry "
                         f"of its lease on {mid} after its last answer")
                if empties and first[mid] > max(empties):
                    fail(f"request {rid} answered nothing pending and then {mid}, claimed at "
                         f"{list(first[mid])} above every empty decision {sorted(empties)}")


def _leased_decision(mon: Monitor, disk: Any, node_id: str, mailbox: str, rid: str,
                     fail: Any) -> None:
    """2a for a leased pop's request id: the node records the decision of
    its greatest-ranked answer, unless that lease expired since (then a
    later copy of the pop may have decided anew) or a purge took it."""
    answers = mon.leased_answers[(mailbox, rid)]
    token = mon.lease_tokens[(mailbox, rid)]
    if any(mid is None for mid, _ in answers):
        if all(mid is None for mid, _ in answers) and \
                disk.pop_decision(mailbox, rid) != ("empty", None):
            fail(f"{node_id}: request {rid} answered nothing pending but recorded as "
                 f"{disk.pop_decision(mailbox, rid)}")
        return
    mid, _ = max(answers, key=lambda x: x[1] or (0, 0, "", 0))
    assert mid is not None
    if mon.purged(disk, mid) or mon.lease_ended(mid, token):
        return
    decided = disk.pop_decision(mailbox, rid)
    if decided != ("claimed", mid):
        fail(f"{node_id}: request {rid} answered {mid} but recorded as {decided}")


def _standing_leases(sim: Sim, node_id: str) -> list[tuple[str, int]]:
    """(message, latest deadline) of every lease ``node_id`` shows standing
    (claimed, not completed). The latest deadline is the lease's own plus its
    length: an owner holds a lease decided in an earlier term to at least a
    lease's length after its own term began (docs/federation.md, "Leases",
    clocks), and the check cannot tell when that was."""
    disk = sim.nodes[node_id].disk
    out = []
    for mid in sim.history.send_bodies:
        view = disk.message(mid)
        if view is not None and view["state"] == "claimed" and view["lease_until_ms"] is not None:
            out.append((mid, int(view["lease_until_ms"]) + int(view["lease_ms"] or 0)))
    return out


def _lease_lag_ms(sim: Sim) -> int:
    """A lease's deadline plus this is "well past" on a clock (8)."""
    return sim.cfg.lease_grace_ms + sim.cfg.lease_slack_ms


def lease_due_times(sim: Sim) -> list[int]:
    """When (simulated time) each lease a node shows will be well past its
    deadline on every node's clock: the last phase waits for these."""
    slowest = min(n.skew_ms for n in sim.nodes.values())
    lag = _lease_lag_ms(sim) - slowest
    return [until + lag for node_id in sim.nodes for _, until in _standing_leases(sim, node_id)]


def overdue_leases(sim: Sim, node_id: str) -> list[tuple[str, int]]:
    """The leases ``node_id`` still shows that are well past their deadline
    on every node's clock: none may be left at the end (8)."""
    clock = min(n.clock(sim.now) for n in sim.nodes.values())
    return [(mid, until) for mid, until in _standing_leases(sim, node_id)
            if until + _lease_lag_ms(sim) < clock]
