"""The client side: requests, retries, and the history they leave.

Clients are outside the cluster. Each request attempt enters at one node
(chosen at random); writes run there, mailbox requests are forwarded over
the simulated network to whichever member that node believes owns the
mailbox, and the answer travels back the same way. The history keeps every
attempt and, for those answered, the value; only answered attempts count as
*acknowledged* for the invariants.

Retries reuse identities the way real clients do: a pop keeps its request
id and claimer session, and a send with an idempotency key keeps its
message id (``msg-N`` here: an id the routing treats as retryable, so the
owner looks it up before deciding). About half the sends carry no key: the
daemon mints their id (a uuid7, seeded here), the owner skips that lookup,
and a client that retries one sends it again under a new id, as a keyless
HTTP retry does; both copies are sends of their own in the history. Inside
the cluster a forward that fails over keeps the minted id, so the
simulator covers the fresh-id path an owner takes without the lookup.
Writes are never retried with a new id, so every op body is unique and
traceable.

Leases (issue 26): a share of pops are leased (``lease_ms`` of 300, 1500 or
6000 ms, and a claim token unique to the pop request, ``tok-<session>``,
which its retries keep). A holder whose leased pop was acknowledged then
renews (some time before or after its deadline, so both outcomes happen),
completes, or goes silent and lets the lease expire
(:meth:`Workload.holder_next`, driven by the runner). These draws, and the
entry nodes of the holders' requests, come from a stream of their own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from common.ops import MEM_DEL, MEM_PUT, NOTE_NEW, NOTE_READ, inbox_key, mailbox_key, mem_key
from common.randomid import uuid7
from federation.requests import (
    MailCancel,
    MailComplete,
    MailDecide,
    MailHold,
    MailPop,
    MailPurge,
    MailRelease,
    MailRenew,
    MailSend,
)
from federation.routing import is_retryable_id

AGENTS = ("alice", "bob", "carol")
SENDERS = (("w", "p0"), ("w", "p1"), ("w", "p2"))
EDITORS = ("ann", "ben")
LEASE_MS = (300, 1_500, 6_000)  # the lengths a leased pop asks for
RESULTS = ("done", "blocked", "rejected")  # a completion's outcomes


@dataclass(slots=True)
class Attempt:
    token: int
    # write | read | send | pop | cancel | hold | release | decide | purge
    # | renew | complete | expire (a node's lease sweep)
    kind: str
    req: Any
    entry: str
    sent_ms: int
    done: bool = False
    ok: bool = False
    value: Any = None
    answered_ms: int | None = None


@dataclass(slots=True)
class History:
    attempts: dict[int, Attempt] = field(default_factory=dict)
    note_bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    mem_bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    send_bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    pop_sessions: dict[str, str | None] = field(default_factory=dict)  # session -> request id
    edits: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # id -> saved contents
    lease_sessions: dict[str, str] = field(default_factory=dict)  # claim token -> pop session
    lease_tokens: dict[str, str] = field(default_factory=dict)  # pop session -> claim token
    # (message id, claim token) -> the (result, note) of every completion a holder asked
    completions: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)

    def acked(self, kind: str) -> list[Attempt]:
        return [a for a in self.attempts.values() if a.kind == kind and a.done and a.ok]


class Workload:
    """Draws client requests from a seeded rng."""

    # Shares of sends an admission hook holds for approval, and of requests
    # that are an approver's decision (tests/sim/test_read_race.py turns
    # both off to replay the workload its seeds were found with).
    HELD_P = 0.3
    DECIDE_P = 0.08
    # Share of pops that are leased, and what a holder does after each
    # acknowledged leased pop or renew: renew, complete, else go silent.
    LEASE_P = 0.3
    RENEW_P = 0.45
    COMPLETE_P = 0.3
    RENEWS_MAX = 3  # renews of one claim, at most

    def __init__(self, rng: random.Random, mailboxes: int, cap: int,
                 read_p: float = 0.0, purge_p: float = 0.0) -> None:
        self.rng = rng
        self.cap = cap
        self.read_p = read_p
        self.mailboxes = [("w", f"q{i}") for i in range(mailboxes)]
        self.history = History()
        self._n = 0
        self.retryable: list[Attempt] = []
        self.holders: dict[str, list[dict[str, str]]] = {}  # message id -> holders asked
        # Who releases is drawn from a stream of its own, derived from (not
        # drawn from) the main one, so every other request of a seed is the
        # same as before releases named their holder. Seeded from the state's
        # repr, not hash(): hash() of the state tuple takes in hash(None),
        # which differs between processes before Python 3.12, so one seed
        # replayed in another process drew other editors.
        self.editors = random.Random(repr(rng.getstate()))
        # Which sends are keyless, and their minted ids, come from a stream
        # of their own too, so the main one draws as it did before them.
        self.minted = random.Random("minted:" + repr(rng.getstate()))
        self.fresh_p = 0.5
        # Which sends an admission hook holds for approval, and the
        # approvers' decisions, from a stream of their own as well.
        self.approvals = random.Random("approvals:" + repr(rng.getstate()))
        self.held_p = self.HELD_P
        self.decide_p = self.DECIDE_P
        # Purges too (issue 27): with purge_p 0 the main stream is untouched.
        self.purges = random.Random("purges:" + repr(rng.getstate()))
        self.purge_p = purge_p
        self._purge_n = 0
        # Leases (issue 26), from a stream of their own: which pops are
        # leased, and what their holders do.
        self.leases = random.Random("leases:" + repr(rng.getstate()))
        self.lease_p = self.LEASE_P
        self._note_n = 0

    def _next(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def draw(self, now_ms: int) -> tuple[str, Any]:
        """A new request: (kind, payload) where a write's payload is its items."""
        if self.purge_p and self.purges.random() < self.purge_p:
            ws, proj = self.purges.choice(self.mailboxes)
            self._purge_n += 1
            body = {"id": f"purge{self._purge_n}", "workspace": ws, "project": proj,
                    "scope": "project", "by_user": "root", "reason": None}
            return "purge", MailPurge(mailbox_key(ws, proj), body)
        h = self.history
        if self.approvals.random() < self.decide_p:
            held = sorted(m for m, b in h.send_bodies.items() if b["approval_required"])
            if held:
                mid = self.approvals.choice(held)
                b = h.send_bodies[mid]
                return "decide", MailDecide(
                    mailbox_key(b["to_workspace"], b["to_project"]), mid,
                    self.approvals.random() < 0.6,
                    decider={"by_user": self.approvals.choice(EDITORS)})
        r = self.rng.random()
        if self.read_p and self.rng.random() < self.read_p:
            return "read", self.rng.choice(AGENTS)  # a quorum read of that agent's inbox
        if r < 0.22:
            return "write", self._notes(now_ms)
        if r < 0.27 and h.note_bodies:
            agent = self.rng.choice(AGENTS)
            mine = [i for i, b in h.note_bodies.items() if b["to"] == agent]
            if mine:
                ids = self.rng.sample(mine, min(len(mine), self.rng.randint(1, 3)))
                return "write", [(NOTE_READ, inbox_key(agent), {"to": agent, "ids": ids})]
        if r < 0.32:
            mid = self._next("mem")
            body = {"id": mid, "title": f"t-{mid}", "content": f"c-{mid}", "tier": "long"}
            h.mem_bodies[mid] = body
            return "write", [(MEM_PUT, mem_key(mid), body)]
        if r < 0.35 and h.mem_bodies:
            mid = self.rng.choice(sorted(h.mem_bodies))
            return "write", [(MEM_DEL, mem_key(mid), {"id": mid})]
        ws, proj = self.rng.choice(self.mailboxes)
        key = mailbox_key(ws, proj)
        if r < 0.60:
            return "send", self._send(key, ws, proj, now_ms)
        if r < 0.86:
            return "pop", self._pop(key)
        mine = [m for m, b in self.history.send_bodies.items()
                if key == mailbox_key(b["to_workspace"], b["to_project"])]
        if r < 0.90 and mine:
            mid = self.rng.choice(mine)
            holder = {"holder_session": self._next("ed"),
                      "holder_user": self.editors.choice(EDITORS)}
            self.holders.setdefault(mid, []).append(holder)
            return "hold", MailHold(key, mid, holder=holder)
        if r < 0.94 and mine:
            return "release", self._release(key, self.rng.choice(mine), now_ms)
        return "cancel", self._cancel(key)

    def _release(self, key: str, mid: str, now_ms: int) -> MailRelease:
        # Mostly one of the message's editors (its latest, or an earlier one
        # whose hold may have lost), sometimes a stranger the owner must refuse.
        known = self.holders.get(mid, [])
        if known and self.editors.random() < 0.9:
            holder = dict(known[-1] if self.editors.random() < 0.8 else self.editors.choice(known))
        else:
            holder = {"holder_session": f"stranger-{self.editors.random():.6f}",
                      "holder_user": "mallory"}
        if self.rng.random() < 0.5:
            return MailRelease(key, mid, holder=holder)
        n = self._next("edit")
        content = {"subject": f"subject {mid} {n}", "body": f"edited body of {mid} ({n})"}
        self.history.edits.setdefault(mid, []).append(content)
        return MailRelease(key, mid, content=content, holder=holder)

    def _notes(self, now_ms: int) -> list[tuple[str, str, dict[str, Any]]]:
        items = []
        for _ in range(self.rng.choice((1, 1, 2, 3))):
            nid = self._next("note")
            to = self.rng.choice(AGENTS)
            body = {"id": nid, "from": self.rng.choice(AGENTS), "to": to, "namespace": "ns",
                    "title": f"title-{nid}", "payload": f"payload-{nid}",
                    "priority": self.rng.randint(1, 10), "tier": "long",
                    "created_at_ms": now_ms, "expires_at_ms": None,
                    "in_reply_to": None, "thread_id": nid}
            self.history.note_bodies[nid] = body
            items.append((NOTE_NEW, inbox_key(to), body))
        return items

    def _message_id(self, now_ms: int) -> str:
        """A keyed id (``msg-N``), or, for a keyless send, a minted uuid7."""
        if self.minted.random() < self.fresh_p:
            return uuid7(now_ms, self.minted.randbytes(10))
        return self._next("msg")

    def resend(self, req: MailSend, now_ms: int) -> MailSend:
        """What a client sends when it retries ``req``: the same request if
        its id is a key, else the same message under a newly minted id (a
        new send: a keyless retry may leave two copies, both real)."""
        if is_retryable_id(req.body["id"]):
            return req
        mid = uuid7(now_ms, self.minted.randbytes(10))
        body = dict(req.body, id=mid, created_at_ms=now_ms, thread_id=mid)
        self.history.send_bodies[mid] = body
        return replace(req, body=body, sent_at_ms=None)

    def _send(self, key: str, ws: str, proj: str, now_ms: int) -> MailSend:
        mid = self._message_id(now_ms)
        fws, fproj = self.rng.choice(SENDERS)
        body = {"id": mid, "to_workspace": ws, "to_project": proj,
                "to_agent": self.rng.choice((None, None, None, "codex")),
                "from_workspace": fws, "from_project": fproj, "from_agent": "claude-code",
                "from_owner_user": None, "subject": f"subject {mid}", "body": f"body of {mid}",
                "nature": "reported", "evidence": None, "created_at_ms": now_ms,
                "in_reply_to": None, "thread_id": mid,
                "approval_required": False, "approval_note": None}
        if self.approvals.random() < self.held_p:
            body.update(approval_required=True, approval_note="held by the sim's hook")
        self.history.send_bodies[mid] = body
        return MailSend(key, body, cap=self.cap)

    def _pop(self, key: str) -> MailPop:
        session = self._next("sess")
        rid = None if self.rng.random() < 0.15 else self._next("req")
        self.history.pop_sessions[session] = rid
        agent = self.rng.choice((None, None, "codex"))
        message_id = None
        sends = [m for m, b in self.history.send_bodies.items()
                 if key == mailbox_key(b["to_workspace"], b["to_project"])]
        if sends and self.rng.random() < 0.15:
            message_id = self.rng.choice(sends)
        lease_ms = token = None
        if self.lease_p and self.leases.random() < self.lease_p:
            lease_ms, token = self.leases.choice(LEASE_MS), f"tok-{session}"
            self.history.lease_sessions[token] = session
            self.history.lease_tokens[session] = token
        return MailPop(key, request_id=rid, message_id=message_id, agent=agent,
                       claimer={"claimer_session": session, "claimer_agent": agent or "any"},
                       lease_ms=lease_ms, token=token)

    def holder_next(self, mailbox: str, claim: dict[str, Any],
                    renews: int) -> tuple[int, str, Any] | None:
        """What the holder of leased ``claim`` (acknowledged, after
        ``renews`` acknowledged renews) does next: ``(delay ms, kind,
        request)``, or None (it goes silent; the lease expires). A renew
        comes between a fifth and one and a half of the lease after the
        answer, so some come after the deadline (refused, lease_lost)."""
        r, lease_ms = self.leases.random(), int(claim["lease_ms"])
        mid, token = str(claim["id"]), str(claim["token"])
        if r < self.RENEW_P and renews < self.RENEWS_MAX:
            delay = int(lease_ms * self.leases.uniform(0.2, 1.5))
            length = self.leases.choice((None, *LEASE_MS))
            return delay, "renew", MailRenew(mailbox, mid, token, lease_ms=length)
        if r < self.RENEW_P + self.COMPLETE_P:
            delay = int(lease_ms * self.leases.uniform(0.1, 1.3))
            self._note_n += 1
            result, note = self.leases.choice(RESULTS), f"note {self._note_n} on {mid}"
            self.history.completions.setdefault((mid, token), []).append((result, note))
            body = {"result": result, "note": note,
                    "by_session": claim.get("claimer_session"),
                    "by_agent": claim.get("claimer_agent")}
            return delay, "complete", MailComplete(mailbox, mid, token, body=body)
        return None

    def _cancel(self, key: str) -> MailCancel:
        ws, proj = self.rng.choice(SENDERS)
        mine = [m for m, b in self.history.send_bodies.items()
                if (b["from_workspace"], b["from_project"]) == (ws, proj)
                and key == mailbox_key(b["to_workspace"], b["to_project"])]
        if mine and self.rng.random() < 0.7:
            ids: tuple[str, ...] | None = tuple(self.rng.sample(mine, min(2, len(mine))))
        else:
            ids = None
        return MailCancel(key, ids, ws, proj)
