"""Merge laws of the reference replica (store/in_memory.py), by hypothesis.

Same op multiset in any order, with any duplication and any batching, gives
the same snapshot; replicas that sync by version vector converge; the
monotone states (claimed/cancelled, read, deleted) never revert.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from common import ops as K
from common.ops import Op
from store.in_memory import Replica
from tests.store.store_opgen import APPLY_NOW, histories, shuffled_batches

LAWS = settings(max_examples=150, deadline=None)


def replica_of(*batches: list[Op], now_ms: int = APPLY_NOW) -> Replica:
    r = Replica()
    for batch in batches:
        r.apply(batch, now_ms)
    return r


@LAWS
@given(st.data())
def test_order_duplication_and_batching_do_not_matter(data: st.DataObject) -> None:
    ops = data.draw(histories())
    reference = replica_of(ops).snapshot()
    batches = data.draw(shuffled_batches(ops))
    assert replica_of(*batches).snapshot() == reference


@LAWS
@given(st.data())
def test_merge_is_associative_through_intermediate_replicas(data: st.DataObject) -> None:
    ops = data.draw(histories())
    a_part = data.draw(st.lists(st.sampled_from(ops), unique_by=lambda o: o.op_id)) if ops else []
    b_part = [o for o in ops if o not in a_part]
    # (A + B) then C == A + (B + C), with C the whole history re-sent
    left = replica_of(a_part)
    left.apply(b_part, APPLY_NOW)
    left.apply(ops, APPLY_NOW)
    right_inner = replica_of(b_part)
    right_inner.apply(ops, APPLY_NOW)
    right = replica_of(a_part)
    right.apply(right_inner.ops_missing({}, 10_000), APPLY_NOW)
    assert left.snapshot() == right.snapshot() == replica_of(ops).snapshot()


@LAWS
@given(st.data())
def test_replicas_converge_by_exchanging_what_the_other_lacks(data: st.DataObject) -> None:
    ops = data.draw(histories())
    parts = [data.draw(st.lists(st.sampled_from(ops))) if ops else [] for _ in range(3)]
    for op in ops:  # every op reaches at least one replica
        if not any(op in p for p in parts):
            parts[data.draw(st.integers(0, 2))].append(op)
    nodes = [replica_of(p) for p in parts]
    for a in nodes:  # one round of pairwise pushes reaches everyone
        for b in nodes:
            if a is not b:
                b.apply(a.ops_missing(b.version_vector(), 10_000), APPLY_NOW)
    for a in nodes:
        for b in nodes:
            if a is not b:
                b.apply(a.ops_missing(b.version_vector(), 10_000), APPLY_NOW)
    snaps = [n.snapshot() for n in nodes]
    assert snaps[0] == snaps[1] == snaps[2] == replica_of(ops).snapshot()


@LAWS
@given(st.data())
def test_claimed_cancelled_read_deleted_never_revert(data: st.DataObject) -> None:
    ops = data.draw(histories())
    order = data.draw(st.permutations(ops))
    r = Replica()
    prev_terminal: set[str] = set()
    prev_read_views: set[tuple[str, str]] = set()
    prev_deleted: set[str] = set()
    for op in order:
        r.apply([op], APPLY_NOW)
        snap = r.snapshot()
        terminal, deleted = set(snap["terminals"]), set(snap["tombstones"])
        assert prev_terminal <= terminal and prev_deleted <= deleted
        for mid in terminal:
            # Decided for good, unless a hold or release outranks the terminal
            # op: then it was never acknowledged and is void (common.lifecycle).
            msg = r.message(mid)
            assert msg is None or msg["state"] in ("claimed", "cancelled", "rejected") or (
                not r.terminal_stands(mid)
                and msg["state"] in ("pending", "editing", "awaiting_approval"))
        for mid in deleted:
            assert r.get_memory(mid, now_ms=0) is None
        shown = {(a, n["id"]): n["read"] for a in ("alice", "bob")
                 for n in r.inbox(a, unread_only=False, limit=100, now_ms=APPLY_NOW)}
        read_views = {k for k, read in shown.items() if read}
        assert prev_read_views & shown.keys() <= read_views
        prev_terminal, prev_read_views, prev_deleted = terminal, read_views, deleted


@LAWS
@given(st.data())
def test_removed_users_and_revoked_keys_never_come_back(data: st.DataObject) -> None:
    ops = data.draw(histories())
    order = data.draw(st.permutations(ops))
    r = Replica()
    removed: set[str] = set()
    revoked: set[str] = set()
    for op in order:
        r.apply([op], APPLY_NOW)
        snap = r.snapshot()
        now_removed = {n for n, u in snap["users"].items() if u["removed"]}
        now_revoked = {k for k, key in snap["apikeys"].items() if key["revoked"]}
        assert removed <= now_removed and revoked <= now_revoked
        removed, revoked = now_removed, now_revoked
    # the final state says removed/revoked exactly when some op did
    assert removed == {op.body["name"] for op in ops
                       if op.kind == "user.put" and op.body["removed"]}
    assert revoked == {op.body["id"] for op in ops
                       if op.kind == "apikey.put" and op.body["revoked"]}


def test_read_mark_before_notification_still_applies() -> None:
    mark = Op("n1", 1, 10, K.NOTE_READ, K.inbox_key("bob"), {"to": "bob", "ids": ["x"]})
    note = Op("n2", 1, 20, K.NOTE_NEW, K.inbox_key("bob"),
              {"id": "x", "from": "alice", "to": "bob", "title": "t", "payload": "p",
               "priority": 5, "tier": "short", "created_at_ms": 1, "expires_at_ms": None})
    r = replica_of([mark], [note])
    assert r.inbox("bob", unread_only=True, limit=10, now_ms=0) == []
    assert r.inbox("bob", unread_only=False, limit=10, now_ms=0)[0]["read"] is True


def test_a_mark_by_another_agent_does_not_read_my_notification() -> None:
    note = Op("n2", 1, 20, K.NOTE_NEW, K.inbox_key("bob"),
              {"id": "x", "from": "alice", "to": "bob", "priority": 5, "created_at_ms": 1})
    mark = Op("n1", 1, 30, K.NOTE_READ, K.inbox_key("eve"), {"to": "eve", "ids": ["x"]})
    r = replica_of([note, mark])
    assert r.inbox("bob", unread_only=True, limit=10, now_ms=0)[0]["id"] == "x"


def test_put_after_delete_never_resurrects_even_after_gc() -> None:
    put1 = Op("n1", 1, 10, K.MEM_PUT, K.mem_key("m"), {"id": "m", "title": "a"})
    dele = Op("n1", 2, 20, K.MEM_DEL, K.mem_key("m"), {"id": "m"})
    late = Op("n2", 1, 30, K.MEM_PUT, K.mem_key("m"), {"id": "m", "title": "b"})
    r = replica_of([put1, dele])
    assert r.gc({"n1": 2}) == 2
    r.apply([late, put1], 0)
    assert r.get_memory("m", now_ms=0) is None
    assert r.ops_missing({}, 10) == [late]


def test_gc_keeps_ids_covered_so_resent_ops_are_skipped() -> None:
    ops = [Op("n1", s, s, K.AGENT_SEEN, K.agent_key("a"), {"agent_id": "a", "at_ms": s})
           for s in (1, 2, 3)]
    r = replica_of(ops)
    assert r.gc({"n1": 2}) == 2
    assert r.apply(ops, 0) == []
    assert r.ops_for_key(K.agent_key("a")) == [ops[2]]
    assert r.version_vector() == {"n1": 3}


def test_version_vector_holds_gaps_until_filled() -> None:
    op = [Op("n1", s, s, K.AGENT_SEEN, K.agent_key("a"), {"agent_id": "a", "at_ms": s})
          for s in (1, 2, 3, 4)]
    r = replica_of([op[0], op[2], op[3]])
    assert r.version_vector() == {"n1": 1} and r.max_seq("n1") == 4
    assert [o.op_id for o in r.ops_missing({"n1": 0}, 10)] == [("n1", 1), ("n1", 3), ("n1", 4)]
    r.apply([op[1]], 0)
    assert r.version_vector() == {"n1": 4}


def test_highest_ranked_terminal_decides_and_pending_never_returns() -> None:
    send = Op("n1", 1, 10, K.MSG_SEND, K.mailbox_key("w", "p"),
              {"id": "g", "to_workspace": "w", "to_project": "p", "subject": "s", "body": "b"})
    claim = Op("n1", 2, 30, K.MSG_CLAIM, K.mailbox_key("w", "p"),
               {"id": "g", "claimer_session": "s1", "request_id": "r1", "at_ms": 3}, epoch=2)
    cancel = Op("n2", 1, 40, K.MSG_CANCEL, K.mailbox_key("w", "p"),
                {"id": "g", "by_workspace": "w", "by_project": "q", "at_ms": 4}, epoch=1)
    for order in ([send, claim, cancel], [cancel, claim, send], [claim, send, cancel]):
        r = replica_of(order)
        msg = r.message("g")
        assert msg is not None and msg["state"] == "claimed" and msg["epoch"] == 2
        assert r.claim_by_request("w", "p", "r1") == msg
        assert r.mailbox_pending("w", "p", limit=10) == []


def test_expired_notification_is_hidden_purged_and_not_revived() -> None:
    note = Op("n1", 1, 10, K.NOTE_NEW, K.inbox_key("bob"),
              {"id": "x", "from": "a", "to": "bob", "created_at_ms": 1, "expires_at_ms": 100})
    r = replica_of([note], now_ms=50)
    assert len(r.inbox("bob", unread_only=False, limit=5, now_ms=99)) == 1
    assert r.inbox("bob", unread_only=False, limit=5, now_ms=100) == []
    assert r.purge_expired(100) == 1
    assert r.apply([note], 200) == []
    retry = Op("n2", 1, 20, K.NOTE_NEW, K.inbox_key("bob"), dict(note.body))
    assert r.apply([retry], 200) == [retry]
    assert r.notifications(["x"]) == []


# -- purge (issue 27) ----------------------------------------------------------

MB_WP = K.mailbox_key("w", "p")


def _send(mid: str, origin: str, seq: int, hlc: int, epoch: int = 1) -> Op:
    # Epoch 1 by default: the purges' term, where the HLC orders decisions.
    return Op(origin, seq, hlc, K.MSG_SEND, MB_WP,
              {"id": mid, "to_workspace": "w", "to_project": "p", "subject": "s",
               "body": f"secret {mid}", "created_at_ms": hlc}, epoch)


def _purge(origin: str, seq: int, hlc: int, at_ms: int, pid: str = "pg") -> Op:
    return Op(origin, seq, hlc, K.MSG_PURGE, MB_WP,
              {"id": pid, "workspace": "w", "project": "p", "scope": "project",
               "by_user": "root", "reason": None, "at_ms": at_ms}, epoch=1)


def _session(sid: str, origin: str, seq: int, hlc: int, at_ms: int) -> Op:
    return Op(origin, seq, hlc, K.SESSION_START, K.project_key("w", "p"),
              {"workspace": "w", "project": "p", "harness": "codex", "session_id": sid,
               "owner_user": None, "at_ms": at_ms})


@LAWS
@given(st.data())
def test_purge_is_idempotent_and_commutes_with_sends_claims_and_sessions(
        data: st.DataObject) -> None:
    # Sends before and after the purge (by HLC), a claim of an old one, a
    # session on either side, the claimed one's completion: every order,
    # duplicated, gives one state, in which exactly the sends ranked below
    # the purge are gone (the completion's outcome and note with them).
    ops = [_send("old1", "n1", 1, 10), _send("old2", "n2", 1, 11), _send("new", "n2", 2, 40),
           Op("n1", 2, 12, K.MSG_CLAIM, MB_WP,
              {"id": "old1", "claimer_session": "s", "request_id": "r1", "at_ms": 12}, epoch=1),
           Op("n2", 4, 14, K.MSG_COMPLETE, MB_WP,
              {"id": "old1", "result": "done", "note": "secret note", "by_session": "s",
               "at_ms": 14, "claim_epoch": 1, "claim_rank": [1, 12, "n1", 2]}),
           _purge("n3", 1, 30, at_ms=30), _purge("n3", 2, 31, at_ms=31, pid="pg2"),
           _session("s-old", "n1", 3, 13, at_ms=13), _session("s-new", "n2", 3, 45, at_ms=45)]
    reference = replica_of(ops).snapshot()
    batches = data.draw(shuffled_batches(ops))
    r = replica_of(*batches)
    assert r.snapshot() == reference
    assert r.message("old1") is None and r.message("old2") is None
    assert r.message("new") is not None and r.message("new")["state"] == "pending"
    assert r.get_session("s-old") is None and r.get_session("s-new") is not None
    assert "secret old1" not in repr(r.snapshot()) and "secret old2" not in repr(r.snapshot())
    # A purged message keeps no outcome: its completion keeps only its rank.
    assert [(c["purged"], c["result"], c["note"]) for c in r.snapshot()["completions"].values()] \
        == [(1, "", None)]
    r.apply([_purge("n3", 2, 31, at_ms=31, pid="pg2")], APPLY_NOW)  # again: nothing changes
    assert r.snapshot() == reference


def test_a_lower_copy_of_a_purged_send_is_judged_again() -> None:
    high, low = _send("g", "n2", 1, 50), _send("g", "n1", 1, 5)
    p = _purge("n3", 1, 30, at_ms=30)
    for order in ([high, p, low], [low, p, high], [p, high, low], [p, low, high]):
        r = replica_of(order)
        assert r.message("g") is None and r.is_purged("g")  # the lowest copy is below
    r = replica_of([p, high])
    assert r.message("g") is not None  # only the copy above the mark is known


def test_a_later_terms_copy_above_the_mark_outranks_an_older_terms_copy_below_it() -> None:
    # Simulator seeds 7789 and 5769: a deposed owner's copy of a send (epoch
    # 1, never on a majority) and the copy a later owner decided after its
    # purge (epoch 2): the later term's copy wins, so the message stays, in
    # every order; with no later copy the old one is purged.
    stale, fresh = _send("g", "n1", 1, 5, epoch=1), _send("g", "n2", 2, 31, epoch=2)
    p = _purge("n2", 1, 30, at_ms=30)
    p = Op(p.origin, p.seq, p.hlc, p.kind, p.key, p.body, 2)
    hold = Op("n2", 3, 32, K.MSG_HOLD, MB_WP, {"id": "g", "holder_session": "e",
                                                "at_ms": 32}, 2)
    old_hold = Op("n1", 2, 6, K.MSG_HOLD, MB_WP, {"id": "g", "holder_session": "d",
                                                   "at_ms": 6}, 1)
    ops = [stale, fresh, p, hold, old_hold]
    reference = replica_of(ops).snapshot()
    for order in itertools.permutations(ops):
        r = replica_of(list(order))
        assert r.snapshot() == reference, order
        got = r.message("g")
        assert got is not None and got["order"][0] == 31 and got["state"] == "editing", order
        assert not r.is_purged("g")
    r = replica_of([old_hold, p, stale])
    assert r.message("g") is None and r.is_purged("g") and r.snapshot()["holds"] == {}


def test_approval_decisions_are_judged_against_the_mark_like_holds() -> None:
    # The approval queue beside the later term's copy: an approve decided on
    # the deposed owner's copy (before the mark) goes with the purge; one
    # decided on the later term's copy (after the mark) stays, in every
    # order, in the replica, the SQLite store and the owner's model. With no
    # later copy the message is purged and its old decision gone.
    import asyncio
    import os
    import tempfile

    from federation.mailbox import MailboxModel
    from store.db import Store

    def gated(op: Op) -> Op:
        return Op(op.origin, op.seq, op.hlc, op.kind, op.key,
                  {**op.body, "approval_required": True}, op.epoch)

    stale = gated(_send("g", "n1", 1, 5, epoch=1))
    fresh = gated(_send("g", "n2", 2, 31, epoch=2))
    p = _purge("n2", 1, 30, at_ms=30)
    p = Op(p.origin, p.seq, p.hlc, p.kind, p.key, p.body, 2)
    old_ok = Op("n1", 2, 6, K.MSG_APPROVE, MB_WP, {"id": "g", "by_user": "ann", "at_ms": 6}, 1)
    new_ok = Op("n2", 3, 32, K.MSG_APPROVE, MB_WP, {"id": "g", "by_user": "bob", "at_ms": 32}, 2)
    old_no = Op("n1", 3, 7, K.MSG_REJECT, MB_WP, {"id": "g", "by_user": "ann", "at_ms": 7}, 1)
    ops = [stale, fresh, p, old_ok, new_ok]
    reference = replica_of(ops).snapshot()
    assert [row["by_user"] for row in reference["decisions"].values()] == ["bob"]
    for order in itertools.permutations(ops):
        r = replica_of(list(order))
        assert r.snapshot() == reference, order
        got = r.message("g")
        assert got is not None and got["state"] == "pending", order
        model = MailboxModel(MB_WP)
        model.apply(list(order))
        assert model.state("g") == "pending"
        decided = model.decision_op("g")
        assert decided is not None and decided.body["by_user"] == "bob"
    gone = [old_ok, old_no, p, stale]
    r = replica_of(gone)
    assert r.message("g") is None and r.is_purged("g") and r.snapshot()["decisions"] == {}
    model = MailboxModel(MB_WP)
    model.apply(gone)
    assert model.is_purged("g") and model.decision_op("g") is None

    async def sqlite(batches: list[list[Op]]) -> dict[str, object]:
        with tempfile.TemporaryDirectory() as tmp:
            store = await Store.open(os.path.join(tmp, "node.db"), "n1")
            try:
                for b in batches:
                    await store.apply_ops(b, APPLY_NOW)
                return await store.snapshot()
            finally:
                await store.close()
    for order in ([stale, old_ok, p, fresh, new_ok], [new_ok, p, old_ok, fresh, stale],
                  [fresh, new_ok, old_ok, stale, p]):
        assert asyncio.run(sqlite([[op] for op in order])) == reference, order
    for order in (gone, gone[::-1], [p, old_no, stale, old_ok]):
        assert asyncio.run(sqlite([[op] for op in order])) == replica_of(gone).snapshot()
        r = replica_of(*[[op] for op in order])
        assert r.snapshot() == replica_of(gone).snapshot()
        assert r.snapshot()["decisions"] == {}


def test_a_project_whose_every_session_is_older_than_its_purge_is_gone() -> None:
    r = replica_of([_session("s1", "n1", 1, 10, at_ms=10), _purge("n2", 1, 20, at_ms=20)])
    assert not r.project_exists("w", "p") and r.list_projects() == []
    r.apply([_session("s2", "n1", 2, 30, at_ms=30)], APPLY_NOW)
    assert r.project_exists("w", "p")
    assert r.list_projects()[0]["first_at_ms"] == 20  # no earlier than the purge
