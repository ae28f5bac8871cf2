"""Changing a node's lane count offline: ``ai-memory lanes resize``
(docs/lanes.md, "Changing the lane count").

Every member of a stopped, settled cluster rewrites its own files from L
lanes to N. Each member does it to its own files, so what is a member's own
stays its own: its promises (the claim fence), its webhook subscriptions
and outbox. What the members replicate is the same on every settled member,
and the rewrite is deterministic, so each member's new lane ``k`` holds what
the others' lane ``k`` holds. The fingerprint (:func:`fingerprint`: the
version vector of every old lane) is what the members compare first: equal
fingerprints mean the same ops held, so the same records.

Two halves:

* where each table's rows go (pure): :data:`RULES` and :func:`row_lanes`.
  Every table of the schema has a rule; a table without one stops the
  rewrite (a test holds the rules to the schema);
* the rewrite (:func:`resize`): new files beside the old ones, then the old
  ones moved into ``<db>.before-resize-<UTC time>/`` and the new ones into
  their places.

A lane's op log starts empty, under a new incarnation, with its highest
clock kept (every later op orders after every record). A record's stamp
(hlc, origin, seq) is the id of the op that made it, and a lane rebuilds
ops from records (a mailbox's state for a new owner), so ids must stay
unique on a lane: each old lane numbered each origin's ops on its own, and
the new lanes interleave those numbers (:func:`renumber`); the version
vector covers every renumbered id (all collected), so an origin's next op
numbers past them. The renumbering depends on nothing but the id and the
old lane, so members that keep different records (each cleans up on its
own clock) still agree on every id.

Message and notification ids were minted to name their mailbox's or inbox's
lane under L; under N an id may name another lane than its record's. Those
ids go in ``lane_moves`` on every lane, and a request that names only an id
is handed to the lane found there (:meth:`daemon.lanes.rules.View.id_lane`).
Memories need none: a memory is on the lane its id names under any count.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from common import limits
from common.errors import BadRequest, Conflict
from common.lanes import HOME_LANE, LANES_MAX, PARTITION_VERSION, lane_of, lane_of_id
from common.ops import inbox_key, mailbox_key
from daemon.lanes.layout import lane_cluster_id, lane_settings, layout_value
from daemon.settings import Settings
from daemon.webhooks import db as webhook_db
from daemon.webhooks.config import side_db_path
from store import schema
from store.apply import ROW_MERGES
from store.backup import new_incarnation_id

# -- where each table's rows go (pure) -------------------------------------------------------

FRESH: Final = "fresh"  # the lane's own history: starts empty
META: Final = "meta"  # written by the rewrite itself
EVERY: Final = "every"  # a record every lane keeps: every old lane's copy merged, to each
HOME: Final = "home"  # the home lane's (namespace subscriptions)
MEMORY: Final = "memory"  # cols[0] is a memory id: the lane it names
LINK: Final = "link"  # a link: both ends' lanes
AGENT: Final = "agent"  # cols[0] is an agent: its inbox's lane
MAILBOX: Final = "mailbox"  # cols are a mailbox's workspace and project
KEY: Final = "key"  # cols[0] is an op key
MESSAGE: Final = "message"  # cols[0] is a message id: its mailbox's lane
SETTLED: Final = "settled"  # must be empty: the rewrite refuses a lane with rows here
MARK: Final = "mark"  # a project's purge mark and hiding bound: merged, on every lane


@dataclass(frozen=True, slots=True)
class Rule:
    how: str
    cols: tuple[str, ...] = ()


RULES: Final[dict[str, Rule]] = {
    "oplog": Rule(FRESH), "vv": Rule(FRESH), "vv_held": Rule(FRESH),
    "node_meta": Rule(META), "store_meta": Rule(META), "schema_migrations": Rule(META),
    "lane_moves": Rule(META),
    "memories": Rule(MEMORY, ("id",)), "mem_tombstones": Rule(MEMORY, ("id",)),
    "memory_grants": Rule(MEMORY, ("memory_id",)),
    "memory_links": Rule(LINK, ("source_id", "target_id")),
    "notes": Rule(AGENT, ("to_agent",)), "note_reads": Rule(AGENT, ("agent_id",)),
    "agents": Rule(AGENT, ("agent_id",)),
    "sessions": Rule(EVERY), "project_harnesses": Rule(EVERY), "users": Rule(EVERY),
    "api_keys": Rule(EVERY), "project_grants": Rule(EVERY),
    "namespace_subscriptions": Rule(HOME),
    "messages": Rule(MAILBOX, ("to_workspace", "to_project")),
    "msg_purged": Rule(MAILBOX, ("to_workspace", "to_project")),
    "msg_terminal": Rule(MESSAGE, ("id",)), "msg_hold": Rule(MESSAGE, ("id",)),
    "msg_revision": Rule(MESSAGE, ("id",)), "msg_decision": Rule(MESSAGE, ("id",)),
    "msg_completion": Rule(MESSAGE, ("id",)),
    "promises": Rule(KEY, ("mailbox",)), "pop_empty": Rule(KEY, ("mailbox",)),
    "msg_purge": Rule(MARK),
    "ops_deferred": Rule(SETTLED),  # ops waiting for ops they depend on
}
_DERIVED_PREFIXES: Final = ("sqlite_", "memories_fts")  # SQLite's own; the search index (triggers)

# The op ids a row carries, as (hlc, origin, seq) columns: the op that made
# it, and a completion's claim. Ranks compare them, and a lane rebuilds ops
# from them (a mailbox's state for a new owner), so each is an op id that
# must stay unique on its new lane (:func:`renumber`).
STAMPS: Final[dict[str, tuple[tuple[str, str, str], ...]]] = {
    t: (("hlc", "origin", "seq"),) for t in (
        "memories", "notes", "sessions", "messages", "msg_terminal", "pop_empty", "msg_hold",
        "msg_revision", "msg_decision", "msg_purge", "msg_purged", "memory_grants",
        "namespace_subscriptions", "users", "api_keys", "project_grants")
} | {
    "agents": (("reg_hlc", "reg_origin", "reg_seq"),),
    "msg_completion": (("hlc", "origin", "seq"), ("claim_hlc", "claim_origin", "claim_seq")),
}


def renumber(seq: int, old_lane: int, old_lanes: int) -> int:
    """An op's seq on its new lane. Each old lane numbered each origin's ops
    1, 2, 3, ... on its own, so a new lane that takes records of several
    gets the same id twice; the old lanes' numbers interleave instead
    (lane ``j``'s ``s`` becomes ``(s - 1) * L + j + 1``): unique, in each old
    lane's order, and the same on every member whatever records it still
    keeps. 0 (no op) stays 0; one old lane keeps its numbers."""
    return seq if seq <= 0 else (seq - 1) * old_lanes + old_lane + 1


def renumbered_vv(vvs: Sequence[dict[str, int]]) -> dict[str, int]:
    """A new lane's version vector: past every renumbered id of every old
    lane (all collected: the op logs start empty), so an origin's next op
    numbers after them."""
    out: dict[str, int] = {}
    for vv in vvs:
        for origin, mark in vv.items():
            out[origin] = max(out.get(origin, 0), mark * len(vvs))
    return {o: m for o, m in out.items() if m > 0}


def restamp(table: str, row: dict[str, Any], old_lane: int, old_lanes: int) -> dict[str, Any]:
    """``row`` of ``table`` from old lane ``old_lane`` with its op ids renumbered."""
    stamps = STAMPS.get(table, ())
    if not stamps or old_lanes == 1:
        return row
    out = dict(row)
    for _, _, seq in stamps:
        if isinstance(out.get(seq), int):
            out[seq] = renumber(out[seq], old_lane, old_lanes)
    return out


def unruled(tables: Iterable[str]) -> list[str]:
    """The tables of a database that no rule places (none, or the rewrite stops)."""
    return sorted(t for t in tables if t not in RULES and not t.startswith(_DERIVED_PREFIXES))


def row_lanes(rule: Rule, row: dict[str, Any], lanes: int,
              message_lanes: dict[str, int]) -> tuple[int, ...]:
    """The new lanes (of ``lanes``) that keep ``row`` of a table placed by
    ``rule``. ``message_lanes``: each known message id's mailbox lane."""
    how, cols = rule.how, rule.cols
    if how == EVERY:
        return tuple(range(lanes))
    if how == HOME:
        return (HOME_LANE,)
    if how == MEMORY:
        return (lane_of_id(str(row[cols[0]]), lanes),)
    if how == LINK:
        return tuple(sorted({lane_of_id(str(row[c]), lanes) for c in cols}))
    if how == AGENT:
        return (lane_of(inbox_key(str(row[cols[0]])), lanes),)
    if how == MAILBOX:
        return (lane_of(mailbox_key(str(row[cols[0]]), str(row[cols[1]])), lanes),)
    if how == KEY:
        return (lane_of(str(row[cols[0]]), lanes),)
    if how == MESSAGE:
        mid = str(row[cols[0]])
        if mid in message_lanes:
            return (message_lanes[mid],)
        if row.get("mailbox"):  # a completion names its mailbox
            return (lane_of(str(row["mailbox"]), lanes),)
        return (lane_of_id(mid, lanes),)  # its message is gone: where a request for it looks
    raise ValueError(f"rule {how!r} places no single rows")


def merge_marks(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per project, the purge mark every lane keeps after the change: the
    greatest in the owners' order of decisions (epoch, hlc, origin, seq), with
    the greatest hiding bound of any lane (``store.apply``'s upsert, at once)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        k = (row["workspace"], row["project"])
        had = out.get(k)
        if had is None:
            out[k] = dict(row)
            continue
        rank = (row["epoch"], row["hlc"], row["origin"], row["seq"])
        best = dict(row) if rank > (had["epoch"], had["hlc"], had["origin"], had["seq"]) else had
        best["max_at_ms"] = max(had["max_at_ms"], row["max_at_ms"])
        out[k] = best
    return out


def place_marks(marks: Iterable[dict[str, Any]], lanes: int) -> dict[int, list[dict[str, Any]]]:
    """Each project's merged mark on the lane of its mailbox; on every other
    lane the hiding alone (what ``proj.hide`` leaves there: a node with lanes
    hides a purged project's sessions on every lane, at the purge's time),
    which ranks below every real purge, as in ``store.apply``."""
    out: dict[int, list[dict[str, Any]]] = {}
    for m in marks:
        owner = lane_of(mailbox_key(str(m["workspace"]), str(m["project"])), lanes)
        hide = {**m, "scope": None, "by_user": None, "reason": None, "at_ms": m["max_at_ms"],
                "epoch": -1, "hlc": 0, "origin": "", "seq": 0}
        for k in range(lanes):
            out.setdefault(k, []).append(m if k == owner else hide)
    return out


def moved_ids(held: Iterable[tuple[str, int]], lanes: int) -> list[tuple[str, int]]:
    """Of (id, the lane that keeps its record), those whose id names another lane."""
    return sorted((rid, lane) for rid, lane in held if lane_of_id(rid, lanes) != lane)


# -- one member's files ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LaneFiles:
    store: Path
    webhooks: Path | None  # None: an in-memory side file (nothing to carry)


def lane_files(settings: Settings, lanes: int) -> list[LaneFiles]:
    """Where each of ``lanes`` lanes of this node keeps its database and webhook side file."""
    at = replace(settings, server=replace(settings.server, lanes=lanes, lane=0))
    out = []
    for i in range(lanes):
        s = lane_settings(at, i)
        side = side_db_path(s.store.db_path, s.webhooks)
        out.append(LaneFiles(Path(s.store.db_path), None if side == ":memory:" else Path(side)))
    return out


def _layout(path: Path) -> tuple[int, int]:
    """(lane, lane count) a lane's database records (a node's without lanes: 0 of 1)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM store_meta WHERE name = 'lane_layout'").fetchone()
    except sqlite3.Error as exc:
        raise BadRequest(f"{path} is not an ai-memory database: {exc}") from None
    finally:
        conn.close()
    if row is None or not row[0]:
        return 0, 1
    lane, count, version = (int(x) for x in str(row[0]).split("/"))
    if count > 1 and version != PARTITION_VERSION:
        raise Conflict(f"{path} was placed by partition rule {version}; this build places by "
                       f"{PARTITION_VERSION}: resize with the build that wrote it")
    return lane, count


def current_lanes(settings: Settings) -> int:
    """The lane count this node's files record (lane 0's database says)."""
    path = Path(settings.store.db_path)
    if not path.is_file():
        raise BadRequest(f"no database at {path}: nothing to resize")
    return _layout(path)[1]


@dataclass
class _Old:
    lane: int
    conn: sqlite3.Connection
    tables: list[str] = field(default_factory=list)


def _hold(path: Path) -> sqlite3.Connection:
    """A connection to ``path`` that holds it exclusively until closed: a
    node that starts meanwhile cannot open it (and no running one has it
    open, or this fails: :func:`store.schema.in_use`'s test)."""
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=limits.resize_lock_wait_s)
    try:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
    except sqlite3.OperationalError:
        conn.close()
        raise Conflict(f"{path} is open in a running process: stop the node first") from None
    conn.row_factory = sqlite3.Row
    return conn


def _open_old(files: Sequence[LaneFiles]) -> list[_Old]:
    """Each old lane's database, held (:func:`_hold`) and checked: the lane it
    says, at this build's schema, settled."""
    latest = max(m.version for m in schema.migrations())
    out: list[_Old] = []
    try:
        for i, f in enumerate(files):
            if not f.store.is_file():
                raise BadRequest(f"lane {i}'s database {f.store} is missing")
            lane, count = _layout(f.store)
            if (lane, count) != (i, len(files)):
                raise Conflict(f"{f.store} records lane {lane} of {count}, not {i} of {len(files)}")
            conn = _hold(f.store)
            out.append(_Old(i, conn))
            version = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
            if version != latest:
                raise Conflict(f"{f.store} is at schema {version}, this build at {latest}: start "
                               "the node once with this build (it migrates), stop it, then resize")
            recovering = conn.execute(
                "SELECT value FROM store_meta WHERE name = 'recovering'").fetchone()
            if recovering is not None and recovering[0] == "1":
                raise Conflict(f"lane {i} ({f.store}) has not finished recovering: start the "
                               "cluster, let it settle, stop it, then resize")
            unsettled = [what for what, sql in (
                ("op(s) still waiting for ops they depend on", "SELECT count(*) FROM ops_deferred"),
                ("op(s) past a gap in what it holds", "SELECT count(*) FROM vv_held"))
                if conn.execute(sql).fetchone()[0]]
            if unsettled:
                raise Conflict(f"lane {i} ({f.store}) holds {' and '.join(unsettled)}: start "
                               "the cluster, let it settle, stop it, then resize")
            out[-1].tables = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            missing = unruled(out[-1].tables)
            if missing:
                raise Conflict(f"no rule places the rows of {', '.join(missing)} "
                               "(daemon/lanes/resize.py RULES)")
    except BaseException:
        for o in out:
            o.conn.close()
        raise
    return out


def _fingerprint(olds: Sequence[_Old]) -> dict[str, Any]:
    per_lane = []
    for o in olds:
        c = o.conn
        per_lane.append({
            "vv": {r[0]: r[1] for r in c.execute("SELECT origin, watermark FROM vv")},
            "held": [list(r) for r in c.execute(
                "SELECT origin, seq FROM vv_held ORDER BY origin, seq")],
            "deferred": c.execute("SELECT count(*) FROM ops_deferred").fetchone()[0],
        })
    raw = json.dumps({"lanes": len(olds), "per_lane": per_lane}, sort_keys=True).encode()
    return {"lanes": len(olds), "digest": hashlib.sha256(raw).hexdigest()[:16],
            "per_lane": per_lane}


def fingerprint(settings: Settings) -> dict[str, Any]:
    """What this member holds, to compare with every other member before a
    resize: per lane, its version vector (a settled lane holds no op past a
    gap and none deferred). Settled members of one cluster print the same
    digest."""
    finish_interrupted(settings)
    olds = _open_old(lane_files(settings, current_lanes(settings)))
    try:
        return _fingerprint(olds)
    finally:
        for o in olds:
            o.conn.close()


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def _insert(conn: sqlite3.Connection, table: str, cols: Sequence[str],
            rows: Sequence[Sequence[Any]]) -> None:
    if rows:
        conn.executemany(f"INSERT OR IGNORE INTO {table} ({', '.join(cols)})"
                         f" VALUES ({', '.join('?' for _ in cols)})", rows)


def _message_lanes(olds: Sequence[_Old], lanes: int) -> dict[str, int]:
    """Each message id any old lane knows, with its mailbox's new lane."""
    out: dict[str, int] = {}
    for o in olds:
        for mid, ws, proj in o.conn.execute(
                "SELECT id, to_workspace, to_project FROM messages WHERE to_workspace IS NOT NULL"
                " UNION ALL SELECT id, to_workspace, to_project FROM msg_purged"):
            out[mid] = lane_of(mailbox_key(ws, proj), lanes)
        for mid, box in o.conn.execute(
                "SELECT id, mailbox FROM msg_completion WHERE mailbox IS NOT NULL"):
            out.setdefault(mid, lane_of(box, lanes))
    return out


def _base_cluster_id(stored: str, lanes: int) -> str:
    if lanes == 1 or not stored:
        return stored
    head, sep, _ = stored.rpartition(".lane")
    return head if sep else stored


def _copy_store(olds: Sequence[_Old], news: Sequence[sqlite3.Connection]) -> dict[str, int]:
    """Every replicated row of the old lanes into the new lanes; rows written per table."""
    lanes = len(news)
    message_lanes = _message_lanes(olds, lanes)
    counts: dict[str, int] = {}
    marks: list[dict[str, Any]] = []
    for o in olds:
        for table, rule in RULES.items():
            if rule.how in (FRESH, META, SETTLED) or table not in o.tables:
                continue
            if rule.how == HOME and o.lane != HOME_LANE:
                continue
            cols = _columns(o.conn, table)
            rows = [restamp(table, dict(r), o.lane, len(olds))
                    for r in o.conn.execute(f"SELECT {', '.join(cols)} FROM {table}")]
            if rule.how == MARK:
                marks.extend(rows)
                continue
            if rule.how == EVERY:
                # Every lane's copy, merged as the ops merge them: a lane may
                # hold a write whose share to another lane failed.
                sql, names, named = ROW_MERGES[table]
                params = [r if named else tuple(r[c] for c in names) for r in rows]
                for conn in news:
                    conn.executemany(sql, params)
                counts[table] = counts.get(table, 0) + len(rows) * lanes
                continue
            by_lane: dict[int, list[tuple[Any, ...]]] = {}
            for row in rows:
                for k in row_lanes(rule, row, lanes, message_lanes):
                    by_lane.setdefault(k, []).append(tuple(row[c] for c in cols))
            for k, batch in by_lane.items():
                _insert(news[k], table, cols, batch)
                counts[table] = counts.get(table, 0) + len(batch)
    placed = place_marks(merge_marks(marks).values(), lanes)
    for k, rows_k in placed.items():
        cols = list(rows_k[0])
        _insert(news[k], "msg_purge", cols, [tuple(m[c] for c in cols) for m in rows_k])
        counts["msg_purge"] = counts.get("msg_purge", 0) + len(rows_k)
    held = [(rid, k) for k, conn in enumerate(news)
            for (rid,) in conn.execute("SELECT id FROM messages UNION ALL SELECT id FROM notes")]
    moves = moved_ids(held, lanes)
    for conn in news:
        _insert(conn, "lane_moves", ("id", "lane"), moves)
    counts["lane_moves"] = len(moves)
    return counts


def _meta(olds: Sequence[_Old], new: sqlite3.Connection, lane: int, lanes: int,
          info: dict[str, Any]) -> None:
    max_hlc = max((o.conn.execute("SELECT value FROM node_meta WHERE name = 'max_hlc'")
                   .fetchone() or [0])[0] for o in olds)
    new.execute("INSERT OR REPLACE INTO node_meta (name, value) VALUES ('max_hlc', ?)",
                (max_hlc,))
    vvs = []
    for o in olds:
        vv = {str(r[0]): int(r[1]) for r in o.conn.execute("SELECT origin, watermark FROM vv")}
        for origin, seq in o.conn.execute("SELECT origin, max(seq) FROM vv_held GROUP BY origin"):
            vv[str(origin)] = max(vv.get(str(origin), 0), int(seq))
        vvs.append(vv)
    new.executemany("INSERT INTO vv (origin, watermark) VALUES (?, ?)",
                    list(renumbered_vv(vvs).items()))
    stored = olds[0].conn.execute(
        "SELECT value FROM store_meta WHERE name = 'cluster_id'").fetchone()
    base = _base_cluster_id("" if stored is None else str(stored[0]), len(olds))
    meta = {"incarnation": new_incarnation_id(new), "recovering": "0",
            "lane_layout": layout_value(lane, lanes), "resized": json.dumps(info)}
    if base:
        meta["cluster_id"] = lane_cluster_id(base, lane, lanes) if lanes > 1 else base
    new.executemany("INSERT OR REPLACE INTO store_meta (name, value) VALUES (?, ?)",
                    list(meta.items()))


WEBHOOK_TABLES: Final = ("webhook_subscriptions", "webhook_memory_versions", "webhook_outbox")


def _copy_webhooks(olds: Sequence[sqlite3.Connection | None],
                   news: Sequence[sqlite3.Connection]) -> int:
    """Subscriptions to every lane (each lane keeps all of them), a memory's
    version to its lane, each old lane's undelivered events to one new lane
    (in the order they were made). The subscriptions' rows."""
    lanes = len(news)
    for j, src in enumerate(olds):
        if src is None:
            continue
        tables = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                  if not r[0].startswith("sqlite_")}
        if tables != set(WEBHOOK_TABLES):
            raise Conflict(f"a webhook side file of lane {j} has tables {sorted(tables)}; this "
                           f"build moves {list(WEBHOOK_TABLES)} (daemon/lanes/resize.py)")
        cols = _columns(src, "webhook_subscriptions")
        rows = [tuple(r) for r in src.execute(
            f"SELECT {', '.join(cols)} FROM webhook_subscriptions")]
        for conn in news:
            _insert(conn, "webhook_subscriptions", cols, rows)
        cols = _columns(src, "webhook_memory_versions")
        by_lane: dict[int, list[tuple[Any, ...]]] = {}
        for r in src.execute(f"SELECT {', '.join(cols)} FROM webhook_memory_versions"):
            row = dict(r)
            row["seq"] = renumber(int(row["seq"]), j, len(olds))  # the memory's op id
            by_lane.setdefault(lane_of_id(str(row["id"]), lanes), []).append(
                tuple(row[c] for c in cols))
        for k, batch in by_lane.items():
            _insert(news[k], "webhook_memory_versions", cols, batch)
        cols = [c for c in _columns(src, "webhook_outbox") if c != "seq"]
        rows = [tuple(r) for r in src.execute(
            f"SELECT {', '.join(cols)} FROM webhook_outbox ORDER BY seq")]
        _insert(news[j % lanes], "webhook_outbox", cols, rows)
    return int(news[0].execute("SELECT count(*) FROM webhook_subscriptions").fetchone()[0])


def _new_side_file(path: Path) -> sqlite3.Connection:
    path.unlink(missing_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # it holds subscription secrets
    conn = schema.connect(str(path))
    webhook_db.migrate(conn)
    return conn


def _own_like(model: Path, stores: Sequence[Path], sides: Sequence[Path]) -> None:
    """The new files get the owner of the old lane 0 database (the command
    may run as root for a node that runs as its own user) and its mode; a
    webhook side file stays readable by its owner only."""
    st = os.stat(model)
    for path in (*stores, *sides):
        if os.geteuid() == 0 and (os.stat(path).st_uid, os.stat(path).st_gid) != (
                st.st_uid, st.st_gid):
            os.chown(path, st.st_uid, st.st_gid)
    for path in stores:
        os.chmod(path, st.st_mode & 0o777)


def _tmp(path: Path) -> Path:
    return path.with_name(path.name + ".resizing")


def resize(settings: Settings, to: int, *, expect: str | None = None,
           now: float | None = None) -> dict[str, Any]:
    """Rewrite this stopped node's files for ``to`` lanes; what was done.

    ``expect``: the digest every member's :func:`fingerprint` printed; this
    member's must equal it. The old files are held from the fingerprint to
    the swap, so a node started meanwhile cannot open them."""
    if not 1 <= to <= LANES_MAX:
        raise BadRequest(f"--to must be 1..{LANES_MAX}, got {to}")
    now = time.time() if now is None else now
    finish_interrupted(settings)
    lanes = current_lanes(settings)
    old_files = lane_files(settings, lanes)
    new_files = lane_files(settings, to)
    olds = _open_old(old_files)
    sides_old: list[sqlite3.Connection | None] = []
    try:
        print_ = _fingerprint(olds)
        if expect is not None and print_["digest"] != expect:
            raise Conflict(f"this member's fingerprint is {print_['digest']}, not {expect}: "
                           "the members do not hold the same ops. Start the cluster, let it "
                           "settle (`ai-memory cluster status`), stop it, and compare again")
        if to == lanes:
            raise BadRequest(f"the node already runs {lanes} lane(s)")
        for f in old_files:
            sides_old.append(_hold(f.webhooks) if f.webhooks is not None
                             and f.webhooks.is_file() else None)
        plan = _plan(old_files, new_files, now)  # after every open: their -wal files exist
        info = {"from": lanes, "to": to, "at_ms": int(now * 1000),
                "fingerprint": print_["digest"]}
        counts = _write_new(olds, sides_old, new_files, old_files[0].store, info)
        _write_journal(old_files[0].store, plan)
        _finish(old_files[0].store)  # the old files are still held: no node opens them
    finally:
        for side in sides_old:
            if side is not None:
                side.close()
        for o in olds:
            o.conn.close()
    return {"from": lanes, "to": to, "fingerprint": print_["digest"], "rows": counts,
            "moved_ids": counts.get("lane_moves", 0), "old_files": str(plan["aside"]),
            "databases": [str(f.store) for f in new_files]}


def _write_new(olds: Sequence[_Old], sides_old: Sequence[sqlite3.Connection | None],
               new_files: Sequence[LaneFiles], model: Path,
               info: dict[str, Any]) -> dict[str, int]:
    """Every new lane's files beside the old ones (``*.resizing``), complete,
    owned like ``model`` and on disk; the rows written per table."""
    to = len(new_files)
    news: list[sqlite3.Connection] = []
    sides: list[sqlite3.Connection] = []
    try:
        for f in new_files:
            tmp = _tmp(f.store)
            for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
                p.unlink(missing_ok=True)
            conn = schema.connect(str(tmp))
            news.append(conn)
            schema.migrate(conn)
            if f.webhooks is not None:
                sides.append(_new_side_file(_tmp(f.webhooks)))
        for conn in news:
            conn.execute("BEGIN IMMEDIATE")
        counts = _copy_store(olds, news)
        for k, conn in enumerate(news):
            _meta(olds, conn, k, to, info)
        for conn in news:
            conn.execute("COMMIT")
        if sides:
            for conn in sides:
                conn.execute("BEGIN IMMEDIATE")
            counts["webhook_subscriptions"] = _copy_webhooks(sides_old, sides)
            for conn in sides:
                conn.execute("COMMIT")
        for conn in (*news, *sides):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode = DELETE")  # one self-contained file each
    finally:
        for conn in (*news, *sides):
            conn.close()
    made = [_tmp(b) for f in new_files for b in (f.store, f.webhooks) if b is not None]
    _own_like(model, [_tmp(f.store) for f in new_files],
              [_tmp(f.webhooks) for f in new_files if f.webhooks is not None])
    for path in made:  # on disk before the journal says they are there
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for folder in {p.parent for p in made}:
        _fsync_dir(folder)
    return counts


# -- the swap: a journal, so that an interrupted one is finished, never half left -------------

def journal_path(db: Path) -> Path:
    return db.with_name(db.name + ".resize-journal")


def _family(base: Path) -> list[Path]:
    """A SQLite file and the files beside it that belong to it."""
    return [base, Path(f"{base}-wal"), Path(f"{base}-shm"), Path(f"{base}-journal")]


def _plan(old_files: Sequence[LaneFiles], new_files: Sequence[LaneFiles],
          now: float) -> dict[str, Any]:
    """Every move of the swap, in order: the old files (and any file in the
    way of a new one) into a new folder beside lane 0's database, then each
    new file into its place."""
    first = old_files[0].store
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    aside = first.with_name(f"{first.name}.before-resize-{stamp}")
    n = 1
    while aside.exists():
        aside = first.with_name(f"{first.name}.before-resize-{stamp}-{n}")
        n += 1
    moves: list[tuple[str, str]] = []
    names: set[str] = set()
    bases = [b for f in (*old_files, *new_files) for b in (f.store, f.webhooks) if b is not None]
    for base in dict.fromkeys(bases):  # the old files, then what is in the new ones' way
        for p in _family(base):
            if p.exists():
                if p.name in names:
                    raise Conflict(f"two files named {p.name} would meet in {aside}: keep the "
                                   "webhook side files beside the databases for a resize")
                names.add(p.name)
                moves.append((str(p), str(aside / p.name)))
    for f in new_files:
        for new in (f.store, f.webhooks):
            if new is not None:
                moves.append((str(_tmp(new)), str(new)))
    return {"aside": str(aside), "moves": moves}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_journal(db: Path, plan: dict[str, Any]) -> None:
    tmp = journal_path(db).with_name(journal_path(db).name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(plan, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, journal_path(db))
    _fsync_dir(db.parent)


def _move(src: str, dst: str) -> None:
    """A rename; across file systems a copy, synced before the source goes."""
    try:
        os.replace(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.copy2(src, dst)
        fd = os.open(dst, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(src)


def _finish(db: Path) -> bool:
    """Carry out the journal beside ``db``, if there is one: each move whose
    source is still there (a repeat finds it done); then the journal goes.
    False when there was none."""
    path = journal_path(db)
    if not path.exists():
        return False
    plan = json.loads(path.read_text())
    aside = Path(plan["aside"])
    if not aside.exists():
        aside.mkdir(mode=0o700)  # old side files hold subscription secrets
    dirs = {aside}
    moves = [(src, dst, src.endswith(".resizing")) for src, dst in plan["moves"]]
    # The old files go aside before the first new file moves in, and a new
    # file then stands at an old file's path: once a new file has moved, the
    # moves aside are all done and must not run again (they would take the
    # new files away).
    aside_done = any(new and not os.path.lexists(src) for src, _, new in moves)
    for src, dst, new in moves:
        if not os.path.lexists(src) or (aside_done and not new):
            continue  # done before an interruption
        if new:  # nothing of another file may pair with a new one
            for q in _family(Path(dst)):
                if os.path.lexists(q):
                    _move(str(q), str(aside / f"left-{q.name}-{time.time_ns()}"))
        _move(src, dst)
        dirs.update((Path(src).parent, Path(dst).parent))
    for d in dirs:
        _fsync_dir(d)
    path.unlink()
    _fsync_dir(db.parent)
    return True


def finish_interrupted(settings: Settings) -> bool:
    """Finish a resize of this node that stopped during its swap (every new
    file was complete before the first move); True if there was one."""
    return _finish(Path(settings.store.db_path))


def interrupted(settings: Settings) -> Path | None:
    """The journal of an unfinished resize of this node, if any: such a node
    must not start (``serve`` refuses) until ``lanes resize`` finishes it."""
    path = journal_path(Path(settings.store.db_path))
    return path if path.exists() else None
