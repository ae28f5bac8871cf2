"""Row counts of every table of every SQLite file in a node's data
directory (the store, the op log, the webhook side database), read through a
separate read-only connection. A request that was refused must leave them
unchanged."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def row_counts(data_dir: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for db in sorted(data_dir.glob("*.db")):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            tables = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%'")]
            for t in tables:
                counts[f"{db.name}:{t}"] = conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]
        finally:
            conn.close()
    assert counts, f"no SQLite tables under {data_dir}"
    return counts


def written(data_dir: Path) -> dict[str, int]:
    """:func:`row_counts`, with each op log counted by its per-origin
    high-water marks instead of its rows: the log is garbage-collected in
    the background (its row count may fall at any moment), while a write
    always moves a high-water mark."""
    counts = {k: v for k, v in row_counts(data_dir).items() if not k.endswith(":oplog")}
    for db in sorted(data_dir.glob("*.db")):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            has_vv = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vv'").fetchone()
            rows = conn.execute("SELECT origin, watermark FROM vv").fetchall() if has_vv else []
        finally:
            conn.close()
        counts.update({f"{db.name}:oplog high-water:{origin}": mark for origin, mark in rows})
    return counts
