"""Ops of kinds this build does not know: kept, forwarded, applied once a build knows them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import ops as K
from common.ops import NOTE_NEW, Op, inbox_key
from store import apply as A
from store.db import Store

KIND = "widget.put"


def widget(seq: int, name: str) -> Op:
    return Op(origin="n2", seq=seq, hlc=100 + seq, kind=KIND, key=f"widget:{name}",
              body={"name": name})


def note(seq: int) -> Op:
    return Op(origin="n2", seq=seq, hlc=100 + seq, kind=NOTE_NEW, key=inbox_key("bob"),
              body={"id": f"note-{seq}", "from": "alice", "to": "bob", "namespace": None,
                    "title": "hi", "payload": "p", "priority": 5, "tier": "mid",
                    "created_at_ms": 1, "expires_at_ms": None})


@pytest.fixture
def forget_widget() -> Iterator[None]:
    yield
    K._registered.discard(KIND)
    A._APPLY.pop(KIND, None)


def widgets(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM widgets")}
    except sqlite3.OperationalError:
        return set()
    finally:
        conn.close()


async def test_an_unknown_kind_is_logged_and_forwarded_not_applied_then_replayed(
        tmp_path: Path, forget_widget: None) -> None:
    db = tmp_path / "n1.db"
    store = await Store.open(db, "n1")
    try:
        new = await store.apply_ops([note(1), widget(2, "a"), note(3), widget(4, "b")], 1000)
        assert [op.seq for op in new] == [1, 2, 3, 4]  # the batch went through whole
        assert store.version_vector() == {"n2": 4}
        forwarded = await store.ops_missing({}, limit=10)
        assert [op.kind for op in forwarded].count(KIND) == 2  # anti-entropy still carries them
    finally:
        await store.close()
    assert widgets(db) == set()
    conn = sqlite3.connect(db)
    try:  # the known kinds around them were applied
        assert {r[0] for r in conn.execute("SELECT id FROM notes")} == {"note-1", "note-3"}
        assert conn.execute("SELECT count(*) FROM ops_deferred").fetchone()[0] == 2
    finally:
        conn.close()

    def apply_widget(conn: sqlite3.Connection, op: Op, now_ms: int) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS widgets (name TEXT PRIMARY KEY)")
        conn.execute("INSERT OR IGNORE INTO widgets VALUES (?)", (op.body["name"],))

    A.register(KIND, apply_widget)  # the "newer build" opens the same file
    again = await Store.open(db, "n1")
    await again.close()
    assert widgets(db) == {"a", "b"}
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM ops_deferred").fetchone()[0] == 0
    finally:
        conn.close()
