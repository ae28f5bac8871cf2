"""An owner rebuilds its mailbox model at takeover from the merged state,
because the op log is collected once every member holds it. Regression: a
takeover after GC used to see the claims but none of the sends."""

from __future__ import annotations

from pathlib import Path

from common.ops import MSG_CANCEL, MSG_CLAIM, MSG_SEND, Op, mailbox_key
from federation.mailbox import MailboxModel
from store.db import Store

KEY = mailbox_key("default", "proj-b")


def send(seq: int, mid: str) -> Op:
    return Op("node1", seq, 1000 + seq, MSG_SEND, KEY, {
        "id": mid, "to_workspace": "default", "to_project": "proj-b", "to_agent": None,
        "from_workspace": "default", "from_project": "proj-a", "from_agent": "kimi",
        "from_owner_user": None, "subject": None, "body": f"body {mid}", "nature": "unknown",
        "evidence": None, "created_at_ms": 5}, 1025)


async def test_state_ops_after_gc_rebuild_the_same_model(tmp_path: Path) -> None:
    ops = [send(i + 1, f"m{i}") for i in range(5)]
    ops.append(Op("node2", 1, 2000, MSG_CLAIM, KEY, {
        "id": "m1", "claimer_session": "s", "claimer_agent": "claude", "request_id": "r1",
        "at_ms": 9}, 2048))
    ops.append(Op("node2", 2, 2001, MSG_CANCEL, KEY, {
        "id": "m3", "by_workspace": "default", "by_project": "proj-a", "at_ms": 10}, 2048))
    store = await Store.open(tmp_path / "n.db", "node3")
    try:
        await store.apply_ops(ops, now_ms=10)
        assert await store.gc({"node1": 5, "node2": 2}) > 0
        assert await store.ops_for_key(KEY) == []
        rebuilt = await store.mailbox_state_ops("default", "proj-b", history_max=100)
    finally:
        await store.close()
    want, got = MailboxModel(KEY), MailboxModel(KEY)
    want.apply(ops)
    got.apply(rebuilt)
    assert got.pending_count() == want.pending_count() == 3
    assert got.first_pending(None, {}) == want.first_pending(None, {}) == "m0"
    assert got.claim_by_request("r1") == "m1"
    for mid in ("m0", "m1", "m2", "m3", "m4"):
        assert got.state(mid) == want.state(mid)
        assert got.message(mid)["body"] == f"body {mid}"


async def test_pull_heads_answer_in_sync_callers_and_never_hide_ops(tmp_path: Path) -> None:
    from common.ops import NOTE_NEW, inbox_key

    key = inbox_key("bob")

    def note(origin: str, seq: int) -> Op:
        return Op(origin, seq, 5000 + seq, NOTE_NEW, key, {
            "id": f"{origin}-{seq}", "from": "a", "to": "bob", "namespace": "_inbox/bob",
            "title": "t", "payload": "p", "priority": 5, "tier": "long", "created_at_ms": 1,
            "expires_at_ms": None})

    store = await Store.open(tmp_path / "n.db", "node1")
    try:
        await store.apply_ops([note("node1", s) for s in (1, 2, 3)], now_ms=10)
        assert await store.ops_for_key(key, {"node1": 3}) == []
        assert [o.seq for o in await store.ops_for_key(key, {"node1": 1})] == [2, 3]
        await store.apply_ops([note("node2", 1)], now_ms=10)
        # A new origin the caller has never heard of is not hidden.
        assert [o.op_id for o in await store.ops_for_key(key, {"node1": 3})] == [("node2", 1)]
    finally:
        await store.close()
    reopened = await Store.open(tmp_path / "n.db", "node1")
    try:  # heads are rebuilt from the log at open
        assert [o.op_id for o in await reopened.ops_for_key(key, {"node1": 3})] == [("node2", 1)]
        assert await reopened.ops_for_key(key, {"node1": 3, "node2": 1}) == []
    finally:
        await reopened.close()
