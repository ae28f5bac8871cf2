"""The writer task, migrations and the lifecycle of a Store file."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from common import ops as K
from common.errors import BadRequest, Unavailable
from common.ops import Op
from store.db import Store
from store.schema import migrations


def seen_op(origin: str, seq: int, agent: str = "a") -> Op:
    return Op(origin, seq, seq * 10, K.AGENT_SEEN, K.agent_key(agent),
              {"agent_id": agent, "at_ms": seq})


async def test_concurrent_callers_share_transactions(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1")
    try:
        results = await asyncio.gather(*(store.apply_ops([seen_op(f"o{i % 7}", i // 7 + 1)], 0)
                                         for i in range(200)))
        assert all(len(r) == 1 for r in results)
        stats = (await store.stats())["writer"]
        assert stats["jobs"] == 200
        # the first job starts alone; the other 199 pile up behind it
        assert stats["batches"] <= 10 and stats["largest_batch"] >= 100
        assert sum(store.version_vector().values()) == 200
    finally:
        await store.close()
    reopened = await Store.open(tmp_path / "n.db", "n1")
    try:
        assert sum(reopened.version_vector().values()) == 200
        assert len(await reopened.ops_missing({}, 1000)) == 200
    finally:
        await reopened.close()


async def test_batch_size_is_bounded(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1", batch_max=16)
    try:
        await asyncio.gather(*(store.apply_ops([seen_op("o", i)], 0) for i in range(1, 101)))
        stats = (await store.stats())["writer"]
        assert stats["largest_batch"] == 16 and stats["batches"] >= 100 // 16
    finally:
        await store.close()


async def test_full_queue_refuses_instead_of_dropping(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1", queue_max=4)
    try:
        results = await asyncio.gather(
            *(store.apply_ops([seen_op("o", i)], 0) for i in range(1, 41)),
            return_exceptions=True)
        refused = [r for r in results if isinstance(r, Unavailable)]
        accepted = [r[0] for r in results if isinstance(r, list)]
        assert refused and accepted and len(refused) + len(accepted) == 40
        assert refused[0].details["limit"] == "writer_queue_max"
        assert refused[0].retryable and refused[0].status == 503
        held = {op.op_id for op in await store.ops_missing({}, 100)}
        assert held == {op.op_id for op in accepted}
    finally:
        await store.close()


async def test_a_malformed_job_fails_alone(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1")
    try:
        bad = Op("o", 1, 10, K.NOTE_NEW, K.inbox_key("b"), {"id": "x"})  # no from/to
        good = seen_op("p", 1)
        res = await asyncio.gather(store.apply_ops([bad], 0), store.apply_ops([good], 0),
                                   return_exceptions=True)
        assert isinstance(res[0], BadRequest) and res[1] == [good]
        assert (await store.stats())["writer"]["batches"] == 1  # same batch, still isolated
        assert store.version_vector() == {"p": 1}
        assert await store.ops_missing({}, 10) == [good]
    finally:
        await store.close()


async def test_close_drains_queued_writes_and_refuses_new_ones(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1")
    pending = [asyncio.ensure_future(store.apply_ops([seen_op("o", i)], 0)) for i in range(1, 51)]
    await asyncio.sleep(0)
    await store.close()
    assert all(len(p.result()) == 1 for p in pending)
    with pytest.raises(Unavailable):
        await store.apply_ops([seen_op("o", 99)], 0)
    reopened = await Store.open(tmp_path / "n.db", "n1")
    try:
        assert reopened.version_vector() == {"o": 50}
    finally:
        await reopened.close()


async def test_migrations_apply_once(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    for _ in range(3):
        store = await Store.open(path, "n1")
        await store.close()
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version")
        assert [tuple(r) for r in rows] == [(m.version, m.name) for m in migrations()]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_state_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    store = await Store.open(path, "n1")
    await store.apply_ops([seen_op("n1", 1), seen_op("n1", 2), seen_op("n2", 3)], 0)
    await store.set_promised(K.mailbox_key("w", "p"), 4)
    await store.set_promised(K.mailbox_key("w", "p"), 2)  # only ever raises
    await store.close()
    store = await Store.open(path, "n1")
    try:
        core = await store.load_core_state()
        assert core.vv == {"n1": 2}
        assert core.own_max_seq == 2 and store.max_seq("n2") == 3
        assert core.max_hlc == 30
        assert core.promises == {K.mailbox_key("w", "p"): 4}
        assert await store.get_promised(K.mailbox_key("w", "p")) == 4
        assert await store.get_promised(K.mailbox_key("w", "q")) == 0
        assert await store.apply_ops([seen_op("n2", 3)], 0) == []  # held ids survive too
    finally:
        await store.close()


async def test_an_unencodable_body_fails_its_job_only(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1")
    try:
        bad = Op("o", 1, 10, K.AGENT_SEEN, K.agent_key("a"),
                 {"agent_id": "a", "at_ms": 1, "extra": {1, 2}})  # a set: not msgpack
        good = seen_op("p", 1, agent="b")
        res = await asyncio.gather(store.apply_ops([bad], 0), store.apply_ops([good], 0),
                                   return_exceptions=True)
        assert isinstance(res[0], BadRequest) and res[1] == [good]
        assert store.version_vector() == {"p": 1}
        assert (await store.snapshot())["agents"] == {"b": (None, None, None, 1)}
    finally:
        await store.close()


def note_op(origin: str, seq: int, nid: str, **body: object) -> Op:
    return Op(origin, seq, seq * 10, K.NOTE_NEW, K.inbox_key("bob"),
              {"id": nid, "from": "alice", "to": "bob", "title": nid, **body})


async def test_a_note_sqlite_refuses_fails_its_job_only(tmp_path: Path) -> None:
    """A job's notes merge in one executemany; a note SQLite refuses there
    (an integer past 64 bits: msgpack packs it, SQLite cannot store it)
    sends the batch to the isolated pass, where its job alone is refused,
    the good note of the same job included, and the neighbours commit."""
    store = await Store.open(tmp_path / "n.db", "n1")
    try:
        good = [[note_op("p", 2 * i + 1, f"g{i}a"), note_op("p", 2 * i + 2, f"g{i}b")]
                for i in range(4)]
        bad = [note_op("o", 1, "ok-but-same-job"), note_op("o", 2, "huge", priority=2 ** 63)]
        reads = [Op("r", 1, 5, K.NOTE_READ, K.inbox_key("bob"), {"to": "bob", "ids": ["g0a"]})]
        res = await asyncio.gather(*(store.apply_ops(g, 0) for g in good[:2]),
                                   store.apply_ops(bad, 0), store.apply_ops(reads, 0),
                                   *(store.apply_ops(g, 0) for g in good[2:]),
                                   return_exceptions=True)
        assert isinstance(res[2], BadRequest), res[2]
        assert [r for i, r in enumerate(res) if i != 2] == [*good[:2], reads, *good[2:]]
        stats = (await store.stats())["writer"]
        assert stats["batches"] == 1 and stats["failed_batches"] == 0
        page = await store.inbox("bob", unread_only=False, limit=50, now_ms=0)
        assert sorted((n["id"], n["read"]) for n in page) == sorted(
            (f"g{i}{x}", (i, x) == (0, "a")) for i in range(4) for x in "ab")
        assert store.version_vector() == {"p": 8, "r": 1}
        assert len(await store.ops_missing({}, 100)) == 9
    finally:
        await store.close()


async def test_a_call_job_sees_the_notes_of_earlier_jobs_in_its_batch(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1")
    try:
        res = await asyncio.gather(
            store.apply_ops([note_op("p", 1, "first")], 0),
            store._writer.call(lambda c: c.execute("SELECT count(*) FROM notes").fetchone()[0]),
            store.apply_ops([note_op("p", 2, "second")], 0))
        assert res[1] == 1
        assert (await store.stats())["writer"]["batches"] == 1
    finally:
        await store.close()


async def test_ops_missing_stops_at_the_op_that_uses_up_the_byte_budget(tmp_path: Path) -> None:
    def big(origin: str, seq: int) -> Op:
        return Op(origin, seq, seq, K.MEM_PUT, K.mem_key(f"{origin}-{seq}"),
                  {"id": f"{origin}-{seq}", "content": "x" * 10_000})

    store = await Store.open(tmp_path / "n.db", "n1")
    try:
        await store.apply_ops([big(o, s) for o in ("a", "b") for s in range(1, 5)], 0)
        ids = [o.op_id for o in await store.ops_missing({}, 100, 25_000)]
        assert ids == [("a", 1), ("a", 2), ("a", 3)]  # 20 KB left room; the third used it up
        ids = [o.op_id for o in await store.ops_missing({"a": 3}, 100, 25_000)]
        assert ids == [("a", 4), ("b", 1), ("b", 2)]  # the budget runs on across origins
        assert [o.op_id for o in await store.ops_missing({}, 100, 1)] == [("a", 1)]  # never empty
        assert [o.op_id for o in await store.ops_missing({}, 2, 10 ** 9)] == [("a", 1), ("a", 2)]
        assert len(await store.ops_missing({}, 100)) == 8  # no budget: no cut
    finally:
        await store.close()


async def test_the_byte_budget_counts_a_key_in_bytes_not_characters(tmp_path: Path) -> None:
    # Keys of 3,000 four-byte characters: 12 KB each in bytes, 3 KB in
    # characters, with the same name in the body (12 KB packed). A budget of
    # 40 KB takes two such ops (24 KB each); counting the key's characters
    # (15 KB an op) it would take three.
    def wide(seq: int) -> Op:
        name = "\U0001f600" * 3000 + str(seq)
        return Op("a", seq, seq, K.MEM_PUT, K.mem_key(name), {"id": name})

    store = await Store.open(tmp_path / "n.db", "n1")
    try:
        await store.apply_ops([wide(s) for s in range(1, 9)], 0)
        ids = [o.op_id for o in await store.ops_missing({}, 100, 40_000)]
        assert ids == [("a", 1), ("a", 2)]
        assert [o.op_id for o in await store.ops_missing({}, 100, 40_000, upto={"a": 1})] == [
            ("a", 1)]
        assert await store.ops_missing({}, 100, upto={"b": 5}) == []  # "a" not named: none
    finally:
        await store.close()


async def test_a_small_batch_commits_on_the_event_loop(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1", inline_ops_max=8)
    try:
        for i in range(1, 6):  # one at a time: each batch holds one op
            await store.apply_ops([seen_op("o", i)], 0)
        stats = (await store.stats())["writer"]
        assert stats["batches"] == 5 and stats["inline_batches"] == 5
        # a write the caller marks small commits there too; any other call goes to the thread
        await store.set_promised("mbox:w/p", 3)
        assert (await store.stats())["writer"]["inline_batches"] == 6
        await store.gc({"o": 2})
        stats = (await store.stats())["writer"]
        assert stats["batches"] == 7 and stats["inline_batches"] == 6
    finally:
        await store.close()
    reopened = await Store.open(tmp_path / "n.db", "n1")  # inline commits are as durable
    try:
        assert reopened.version_vector() == {"o": 5}
        assert await reopened.get_promised("mbox:w/p") == 3
    finally:
        await reopened.close()


async def test_a_batch_over_the_inline_limit_goes_to_the_writer_thread(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1", inline_ops_max=4)
    try:
        await store.apply_ops([seen_op("o", i) for i in range(1, 5)], 0)  # 4 ops: inline
        await store.apply_ops([seen_op("o", i) for i in range(5, 10)], 0)  # 5 ops: thread
        stats = (await store.stats())["writer"]
        assert stats["batches"] == 2 and stats["inline_batches"] == 1
        assert store.version_vector() == {"o": 9}
    finally:
        await store.close()


async def _checkpoints(store: Store, want: int) -> dict[str, int]:
    """The writer's stats once it has run ``want`` checkpoints (each runs
    just after the batch that crossed the mark was answered)."""
    for _ in range(200):
        stats: dict[str, int] = (await store.stats())["writer"]
        if stats["checkpoints"] >= want:
            return stats
        await asyncio.sleep(0.01)
    raise AssertionError(f"{want} checkpoints expected, {stats['checkpoints']} ran")


async def test_the_writer_checkpoints_the_wal_itself(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1", checkpoint_ops=10)
    try:
        probe = sqlite3.connect(tmp_path / "n.db")  # another connection keeps the default
        assert probe.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
        probe.close()
        for i in range(1, 10):
            await store.apply_ops([seen_op("o", i)], 0)
        await asyncio.sleep(0.05)
        assert (await store.stats())["writer"]["checkpoints"] == 0
        await store.apply_ops([seen_op("o", 10)], 0)
        first = (await _checkpoints(store, 1))["checkpoint_frames"]
        assert first > 0
        # the next mark is as many ops as write about 1,000 frames at that rate
        assert store._writer._checkpoint_ops == 10 * 1000 // first
        # what was checkpointed is in the database file itself
        copy = tmp_path / "copy.db"
        copy.write_bytes((tmp_path / "n.db").read_bytes())  # the file alone, without its WAL
        conn = sqlite3.connect(copy)
        try:
            assert conn.execute("SELECT watermark FROM vv WHERE origin = 'o'").fetchone()[0] == 10
        finally:
            conn.close()
    finally:
        await store.close()


async def test_ops_committed_on_the_thread_count_towards_the_checkpoint(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1", checkpoint_ops=50)
    try:
        await store.apply_ops([seen_op("o", i) for i in range(1, 61)], 0)  # one job, 60 ops
        assert (await _checkpoints(store, 1))["inline_batches"] == 0
    finally:
        await store.close()


def _note(seq: int) -> Op:
    return Op("o", seq, seq * 10, K.NOTE_NEW, K.inbox_key("b"),
              {"id": f"n{seq}", "from": "a", "to": "b", "title": "t", "priority": 5,
               "created_at_ms": seq})


async def test_writes_of_unbounded_size_go_to_the_thread_and_are_checkpointed(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "n.db", "n1", inline_ops_max=8)
    try:
        await store.apply_ops([_note(1)], 0)
        purge = Op("o", 2, 20, K.MSG_PURGE, K.mailbox_key("w", "p"),
                   {"workspace": "w", "project": "p", "id": "purge-1"})
        await store.apply_ops([purge], 0)  # a purge scans its whole mailbox
        stats = await _checkpoints(store, 1)
        assert stats["batches"] == 2 and stats["inline_batches"] == 1
        # a read mark per id: 9 ids are over the inline limit of 8 ops
        read = Op("o", 3, 30, K.NOTE_READ, K.inbox_key("b"), {"to": "b", "ids": [f"n{i}" for i in range(9)]})
        await store.apply_ops([read], 0)
        stats = (await store.stats())["writer"]
        assert stats["batches"] == 3 and stats["inline_batches"] == 1
        await store.gc({"o": 1})  # GC: any number of rows
        assert (await _checkpoints(store, 2))["inline_batches"] == 1
    finally:
        await store.close()


async def test_a_cancelled_writer_answers_the_batch_in_hand_and_the_queued_jobs(
        tmp_path: Path) -> None:
    # The writer task cancelled (a loop torn down before close()) while a
    # batch runs on its thread: its callers and those still queued got no
    # answer at all and waited for good (review, 2026-12-04).
    import time

    store = await Store.open(tmp_path / "n.db", "n1")
    writer = store._writer
    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    def slow(conn: sqlite3.Connection) -> int:
        loop.call_soon_threadsafe(started.set)
        time.sleep(0.3)
        return 1
    in_hand = asyncio.ensure_future(writer.call(slow))  # not small: on the thread
    await started.wait()
    queued = asyncio.ensure_future(store.apply_ops([seen_op("o", 1)], 0))
    await asyncio.sleep(0)
    assert writer._task is not None
    writer._task.cancel()
    try:
        for fut in (in_hand, queued):
            with pytest.raises(Unavailable):
                await asyncio.wait_for(fut, 5)
        with pytest.raises(Unavailable):  # and nothing new is taken
            await store.apply_ops([seen_op("o", 2)], 0)
    finally:
        await store.close()
