"""``Store``: one node's SQLite file behind an async API.

Writes go through the single :class:`store.writer.Writer` (group commit on
its own thread); reads go through a :class:`store.reader.ReadPool` of
read-only aiosqlite connections that run alongside it thanks to WAL. The
merge rules are those of :mod:`store.in_memory`, kept by the upserts in
:mod:`store.apply`; the read shapes come from :mod:`store.queries`. Every
write is durable when its awaitable returns.

The seen-set (version vector plus ops held past a gap) and the greatest HLC
are loaded once at open and then kept in memory by the writer, so
``version_vector``, ``max_seq`` and the duplicate check cost no query.
Mailbox promises are local to the node: never replicated, only raised.

This module holds the storage contract (what :class:`federation.driver.Store`
and the peer protocol need); the domain reads the services run are
:class:`store.reads.DomainReads`, which :class:`Store` inherits.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from common import limits
from common.lifecycle import AWAITING, CANCELLED, CLAIMED, EDITING, PENDING, REJECTED
from common.ops import (
    MSG_CANCEL,
    MSG_CLAIM,
    MSG_EMPTY,
    MSG_PURGE,
    MSG_REJECT,
    MSG_SEND,
    OP_FRAME_BYTES,
    PROJ_HIDE,
    Op,
    mailbox_key,
    op_weight,
    unpack_body,
)
from store import deferred
from store import queries as Q
from store.apply import apply_op
from store.backup import new_incarnation_id
from store.reader import ReadPool
from store.reads import DomainReads
from store.records import (
    COMPLETION_COLS,
    EMPTY_FIELDS,
    LEASE_COLS,
    MESSAGE_FIELDS,
    SESSION_FIELDS,
    TERMINAL_COLS,
    claim_op,
    completion_op,
    decision_op,
    edit_ops,
    purge_op,
    reject_op,
)
from store.schema import connect, migrate
from store.seen import SeenSet
from store.writer import Writer

_PULLED_PREFIXES = ("inbox:", "mbox:", "proj:", "ident:")


@dataclass(frozen=True, slots=True)
class CoreState:
    """What the federation core needs to resume after a restart."""

    vv: dict[str, int]
    max_hlc: int
    own_max_seq: int
    promises: dict[str, int]


def _open_writer(path: str) -> tuple[sqlite3.Connection, SeenSet, int, bool]:
    conn = connect(path)
    try:
        created = 1 in migrate(conn)
        offline = conn.execute(
            "SELECT 1 FROM store_meta WHERE name = 'created_offline'").fetchone()
        if offline is not None:
            # Made by a command before any node served it (user add --db):
            # this is the node's first open of a database created empty.
            conn.execute("DELETE FROM store_meta WHERE name = 'created_offline'")
            created = True
        if created:
            # A database created now: this member may have had another one
            # before (a wiped disk), so it recovers before it votes in claims,
            # under an incarnation that orders after the one it replaces.
            conn.execute("INSERT OR REPLACE INTO store_meta (name, value)"
                         " VALUES ('recovering', '1')")
            conn.execute("UPDATE store_meta SET value = ? WHERE name = 'incarnation'",
                         (new_incarnation_id(conn),))
        deferred.replay(conn, apply_op, int(time.time() * 1000))
        marks = dict(conn.execute("SELECT origin, watermark FROM vv").fetchall())
        held: dict[str, set[int]] = {}
        for origin, seq in conn.execute("SELECT origin, seq FROM vv_held"):
            held.setdefault(origin, set()).add(seq)
        row = conn.execute("SELECT value FROM node_meta WHERE name = 'max_hlc'").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn, SeenSet(marks, held), row[0] if row else 0, created


def holds_data(path: str | os.PathLike[str]) -> bool:
    """Has a node ever opened the database at ``path``? False when there is
    no file, or only one a command made before any node served it
    (``user add --db``): such a member has nothing of its cluster yet."""
    path = os.fspath(path)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return False
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT 1 FROM store_meta WHERE name = 'created_offline'").fetchone()
    except sqlite3.OperationalError:
        return True  # not one of ours, or older than store_meta: let the open say
    finally:
        conn.close()
    return row is None


def copy_to_recover(path: str | os.PathLike[str]) -> dict[str, int] | None:
    """The version vector of the database at ``path`` if it must still
    recover before its member votes (``ai-memory restore`` marked it, or it
    was seeded and has not recovered yet); None for any other file."""
    if not holds_data(path):
        return None
    conn = sqlite3.connect(f"file:{os.fspath(path)}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM store_meta WHERE name = 'recovering'").fetchone()
        if row is None or row[0] != "1":
            return None
        return {str(o): int(w) for o, w in conn.execute(
            "SELECT origin, watermark FROM vv WHERE watermark > 0")}
    except sqlite3.DatabaseError:
        return None  # not one of ours, or older than store_meta: let the open say
    finally:
        conn.close()


def _op(row: sqlite3.Row) -> Op:
    return Op(origin=row["origin"], seq=row["seq"], hlc=row["hlc"], kind=row["kind"],
              key=row["key"], body=unpack_body(row["body"]), epoch=row["epoch"])


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


class Store(DomainReads):
    """The storage contract (ops, collection, promises, incarnation, the
    mailbox rebuild, figures); the domain reads come from :class:`DomainReads`."""

    def __init__(self, path: str, node_id: str, executor: ThreadPoolExecutor,
                 conn: sqlite3.Connection, writer: Writer, reads: ReadPool) -> None:
        self.path = path
        self.node_id = node_id
        self._executor = executor
        self._conn = conn
        self._writer = writer
        super().__init__(reads)
        self._closed = False
        self.created = False  # the file was created (empty) by this open
        # Ids an offline change of the lane count left off the lane they name
        # (table lane_moves): none unless ``ai-memory lanes resize`` ran.
        self.lanes_moved = False
        # Highest seq per origin logged under each key that read quorums pull
        # (inboxes, mailboxes, projects): lets an in-sync pull answer from
        # memory. Upper bounds are enough, so collection never lowers them.
        self._heads: dict[str, dict[str, int]] = {}

    @classmethod
    async def open(cls, path: str | os.PathLike[str], node_id: str, *,
                   queue_max: int = limits.writer_queue_max,
                   batch_max: int = limits.writer_batch_max,
                   inline_ops_max: int = limits.writer_inline_ops_max,
                   checkpoint_ops: int = limits.wal_checkpoint_ops,
                   read_connections: int = limits.store_read_connections) -> Store:
        """Open (creating and migrating as needed) the database at ``path``."""
        path = os.fspath(path)
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer")
        try:
            conn, seen, max_hlc, created = await loop.run_in_executor(
                executor, _open_writer, path)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        writer = Writer(conn, executor, seen, max_hlc, queue_max=queue_max, batch_max=batch_max,
                        inline_ops_max=inline_ops_max, checkpoint_ops=checkpoint_ops)
        try:
            reads = await ReadPool.open(path, read_connections)
        except BaseException:
            await loop.run_in_executor(executor, conn.close)
            executor.shutdown(wait=False)
            raise
        writer.start()
        store = cls(path, node_id, executor, conn, writer, reads)
        store.created = created
        ranges = " OR ".join("key >= ? AND key < ?" for _ in _PULLED_PREFIXES)
        bounds = [b for p in _PULLED_PREFIXES for b in (p, p[:-1] + chr(ord(p[-1]) + 1))]
        rows = await reads.fetchall(
            f"SELECT key, origin, max(seq) FROM oplog WHERE {ranges} GROUP BY key, origin", bounds)
        for key, origin, seq in rows:
            store._heads.setdefault(key, {})[origin] = seq
        store.lanes_moved = await reads.fetchone("SELECT 1 FROM lane_moves LIMIT 1") is not None
        return store

    async def moved_lane(self, record_id: str) -> int | None:
        """The lane of a message or notification that ``ai-memory lanes
        resize`` placed off the lane its id names; None for any other id."""
        if not self.lanes_moved:
            return None
        row = await self._reads.fetchone("SELECT lane FROM lane_moves WHERE id = ?", (record_id,))
        return None if row is None else int(row[0])

    async def close(self) -> None:
        """Finish every queued write, then close all connections."""
        if self._closed:
            return
        self._closed = True
        await self._writer.close()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._conn.close)
        self._executor.shutdown(wait=False)
        await self._reads.close()

    # -- ops -----------------------------------------------------------------------

    async def apply_ops(self, ops: Iterable[Op], now_ms: int) -> list[Op]:
        """Log and merge ``ops`` in one durable transaction (shared with
        concurrent callers); return the ops that were new."""
        batch = list(ops)
        if not batch:
            return []
        new = await self._writer.apply(batch, now_ms)
        if any(op.kind in (MSG_PURGE, PROJ_HIDE) for op in new):
            self._projects.clear()  # a purge may have taken a project away
        # Before returning, so that no ack for these ops can precede the head.
        for op in new:
            if op.key.startswith(_PULLED_PREFIXES):
                heads = self._heads.setdefault(op.key, {})
                if op.seq > heads.get(op.origin, 0):
                    heads[op.origin] = op.seq
        return new

    def writer_queue_depth(self) -> int:
        return self._writer.queue_depth

    def version_vector(self) -> dict[str, int]:
        return self._writer.seen.version_vector()

    def max_seq(self, origin: str) -> int:
        return self._writer.seen.max_seq(origin)

    def max_hlc(self) -> int:
        return self._writer.max_hlc

    def max_seqs(self) -> dict[str, int]:
        """The greatest seq held of every origin, gaps or not (held-only
        origins, whose watermark is still 0, included)."""
        seen = self._writer.seen
        return {origin: seen.max_seq(origin) for origin in seen.origins()}

    async def collected_floor(self) -> dict[str, int]:
        """Per origin, the seq up to which this op log no longer holds ops
        (GC collected them, :meth:`gc`): anti-entropy can give a member
        every op of the origin past that, none at or below it. Origins with
        nothing collected are left out. One index seek per origin."""
        marks = self._writer.seen.version_vector()
        if not marks:
            return {}
        origins = sorted(marks)
        rows: list[Any] = []
        for at in range(0, len(origins), 100):  # SQLite joins at most 500 SELECTs in one
            part = origins[at:at + 100]
            sql = " UNION ALL ".join("SELECT ?, min(seq) FROM oplog WHERE origin = ?"
                                     for _ in part)
            rows += await self._reads.fetchall(sql, [x for o in part for x in (o, o)])
        floors = {}
        for origin, least in rows:
            # 1..mark are held; what the log still has of them starts at its least seq.
            floor = marks[origin] if least is None else min(marks[origin], int(least) - 1)
            if floor > 0:
                floors[str(origin)] = floor
        return floors

    async def ops_missing(self, vv: dict[str, int], limit: int,
                          bytes_max: int | None = None,
                          upto: Mapping[str, int] | None = None) -> list[Op]:
        """Logged ops ``vv`` does not cover, ordered by (origin, seq), at most
        ``limit`` and, with ``bytes_max``, ops of at most that many bytes
        (:func:`common.ops.op_weight`) past the first: the batch stops at
        the op that reaches it. Sizes are summed in SQL before any body is
        read, so no more rows than the batch are loaded. Only ops the
        seen-set records are read (an op committed by a writer batch still
        settling waits for the next read); with ``upto``, only ops at or
        below its seq for their origin, and none of an origin it does not
        name (a push's target: what the node held when it began)."""
        out: list[Op] = []
        seen = self._writer.seen
        budget = bytes_max
        for origin in sorted(seen.origins()):
            if len(out) >= limit or (budget is not None and budget <= 0):
                break
            floor = vv.get(origin, 0)
            top = seen.max_seq(origin) if upto is None else min(
                upto.get(origin, 0), seen.max_seq(origin))
            if top <= floor:
                continue  # the peer already holds all we have (or push) of this origin
            want = limit - len(out)
            if budget is None:
                rows = await self._reads.fetchall(
                    f"SELECT {Q.OP_COLS} FROM oplog WHERE origin = ? AND seq > ? AND seq <= ?"
                    " ORDER BY seq LIMIT ?", (origin, floor, top, want))
            else:
                # One statement, so one snapshot: the sizes of the next
                # ``want`` ops (``length()`` of a blob does not read it; a
                # key's text is cast to count its bytes), then the rows of
                # those that start within the budget.
                rows = await self._reads.fetchall(
                    f"SELECT {Q.OP_COLS} FROM (SELECT seq AS s, sum(w) OVER"
                    " (ORDER BY seq ROWS UNBOUNDED PRECEDING) - w AS before FROM"
                    " (SELECT seq, ? + length(CAST(key AS BLOB)) + length(body) AS w"
                    "  FROM oplog WHERE origin = ? AND seq > ? AND seq <= ?"
                    "  ORDER BY seq LIMIT ?))"
                    " JOIN oplog ON origin = ? AND seq = s WHERE before < ? ORDER BY seq",
                    (OP_FRAME_BYTES, origin, floor, top, want, origin, budget))
                budget -= sum(op_weight(len(r["key"].encode()), len(r["body"])) for r in rows)
            out.extend(_op(r) for r in rows)
        return out

    async def ops_for_key(self, key: str, vv: dict[str, int] | None = None) -> list[Op]:
        """Ops logged under ``key`` that a holder of ``vv`` lacks.

        One statement of index range probes over (key, origin, seq): for each
        origin the caller knows, ``seq > floor``; for the gaps between known
        origins (origins it has never heard of), everything. A caller that is
        in sync costs a handful of index seeks, not a scan of the key's
        history."""
        floor = vv or {}
        heads = self._heads.get(key)
        if vv is not None and key.startswith(_PULLED_PREFIXES) and all(
                seq <= floor.get(origin, 0) for origin, seq in (heads or {}).items()):
            return []  # the caller holds everything logged under this key
        known = sorted(floor)
        parts: list[str] = []
        params: list[Any] = []
        for origin in known:
            parts.append("key = ? AND origin = ? AND seq > ?")
            params += [key, origin, floor[origin]]
        bounds = [None, *known, None]
        for lo, hi in itertools.pairwise(bounds):
            cond = ["key = ?"]
            params.append(key)
            if lo is not None:
                cond.append("origin > ?")
                params.append(lo)
            if hi is not None:
                cond.append("origin < ?")
                params.append(hi)
            parts.append(" AND ".join(cond))
        sql = " UNION ALL ".join(f"SELECT {Q.OP_COLS} FROM oplog WHERE {p}" for p in parts)
        rows = await self._reads.fetchall(f"SELECT * FROM ({sql}) ORDER BY origin, seq", params)
        return [_op(r) for r in rows]

    async def gc(self, floor_vv: dict[str, int]) -> int:
        """Delete op-log rows every member holds; return how many. Their ids
        stay covered by the version vector, and memory tombstones stay."""
        pairs = [(o, s) for o, s in floor_vv.items() if s > 0]

        def run(conn: sqlite3.Connection) -> int:
            cur = conn.executemany("DELETE FROM oplog WHERE origin = ? AND seq <= ?", pairs)
            return max(cur.rowcount, 0)
        result: int = await self._writer.call(run)
        return result

    async def purge_expired(self, now_ms: int, empty_before_ms: int | None = None) -> int:
        """Delete expired notifications (and their read marks) locally; with
        ``empty_before_ms``, also the "nothing pending" pop decisions taken
        before it (not counted)."""
        def run(conn: sqlite3.Connection) -> int:
            if empty_before_ms is not None:
                conn.execute("DELETE FROM pop_empty WHERE at_ms < ?", (empty_before_ms,))
            conn.execute(
                "DELETE FROM note_reads WHERE (agent_id, note_id) IN (SELECT to_agent, id"
                " FROM notes WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?)", (now_ms,))
            cur = conn.execute(
                "DELETE FROM notes WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?",
                (now_ms,))
            return max(cur.rowcount, 0)
        result: int = await self._writer.call(run)
        return result

    # -- incarnation ------------------------------------------------------------------

    async def recovering(self) -> bool:
        """Does this database still have to recover (created empty, or
        restored) before its member may promise or accept in claim rounds?"""
        row = await self._reads.fetchone(
            "SELECT value FROM store_meta WHERE name = 'recovering'")
        return row is not None and row[0] == "1"

    async def mark_created_offline(self) -> None:
        """This database was created by a command, not a node: the first node
        to open it treats it as created by that open (see :mod:`store.schema`)."""
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO store_meta (name, value)"
                         " VALUES ('created_offline', '1')")
        await self._writer.call(run)

    async def set_recovering(self, recovering: bool) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO store_meta (name, value) VALUES ('recovering', ?)",
                         ("1" if recovering else "0",))
        await self._writer.call(run)

    async def cluster_id(self) -> str:
        """The id of the cluster this database belongs to ("" until a node
        first opened it as a member: databases made before cluster ids)."""
        row = await self._reads.fetchone(
            "SELECT value FROM store_meta WHERE name = 'cluster_id'")
        return "" if row is None else str(row[0])

    async def set_cluster_id(self, cluster_id: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO store_meta (name, value) VALUES ('cluster_id', ?)",
                         (cluster_id,))
        await self._writer.call(run)

    async def lane_layout(self) -> str:
        """Which lane of how many this database is, as ``lane/lanes/partition``
        ("" until a node first opened it: a database of a node without lanes
        reads as lane 0 of 1; see :mod:`daemon.lanes.layout`)."""
        row = await self._reads.fetchone(
            "SELECT value FROM store_meta WHERE name = 'lane_layout'")
        return "" if row is None else str(row[0])

    async def set_lane_layout(self, layout: str) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO store_meta (name, value) VALUES ('lane_layout', ?)",
                         (layout,))
        await self._writer.call(run)

    async def incarnation(self) -> str:
        """This database's incarnation id: created with the database, replaced
        by a restore (see :mod:`store.backup`)."""
        row = await self._reads.fetchone(
            "SELECT value FROM store_meta WHERE name = 'incarnation'")
        if row is None:  # pragma: no cover - migration 0005 always writes it
            raise RuntimeError("database without an incarnation id")
        return str(row[0])

    # -- promises (local) -------------------------------------------------------------

    async def set_promised(self, mailbox: str, epoch: int) -> None:
        """Durably record that this node promised ``epoch`` for ``mailbox``
        (a lower epoch than the one stored changes nothing)."""
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO promises (mailbox, epoch) VALUES (?, ?) ON CONFLICT (mailbox)"
                         " DO UPDATE SET epoch = max(epoch, excluded.epoch)", (mailbox, epoch))
        await self._writer.call(run, small=True)

    async def get_promised(self, mailbox: str) -> int:
        row = await self._reads.fetchone("SELECT epoch FROM promises WHERE mailbox = ?", (mailbox,))
        return int(row[0]) if row else 0

    async def load_core_state(self) -> CoreState:
        rows = await self._reads.fetchall("SELECT mailbox, epoch FROM promises")
        return CoreState(vv=self.version_vector(), max_hlc=self.max_hlc(),
                         own_max_seq=self.max_seq(self.node_id),
                         promises={r[0]: r[1] for r in rows})

    def seen_copy(self) -> SeenSet:
        """A copy of the op ids this store holds (watermarks and held seqs);
        event-loop only, like the writer's own set."""
        w = self._writer.seen
        return SeenSet(w.watermark, w.held)

    # -- mailbox state (the driver's rebuild) ------------------------------------

    async def mailbox_state_ops(self, workspace: str, project: str, *, history_max: int,
                                empty_max: int = limits.mailbox_empty_decisions_max) -> list[Op]:
        """The mailbox's merged state as ops: every pending message's send,
        the send and winning terminal of the ``history_max`` most recently
        decided ones, and the ``empty_max`` latest "nothing pending" pop
        decisions. An owner builds its model from these at takeover; the op
        log alone will not do, because it is collected once every member
        holds it."""
        cols = (f"m.origin, m.seq, m.hlc, m.send_epoch, {', '.join('m.' + c for c in MESSAGE_FIELDS)},"
                " t.state AS t_state, t.epoch AS t_epoch, t.hlc AS t_hlc, t.origin AS t_origin,"
                " t.seq AS t_seq, t.claimed_by_session, t.claimed_by_agent, t.claimed_by_key,"
                " t.claimed_by_agent_id, t.request_id,"
                " t.claimed_at_ms, t.cancelled_at_ms, "
                + ", ".join(f"t.{c}" for c in LEASE_COLS))
        base = (f"SELECT {cols} FROM messages m LEFT JOIN msg_terminal t ON t.id = m.id"
                " WHERE m.to_workspace = :ws AND m.to_project = :proj")
        holds = {r["id"]: r for r in await self._reads.fetchall(
            "SELECT h.* FROM msg_hold h JOIN messages m ON m.id = h.id"
            " WHERE m.to_workspace = ? AND m.to_project = ?", (workspace, project))}
        revisions = {r["id"]: r for r in await self._reads.fetchall(
            "SELECT v.* FROM msg_revision v JOIN messages m ON m.id = v.id"
            " WHERE m.to_workspace = ? AND m.to_project = ?", (workspace, project))}
        decisions: dict[str, dict[str, Any]] = {}
        for r in await self._reads.fetchall(
                "SELECT d.* FROM msg_decision d JOIN messages m ON m.id = d.id"
                " WHERE m.to_workspace = ? AND m.to_project = ?", (workspace, project)):
            decisions.setdefault(r["id"], {})[r["kind"]] = r
        params = {"ws": workspace, "proj": project, "n": history_max}
        # Queued: no terminal op, or one void below the message's hold (the
        # state column says which).
        queued = f"m.state IN ('{PENDING}', '{EDITING}', '{AWAITING}')"
        rows = await self._reads.fetchall(f"{base} AND {queued}", params)
        latest = await self._reads.fetchall(
            f"{base} AND NOT {queued} ORDER BY t.hlc DESC, t.origin DESC, t.seq DESC"
            " LIMIT :n", params)
        # Every leased claim that stands, however old, too: its owner must
        # expire it.
        have = {r["id"] for r in latest}
        rows += latest + [r for r in await self._reads.fetchall(
            f"{base} AND NOT {queued} AND t.lease_until_ms IS NOT NULL", params)
            if r["id"] not in have]
        completions = {r["id"]: r for r in await self._reads.fetchall(
            "SELECT c.* FROM msg_completion c JOIN messages m ON m.id = c.id"
            " WHERE m.to_workspace = ? AND m.to_project = ? AND c.purged = 0",
            (workspace, project))}
        key = mailbox_key(workspace, project)
        out: list[Op] = []
        for r in rows:
            body = {name: r[name] for name in MESSAGE_FIELDS}
            out.append(Op(r["origin"], r["seq"], r["hlc"], MSG_SEND, key, body, r["send_epoch"]))
            if body["id"] in completions:
                out.append(completion_op(key, completions[body["id"]]))
            if r["t_state"] == CLAIMED:
                out.append(claim_op(key, body["id"], r, (r["t_epoch"], r["t_hlc"],
                                                          r["t_origin"], r["t_seq"])))
            elif r["t_state"] == REJECTED:
                out.append(reject_op(key, body["id"], (r["t_epoch"], r["t_hlc"], r["t_origin"],
                                                       r["t_seq"]),
                                     decisions.get(body["id"], {}).get(MSG_REJECT)))
            elif r["t_state"] == CANCELLED:
                out.append(Op(r["t_origin"], r["t_seq"], r["t_hlc"], MSG_CANCEL, key, {
                    "id": body["id"], "by_workspace": body["from_workspace"],
                    "by_project": body["from_project"], "at_ms": r["cancelled_at_ms"]},
                    r["t_epoch"]))
            for _, decision in sorted(decisions.get(body["id"], {}).items()):
                # before edit_ops' bare copy of an approval
                out.append(decision_op(key, body["id"], decision))
            out += edit_ops(key, body["id"], holds.get(body["id"]), revisions.get(body["id"]))
        out += [Op(r["origin"], r["seq"], r["hlc"], MSG_EMPTY, key,
                   {name: r[name] for name in EMPTY_FIELDS}, r["epoch"])
                for r in await self._reads.fetchall(
                    "SELECT * FROM pop_empty WHERE mailbox = ?"
                    " ORDER BY at_ms DESC, hlc DESC, origin DESC, seq DESC LIMIT ?",
                    (key, empty_max))]
        return out + await self._purge_state_ops(key, workspace, project, history_max)

    async def due_lease_mailboxes(self, before_ms: int, limit: int = 100) -> list[tuple[str, str]]:
        """``(workspace, project)`` of mailboxes holding a leased claim that
        stands, is not completed, and whose deadline is before ``before_ms``
        (what this node's sweep asks an owner to expire), the most overdue
        first."""
        rows = await self._reads.fetchall(
            "SELECT m.to_workspace, m.to_project FROM msg_terminal t"
            " JOIN messages m ON m.id = t.id LEFT JOIN msg_completion c ON c.id = t.id"
            f" WHERE t.lease_until_ms < ? AND m.state = '{CLAIMED}'"
            " AND (c.id IS NULL OR c.token IS NOT t.token OR c.purged = 1)"
            " GROUP BY m.to_workspace, m.to_project"
            " ORDER BY min(t.lease_until_ms), m.to_workspace, m.to_project LIMIT ?",
            (before_ms, limit))
        return [(r[0], r[1]) for r in rows]

    async def _purge_state_ops(self, key: str, workspace: str, project: str,
                               history_max: int) -> list[Op]:
        """The mailbox's mark, and for its ``history_max`` latest purged
        messages a bodiless stand-in of the send and, if claimed under a
        request id, the claim (as :meth:`store.in_memory.Replica.mailbox_state_ops`)."""
        mark = await self._reads.fetchone(
            "SELECT * FROM msg_purge WHERE workspace = ? AND project = ? AND seq > 0",
            (workspace, project))  # seq 0: the hiding of a proj.hide alone, not a mark
        if mark is None:
            return []
        out = [purge_op(key, dict(mark), mark["hlc"], mark["origin"], mark["seq"],
                        mark["epoch"])]
        rows = await self._reads.fetchall(
            "SELECT g.id, g.hlc, g.origin, g.seq, t.state AS t_state, t.epoch AS t_epoch,"
            " t.hlc AS t_hlc, t.origin AS t_origin, t.seq AS t_seq, t.claimed_by_session,"
            " t.claimed_by_agent, t.request_id, t.claimed_at_ms"
            " FROM msg_purged g LEFT JOIN msg_terminal t ON t.id = g.id"
            " WHERE g.to_workspace = ? AND g.to_project = ?"
            " ORDER BY g.hlc DESC, g.origin DESC, g.seq DESC LIMIT ?",
            (workspace, project, history_max))
        for r in rows:
            stub = {"id": r["id"], "to_workspace": workspace, "to_project": project}
            out.append(Op(r["origin"], r["seq"], r["hlc"], MSG_SEND, key, stub, 0))
            if r["t_state"] != CLAIMED or r["request_id"] is None:
                continue
            out.append(Op(r["t_origin"], r["t_seq"], r["t_hlc"], MSG_CLAIM, key, {
                "id": r["id"], "claimer_session": r["claimed_by_session"],
                "claimer_agent": r["claimed_by_agent"], "request_id": r["request_id"],
                "at_ms": r["claimed_at_ms"]}, r["t_epoch"]))
        return out


    # -- status ----------------------------------------------------------------------

    async def stats(self) -> dict[str, Any]:
        counts = await self._reads.fetchone(
            "SELECT " + ", ".join(f"(SELECT count(*) FROM {t}) AS {t}" for t in Q.STAT_TABLES))
        pages = await self._reads.fetchone(
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()")
        wal = self.path + "-wal"
        return {
            "tables": dict(counts) if counts else {},
            "oplog_ops": counts["oplog"] if counts else 0,
            "db_bytes": int(pages[0]) if pages else 0,
            "wal_bytes": _file_size(wal),
            "writer": {**asdict(self._writer.stats), "queue_depth": self._writer.queue_depth},
            "version_vector": self.version_vector(),
            "max_hlc": self.max_hlc(),
        }

    # -- comparison ----------------------------------------------------------------

    async def _message_side_rows(self) -> dict[str, Any]:
        """A snapshot's ``holds``, ``revisions``, ``completions`` (every
        ``msg_completion`` row by message id) and ``decisions``."""
        fetch = self._reads.fetchall
        return {
            "holds": {r["id"]: {k: r[k] for k in r.keys() if k != "id"}
                      for r in await fetch("SELECT * FROM msg_hold")},
            "revisions": {r["id"]: {k: r[k] for k in r.keys() if k != "id"}
                          for r in await fetch("SELECT * FROM msg_revision")},
            "completions": {r["id"]: {k: r[k] for k in COMPLETION_COLS}
                            for r in await fetch("SELECT * FROM msg_completion")},
            "decisions": {(r["id"], r["kind"]): {k: r[k] for k in r.keys() if k != "id"}
                          for r in await fetch("SELECT * FROM msg_decision")},
        }

    async def snapshot(self, now_ms: int | None = None) -> dict[str, Any]:
        """All replicated state in the canonical form of
        :meth:`store.in_memory.Replica.snapshot` (same meaning of ``now_ms``)."""
        live = "" if now_ms is None else f" WHERE {Q.NOT_EXPIRED}"
        p = {} if now_ms is None else {"now": now_ms}
        fetch = self._reads.fetchall
        memories = {r["id"]: Q.memory(r) for r in await fetch(
            f"SELECT {Q.MEMORY_COLS} FROM memories{live}", p)}
        notes = {r["id"]: Q.note(r, with_read=False) for r in await fetch(
            f"SELECT {Q.NOTE_COLS} FROM notes{live}", p)}
        agents = {r["agent_id"]: (a["agent_type"], a["capabilities"], a["registered_at_ms"],
                                  a["last_seen_at_ms"])
                  for r in await fetch(f"SELECT {Q.AGENT_COLS} FROM agents")
                  for a in (Q.agent(r),)}
        messages = {}
        for r in await fetch("SELECT * FROM messages"):
            row = {name: r[name] for name in MESSAGE_FIELDS}
            messages[r["id"]] = {**row, "order": (r["hlc"], r["origin"]), "epoch": r["send_epoch"]}
        terminals = {r["id"]: {k: r[k] for k in TERMINAL_COLS}
                     for r in await fetch("SELECT * FROM msg_terminal")}
        return {
            "vv": self.version_vector(),
            "memories": memories,
            "tombstones": [r[0] for r in await fetch("SELECT id FROM mem_tombstones ORDER BY id")],
            "notes": notes,
            "reads": [(r[0], r[1]) for r in await fetch(
                "SELECT agent_id, note_id FROM note_reads ORDER BY agent_id, note_id")],
            "agents": agents,
            "sessions": {r["session_id"]: {k: r[k] for k in SESSION_FIELDS}
                         for r in await fetch(f"SELECT {Q.SESSION_COLS} FROM sessions")},
            "harnesses": [tuple(r) for r in await fetch(
                "SELECT workspace, project, harness, first_at_ms, last_at_ms"
                " FROM project_harnesses ORDER BY workspace, project, harness")],
            "messages": messages,
            "terminals": terminals,
            **await self._message_side_rows(),
            "empties": {(r["mailbox"], r["request_id"]): {
                **{k: r[k] for k in EMPTY_FIELDS}, "epoch": r["epoch"],
                "rank": (r["hlc"], r["origin"], r["seq"])}
                for r in await fetch("SELECT * FROM pop_empty")},
            "links": [tuple(r) for r in await fetch(
                "SELECT source_id, target_id, relation, created_at_ms FROM memory_links"
                " ORDER BY source_id, target_id, relation")],
            "grants": {f"{r['memory_id']}/{r['agent_id']}": {
                "memory_id": r["memory_id"], "agent_id": r["agent_id"],
                "permission": r["permission"], "granted": bool(r["granted"]), "at_ms": r["at_ms"]}
                for r in await fetch("SELECT * FROM memory_grants ORDER BY memory_id, agent_id")},
            "nsubs": {f"{r['agent_id']}|{r['namespace']}": {
                "agent_id": r["agent_id"], "namespace": r["namespace"],
                "active": bool(r["active"]), "at_ms": r["at_ms"]}
                for r in await fetch(
                    "SELECT * FROM namespace_subscriptions ORDER BY agent_id, namespace")},
            "users": {r["name"]: {
                "name": r["name"], "root": bool(r["root"]), "password_hash": r["password_hash"],
                "removed": bool(r["removed"]), "created_at_ms": r["created_at_ms"]}
                for r in await fetch("SELECT * FROM users ORDER BY name")},
            "apikeys": {r["id"]: {
                "id": r["id"], "user": r["user"], "agent": r["agent"], "label": r["label"],
                "hash": r["hash"], "created_at_ms": r["created_at_ms"],
                "revoked": bool(r["revoked"])}
                for r in await fetch("SELECT * FROM api_keys ORDER BY id")},
            "pgrants": {f"{r['user']}|{r['workspace']}|{r['project']}": {
                "user": r["user"], "workspace": r["workspace"], "project": r["project"] or None,
                "access": r["access"], "granted": bool(r["granted"]), "at_ms": r["at_ms"]}
                for r in await fetch(
                    "SELECT * FROM project_grants ORDER BY user, workspace, project")},
            "purges": await self.purge_marks(),
            "purge_at": [tuple(r) for r in await fetch(
                "SELECT workspace, project, max_at_ms FROM msg_purge ORDER BY workspace, project")],
            "purged": {r["id"]: [[r["hlc"], r["origin"], r["seq"]], r["to_workspace"],
                                 r["to_project"], r["epoch"]]
                       for r in await fetch("SELECT * FROM msg_purged ORDER BY id")},
        }
