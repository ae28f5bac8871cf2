"""Read views of the SQLite Store with hand-computed expectations."""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from common import ops as K
from common.ops import Op
from store import queries as Q
from store import schema
from store.db import Store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path / "n.db", "n1")
    yield s
    await s.close()


def note(seq: int, nid: str, *, to: str = "bob", priority: int = 5, created: int = 0,
         expires: int | None = None, origin: str = "n1") -> Op:
    return Op(origin, seq, seq, K.NOTE_NEW, K.inbox_key(to),
              {"id": nid, "from": "alice", "to": to, "namespace": "inbox", "title": nid,
               "payload": "p", "priority": priority, "tier": "short", "created_at_ms": created,
               "expires_at_ms": expires})


async def test_inbox_orders_filters_then_limits(store: Store) -> None:
    ops = [
        note(1, "low-old", priority=2, created=10),
        note(2, "high-old", priority=9, created=10),
        note(3, "high-new", priority=9, created=20),
        note(4, "mid-read", priority=5, created=30),
        note(5, "expired", priority=10, created=40, expires=1000),
        note(6, "other", to="carol", priority=10, created=50),
        Op("n1", 7, 7, K.NOTE_READ, K.inbox_key("bob"), {"to": "bob", "ids": ["mid-read"]}),
    ]
    await store.apply_ops(ops, 0)

    async def ids(**kw: object) -> list[str]:
        rows = await store.inbox("bob", **{"unread_only": False, "limit": 50, "now_ms": 2000,
                                            **kw})  # type: ignore[arg-type]
        return [r["id"] for r in rows]

    assert await ids() == ["high-new", "high-old", "mid-read", "low-old"]
    assert await ids(limit=2) == ["high-new", "high-old"]
    assert await ids(unread_only=True, limit=3) == ["high-new", "high-old", "low-old"]
    assert await ids(min_priority=5, unread_only=True) == ["high-new", "high-old"]
    # since is "after": a notification created at that very instant is left out.
    assert await ids(since_ms=20) == ["mid-read"]
    assert await ids(since_ms=19) == ["high-new", "mid-read"]
    assert await ids(now_ms=999) == ["expired", "high-new", "high-old", "mid-read", "low-old"]
    assert await store.inbox_count("bob", unread_only=True, now_ms=2000) == 3
    assert await store.inbox_count("bob", unread_only=False, now_ms=999) == 5
    row = (await store.inbox("bob", unread_only=False, limit=1, min_priority=5, since_ms=29,
                             now_ms=2000))[0]
    assert row == {"id": "mid-read", "from": "alice", "to": "bob", "namespace": "inbox",
                   "title": "mid-read", "payload": "p", "priority": 5, "tier": "short",
                   "created_at_ms": 30, "expires_at_ms": None, "read": True,
                   "in_reply_to": None, "thread_id": "mid-read"}
    assert [r["id"] for r in await store.notifications(["other", "nope", "low-old"])] == [
        "other", "low-old"]


async def _plan(store: Store, sql: str, params: Any) -> str:
    rows = await store._reads.fetchall("EXPLAIN QUERY PLAN " + sql, params)
    return " | ".join(r["detail"] for r in rows)


_FILTERS = [dict(zip(("min_priority", "since", "tier"), bits, strict=True))
            for bits in itertools.product((False, True), repeat=3)]
_PARAMS = {"agent": "bob", "now": 5, "limit": 50, "min_priority": 1, "since": 0, "tier": "short"}


async def test_every_notes_query_in_the_store_uses_an_index_and_no_sort(store: Store) -> None:
    """Each statement in store/ that reads or changes notes by a key, with
    the indexes migration 0011 leaves (notes_inbox_by_read, notes_by_expiry,
    the primary key): no full scan of notes and no temporary sort."""
    inbox = {f"inbox unread={u} {f}": Q.inbox_sql(unread_only=u, **f)
             for u in (False, True) for f in _FILTERS}
    for name, sql in inbox.items():
        detail = await _plan(store, sql, _PARAMS)
        assert "TEMP B-TREE" not in detail, (name, detail)
        assert detail.count("USING INDEX notes_inbox_by_read") == (1 if "unread=True" in name
                                                                   else 2), (name, detail)
        if "unread=False" in name:
            assert "MERGE (UNION ALL)" in detail, (name, detail)
    counts = {u: "SELECT count(*) FROM notes WHERE to_agent = :agent AND"
                 f" {Q.NOT_EXPIRED}{' AND read = 0' if u else ''}" for u in (False, True)}
    for sql in counts.values():
        assert "USING COVERING INDEX notes_inbox_by_read" in await _plan(store, sql, _PARAMS)
    keyed = {  # apply.py, db.py (notifications, purge_expired)
        "UPDATE notes SET read = 1 WHERE to_agent = ? AND id = ? AND read = 0": ("bob", "x"),
        "SELECT id FROM notes WHERE id IN (?, ?)": ("x", "y"),
        "DELETE FROM notes WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?": (5,),
        "DELETE FROM note_reads WHERE (agent_id, note_id) IN (SELECT to_agent, id"
        " FROM notes WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?)": (5,),
    }
    for sql, params in keyed.items():
        detail = await _plan(store, sql, params)
        assert "SCAN notes" not in detail and "TEMP B-TREE" not in detail, (sql, detail)
    for name in ("notes_inbox", "notes_inbox_unread", "notes_inbox_count"):
        assert not await store._reads.fetchall(
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (name,))


async def test_inbox_pages_equal_the_plain_sorted_query(store: Store) -> None:
    """The merged shape returns exactly what the one-statement query with a
    sort returns, for every filter, on a mixed inbox (read and unread, ties
    on priority and time, expired rows, other recipients)."""
    rng = random.Random(7)
    ops: list[Op] = []
    for i in range(300):
        ops.append(note(i + 1, f"n{i:03d}", to=rng.choice(("bob", "bob", "carol")),
                        priority=rng.randrange(1, 4), created=rng.randrange(0, 20),
                        expires=rng.choice((None, None, 3, 50))))
        if rng.random() < 0.2:
            ops[-1].body["tier"] = "long"
    reads = [o.body["id"] for o in ops if rng.random() < 0.4]
    ops.append(Op("n1", 301, 301, K.NOTE_READ, "inbox:bob", {"to": "bob", "ids": reads}))
    await store.apply_ops(ops, 0)
    checked = 0
    for unread in (False, True):
        for f in _FILTERS:
            for limit in (1, 7, 500):
                kw: dict[str, Any] = {"unread_only": unread, "limit": limit, "now_ms": 10}
                where = ["to_agent = :agent", Q.NOT_EXPIRED] + (["read = 0"] if unread else [])
                if f["min_priority"]:
                    kw["min_priority"] = 2
                    where.append("priority >= :min_priority")
                if f["since"]:
                    kw["since_ms"] = 8
                    where.append("created_at_ms > :since")  # "after": exclusive
                if f["tier"]:
                    kw["tier"] = "long"
                    where.append("tier = :tier")
                plain = await store._reads.fetchall(
                    f"SELECT {Q.NOTE_COLS} FROM notes WHERE {' AND '.join(where)}"
                    " ORDER BY priority DESC, created_at_ms DESC, id DESC LIMIT :limit",
                    {"agent": "bob", "now": 10, "limit": limit, "min_priority": 2, "since": 8,
                     "tier": "long"})
                got = await store.inbox("bob", **kw)
                assert got == [Q.note(r) for r in plain], (unread, f, limit)
                checked += bool(got)
    assert checked >= 40


async def test_purge_expired_removes_rows_and_a_resent_copy_stays_out(store: Store) -> None:
    short = note(1, "short", expires=100)
    await store.apply_ops([short, note(2, "keep"),
                           Op("n1", 3, 3, K.NOTE_READ, "inbox:bob", {"to": "bob",
                                                                      "ids": ["short"]})], 0)
    assert await store.purge_expired(100) == 1
    assert [n["id"] for n in await store.notifications(["short", "keep"])] == ["keep"]
    assert await store.apply_ops([short], 200) == []
    retry = note(1, "short", expires=100, origin="n2")
    assert await store.apply_ops([retry], 200) == [retry]  # logged, but not shown
    assert await store.notifications(["short"]) == []
    assert (await store.stats())["tables"]["note_reads"] == 0


async def test_ops_missing_pages_by_origin_then_seq(store: Store) -> None:
    ops = [note(s, f"{o}{s}", origin=o) for o in ("b", "a", "c") for s in (1, 2, 3)]
    await store.apply_ops(ops, 0)
    got = await store.ops_missing({"a": 1, "c": 3}, 3)
    assert [o.op_id for o in got] == [("a", 2), ("a", 3), ("b", 1)]
    assert got[0] == ops[4]  # bodies and every field round-trip
    assert await store.ops_missing({"a": 3, "b": 3, "c": 3}, 10) == []
    assert [o.op_id for o in await store.ops_missing({}, 100)] == sorted(o.op_id for o in ops)


async def test_ops_for_key_and_gc(store: Store) -> None:
    put = Op("n1", 1, 10, K.MEM_PUT, K.mem_key("m"), {"id": "m", "title": "t"})
    dele = Op("n2", 1, 20, K.MEM_DEL, K.mem_key("m"), {"id": "m"})
    other = Op("n1", 2, 30, K.MEM_PUT, K.mem_key("z"), {"id": "z", "title": "z"})
    late = Op("n3", 1, 40, K.MEM_PUT, K.mem_key("m"), {"id": "m", "title": "again"})
    await store.apply_ops([put, dele, other], 0)
    assert await store.ops_for_key(K.mem_key("m")) == [put, dele]
    assert await store.ops_for_key(K.mem_key("m"), {"n1": 1}) == [dele]
    assert await store.gc({"n1": 1, "n2": 1}) == 2
    assert await store.ops_for_key(K.mem_key("m")) == []
    assert await store.apply_ops([put, dele], 0) == []
    assert await store.apply_ops([late], 0) == [late]
    assert await store.get_memory("m", now_ms=0) is None
    assert (await store.get_memory("z", now_ms=0) or {})["title"] == "z"
    tables = (await store.stats())["tables"]
    assert tables["oplog"] == 2 and tables["mem_tombstones"] == 1 and tables["memories"] == 1


async def test_mailbox_fifo_agent_filter_and_claim_by_request(store: Store) -> None:
    def send(seq: int, mid: str, to_agent: str | None = None) -> Op:
        return Op("n1", seq, 100 - seq, K.MSG_SEND, K.mailbox_key("w", "p"),
                  {"id": mid, "to_workspace": "w", "to_project": "p", "to_agent": to_agent,
                   "from_workspace": "w", "from_project": "a", "from_agent": "other",
                   "subject": mid, "body": "b", "nature": "unknown", "created_at_ms": seq})
    claim = Op("n2", 1, 500, K.MSG_CLAIM, K.mailbox_key("w", "p"),
               {"id": "m3", "claimer_session": "s", "claimer_agent": "codex",
                "request_id": "req", "at_ms": 7}, epoch=3)
    # hlc decreases with seq: mailbox order is by hlc, not arrival
    await store.apply_ops([send(1, "m1"), send(2, "m2", "codex"), send(3, "m3"),
                           send(4, "m4", "claude"), claim], 0)
    pending = await store.mailbox_pending("w", "p", limit=10)
    assert [m["id"] for m in pending] == ["m4", "m2", "m1"]
    assert [m["id"] for m in await store.mailbox_pending("w", "p", limit=10, agent="codex")] == [
        "m2", "m1"]
    assert await store.mailbox_pending_count("w", "p") == 3
    assert [m["id"] for m in await store.outbox("w", "a", limit=2)] == ["m4", "m2"]
    assert len(await store.outbox("w", "a", limit=10, pending_only=False)) == 4
    assert [m["id"] for m in await store.mailbox_messages("w", "p", limit=2, offset=1)] == [
        "m2", "m3"]
    claimed = await store.claim_by_request("w", "p", "req")
    assert claimed is not None and claimed["id"] == "m3"
    assert claimed["state"] == "claimed" and claimed["claimed_by_agent"] == "codex"
    assert claimed["epoch"] == 3 and claimed["claimed_at_ms"] == 7 and claimed["order"] == [97, "n1"]
    assert await store.claim_by_request("w", "q", "req") is None
    assert pending[0]["state"] == "pending" and pending[0]["epoch"] == 0


async def test_projects_sessions_agents(store: Store) -> None:
    def start(seq: int, sid: str, proj: str, harness: str, at: int) -> Op:
        return Op("n1", seq, seq, K.SESSION_START, K.project_key("w", proj),
                  {"workspace": "w", "project": proj, "harness": harness, "session_id": sid,
                   "owner_user": "u", "at_ms": at})
    await store.apply_ops([
        start(1, "s1", "p", "codex", 10), start(2, "s2", "q", "claude", 20),
        start(3, "s1", "p", "codex", 30), start(4, "s3", "p", "claude", 5),
        Op("n1", 5, 5, K.AGENT_SEEN, K.agent_key("bob"), {"agent_id": "bob", "at_ms": 99}),
        Op("n2", 1, 6, K.AGENT_REG, K.agent_key("bob"),
           {"agent_id": "bob", "agent_type": "ai", "capabilities": ["x"], "registered_at_ms": 9}),
        Op("n3", 1, 7, K.AGENT_SEEN, K.agent_key("eve"), {"agent_id": "eve", "at_ms": 1}),
    ], 0)
    assert await store.get_session("s1") == {
        "workspace": "w", "project": "p", "harness": "codex", "session_id": "s1",
        "owner_user": "u", "started_at_ms": 10, "last_at_ms": 30}
    assert await store.get_session("nope") is None
    assert await store.project_exists("w", "q") and not await store.project_exists("w", "z")
    assert await store.project_harnesses("w", "p") == {"codex", "claude"}
    assert await store.last_active_project() == ("w", "p")
    assert await store.list_projects() == [
        {"workspace": "w", "project": "p", "harnesses": ["claude", "codex"], "first_at_ms": 5,
         "last_active_at_ms": 30},
        {"workspace": "w", "project": "q", "harnesses": ["claude"], "first_at_ms": 20,
         "last_active_at_ms": 20}]
    # A miss is not remembered: the project exists as soon as a session starts there.
    await store.apply_ops([start(6, "s4", "z", "codex", 40)], 0)
    assert await store.project_exists("w", "z") and await store.project_exists("w", "z")
    assert await store.list_agents() == [
        {"agent_id": "bob", "agent_type": "ai", "capabilities": ["x"], "registered_at_ms": 9,
         "last_seen_at_ms": 99}]
    assert await store.get_agent("eve") is None  # seen but never registered


async def test_memories_filters_and_expiry(store: Store) -> None:
    def put(seq: int, mid: str, **body: object) -> Op:
        return Op("n1", seq, seq, K.MEM_PUT, K.mem_key(mid), {"id": mid, **body})
    await store.apply_ops([
        put(1, "a", namespace="x", tags=["t1", "t2"], priority=7, updated_at_ms=1),
        put(2, "b", namespace="x", tags=["t1"], priority=3, updated_at_ms=2, agent_id="al"),
        put(3, "c", namespace="y", tags=["t2", "t1"], updated_at_ms=3, expires_at_ms=50),
        put(4, "a", namespace="x", tags=["t1", "t2"], priority=8, updated_at_ms=4,
            metadata={"k": [1, 2]}, confidence=0.25),
    ], 0)

    async def ids(**kw: object) -> list[str]:
        rows = await store.list_memories(**{"limit": 10, "now_ms": 0, **kw})  # type: ignore[arg-type]
        return [r["id"] for r in rows]

    assert await ids() == ["a", "c", "b"]
    assert await ids(tags=["t1", "t2"]) == ["a", "c"]
    assert await ids(namespace="x", min_priority=5) == ["a"]
    assert await ids(agent_id="al") == ["b"]
    assert await ids(now_ms=50) == ["a", "b"]
    assert await ids(limit=1, offset=1) == ["c"]
    a = await store.get_memory("a", now_ms=0)
    assert a is not None and a["priority"] == 8 and a["metadata"] == {"k": [1, 2]}
    assert a["confidence"] == 0.25 and a["tags"] == ["t1", "t2"]
    assert await store.get_memory("c", now_ms=50) is None


async def test_a_database_from_before_0011_migrates_and_reads_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node upgraded in place: its notes, written under the three old
    indexes, read the same after 0011 swaps them for one."""
    path = tmp_path / "old.db"
    every = schema.migrations()
    # Every migration but 0011 (the later ones add columns today's code writes).
    monkeypatch.setattr(schema, "migrations", lambda: [m for m in every if m.version != 11])
    old = await Store.open(path, "n1")
    ops = [note(i + 1, f"n{i:02d}", priority=i % 3, created=i, expires=None if i % 4 else 9)
           for i in range(40)]
    ops.append(Op("n1", 41, 41, K.NOTE_READ, "inbox:bob",
                  {"to": "bob", "ids": [f"n{i:02d}" for i in range(0, 40, 3)]}))
    await old.apply_ops(ops, 0)

    async def pages(s: Store) -> list[Any]:
        return [await s.inbox("bob", unread_only=u, limit=lim, now_ms=5) for u in (False, True)
                for lim in (5, 100)] + [await s.inbox_count("bob", unread_only=u, now_ms=5)
                                        for u in (False, True)]
    async def indexes(s: Store) -> set[str]:
        return {r[0] for r in await s._reads.fetchall(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'notes'"
            " AND name NOT LIKE 'sqlite_%'")}
    assert await indexes(old) == {"notes_inbox", "notes_inbox_unread", "notes_inbox_count",
                                  "notes_by_expiry", "notes_by_thread"}
    before = await pages(old)
    await old.close()
    monkeypatch.undo()
    new = await Store.open(path, "n1")
    try:
        assert await pages(new) == before
        assert await indexes(new) == {"notes_inbox_by_read", "notes_by_expiry", "notes_by_thread"}
    finally:
        await new.close()
