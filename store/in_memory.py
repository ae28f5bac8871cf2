"""The reference replica: every merge rule of :mod:`common.ops`, in memory.

:class:`Replica` holds the same state as one node's SQLite file, as plain
dicts, and answers the same reads with the same dict shapes. It does no I/O
and never reads a clock (expiry takes ``now_ms``), so it serves three uses:
the deterministic cluster simulator runs nodes on it, hypothesis checks the
merge laws on it (any order, duplication or batching of one op multiset
gives one :meth:`Replica.snapshot`), and the SQLite :class:`store.db.Store`
is tested for equal views against it.

How each rule is kept order-free (ranks are defined in :mod:`store.records`):

* every op is logged once by ``(origin, seq)``; :class:`store.seen.SeenSet`
  remembers ids even after :meth:`Replica.gc` drops the log rows;
* ``mem.put`` is last-writer-wins; ``mem.del`` records the id in a tombstone
  set that is never emptied and drops the row, and a put for a tombstoned id
  is ignored. Tombstones are kept as bare ids past gc: an old put can still
  be in flight from a member that had not yet seen the delete, and without
  the id it would resurrect the memory;
* ``note.new`` and ``msg.send`` are insert-once (the lowest-ranked copy of
  an id wins, so retries on two nodes converge; of a send's copies, those of
  the latest owner term first: ``_copy_key``); read marks are a grow-only
  set of ``(agent, id)`` consulted whenever a notification is shown, so a
  mark that arrives first still applies;
* a message is pending until a terminal op is known; the terminal op of the
  highest rank decides claimed/cancelled unless the message's winning hold
  or release outranks it (then that terminal op is void and the hold
  decides: :mod:`common.lifecycle`), and terminal ops are kept even when
  their ``msg.send`` has not arrived;
* ``link.put`` is a grow-only set of (source, target, relation) whose
  ``created_at`` is the minimum seen; ``grant.put`` is last-writer-wins per
  (memory, agent), a revoke being a put with ``granted`` false; ``nsub.put``
  likewise per (agent, namespace);
* ``msg.purge`` (issue 27) keeps, per mailbox, the greatest purge by
  ``(epoch, hlc, origin, seq)`` (the *mark*) and the greatest ``at_ms`` of
  its purges. A message whose winning send is ranked so below its
  mailbox's mark is dropped, and its id kept in a purged set with the rank
  and epoch of that send: a copy that would not win over it is ignored, one
  that would is judged again (a message's mailbox comes from its send).
  Holds, saved edits and approval decisions ranked below the mark are
  dropped, of any message of the mailbox (one whose send has not arrived
  is judged when it does; one ranked above stays, hidden while its message
  is purged). Completions and terminal ops stay (a reader sees neither
  while the message is gone; dropping a completion would depend on whether
  it came before the purge or after a later copy of the send). Sessions and
  harness rows are kept as merged, and every read hides those of a project
  whose last activity is before its purge ``at_ms`` (a harness's first
  activity reads as no earlier than it), which keeps the rule order-free;
* users keep root and password hash last-writer-wins and ``removed`` as a
  sticky flag; API keys keep their identity fields from the lowest-ranked
  op and ``revoked`` as a sticky flag; project grants are last-writer-wins
  per (user, workspace, project);
* agents merge type/capabilities last-writer-wins, ``registered_at`` by min
  and ``last_seen_at`` by max; sessions keep their first identity fields,
  min start and max activity; a project exists once any session named it.

Local, non-replicated actions: :meth:`Replica.purge_expired` (drops expired
notifications and their read marks; a notification that arrives already
expired is not stored) and :meth:`Replica.gc`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from common import lifecycle, limits
from common import ops as K
from common.lifecycle import CLAIMED, EDITING, PENDING
from common.ops import Op, op_weight, pack_body
from store.records import (
    EMPTY_FIELDS,
    MESSAGE_FIELDS,
    PURGE_FIELDS,
    Rank,
    TerminalRank,
    apikey_row,
    body_rank,
    claim_op,
    completion_below,
    completion_op,
    completion_row,
    completion_wins,
    decision_op,
    decision_row,
    edit_ops,
    empty_row,
    grant_row,
    hold_row,
    is_expired,
    link_row,
    lww_rank,
    memory_row,
    message_row,
    message_view,
    note_row,
    nsub_row,
    pgrant_row,
    physical_ms,
    purge_op,
    purged_completion,
    reject_op,
    revision_row,
    terminal_rank,
    terminal_row,
    user_row,
)
from store.seen import SeenSet


@dataclass(slots=True)
class _Ranked:
    rank: Rank
    row: dict[str, Any]


def _copy_key(epoch: int, rank: Rank) -> tuple[int, int, str, int]:
    """Which copy of a send wins (federation.mailbox._copy_key): the latest
    owner term's, then the lowest ``(hlc, origin, seq)``."""
    return (-epoch, *rank)


@dataclass(slots=True)
class _Message:
    rank: Rank
    row: dict[str, Any]
    epoch: int

    @property
    def order(self) -> tuple[int, str]:
        return (self.rank[0], self.rank[1])


@dataclass(slots=True)
class _Terminal:
    rank: TerminalRank
    row: dict[str, Any]


@dataclass(slots=True)
class _Agent:
    reg_rank: Rank | None = None
    agent_type: str | None = None
    capabilities: Any = None
    registered_at_ms: int | None = None
    last_seen_at_ms: int | None = None


def _scope_of(mailbox: str) -> tuple[str, str]:
    """``(workspace, project)`` of a ``mbox:`` key."""
    ws, _, proj = mailbox.removeprefix("mbox:").partition("/")
    return ws, proj


class Replica:
    """One node's replicated state, in memory."""

    def __init__(self) -> None:
        self.seen = SeenSet()
        self._log: dict[tuple[str, int], Op] = {}
        self._max_hlc = 0
        self._memories: dict[str, _Ranked] = {}
        self._tombstones: set[str] = set()
        self._notes: dict[str, _Ranked] = {}
        self._reads: set[tuple[str, str]] = set()
        self._agents: dict[str, _Agent] = {}
        self._sessions: dict[str, _Ranked] = {}
        # (workspace, project, harness) -> [first_at_ms, last_at_ms]
        self._harnesses: dict[tuple[str, str, str], list[int]] = {}
        self._messages: dict[str, _Message] = {}
        self._terminals: dict[str, _Terminal] = {}
        # message id -> winning msg.hold/msg.release row; -> winning saved content
        self._holds: dict[str, dict[str, Any]] = {}
        self._revisions: dict[str, dict[str, Any]] = {}
        # message id -> the first msg.complete row (with its hlc, origin, seq)
        self._completions: dict[str, dict[str, Any]] = {}
        # message id -> {kind: winning msg.approve / msg.reject row} (who decided)
        self._decisions: dict[str, dict[str, dict[str, Any]]] = {}
        # (mailbox key, request id) -> the winning msg.empty op
        self._empties: dict[tuple[str, str], Op] = {}
        self._promises: dict[str, int] = {}
        self.recovering_mark = False
        # (source_id, target_id, relation) -> created_at_ms
        self._links: dict[tuple[str, str, str], int] = {}
        self._grants: dict[tuple[str, str], _Ranked] = {}
        self._nsubs: dict[tuple[str, str], _Ranked] = {}
        # identity (issue 7): name -> user; key id -> key; (user, ws, project or "")
        self._users: dict[str, _Ranked] = {}
        self._apikeys: dict[str, _Ranked] = {}
        self._pgrants: dict[tuple[str, str, str], _Ranked] = {}
        # purges (issue 27): (workspace, project) -> greatest msg.purge; -> greatest at_ms
        self._marks: dict[tuple[str, str], Op] = {}
        self._purge_at: dict[tuple[str, str], int] = {}
        # message id -> (rank of the purged send, its workspace, project)
        # (its epoch too: a copy of a later owner term outranks it)
        self._purged: dict[str, tuple[Rank, str, str, int]] = {}

    # -- applying ops --------------------------------------------------------

    def apply(self, ops: Iterable[Op], now_ms: int) -> list[Op]:
        """Merge ``ops``; return those not seen before, in input order."""
        fresh: list[Op] = []
        for op in ops:
            if op.op_id in self.seen:
                continue
            self.seen.add(op.origin, op.seq)
            self._log[op.op_id] = op
            self._max_hlc = max(self._max_hlc, op.hlc)
            self._merge(op, now_ms)
            fresh.append(op)
        return fresh

    def apply_ops(self, ops: list[Op], now_ms: int) -> list[Op]:
        """:meth:`apply` under the name of ``store.db.Store.apply_ops``
        (both keep :class:`federation.driver.Store`)."""
        return self.apply(ops, now_ms)

    def _merge(self, op: Op, now_ms: int) -> None:
        kind = op.kind
        if kind == K.MEM_PUT:
            self._mem_put(op)
        elif kind == K.MEM_DEL:
            mem_id = str(op.body["id"])
            self._tombstones.add(mem_id)
            self._memories.pop(mem_id, None)
        elif kind == K.NOTE_NEW:
            row = note_row(op)
            if not is_expired(row["expires_at_ms"], now_ms):
                _keep_lowest(self._notes, row["id"], lww_rank(op), row)
        elif kind == K.NOTE_READ:
            reader = str(op.body["to"])
            self._reads.update((reader, str(i)) for i in op.body.get("ids") or [])
        elif kind == K.AGENT_REG:
            self._agent_reg(op)
        elif kind == K.AGENT_SEEN:
            seen = self._agents.setdefault(str(op.body["agent_id"]), _Agent())
            seen.last_seen_at_ms = _max_opt(seen.last_seen_at_ms, int(op.body["at_ms"]))
        elif kind == K.SESSION_START:
            self._session_start(op)
        elif kind == K.MSG_SEND:
            self._msg_send(op)
        elif kind == K.MSG_PURGE:
            self._msg_purge(op)
        elif kind == K.PROJ_HIDE:
            scope = (str(op.body["workspace"]), str(op.body["project"]))
            at_ms = int(op.body["at_ms"])
            self._purge_at[scope] = max(self._purge_at.get(scope, at_ms), at_ms)
        elif kind in K.TERMINAL_KINDS:
            msg_id = str(op.body["id"])
            cur = self._terminals.get(msg_id)
            if cur is None or terminal_rank(op) > cur.rank:
                self._terminals[msg_id] = _Terminal(terminal_rank(op), terminal_row(op))
            self._decide(op)
            self._drop_old_edits(msg_id)  # a decision made before the purge goes with it
        elif kind in K.HOLD_KINDS:
            self._msg_hold(op)
        elif kind == K.MSG_COMPLETE:
            self._msg_complete(op)
        elif kind == K.OP_GAP:
            pass  # a lost op id, filled: nothing to merge
        elif kind == K.MSG_EMPTY:
            slot = (op.key, str(op.body["request_id"]))
            cur_empty = self._empties.get(slot)
            if cur_empty is None or terminal_rank(op) > terminal_rank(cur_empty):
                self._empties[slot] = op
        elif kind == K.LINK_PUT:
            link = link_row(op)
            lkey = (link["source_id"], link["target_id"], link["relation"])
            self._links[lkey] = min(self._links.get(lkey, link["created_at_ms"]),
                                    link["created_at_ms"])
        elif kind == K.GRANT_PUT:
            grant = grant_row(op)
            gkey = (grant["memory_id"], grant["agent_id"])
            cur_grant = self._grants.get(gkey)
            if cur_grant is None or lww_rank(op) > cur_grant.rank:
                self._grants[gkey] = _Ranked(lww_rank(op), grant)
        elif kind == K.NSUB_PUT:
            nsub = nsub_row(op)
            skey = (nsub["agent_id"], nsub["namespace"])
            cur_sub = self._nsubs.get(skey)
            if cur_sub is None or lww_rank(op) > cur_sub.rank:
                self._nsubs[skey] = _Ranked(lww_rank(op), nsub)
        elif kind == K.USER_PUT:
            self._user_put(op)
        elif kind == K.APIKEY_PUT:
            self._apikey_put(op)
        elif kind == K.PGRANT_PUT:
            pg = pgrant_row(op)
            pkey = (pg["user"], pg["workspace"], pg["project"] or "")
            cur_pg = self._pgrants.get(pkey)
            if cur_pg is None or body_rank(op) > cur_pg.rank:
                self._pgrants[pkey] = _Ranked(body_rank(op), pg)
        else:
            raise ValueError(f"unknown op kind {kind!r}")

    def _msg_hold(self, op: Op) -> None:
        msg_id = str(op.body["id"])
        stamp = {"hlc": op.hlc, "origin": op.origin, "seq": op.seq}
        self._decide(op)
        _keep_highest(self._holds, msg_id, {**hold_row(op), **stamp})
        revision = revision_row(op)
        if revision is not None:
            _keep_highest(self._revisions, msg_id, {**revision, **stamp})
        self._drop_old_edits(msg_id)  # one decided before the purge goes with it

    def _msg_complete(self, op: Op) -> None:
        """The latest claim's first completion of a message wins
        (:func:`store.records.completion_wins`)."""
        done = {**completion_row(op), "hlc": op.hlc, "origin": op.origin, "seq": op.seq}
        mark = self._marks.get(_scope_of(op.key))
        if completion_below(done, None if mark is None else terminal_rank(mark)):
            done = purged_completion(done)
        cur = self._completions.get(done["id"])
        if cur is None or completion_wins(done, cur):
            self._completions[done["id"]] = done

    def _mark_of(self, row: dict[str, Any]) -> tuple[int, int, str, int] | None:
        """The terminal rank (the owners' order of decisions) of the mark."""
        mark = self._marks.get((row["to_workspace"], row["to_project"]))
        return None if mark is None else terminal_rank(mark)

    def _msg_send(self, op: Op) -> None:
        row = message_row(op)
        mid, rank = row["id"], lww_rank(op)
        key = _copy_key(op.epoch, rank)
        purged = self._purged.get(mid)
        if purged is not None:
            if _copy_key(purged[3], purged[0]) <= key:
                return
            del self._purged[mid]  # a winning copy: judged again below
        old = self._messages.get(mid)
        if old is None or key < _copy_key(old.epoch, old.rank):
            self._messages[mid] = _Message(rank, row, op.epoch)
        self._purge_if_marked(mid)

    def _drop_old_edits(self, mid: str) -> None:
        """Forget the hold and saved edit of ``mid`` decided before the mark
        of its mailbox (known from its send or its purged record; with
        neither, they are judged when the send arrives)."""
        msg, purged = self._messages.get(mid), self._purged.get(mid)
        scope = ((msg.row["to_workspace"], msg.row["to_project"]) if msg is not None
                 else None if purged is None else (purged[1], purged[2]))
        op = None if scope is None else self._marks.get(scope)
        if op is None:
            return
        mark = terminal_rank(op)

        def below(row: dict[str, Any]) -> bool:
            return (row["epoch"], row["hlc"], row["origin"], row["seq"]) < mark
        for table in (self._holds, self._revisions):
            row = table.get(mid)
            if row is not None and below(row):
                del table[mid]
        mine = self._decisions.get(mid)  # approval decisions, ranked like holds
        if mine is not None:
            for kind in [k for k, row in mine.items() if below(row)]:
                del mine[kind]
            if not mine:
                del self._decisions[mid]

    def _purge_if_marked(self, mid: str) -> bool:
        msg = self._messages[mid]
        mark = self._mark_of(msg.row)
        self._drop_old_edits(mid)
        if mark is None or (msg.epoch, *msg.rank) >= mark:
            return False
        del self._messages[mid]
        # Awaiting or rejected, it goes like any other (its decisions made
        # before the mark went above).
        self._purged[mid] = (msg.rank, msg.row["to_workspace"], msg.row["to_project"], msg.epoch)
        return True

    def _msg_purge(self, op: Op) -> None:
        b = op.body
        scope = (str(b["workspace"]), str(b["project"]))
        at_ms = int(b.get("at_ms", physical_ms(op.hlc)))
        self._purge_at[scope] = max(self._purge_at.get(scope, at_ms), at_ms)
        cur = self._marks.get(scope)
        if cur is not None and terminal_rank(cur) >= terminal_rank(op):
            return
        self._marks[scope] = op
        for mid in [m for m, msg in self._messages.items()
                    if (msg.row["to_workspace"], msg.row["to_project"]) == scope]:
            self._purge_if_marked(mid)
        for mid in [m for m, v in self._purged.items() if (v[1], v[2]) == scope]:
            self._drop_old_edits(mid)
        key, mark = K.mailbox_key(*scope), terminal_rank(op)
        for mid, done in list(self._completions.items()):
            if done["mailbox"] == key and not done["purged"] and completion_below(done, mark):
                self._completions[mid] = purged_completion(done)

    def _project_hidden(self, workspace: str, project: str, last_at_ms: int) -> bool:
        """Is activity last seen at ``last_at_ms`` older than the project's purge?"""
        cut = self._purge_at.get((workspace, project))
        return cut is not None and last_at_ms < cut

    def purge_marks(self) -> list[dict[str, Any]]:
        """Every mailbox's mark (the greatest purge): its body and rank."""
        return [{**{k: op.body.get(k) for k in PURGE_FIELDS},
                 "at_ms": int(op.body.get("at_ms", physical_ms(op.hlc))),
                 "hlc": op.hlc, "origin": op.origin, "seq": op.seq, "epoch": op.epoch}
                for _, op in sorted(self._marks.items())]

    def memory_ids_under(self, namespace: str, *, limit: int) -> list[str]:
        """As :meth:`store.reads.DomainReads.memory_ids_under`."""
        return sorted(k for k, m in self._memories.items()
                      if m.row["namespace"] == namespace
                      or str(m.row["namespace"]).startswith(namespace + "/"))[:limit]

    def mailbox_projects(self, workspace: str) -> list[str]:
        """As :meth:`store.reads.DomainReads.mailbox_projects`."""
        found = {m.row["to_project"] for m in self._messages.values()
                 if m.row["to_workspace"] == workspace}
        found |= {proj for ws, proj in self._marks if ws == workspace}
        return sorted(p for p in found if p is not None)

    def is_purged(self, msg_id: str) -> bool:
        return msg_id in self._purged

    def purged_rank(self, msg_id: str) -> Rank:
        """The (hlc, origin, seq) of the purged send of ``msg_id``."""
        return self._purged[msg_id][0]

    def _user_put(self, op: Op) -> None:
        row = user_row(op)
        cur = self._users.get(row["name"])
        if cur is None:
            self._users[row["name"]] = _Ranked(body_rank(op), row)
            return
        removed = cur.row["removed"] or row["removed"]
        created = min(cur.row["created_at_ms"], row["created_at_ms"])
        if body_rank(op) > cur.rank:
            cur.rank = body_rank(op)
            cur.row.update(root=row["root"], password_hash=row["password_hash"])
        cur.row.update(removed=removed, created_at_ms=created)

    def _apikey_put(self, op: Op) -> None:
        row = apikey_row(op)
        cur = self._apikeys.get(row["id"])
        if cur is None:
            self._apikeys[row["id"]] = _Ranked(body_rank(op), row)
            return
        revoked = cur.row["revoked"] or row["revoked"]
        if body_rank(op) < cur.rank:
            self._apikeys[row["id"]] = cur = _Ranked(body_rank(op), row)
        cur.row["revoked"] = revoked

    def _decide(self, op: Op) -> None:
        if op.kind in lifecycle.DECISION_KINDS:
            stamp = {"hlc": op.hlc, "origin": op.origin, "seq": op.seq}
            mine = self._decisions.setdefault(str(op.body["id"]), {})
            _keep_highest(mine, op.kind, {**decision_row(op), **stamp})

    def _mem_put(self, op: Op) -> None:
        row = memory_row(op)
        if row["id"] in self._tombstones:
            return
        cur = self._memories.get(row["id"])
        if cur is None or lww_rank(op) > cur.rank:
            self._memories[row["id"]] = _Ranked(lww_rank(op), row)

    def _agent_reg(self, op: Op) -> None:
        b = op.body
        agent = self._agents.setdefault(str(b["agent_id"]), _Agent())
        registered = int(b.get("registered_at_ms", physical_ms(op.hlc)))
        if agent.reg_rank is None or lww_rank(op) > agent.reg_rank:
            agent.reg_rank = lww_rank(op)
            agent.agent_type = b.get("agent_type")
            agent.capabilities = b.get("capabilities")
        agent.registered_at_ms = _min_opt(agent.registered_at_ms, registered)
        agent.last_seen_at_ms = _max_opt(agent.last_seen_at_ms, registered)

    def _session_start(self, op: Op) -> None:
        b = op.body
        at_ms = int(b["at_ms"])
        ws, proj, harness = str(b["workspace"]), str(b["project"]), str(b["harness"])
        span = self._harnesses.setdefault((ws, proj, harness), [at_ms, at_ms])
        span[0], span[1] = min(span[0], at_ms), max(span[1], at_ms)
        sid = str(b["session_id"])
        cur = self._sessions.get(sid)
        if cur is None:
            row = {"workspace": ws, "project": proj, "harness": harness, "session_id": sid,
                   "owner_user": b.get("owner_user"), "started_at_ms": at_ms, "last_at_ms": at_ms}
            self._sessions[sid] = _Ranked(body_rank(op), row)
            return
        row = cur.row
        if body_rank(op) < cur.rank:
            cur.rank = body_rank(op)
            row.update(workspace=ws, project=proj, harness=harness, owner_user=b.get("owner_user"))
        row["started_at_ms"] = min(row["started_at_ms"], at_ms)
        row["last_at_ms"] = max(row["last_at_ms"], at_ms)

    # -- local maintenance ---------------------------------------------------

    def purge_expired(self, now_ms: int, empty_before_ms: int | None = None) -> int:
        """Drop expired notifications (and their read marks); return how many.
        With ``empty_before_ms``, also the "nothing pending" pop decisions
        taken before it (not counted)."""
        gone = [n.row for n in self._notes.values() if is_expired(n.row["expires_at_ms"], now_ms)]
        for row in gone:
            del self._notes[row["id"]]
            self._reads.discard((row["to"], row["id"]))
        if empty_before_ms is not None:
            for slot in [k for k, op in self._empties.items()
                         if empty_row(op)["at_ms"] < empty_before_ms]:
                del self._empties[slot]
        return len(gone)

    def gc(self, floor_vv: dict[str, int]) -> int:
        """Drop logged ops every member holds (``seq <= floor_vv[origin]``);
        return how many. Their ids stay in :attr:`seen`."""
        doomed = [oid for oid in self._log if oid[1] <= floor_vv.get(oid[0], 0)]
        for oid in doomed:
            del self._log[oid]
        return len(doomed)

    def collected_floor(self) -> dict[str, int]:
        """Per origin, the seq up to which the log no longer holds ops
        (``Store.collected_floor``); origins with nothing collected left out."""
        least: dict[str, int] = {}
        for origin, seq in self._log:
            if seq < least.get(origin, seq + 1):
                least[origin] = seq
        floors = {}
        for origin, mark in self.seen.version_vector().items():
            floor = min(mark, least[origin] - 1) if origin in least else mark
            if floor > 0:
                floors[origin] = floor
        return floors

    def set_recovering(self, recovering: bool) -> None:
        """The durable "must recover first" mark (``Store.set_recovering``)."""
        self.recovering_mark = recovering

    def set_promised(self, mailbox: str, epoch: int) -> None:
        self._promises[mailbox] = max(self._promises.get(mailbox, 0), epoch)

    def get_promised(self, mailbox: str) -> int:
        return self._promises.get(mailbox, 0)

    def promises(self) -> dict[str, int]:
        return dict(self._promises)

    def seed_copy(self) -> Replica:
        """A copy of this replica's replicated state to seed a member that
        lost its disk (what a backup restored on another member holds):
        everything but the promises, which are this member's own."""
        out = copy.deepcopy(self)
        out._promises = {}
        return out

    # -- the op log ------------------------------------------------------------

    def version_vector(self) -> dict[str, int]:
        return self.seen.version_vector()

    def max_seq(self, origin: str) -> int:
        return self.seen.max_seq(origin)

    def max_hlc(self) -> int:
        return self._max_hlc

    def max_seqs(self) -> dict[str, int]:
        return {origin: self.seen.max_seq(origin) for origin in self.seen.origins()}

    def ops_missing(self, vv: dict[str, int], limit: int,
                    bytes_max: int | None = None,
                    upto: Mapping[str, int] | None = None) -> list[Op]:
        """Logged ops that ``vv`` does not cover, by (origin, seq), at most
        ``limit``, and with ``bytes_max`` and ``upto`` cut as
        ``Store.ops_missing`` cuts them (ops are taken while some of the
        budget is left)."""
        ids = sorted(oid for oid in self._log if oid[1] > vv.get(oid[0], 0)
                     and (upto is None or oid[1] <= upto.get(oid[0], 0)))
        out = [self._log[oid] for oid in ids[:limit]]
        if bytes_max is None:
            return out
        budget = bytes_max
        for i, op in enumerate(out):
            if budget <= 0:
                return out[:i]
            budget -= op_weight(len(op.key.encode()), len(pack_body(op.body)))
        return out

    def ops_for_key(self, key: str, vv: dict[str, int] | None = None) -> list[Op]:
        floor = vv or {}
        ids = sorted(oid for oid, op in self._log.items()
                     if op.key == key and oid[1] > floor.get(oid[0], 0))
        return [self._log[oid] for oid in ids]

    # -- memories ----------------------------------------------------------------

    def get_memory(self, memory_id: str, *, now_ms: int) -> dict[str, Any] | None:
        cur = self._memories.get(memory_id)
        if cur is None or is_expired(cur.row["expires_at_ms"], now_ms):
            return None
        return _copy_memory(cur.row)

    def list_memories(self, *, namespace: str | None = None, tier: str | None = None,
                      tags: list[str] | None = None, min_priority: int | None = None,
                      agent_id: str | None = None, limit: int, offset: int = 0,
                      below: tuple[int, str] | None = None, keys_only: bool = False,
                      now_ms: int) -> list[dict[str, Any]]:
        want = set(tags or ())
        rows = [
            r for r in (m.row for m in self._memories.values())
            if not is_expired(r["expires_at_ms"], now_ms)
            and (namespace is None or r["namespace"] == namespace)
            and (tier is None or r["tier"] == tier)
            and (min_priority is None or r["priority"] >= min_priority)
            and (agent_id is None or r["agent_id"] == agent_id)
            and want <= set(r["tags"])
            and (below is None or (r["updated_at_ms"], r["id"]) < (int(below[0]), str(below[1])))
        ]
        rows.sort(key=lambda r: (r["updated_at_ms"], r["id"]), reverse=True)
        page = rows[offset:offset + limit]
        if keys_only:
            return [{"updated_at_ms": r["updated_at_ms"], "id": r["id"]} for r in page]
        return [_copy_memory(r) for r in page]

    # -- inbox -------------------------------------------------------------------

    def _inbox_rows(self, agent_id: str, unread_only: bool, now_ms: int,
                    min_priority: int | None = None,
                    since_ms: int | None = None) -> list[dict[str, Any]]:
        out = []
        for n in self._notes.values():
            r = n.row
            if r["to"] != agent_id or is_expired(r["expires_at_ms"], now_ms):
                continue
            read = (agent_id, r["id"]) in self._reads
            if (unread_only and read) or (min_priority is not None and r["priority"] < min_priority):
                continue
            if since_ms is not None and r["created_at_ms"] <= since_ms:
                continue
            out.append({**r, "read": read})
        return out

    def inbox(self, agent_id: str, *, unread_only: bool, limit: int,
              min_priority: int | None = None, since_ms: int | None = None,
              now_ms: int) -> list[dict[str, Any]]:
        rows = self._inbox_rows(agent_id, unread_only, now_ms, min_priority, since_ms)
        rows.sort(key=lambda r: (r["priority"], r["created_at_ms"], r["id"]), reverse=True)
        return rows[:limit]

    def inbox_count(self, agent_id: str, *, unread_only: bool, now_ms: int) -> int:
        return len(self._inbox_rows(agent_id, unread_only, now_ms))

    def unread_senders(self, agent_id: str, *, now_ms: int, limit: int) -> list[tuple[str, int]]:
        counts: dict[str, int] = {}
        for r in self._inbox_rows(agent_id, True, now_ms):
            counts[r["from"]] = counts.get(r["from"], 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]

    def notifications(self, ids: Iterable[str]) -> list[dict[str, Any]]:
        out = []
        for note_id in ids:
            cur = self._notes.get(note_id)
            if cur is not None:
                out.append({**cur.row, "read": (cur.row["to"], note_id) in self._reads})
        return out

    # -- agents, projects, sessions -------------------------------------------------

    def list_agents(self) -> list[dict[str, Any]]:
        return [v for v in (self.get_agent(a) for a in sorted(self._agents)) if v is not None]

    def get_agent(self, agent_id: str) -> dict[str, Any] | None:
        a = self._agents.get(agent_id)
        if a is None or a.reg_rank is None:
            return None
        return {"agent_id": agent_id, "agent_type": a.agent_type,
                "capabilities": a.capabilities, "registered_at_ms": a.registered_at_ms,
                "last_seen_at_ms": a.last_seen_at_ms}

    def _live_harnesses(self) -> dict[tuple[str, str, str], list[int]]:
        out = {}
        for (ws, proj, harness), (first, last) in self._harnesses.items():
            if not self._project_hidden(ws, proj, last):
                out[(ws, proj, harness)] = [max(first, self._purge_at.get((ws, proj), first)),
                                            last]
        return out

    def project_exists(self, workspace: str, project: str) -> bool:
        return any(k[0] == workspace and k[1] == project for k in self._live_harnesses())

    def project_harnesses(self, workspace: str, project: str) -> set[str]:
        return {k[2] for k in self._live_harnesses() if k[0] == workspace and k[1] == project}

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        cur = self._sessions.get(session_id)
        if cur is None or self._project_hidden(cur.row["workspace"], cur.row["project"],
                                               cur.row["last_at_ms"]):
            return None
        return dict(cur.row)

    def list_projects(self) -> list[dict[str, Any]]:
        grouped: dict[tuple[str, str], dict[str, Any]] = {}
        for (ws, proj, harness), (first, last) in sorted(self._live_harnesses().items()):
            p = grouped.setdefault((ws, proj), {"workspace": ws, "project": proj,
                                                "harnesses": [], "first_at_ms": first,
                                                "last_active_at_ms": last})
            p["harnesses"].append(harness)
            p["first_at_ms"] = min(p["first_at_ms"], first)
            p["last_active_at_ms"] = max(p["last_active_at_ms"], last)
        return list(grouped.values())

    def last_active_project(self) -> tuple[str, str] | None:
        projects = self.list_projects()
        if not projects:
            return None
        best = min(projects, key=lambda p: (-p["last_active_at_ms"], p["workspace"], p["project"]))
        return (best["workspace"], best["project"])

    # -- mailbox -------------------------------------------------------------------

    def _live_terminal(self, msg_id: str) -> _Terminal | None:
        """The winning terminal op of a message, unless its winning hold or
        release outranks it (:func:`common.lifecycle.terminal_stands`)."""
        term = self._terminals.get(msg_id)
        if term is None:
            return None
        hold = self._holds.get(msg_id)
        hold_rank = None if hold is None else _row_rank(hold)
        return term if lifecycle.terminal_stands(term.rank, hold_rank) else None

    def decided_rank(self, msg_id: str) -> TerminalRank | None:
        """The rank of the terminal op that decides the message, if one does."""
        term = self._live_terminal(msg_id)
        return None if term is None else term.rank

    def hold_rank(self, msg_id: str) -> TerminalRank | None:
        """The rank of the message's winning hold or release, if any."""
        hold = self._holds.get(msg_id)
        return None if hold is None else _row_rank(hold)

    def terminal_stands(self, msg_id: str) -> bool:
        """Is the message decided by a terminal op no hold or release outranks?"""
        return self._live_terminal(msg_id) is not None

    def _view(self, msg: _Message) -> dict[str, Any]:
        mid = msg.row["id"]
        term = self._live_terminal(mid)
        won = self._terminals.get(mid)
        return message_view(msg.row, msg.order, msg.epoch,
                            None if term is None else {**term.row, "terminal_rank": list(term.rank)},
                            self._holds.get(mid), self._revisions.get(mid),
                            completion=self._completions.get(mid),
                            decisions=self._decisions.get(mid),
                            deliveries=None if won is None else won.row["delivery"])

    def sent_body(self, msg_id: str) -> dict[str, Any] | None:
        """The message's fields as its send wrote them (``Store.sent_body``)."""
        msg = self._messages.get(msg_id)
        return None if msg is None else {name: msg.row[name] for name in MESSAGE_FIELDS}

    def _state(self, msg_id: str) -> str:
        term = self._live_terminal(msg_id)
        if term is not None:
            return str(term.row["state"])
        hold = self._holds.get(msg_id)
        msg = self._messages.get(msg_id)
        return lifecycle.merged_state(
            None, None if hold is None else hold["kind"],
            approval_required=msg is not None and bool(msg.row.get("approval_required")))

    def message(self, msg_id: str) -> dict[str, Any] | None:
        msg = self._messages.get(msg_id)
        return None if msg is None else self._view(msg)

    def _fifo(self, pred: Callable[[_Message], bool]) -> list[_Message]:
        return sorted((m for m in self._messages.values() if pred(m)), key=lambda m: m.rank)

    def mailbox_pending(self, workspace: str, project: str, *, limit: int,
                        agent: str | None = None,
                        with_held: bool = False) -> list[dict[str, Any]]:
        states = (PENDING, EDITING) if with_held else (PENDING,)

        def pred(m: _Message) -> bool:
            r = m.row
            return (r["to_workspace"] == workspace and r["to_project"] == project
                    and self._state(r["id"]) in states
                    and (agent is None or r["to_agent"] is None or r["to_agent"] == agent))
        return [self._view(m) for m in self._fifo(pred)[:limit]]

    def mailbox_pending_count(self, workspace: str, project: str,
                              agent: str | None = None) -> int:
        return sum(1 for m in self._messages.values()
                   if m.row["to_workspace"] == workspace and m.row["to_project"] == project
                   and self._state(m.row["id"]) == PENDING
                   and (agent is None or m.row["to_agent"] in (None, agent)))

    def mailbox_messages(self, workspace: str, project: str, *, limit: int,
                         offset: int = 0) -> list[dict[str, Any]]:
        msgs = self._fifo(lambda m: m.row["to_workspace"] == workspace
                          and m.row["to_project"] == project)
        msgs.reverse()
        return [self._view(m) for m in msgs[offset:offset + limit]]

    def outbox(self, from_workspace: str, from_project: str, *, limit: int,
               pending_only: bool = True, with_held: bool = False) -> list[dict[str, Any]]:
        # Still queued: pending or awaiting an approver (with_held: editing too).
        states = (PENDING, lifecycle.AWAITING) + ((EDITING,) if with_held else ())

        def pred(m: _Message) -> bool:
            r = m.row
            return (r["from_workspace"] == from_workspace and r["from_project"] == from_project
                    and (not pending_only or self._state(r["id"]) in states))
        return [self._view(m) for m in self._fifo(pred)[:limit]]

    def sent_messages(self, from_workspace: str, from_project: str, *, limit: int,
                      offset: int = 0) -> list[dict[str, Any]]:
        msgs = self._fifo(lambda m: m.row["from_workspace"] == from_workspace
                          and m.row["from_project"] == from_project)
        msgs.reverse()
        return [self._view(m) for m in msgs[offset:offset + limit]]

    def mailbox_editing(self, workspace: str, project: str, *,
                        limit: int) -> list[dict[str, Any]]:
        msgs = self._fifo(lambda m: m.row["to_workspace"] == workspace
                          and m.row["to_project"] == project
                          and self._state(m.row["id"]) == EDITING)
        return [self._view(m) for m in msgs[:limit]]

    def mailbox_awaiting(self, workspace: str, project: str, *,
                         limit: int) -> list[dict[str, Any]]:
        """Messages of a mailbox awaiting an approver, oldest first."""
        msgs = self._fifo(lambda m: m.row["to_workspace"] == workspace
                          and m.row["to_project"] == project
                          and self._state(m.row["id"]) == lifecycle.AWAITING)
        return [self._view(m) for m in msgs[:limit]]

    def claim_by_request(self, workspace: str, project: str,
                         request_id: str) -> dict[str, Any] | None:
        """The message of this mailbox claimed under ``request_id`` (the
        oldest one, should a request id have been reused)."""
        def pred(m: _Message) -> bool:
            term = self._live_terminal(m.row["id"])
            return (term is not None and term.row["state"] == CLAIMED
                    and term.row["request_id"] == request_id
                    and m.row["to_workspace"] == workspace and m.row["to_project"] == project)
        found = self._fifo(pred)
        return self._view(found[0]) if found else None

    def mailbox_state_ops(self, workspace: str, project: str, *, history_max: int,
                          empty_max: int = limits.mailbox_empty_decisions_max) -> list[Op]:
        """The mailbox's merged state as ops, as :meth:`store.db.Store.mailbox_state_ops`
        synthesises them: every pending message's send, the send and winning
        terminal of the ``history_max`` most recently decided ones, and the
        ``empty_max`` latest "nothing pending" decisions. Owners rebuild from
        this, never from the op log, which is collected."""
        key = K.mailbox_key(workspace, project)
        mine = [m for m in self._messages.values()
                if m.row["to_workspace"] == workspace and m.row["to_project"] == project]
        # Decided: a terminal op that stands (one below the message's hold is
        # void, and the message still occupies the mailbox).
        decided = sorted((m for m in mine if self._live_terminal(m.row["id"]) is not None),
                         key=lambda m: self._terminals[m.row["id"]].rank[1:], reverse=True)
        queued = [m for m in mine if self._live_terminal(m.row["id"]) is None]
        # Every leased claim that stands, however old: its owner must expire it.
        leased = [m for m in decided[history_max:]
                  if self._terminals[m.row["id"]].row["lease_until_ms"] is not None]
        chosen = queued + decided[:history_max] + leased
        out: list[Op] = []
        for m in chosen:
            row = m.row
            out.append(Op(m.rank[1], m.rank[2], m.rank[0], K.MSG_SEND, key, dict(row), m.epoch))
            done = self._completions.get(row["id"])
            if done is not None and not done["purged"]:
                out.append(completion_op(key, done))
            term = self._terminals.get(row["id"])
            if term is None:
                continue
            epoch, hlc, origin, seq = term.rank
            t = term.row
            if t["state"] == CLAIMED:
                out.append(claim_op(key, row["id"], t, term.rank))
            elif t["state"] == lifecycle.REJECTED:
                out.append(reject_op(key, row["id"], term.rank,
                                     (self._decisions.get(row["id"]) or {}).get(K.MSG_REJECT)))
            else:
                body = {"id": row["id"], "by_workspace": row["from_workspace"],
                        "by_project": row["from_project"], "at_ms": t["cancelled_at_ms"]}
                out.append(Op(origin, seq, hlc, K.MSG_CANCEL, key, body, epoch))
        for m in chosen:
            mid = m.row["id"]
            for _, decision in sorted((self._decisions.get(mid) or {}).items()):
                # before edit_ops' bare copy of an approval
                out.append(decision_op(key, mid, decision))
            out += edit_ops(key, mid, self._holds.get(mid), self._revisions.get(mid))
        empties = sorted((op for (k, _), op in self._empties.items() if k == key),
                         key=lambda op: (empty_row(op)["at_ms"], op.hlc, op.origin, op.seq),
                         reverse=True)
        out += [Op(op.origin, op.seq, op.hlc, K.MSG_EMPTY, key,
                   {name: empty_row(op)[name] for name in EMPTY_FIELDS}, op.epoch)
                for op in empties[:empty_max]]
        mark = self._marks.get((workspace, project))
        if mark is not None:
            out.append(purge_op(key, mark.body, mark.hlc, mark.origin, mark.seq, mark.epoch))
        out += self._purged_claims(key, workspace, project, history_max)
        return out

    def _purged_claims(self, key: str, workspace: str, project: str,
                       history_max: int) -> list[Op]:
        """For the ``history_max`` latest purged messages of the mailbox (by
        the rank of the purged send): a bodiless stand-in of the send at that
        rank (below the mark, so the owner's model files the id as purged and
        ignores any later copy of it), and its claim if it was claimed under
        a request id, so an owner answers a retried pop of that request id
        "nothing", never a newer message."""
        mine = sorted(((rank, mid) for mid, (rank, ws, proj, _) in self._purged.items()
                       if (ws, proj) == (workspace, project)), reverse=True)
        out: list[Op] = []
        for rank, mid in mine[:history_max]:
            stub = {"id": mid, "to_workspace": workspace, "to_project": project}
            out.append(Op(rank[1], rank[2], rank[0], K.MSG_SEND, key, stub, 0))
            term = self._terminals.get(mid)
            if term is None or term.row["state"] != CLAIMED or term.row["request_id"] is None:
                continue
            epoch, hlc, origin, seq = term.rank
            t = term.row
            out.append(Op(origin, seq, hlc, K.MSG_CLAIM, key,
                          {"id": mid, "claimer_session": t["claimed_by_session"],
                           "claimer_agent": t["claimed_by_agent"],
                           "request_id": t["request_id"], "at_ms": t["claimed_at_ms"]}, epoch))
        return out

    def due_lease_mailboxes(self, before_ms: int, limit: int = 100) -> list[tuple[str, str]]:
        """``(workspace, project)`` of mailboxes holding a leased claim that
        stands, is not completed, and whose deadline is before ``before_ms``
        (what a node's sweep asks an owner to expire)."""
        out: dict[tuple[str, str], int] = {}
        for mid, term in self._terminals.items():
            until = term.row["lease_until_ms"]
            msg = self._messages.get(mid)
            if (until is None or until >= before_ms or msg is None
                    or self._live_terminal(mid) is not term):
                continue
            done = self._completions.get(mid)
            if done is not None and done.get("token") == term.row["token"] and not done["purged"]:
                continue
            box = (msg.row["to_workspace"], msg.row["to_project"])
            out[box] = min(until, out.get(box, until))
        return sorted(out, key=lambda box: (out[box], box))[:limit]

    def pop_decision(self, mailbox: str, request_id: str) -> tuple[str, str | None] | None:
        """How this replica records pop ``request_id`` of ``mailbox``:
        ``("claimed", message id)`` or ``("empty", None)``, whichever op ranks
        higher (the rule :class:`federation.mailbox.MailboxModel` decides by);
        None if neither is known."""
        best: tuple[TerminalRank, tuple[str, str | None]] | None = None
        for mid, term in self._terminals.items():
            msg = self._messages.get(mid)
            if (term.row["state"] == CLAIMED and self._live_terminal(mid) is term and term.row["request_id"] == request_id
                    and msg is not None
                    and K.mailbox_key(msg.row["to_workspace"], msg.row["to_project"]) == mailbox
                    and (best is None or term.rank > best[0])):
                best = (term.rank, ("claimed", mid))
        empty = self._empties.get((mailbox, request_id))
        if empty is not None and (best is None or terminal_rank(empty) > best[0]):
            best = (terminal_rank(empty), ("empty", None))
        return None if best is None else best[1]

    # -- comparison ----------------------------------------------------------------

    def snapshot(self, now_ms: int | None = None) -> dict[str, Any]:
        """All replicated state in a canonical form; equal for converged
        replicas. With ``now_ms``, expired memories and notifications are left
        out (what readers can see), so replicas that purged at different times
        still compare equal."""
        def live(row: dict[str, Any]) -> bool:
            return now_ms is None or not is_expired(row["expires_at_ms"], now_ms)

        agents = {}
        for agent_id, a in self._agents.items():
            agents[agent_id] = (a.agent_type if a.reg_rank else None,
                                a.capabilities if a.reg_rank else None,
                                a.registered_at_ms, a.last_seen_at_ms)
        return {
            "vv": self.version_vector(),
            "memories": {k: v.row for k, v in self._memories.items() if live(v.row)},
            "tombstones": sorted(self._tombstones),
            "notes": {k: v.row for k, v in self._notes.items() if live(v.row)},
            "reads": sorted(self._reads),
            "agents": agents,
            "sessions": {k: v.row for k, v in self._sessions.items()},
            "harnesses": sorted((*k, v[0], v[1]) for k, v in self._harnesses.items()),
            "messages": {k: {**v.row, "order": v.order, "epoch": v.epoch}
                         for k, v in self._messages.items()},
            "terminals": {k: v.row for k, v in self._terminals.items()},
            "holds": {k: dict(v) for k, v in self._holds.items()},
            "revisions": {k: dict(v) for k, v in self._revisions.items()},
            "completions": {k: dict(v) for k, v in self._completions.items()},
            "decisions": {(k, kind): dict(row) for k, v in self._decisions.items()
                          for kind, row in v.items()},
            "empties": {k: _empty_snapshot(op) for k, op in self._empties.items()},
            "links": sorted((*k, v) for k, v in self._links.items()),
            "grants": {f"{k[0]}/{k[1]}": v.row for k, v in sorted(self._grants.items())},
            "nsubs": {f"{k[0]}|{k[1]}": v.row for k, v in sorted(self._nsubs.items())},
            "users": {k: dict(v.row) for k, v in sorted(self._users.items())},
            "apikeys": {k: dict(v.row) for k, v in sorted(self._apikeys.items())},
            "pgrants": {"|".join(k): dict(v.row) for k, v in sorted(self._pgrants.items())},
            "purges": self.purge_marks(),
            "purge_at": sorted((*k, v) for k, v in self._purge_at.items()),
            "purged": {k: [list(v[0]), v[1], v[2], v[3]] for k, v in sorted(self._purged.items())},
        }


def _empty_snapshot(op: Op) -> dict[str, Any]:
    row = empty_row(op)
    return {**{k: row[k] for k in EMPTY_FIELDS}, "epoch": op.epoch,
            "rank": (op.hlc, op.origin, op.seq)}


def _row_rank(r: dict[str, Any]) -> TerminalRank:
    return (r["epoch"], r["hlc"], r["origin"], r["seq"])


def _keep_highest(table: dict[str, dict[str, Any]], key: str, row: dict[str, Any]) -> None:
    """Keep the row of greatest (epoch, hlc, origin, seq)."""
    cur = table.get(key)

    def rank(r: dict[str, Any]) -> tuple[int, int, str, int]:
        return (r["epoch"], r["hlc"], r["origin"], r["seq"])
    if cur is None or rank(row) > rank(cur):
        table[key] = row


def _keep_lowest(table: dict[str, _Ranked], key: str, rank: Rank, row: dict[str, Any]) -> None:
    cur = table.get(key)
    if cur is None or rank < cur.rank:
        table[key] = _Ranked(rank, row)


def _copy_memory(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "tags": list(row["tags"]), "metadata": dict(row["metadata"])}


def _min_opt(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)


def _max_opt(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)
