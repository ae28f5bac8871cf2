"""Opening a database file and bringing its schema up to date.

Migrations are the files ``store/migrations/NNNN_name.sql``, applied in
number order. Each one runs inside its own transaction together with the
row that records it in ``schema_migrations``, so a crash mid-migration
leaves the file at the previous version and the next open retries it.
Opening an up-to-date file changes nothing.

Connection settings: WAL journal (readers never block the writer),
``synchronous=NORMAL`` (a commit survives the process being killed; only
power loss can take back the last transactions), a busy timeout for the
rare moment two connections want the same lock.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from importlib import resources

from common import limits

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
BUSY_TIMEOUT_MS = limits.store_busy_timeout_ms


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """Every migration shipped with the package, in version order."""
    found = []
    for entry in (resources.files("store") / "migrations").iterdir():
        m = _NAME.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration numbers in store/migrations: {versions}")
    return found


def configure(conn: sqlite3.Connection, *, readonly: bool = False) -> None:
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if readonly:
        conn.execute("PRAGMA query_only = 1")
        return
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise RuntimeError(f"could not switch the database to WAL (got {mode!r})")
    conn.execute("PRAGMA synchronous = NORMAL")


def connect(path: str) -> sqlite3.Connection:
    """The write connection: autocommit mode, transactions are explicit."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    configure(conn)
    return conn


def in_use(path: str) -> bool:
    """Does another connection (a running node) hold the database at ``path``
    open? Every open WAL connection keeps a shared lock on the file, so an
    exclusive lock taken without waiting fails while one exists."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def migrate(conn: sqlite3.Connection) -> list[int]:
    """Apply pending migrations; return the versions applied now."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
    )
    done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    applied = []
    for mig in migrations():
        if mig.version in done:
            continue
        script = (
            "BEGIN IMMEDIATE;\n"
            f"{mig.sql}\n;\n"
            f"INSERT INTO schema_migrations (version, name) VALUES ({mig.version}, '{mig.name}');\n"
            "COMMIT;"
        )
        try:
            conn.executescript(script)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied.append(mig.version)
    return applied
