"""Online backup and restore of one node's SQLite file.

Backup: a fresh read-only connection copies the whole database with
SQLite's online backup API in one step (``Connection.backup`` with
``pages=-1``). One step is one read transaction, so the copy is a single
consistent snapshot: every transaction committed before the step began is
in it, none is half in it, and the writer (WAL) is never blocked. What the
copy holds is then read back from the copy itself (its version vector,
incarnation, schema version) after ``PRAGMA integrity_check``, so the
description can never disagree with the file.

Restore: the backup is checked (integrity, an ``ai-memory`` schema), copied
to the target path with the same API (no stray WAL), and given a NEW
incarnation id; the one it had is kept as ``restored_from``. A restored
node is therefore recognisable to its peers as not the node whose promises
they saw (see docs/operations.md). These functions are synchronous and run
on a worker thread.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common.errors import BadRequest, Conflict, Unavailable
from common.randomid import incarnation_id
from store.records import physical_ms


@dataclass(frozen=True, slots=True)
class BackupInfo:
    node_id: str
    incarnation: str
    version_vector: dict[str, int]
    schema_version: int
    max_hlc: int
    oplog_ops: int
    bytes: int
    taken_at_ms: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def new_incarnation_id(conn: sqlite3.Connection | None = None) -> str:
    """An incarnation id for a database made now (:func:`common.randomid.incarnation_id`):
    later than the clock and than every op the database ``conn`` holds, so
    a copy of a peer's history made on a machine whose clock is behind
    still orders after the disk it replaces, as long as that disk wrote no
    op later than the history shows."""
    born = int(time.time() * 1000)
    if conn is not None:
        try:
            row = conn.execute("SELECT value FROM node_meta WHERE name = 'max_hlc'").fetchone()
        except sqlite3.OperationalError:
            row = None
        if row is not None and row[0]:
            born = max(born, physical_ms(int(row[0])) + 1)
    return incarnation_id(born)


def read_incarnation(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute("SELECT value FROM store_meta WHERE name = 'incarnation'").fetchone()
    except sqlite3.OperationalError:  # not an ai-memory database, or before migration 0005
        return None
    return None if row is None else str(row[0])


def describe(conn: sqlite3.Connection) -> dict[str, Any]:
    """What a database file holds: incarnation, version vector, schema, op count."""
    try:
        vv = {str(o): int(w) for o, w in conn.execute("SELECT origin, watermark FROM vv")}
        schema = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
        row = conn.execute("SELECT value FROM node_meta WHERE name = 'max_hlc'").fetchone()
        ops = conn.execute("SELECT count(*) FROM oplog").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise BadRequest(f"not an ai-memory database: {exc}") from None
    return {"incarnation": read_incarnation(conn), "version_vector": vv,
            "schema_version": int(schema or 0), "max_hlc": int(row[0]) if row else 0,
            "oplog_ops": int(ops)}


def _check(conn: sqlite3.Connection, what: str) -> None:
    try:
        result = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        raise BadRequest(f"{what} is not a readable SQLite database: {exc}") from None
    if result != ["ok"]:
        raise BadRequest(f"{what} fails integrity_check: {'; '.join(result[:5])}")


def online_backup(db_path: str, dest: str, node_id: str) -> BackupInfo:
    """Copy the live database at ``db_path`` to the new file ``dest``."""
    started = time.monotonic()
    taken_at_ms = int(time.time() * 1000)
    src = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        out = sqlite3.connect(dest)
        try:
            src.backup(out, pages=-1)
            out.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
            _check(out, "the backup")
            info = describe(out)
        finally:
            out.close()
    except sqlite3.Error as exc:
        raise Unavailable(f"backup failed: {exc}") from None
    finally:
        src.close()
    if not info["incarnation"]:
        raise Unavailable("the database has no incarnation id (migration 0005 missing)")
    return BackupInfo(node_id=node_id, bytes=os.stat(dest).st_size, taken_at_ms=taken_at_ms,
                      seconds=time.monotonic() - started, **info)


def restore(backup: str | Path, db_path: str | Path, *, force: bool = False,
            foreign: bool = False) -> dict[str, Any]:
    """Write ``backup`` as the database ``db_path`` under a new incarnation.
    ``foreign``: the copy is another member's (seeding a member that lost
    its disk), so its promises, which are that member's, are dropped."""
    backup, db_path = Path(backup), Path(db_path)
    if not backup.is_file():
        raise BadRequest(f"no backup file at {backup}")
    leftovers = [p for p in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")) if p.exists()]
    if leftovers and not force:
        raise Conflict(f"{db_path} exists; stop its node and pass --force to replace it")
    src = sqlite3.connect(f"file:{backup}?mode=ro", uri=True)
    try:
        _check(src, str(backup))
        before = describe(src)
        if not before["incarnation"]:
            raise BadRequest(f"{backup} is not an ai-memory backup (no incarnation)")
        for path in leftovers:
            path.unlink()
        db_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = db_path.with_name(db_path.name + ".restoring")
        tmp.unlink(missing_ok=True)
        out = sqlite3.connect(tmp, isolation_level=None)
        try:
            src.backup(out, pages=-1)
            incarnation = new_incarnation_id(out)
            out.execute("BEGIN IMMEDIATE")
            out.execute("UPDATE store_meta SET value = ? WHERE name = 'incarnation'",
                        (incarnation,))
            # The restored member may have promised and accepted more than the
            # copy holds: it recovers (docs/federation.md, "Amnesia") first.
            out.execute("INSERT OR REPLACE INTO store_meta (name, value)"
                        " VALUES ('recovering', '1')")
            out.execute("INSERT INTO store_meta (name, value) VALUES ('restored_from', ?)"
                        " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                        (before["incarnation"],))
            if foreign:
                out.execute("DELETE FROM promises")
            out.execute("COMMIT")
            _check(out, "the restored database")
        finally:
            out.close()
        os.replace(tmp, db_path)
    finally:
        src.close()
    # ``ops``: the operations the copy holds (its version vector's sum, what
    # `backup` reports); ``oplog_ops`` only counts the op-log rows not yet
    # compacted away once every member held them, often 0.
    return {"db": str(db_path), "incarnation": incarnation,
            "restored_from": before["incarnation"], "version_vector": before["version_vector"],
            "ops": sum(before["version_vector"].values()), "oplog_ops": before["oplog_ops"]}
