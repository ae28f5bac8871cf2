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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.lifecycle import EDITABLE_FIELDS, TERMINAL
from common.ops import (
    MEM_DEL,
    MSG_CANCEL,
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

# state, request, session, at_ms, epoch of the deciding op
Decision = tuple[str, str | None, str | None, int | None, int | None]


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
        self.claims: dict[str, list[tuple[list[Any], int]]] = {}
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

    def purged(self, disk: Any, mid: str) -> bool:
        """Is ``mid`` gone from ``disk`` by a purge of its mailbox?"""
        sent = self.sim.history.send_bodies.get(mid)
        return (sent is not None and disk.is_purged(mid) and
                mailbox_key(sent["to_workspace"], sent["to_project"]) in self.purge_issued)

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
            seen = self.answers.setdefault((a.req.mailbox, a.req.request_id), set())
            seen.add(got)
            # A claim a purge took is answered "nothing pending" afterwards.
            purged_since = a.req.mailbox in self.purge_issued and len(seen) == 2 and None in seen
            if len(seen) > 1 and not purged_since:
                self.fail(f"request {a.req.request_id} answered differently: "
                          f"{sorted(seen, key=str)}")
        if a.kind == "pop" and a.value is not None:
            msg, claim = a.value["message"], a.value["claim"]
            mid = msg["id"]
            ident = _identity(a.req)
            prev = self.popped.get(mid)
            if prev is not None and prev != ident:
                self.fail(f"message {mid} popped twice: by {prev} and by {ident}")
            self.popped[mid] = ident
            self.popped_session[mid] = str(claim.get("claimer_session"))
            self.popped_claim[mid] = (claim.get("request_id"), str(claim.get("claimer_session")))
            epoch = int(a.value["rank"][0])
            self.popped_epoch[mid] = min(epoch, self.popped_epoch.get(mid, epoch))
            self.popped_at.setdefault(mid, self.sim.now)
            self.popped_sent[mid] = (a.req.mailbox, max(a.sent_ms, self.popped_sent.get(
                mid, (a.req.mailbox, a.sent_ms))[1]))
            if a.req.request_id is not None:
                other = self.by_request.setdefault(a.req.request_id, mid)
                if other != mid:
                    self.fail(f"request {a.req.request_id} got {other} and then {mid}")
            if claim.get("request_id") != a.req.request_id:
                self.fail(f"pop {ident} acked with claim for request {claim.get('request_id')}")
            if not _was_written(h, mid, msg):
                self.fail(f"pop {ident} returned a body that was never sent: {msg}")
            if a.value.get("fresh"):
                self.claims.setdefault(mid, []).append((a.value["rank"], self.sim.now))
            if mid in self.cancelled:
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
                if mid in self.popped:
                    self.fail(f"message {mid} acked as popped and as cancelled")

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
                state: Decision | None = None if view is None else (
                    view["state"], view["request_id"], view["claimed_by_session"],
                    view["claimed_at_ms"], view["epoch"])
                seq = self.seen_states.setdefault((node_id, mid), [])
                last = seq[-1][1] if seq else None
                if seq and last == state:
                    continue
                if last is not None and last[0] in TERMINAL and not (
                        state is None and self.purged(disk, mid)) and (
                        state is None or state[0] not in TERMINAL) and (
                        state is None or disk.terminal_stands(mid)
                        or self._shows_acked_claim(mid, last)
                        or self._shows_acked_cancel(mid, last)):
                    # Only an unacknowledged terminal op may give way, and
                    # only to a hold or release that outranks it.
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
            for c_rank, _answered_ms in claims:
                if h_rank > c_rank:
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
        # 2. the acknowledged claimer is the final claimer.
        for mid, ident in mon.popped.items():
            view = disk.message(mid)
            if view is None and mon.purged(disk, mid):
                continue
            if view is None or view["state"] != "claimed":
                fail(f"{node_id}: acked-popped {mid} ends as {view and view['state']}")
                continue
            if view["claimed_by_session"] != mon.popped_session[mid]:
                fail(f"{node_id}: {mid} acked to {ident} / {mon.popped_session[mid]} "
                     f"but claimed by {view['claimed_by_session']} ({view['request_id']})")
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
        # 2a. every answered request id ends decided the way it was answered.
        for (mailbox, rid), seen in mon.answers.items():
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
            if shown and any(s is None or (s[1], s[2]) != acked for s in after[shown[0]:]):
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
    return out
