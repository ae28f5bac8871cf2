"""``ai-memory lanes resize`` without daemons: the placement rules against the
schema, the renumbering of op ids, the refusals, and the property that
matters: a node of L lanes resized to N holds, lane by lane, what a node of N
lanes that applied the same ops holds (daemon/lanes/resize.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sqlite3
import tempfile
from itertools import product
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from common import ops as K
from common.errors import BadRequest, Conflict
from common.lanes import lane_of, lane_of_id, lanes_of_item
from common.ops import Op
from daemon.lanes import resize as rs
from daemon.lanes.layout import lane_db_path, layout_value
from daemon.settings import load_settings
from store import schema
from store.db import Store
from tests.store.store_opgen import APPLY_NOW, MAILBOX_OF, histories


def _fresh(path: Path) -> sqlite3.Connection:
    conn = schema.connect(str(path))
    schema.migrate(conn)
    return conn


def test_every_table_has_a_rule_and_every_rule_a_table(tmp_path: Path) -> None:
    conn = _fresh(tmp_path / "x.db")
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    conn.close()
    assert rs.unruled(tables) == []
    assert set(rs.RULES) <= set(tables)
    assert rs.unruled([*tables, "msg_new_thing"]) == ["msg_new_thing"]


def test_every_op_id_a_placed_row_carries_is_renumbered(tmp_path: Path) -> None:
    """A column named like a seq in a table whose rows move is an op id:
    STAMPS must name it, or two old lanes' ids would meet on one new lane."""
    conn = _fresh(tmp_path / "x.db")
    for table, rule in rs.RULES.items():
        if rule.how in (rs.FRESH, rs.META, rs.SETTLED):
            continue
        seqs = {r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[1].endswith("seq")}
        assert seqs == {s for _, _, s in rs.STAMPS.get(table, ())}, table
    conn.close()


def test_renumbered_ids_stay_apart_in_order_and_under_the_vector() -> None:
    for lanes in range(1, 5):
        got = {(j, s): rs.renumber(s, j, lanes) for j, s in product(range(lanes), range(1, 40))}
        assert len(set(got.values())) == len(got)  # no two old ids meet
        for j in range(lanes):
            assert [got[(j, s)] for s in range(1, 40)] == sorted(got[(j, s)] for s in range(1, 40))
        vv = rs.renumbered_vv([{"n1": 39, "n2": 3}] * lanes)
        assert max(got.values()) <= vv["n1"] and rs.renumber(3, lanes - 1, lanes) <= vv["n2"]
    assert rs.renumber(0, 1, 2) == 0 and rs.renumber(7, 0, 1) == 7


def test_rows_go_where_their_keys_are() -> None:
    rule = rs.RULES["memory_links"]
    assert rs.row_lanes(rule, {"source_id": "a", "target_id": "b"}, 4, {}) == tuple(
        sorted({lane_of_id("a", 4), lane_of_id("b", 4)}))
    assert rs.row_lanes(rs.RULES["users"], {}, 3, {}) == (0, 1, 2)
    assert rs.row_lanes(rs.RULES["namespace_subscriptions"], {}, 3, {}) == (0,)
    term = rs.RULES["msg_terminal"]
    assert rs.row_lanes(term, {"id": "g1"}, 4, {"g1": 2}) == (2,)
    assert rs.row_lanes(rs.RULES["msg_completion"], {"id": "gone", "mailbox": "mbox:w/p"}, 4,
                        {}) == (lane_of("mbox:w/p", 4),)
    assert rs.row_lanes(term, {"id": "gone"}, 4, {}) == (lane_of_id("gone", 4),)
    marks = rs.merge_marks([
        {"workspace": "w", "project": "p", "id": "h", "max_at_ms": 50, "epoch": -1, "hlc": 0,
         "origin": "", "seq": 0},
        {"workspace": "w", "project": "p", "id": "real", "max_at_ms": 20, "epoch": 1, "hlc": 9,
         "origin": "n1", "seq": 4}])
    assert marks[("w", "p")]["id"] == "real" and marks[("w", "p")]["max_at_ms"] == 50
    placed = rs.place_marks(marks.values(), 3)
    owner = lane_of("mbox:w/p", 3)
    assert placed[owner][0]["seq"] == 4
    assert all(placed[k][0]["seq"] == 0 and placed[k][0]["max_at_ms"] == 50
               for k in range(3) if k != owner)


# -- real files -------------------------------------------------------------------------------

def op_ids_are_unique(db: Path | str) -> None:
    """Every op id a lane's records carry names one op (one clock reading),
    and the lane's version vector covers it: a lane rebuilds ops from its
    records, so two records of one id would be two ops under one id, and an
    id past the vector would be issued again by its origin."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        vv = dict(conn.execute("SELECT origin, watermark FROM vv").fetchall())
        seen: dict[tuple[str, int], int] = {}
        for table, stamps in rs.STAMPS.items():
            for row in conn.execute(f"SELECT * FROM {table}"):
                for hlc, origin, seq in stamps:
                    if row[seq] and row[origin]:
                        key = (row[origin], row[seq])
                        assert seen.setdefault(key, row[hlc]) == row[hlc], (db, table, key)
                        assert row[seq] <= vv.get(row[origin], 0), (db, table, key, vv)
    finally:
        conn.close()


def _numbered_per_lane(ops: list[Op]) -> list[Op]:
    """``ops`` as one lane's replica group numbers them: each origin's 1, 2, 3, ...
    (every lane numbers on its own, so two lanes hold the same ids)."""
    counters: dict[str, int] = {}
    out = []
    for op in sorted(ops, key=lambda o: (o.origin, o.seq)):
        counters[op.origin] = counters.get(op.origin, 0) + 1
        out.append(dataclasses.replace(op, seq=counters[op.origin]))
    return out


async def _build(db: Path, ops: list[Op], lanes: int) -> None:
    """A node of ``lanes`` lanes that applied ``ops``, each on the lanes it belongs to."""
    for j in range(lanes):
        path = lane_db_path(str(db), j)
        store = await Store.open(path, "n1")
        try:
            mine = [op for op in ops if j in lanes_of_item(op.kind, op.key, lanes)]
            await store.apply_ops(_numbered_per_lane(mine), APPLY_NOW)
            if lanes > 1:
                await store.set_lane_layout(layout_value(j, lanes))
            await store.set_cluster_id("c-test" if lanes == 1 else f"c-test.lane{j}of{lanes}p2")
            await store.set_recovering(False)  # a member that has served: settled
        finally:
            await store.close()


_STAMP_FIELDS = ("seq", "claim_seq", "reg_seq")


def _without_ids(value: Any) -> Any:
    """``value`` with every op seq taken out (a resize renumbers them)."""
    if isinstance(value, dict):
        return {k: (_without_ids(v) if k != "rank" else list(v)[:2])
                for k, v in value.items() if k not in _STAMP_FIELDS}
    if isinstance(value, (list, tuple)):
        return [_without_ids(v) for v in value]
    return value


async def _lane_view(path: str) -> dict[str, Any]:
    store = await Store.open(path, "n1")
    try:
        snap = await store.snapshot()
        snap.pop("vv")
        snap["purged"] = {k: [v[0][:2], *v[1:]] for k, v in snap["purged"].items()}
        out = _without_ids(snap)
        out["projects"] = await store.list_projects()
        return out  # type: ignore[no-any-return]
    finally:
        await store.close()


_BY_MESSAGE = {K.MSG_CLAIM, K.MSG_CANCEL, K.MSG_HOLD, K.MSG_RELEASE, K.MSG_APPROVE,
               K.MSG_REJECT, K.MSG_RENEW, K.MSG_EXPIRE, K.MSG_COMPLETE}


def _settled(ops: list[Op]) -> list[Op]:
    """The history as a settled node holds it: every decision on a message
    came with its send (the members hold the same ops), and an id names one
    record (the generator draws ids from tiny pools). (A decision whose
    send no member holds names no mailbox: the resize keeps it on the lane
    its id names.)"""
    sent = {op.body["id"] for op in ops if op.kind == K.MSG_SEND}
    inbox_of: dict[str, str] = {}  # a notification id names one inbox (it is minted for it)
    out = []
    for op in ops:
        if op.kind == K.NOTE_NEW and inbox_of.setdefault(op.body["id"], op.key) != op.key:
            continue
        if op.kind in _BY_MESSAGE:
            if op.body.get("id") not in sent:
                continue
            # a decision is under its message's mailbox (the generator draws any)
            op = dataclasses.replace(op, key=K.mailbox_key(*MAILBOX_OF[op.body["id"]]))
        out.append(op)
    return out


def _as_laned(ops: list[Op]) -> list[Op]:
    """The history as a node with lanes writes it: a purge also hides its
    project on every lane (proj.hide, at the purge's time), and a link is
    written under its target's key too (``memory_lanes.link_items``)."""
    links = [Op(origin="lx", seq=i + 1, hlc=op.hlc, kind=K.LINK_PUT,
                key=K.mem_key(op.body["target_id"]), body=op.body)
             for i, op in enumerate(o for o in ops if o.kind == K.LINK_PUT)]
    return _with_hides(ops) + links


def _with_hides(ops: list[Op]) -> list[Op]:
    hides = [Op(origin="hx", seq=i + 1, hlc=op.hlc, kind=K.PROJ_HIDE,
                key=K.project_key(op.body["workspace"], op.body["project"]),
                body={"id": op.body["id"], "workspace": op.body["workspace"],
                      "project": op.body["project"], "at_ms": op.body["at_ms"]})
             for i, op in enumerate(o for o in ops if o.kind == K.MSG_PURGE)]
    return ops + hides


@pytest.mark.slow  # hypothesis: each example builds and resizes real files
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.sampled_from([(1, 2), (2, 3), (3, 2), (2, 1), (3, 4)]))
def test_a_resized_node_holds_what_a_node_of_the_new_count_holds(
        ops: list[Op], counts: tuple[int, int]) -> None:
    old, new = counts
    ops = _as_laned(_settled(ops))

    async def check() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            db, want_db = Path(tmp) / "a" / "node.db", Path(tmp) / "b" / "node.db"
            db.parent.mkdir()
            want_db.parent.mkdir()
            await _build(db, ops, old)
            await _build(want_db, ops, new)
            for j in range(old):
                conn = sqlite3.connect(lane_db_path(str(db), j))
                deferred = conn.execute("SELECT count(*) FROM ops_deferred").fetchone()[0]
                conn.close()
                assume(deferred == 0)  # a settled node: the resize refuses one with these
            out = rs.resize(load_settings({"db": str(db)}, env={}), new)
            assert out["from"] == old and out["to"] == new
            for k in range(new):
                path = lane_db_path(str(db), k)
                op_ids_are_unique(path)
                assert await _lane_view(path) == await _lane_view(lane_db_path(str(want_db), k))
                conn = sqlite3.connect(path)
                moves = dict(conn.execute("SELECT id, lane FROM lane_moves").fetchall())
                here = [r[0] for r in conn.execute("SELECT id FROM messages UNION ALL "
                                                   "SELECT id FROM notes")]
                layout, cid = (conn.execute(f"SELECT value FROM store_meta WHERE name = '{n}'")
                               .fetchone()[0] for n in ("lane_layout", "cluster_id"))
                conn.close()
                for rid in here:
                    assert (moves.get(rid) == k) == (lane_of_id(rid, new) != k), rid
                assert layout == layout_value(k, new)
                assert cid == ("c-test" if new == 1 else f"c-test.lane{k}of{new}p2")

    asyncio.run(check())


def _node(tmp_path: Path, lanes: int = 2) -> Path:
    db = tmp_path / "node.db"
    asyncio.run(_build(db, [Op("n1", 1, 5, K.SESSION_START, K.project_key("w", "p"), {
        "session_id": "s1", "workspace": "w", "project": "p", "harness": "codex",
        "at_ms": 1, "owner_user": None})], lanes))
    return db


def test_refusals_leave_the_files_as_they_were(tmp_path: Path) -> None:
    db = _node(tmp_path)
    settings_ = load_settings({"db": str(db)}, env={})
    def names() -> list[str]:  # (opening a WAL database may leave its -wal and -shm)
        return sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm")))

    before = names()
    with pytest.raises(BadRequest):
        rs.resize(settings_, 2)  # the count it has
    with pytest.raises(Conflict, match="fingerprint"):
        rs.resize(settings_, 3, expect="0" * 16)
    held = sqlite3.connect(lane_db_path(str(db), 1))  # a running lane holds its file open
    held.execute("PRAGMA journal_mode = WAL")
    held.execute("SELECT 1 FROM store_meta").fetchall()
    held.execute("BEGIN")
    held.execute("SELECT count(*) FROM vv").fetchall()
    try:
        with pytest.raises(Conflict, match="running"):
            rs.resize(settings_, 3)
    finally:
        held.execute("COMMIT")
        held.close()
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO ops_deferred VALUES ('n2', 9, 1, 'msg.claim', 'mbox:w/p', 0, x'')")
    conn.commit()
    conn.close()
    with pytest.raises(Conflict, match="waiting"):
        rs.resize(settings_, 3)
    assert names() == before
    with pytest.raises(BadRequest, match="no database"):
        rs.resize(load_settings({"db": str(tmp_path / "none.db")}, env={}), 3)


def _digest(folder: Path) -> dict[str, str]:
    import hashlib
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file() and not p.name.endswith("-shm")}  # SQLite's scratch index


def test_a_record_one_lane_missed_is_kept_merged_on_every_lane(tmp_path: Path) -> None:
    """A write of a record every lane keeps goes to each lane on its own; one
    whose share to lane 0 failed leaves lane 1 ahead: a key revoked there
    only, a user only there. The resize merges every lane's copy, as the ops
    would (revoked and removed only go up), never just lane 0's."""
    db = _node(tmp_path)
    key = ("k1", "ann", None, None, "h" * 64, 1, 0, 5, "clock", 0)
    for j, revoked in ((0, 0), (1, 1)):
        conn = sqlite3.connect(lane_db_path(str(db), j))
        conn.execute("INSERT INTO api_keys (id, user, agent, label, hash, created_at_ms, revoked,"
                     " hlc, origin, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (*key[:6], revoked, *key[7:]))
        if j == 1:
            conn.execute("INSERT INTO users (name, root, password_hash, removed, created_at_ms,"
                         " hlc, origin, seq) VALUES ('ann', 0, NULL, 0, 1, 5, 'clock', 0)")
        conn.commit()
        conn.close()
    rs.resize(load_settings({"db": str(db)}, env={}), 3)
    for k in range(3):
        conn = sqlite3.connect(lane_db_path(str(db), k))
        assert conn.execute("SELECT revoked FROM api_keys WHERE id = 'k1'").fetchall() == [(1,)]
        assert conn.execute("SELECT name FROM users").fetchall() == [("ann",)]
        conn.close()


def test_each_refusal_changes_no_byte(tmp_path: Path) -> None:
    """A lane still recovering, one of another schema, one holding an op past
    a gap: each is refused, and not a byte of a database changes."""
    db = _node(tmp_path)
    settings_ = load_settings({"db": str(db)}, env={})
    for sql, match in (("UPDATE store_meta SET value = '1' WHERE name = 'recovering'",
                        "recovering"),
                       ("DELETE FROM schema_migrations WHERE version = (SELECT max(version)"
                        " FROM schema_migrations)", "schema"),
                       ("INSERT INTO vv_held (origin, seq) VALUES ('n2', 7)", "gap")):
        lane1 = Path(lane_db_path(str(db), 1))
        conn = sqlite3.connect(lane1)
        conn.execute(sql)
        conn.commit()
        conn.close()
        before = _digest(tmp_path)
        with pytest.raises(Conflict, match=match):
            rs.resize(settings_, 3)
        assert _digest(tmp_path) == before
        for p in tmp_path.glob("node.lane1.db*"):
            p.unlink()
        asyncio.run(_build(db.with_name("fresh.db"), [], 2))  # a clean lane 1 again
        Path(lane_db_path(str(db.with_name("fresh.db")), 1)).rename(lane1)
        for p in tmp_path.glob("fresh*"):
            p.unlink()


def _layout_of(path: str | Path) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(conn.execute("SELECT value FROM store_meta WHERE name = 'lane_layout'"
                                ).fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("crash", ["aside", "first new file in", "every file moved"])
def test_an_interrupted_swap_is_finished_and_serve_waits_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: str) -> None:
    """The swap stops (a power cut) while the old files go aside, after the
    first new file moved in, or after every move but before the journal
    went: `serve` refuses while the journal is there, and finishing gives
    three good new lanes and every old file aside (a first build ran the
    moves aside again after a new file stood at an old file's path, and
    took the new files away: a reviewer's reproduction)."""
    import subprocess
    import sys

    db = _node(tmp_path)
    stale = Path(lane_db_path(str(db), 2))
    stale.write_bytes(b"left from an earlier try")
    Path(f"{stale}-wal").write_bytes(b"not this file's")
    settings_ = load_settings({"db": str(db)}, env={})
    real_move, real_fsync_dir = rs._move, rs._fsync_dir
    done = {"aside": 0, "new": 0}

    def move(src: str, dst: str) -> None:
        new = src.endswith(".resizing")
        if (crash == "aside" and not new and done["aside"] == 3) or (
                crash == "first new file in" and new and done["new"] == 1):
            raise OSError("power cut")
        done["new" if new else "aside"] += 1
        real_move(src, dst)

    def fsync_dir(path: Path) -> None:
        if crash == "every file moved" and done["new"] == 6:  # 3 databases, 3 side files
            raise OSError("power cut")
        real_fsync_dir(path)

    monkeypatch.setattr(rs, "_move", move)
    monkeypatch.setattr(rs, "_fsync_dir", fsync_dir)
    with pytest.raises(OSError, match="power cut"):
        rs.resize(settings_, 3)
    monkeypatch.setattr(rs, "_move", real_move)
    monkeypatch.setattr(rs, "_fsync_dir", real_fsync_dir)
    journal = rs.journal_path(db)
    assert journal.exists()

    if crash == "aside":
        assert not db.exists()  # lane 0's file is already aside
        env = {"PYTHONPATH": str(Path(__file__).resolve().parents[3]), "PATH": "/usr/bin:/bin"}
        served = subprocess.run([sys.executable, "-m", "cli", "serve", "--db", str(db),
                                 "--port", "1"], capture_output=True, text=True, timeout=60,
                                env=env)
        assert served.returncode == 4 and "lanes resize" in served.stderr, served.stderr
        assert not db.exists()  # it created nothing

    assert rs.finish_interrupted(settings_) and not journal.exists()
    assert rs.current_lanes(settings_) == 3
    for k in range(3):
        path = lane_db_path(str(db), k)
        assert _layout_of(path) == layout_value(k, 3)
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
        conn.close()
    assert not Path(f"{stale}-wal").exists()  # the stale WAL went aside with its file
    aside = next(tmp_path.glob("node.db.before-resize-*"))
    assert _layout_of(aside / "node.db") == layout_value(0, 2)
    assert _layout_of(aside / "node.lane1.db") == layout_value(1, 2)
    assert (aside / "node.lane2.db").read_bytes() == b"left from an earlier try"
    assert not rs.finish_interrupted(settings_)  # nothing left to finish


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_the_new_files_belong_to_the_nodes_user(tmp_path: Path) -> None:
    """Run as root for a node that runs as its own user: the new databases
    and side files take the old database's owner and mode (a node could not
    open files root made for it)."""
    db = _node(tmp_path)
    for p in tmp_path.iterdir():
        os.chown(p, 4321, 4321)
    os.chmod(db, 0o640)
    side = Path(f"{db}.webhooks.sqlite")
    out = rs.resize(load_settings({"db": str(db)}, env={}), 3)
    for k in range(3):
        st = os.stat(lane_db_path(str(db), k))
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (4321, 4321, 0o640), k
        side = Path(f"{lane_db_path(str(db), k)}.webhooks.sqlite")
        if side.exists():
            st = os.stat(side)
            assert (st.st_uid, st.st_mode & 0o777) == (4321, 0o600), k
    assert os.stat(out["old_files"]).st_mode & 0o777 == 0o700


def test_the_command_takes_the_nodes_config_as_serve_does(tmp_path: Path) -> None:
    """What systemd runs: `serve --config node.toml`; the resize reads the same
    file, so it finds the databases and the webhook side files (here in a
    folder of their own) where the node keeps them."""
    import json
    import subprocess
    import sys

    data, hooks = tmp_path / "data", tmp_path / "hooks"
    data.mkdir()
    hooks.mkdir()
    db = data / "node.db"
    _node(data)
    for j in range(2):  # the side files a node with [webhooks] db_path keeps
        conn = rs._new_side_file(Path(lane_db_path(str(hooks / "side.sqlite"), j)))
        conn.execute("INSERT INTO webhook_subscriptions (id, url, events, secret,"
                     " created_at_ms) VALUES ('sub1', 'https://x.example/h', '[]', 's', 1)")
        conn.close()
    conf = tmp_path / "node.toml"
    conf.write_text(f'[server]\nlanes = 2\n[store]\ndb = "{db}"\n'
                    f'[webhooks]\ndb_path = "{hooks / "side.sqlite"}"\n')
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[3]), "PATH": "/usr/bin:/bin"}

    def cli(*args: str) -> Any:
        done = subprocess.run([sys.executable, "-m", "cli", "lanes", "resize", "--config",
                               str(conf), "--json", *args], capture_output=True, text=True,
                              timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    digest = cli("--check")["digest"]
    out = cli("--to", "3", "--expect", digest)
    assert out["databases"] == [lane_db_path(str(db), k) for k in range(3)]
    for k in range(3):
        conn = sqlite3.connect(lane_db_path(str(hooks / "side.sqlite"), k))
        assert conn.execute("SELECT id FROM webhook_subscriptions").fetchall() == [("sub1",)]
        conn.close()
