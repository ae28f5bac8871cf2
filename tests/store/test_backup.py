"""Incarnation ids, online backup and restore on real SQLite files."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from common.errors import BadRequest, Conflict
from common.ops import AGENT_SEEN, Op, agent_key
from common.randomid import incarnation_born_ms
from store.backup import describe, online_backup, restore
from store.db import Store


async def test_every_database_gets_its_own_incarnation_and_keeps_it(tmp_path: Path) -> None:
    a = await Store.open(tmp_path / "a.db", "n1")
    b = await Store.open(tmp_path / "b.db", "n1")
    try:
        inc_a, inc_b = await a.incarnation(), await b.incarnation()
    finally:
        await a.close()
        await b.close()
    assert inc_a != inc_b
    born_a, born_b = incarnation_born_ms(inc_a), incarnation_born_ms(inc_b)
    assert born_a is not None and born_b is not None and born_a <= born_b  # ordered by birth
    again = await Store.open(tmp_path / "a.db", "n1")
    try:
        assert await again.incarnation() == inc_a  # reopening is not a new incarnation
    finally:
        await again.close()


async def test_backup_then_restore_is_a_new_incarnation_with_the_same_contents(
        tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "live.db", "n1")
    try:
        ops = [Op(origin="n1", seq=i, hlc=1000 + i, kind=AGENT_SEEN, key=agent_key(f"a{i}"),
                  body={"agent_id": f"a{i}", "at_ms": 1000 + i}) for i in range(1, 51)]
        assert len(await store.apply_ops(ops, now_ms=2000)) == 50
        original = await store.incarnation()
        info = online_backup(store.path, str(tmp_path / "copy.db"), "n1")
        assert info.incarnation == original and info.version_vector == store.version_vector()
    finally:
        await store.close()
    with pytest.raises(Conflict):
        restore(tmp_path / "copy.db", tmp_path / "live.db")
    result = restore(tmp_path / "copy.db", tmp_path / "restored.db")
    assert result["restored_from"] == original and result["incarnation"] != original
    back = await Store.open(tmp_path / "restored.db", "n1")
    try:
        assert await back.incarnation() == result["incarnation"]
        assert back.version_vector() == info.version_vector
    finally:
        await back.close()


async def test_a_restored_incarnation_orders_after_the_history_it_holds(tmp_path: Path) -> None:
    # A copy of a history written by clocks ahead of this machine's (the
    # history's latest op an hour from now): the restored disk still orders
    # after the one it replaces, which wrote into that history.
    ahead_ms = int(time.time() * 1000) + 3_600_000
    store = await Store.open(tmp_path / "live.db", "n1")
    try:
        op = Op(origin="n1", seq=1, hlc=ahead_ms << 16, kind=AGENT_SEEN, key=agent_key("a"),
                body={"agent_id": "a", "at_ms": 1})
        assert await store.apply_ops([op], now_ms=2000)
        original = await store.incarnation()
        online_backup(store.path, str(tmp_path / "copy.db"), "n1")
    finally:
        await store.close()
    restored = restore(tmp_path / "copy.db", tmp_path / "restored.db")["incarnation"]
    born = incarnation_born_ms(restored)
    assert born is not None and born > ahead_ms
    assert born > (incarnation_born_ms(original) or 0)


def test_restore_refuses_what_is_not_a_sound_ai_memory_backup(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(BadRequest):
        restore(junk, tmp_path / "x.db")
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(BadRequest):
        restore(other, tmp_path / "x.db")
    assert not (tmp_path / "x.db").exists()
    conn = sqlite3.connect(other)
    try:
        with pytest.raises(BadRequest):
            describe(conn)
    finally:
        conn.close()


async def test_restore_counts_the_ops_the_copy_holds_not_the_op_log_rows_left(
        tmp_path: Path) -> None:
    """Once every member holds them, op-log rows are compacted away: a backup of
    42 ops may hold no op-log row, and `restore` still says 42 (it said 0)."""
    from click.testing import CliRunner

    from cli.main import cli

    store = await Store.open(tmp_path / "live.db", "n1")
    try:
        ops = [Op(origin="n1", seq=i, hlc=1000 + i, kind=AGENT_SEEN, key=agent_key(f"a{i}"),
                  body={"agent_id": f"a{i}", "at_ms": 1000 + i}) for i in range(1, 43)]
        assert len(await store.apply_ops(ops, now_ms=2000)) == 42
        assert await store.gc({"n1": 42}) == 42
        info = online_backup(store.path, str(tmp_path / "copy.db"), "n1")
    finally:
        await store.close()
    assert info.oplog_ops == 0 and info.version_vector == {"n1": 42}
    result = restore(tmp_path / "copy.db", tmp_path / "a.db")
    assert result["ops"] == 42 and result["oplog_ops"] == 0
    printed = CliRunner().invoke(cli, ["restore", str(tmp_path / "copy.db"), "--db",
                                       str(tmp_path / "b.db")])
    assert printed.exit_code == 0, printed.output
    assert ": restored 42 ops in its version vector as incarnation " in printed.output


async def test_collected_floor_says_what_the_log_no_longer_holds_and_a_restore_must_recover(
        tmp_path: Path) -> None:
    """What a member's hello reports (daemon/replication/joining.py): per origin,
    the seq up to which GC emptied the op log; and the vector of a copy that
    must recover (store.db.copy_to_recover), None for a live database."""
    from store.db import copy_to_recover

    def op(origin: str, seq: int) -> Op:
        return Op(origin=origin, seq=seq, hlc=1000 + seq, kind=AGENT_SEEN,
                  key=agent_key(f"{origin}{seq}"), body={"agent_id": "a", "at_ms": 1000 + seq})

    store = await Store.open(tmp_path / "live.db", "n1")
    try:
        ops = [op("n1", i) for i in range(1, 11)] + [op("n2", i) for i in range(1, 6)]
        await store.apply_ops([*ops, op("n3", 7)], now_ms=2000)  # n3: held past a gap only
        assert await store.collected_floor() == {}
        assert await store.gc({"n1": 4, "n2": 5}) == 9
        assert await store.collected_floor() == {"n1": 4, "n2": 5}  # n2: all of it
        await store.set_recovering(False)  # a member that has recovered
        online_backup(store.path, str(tmp_path / "copy.db"), "n1")
    finally:
        await store.close()
    assert copy_to_recover(tmp_path / "live.db") is None
    assert copy_to_recover(tmp_path / "nothing.db") is None
    restore(tmp_path / "copy.db", tmp_path / "restored.db")
    assert copy_to_recover(tmp_path / "restored.db") == {"n1": 10, "n2": 5}
