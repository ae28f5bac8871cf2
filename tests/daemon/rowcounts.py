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
