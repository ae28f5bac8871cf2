"""The merge rule of ``msg.complete`` and of the thread fields, by hand
(the hypothesis laws and the SQLite equivalence cover them on random
histories too): the first completion by (hlc, origin, seq) wins in any
order, on both stores, and shows only while the message is claimed."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from common import ops as K
from common.ops import Op
from store.db import Store
from store.in_memory import Replica

BOX = K.mailbox_key("ws", "b")


def send(seq: int, hlc: int, **extra: Any) -> Op:
    body = {"id": "m1", "to_workspace": "ws", "to_project": "b", "to_agent": None,
            "from_workspace": "ws", "from_project": "a", "from_agent": "other",
            "from_owner_user": None, "subject": "s", "body": "b", "nature": "unknown",
            "evidence": None, "created_at_ms": 1, **extra}
    return Op("n1", seq, hlc, K.MSG_SEND, BOX, body, 1)


def claim(seq: int, hlc: int) -> Op:
    return Op("n1", seq, hlc, K.MSG_CLAIM, BOX, {
        "id": "m1", "claimer_session": None, "claimer_agent": "codex", "claimer_key": "k1",
        "claimer_agent_id": "worker", "request_id": "r1", "at_ms": 2}, 1)


def done(origin: str, seq: int, hlc: int, result: str) -> Op:
    return Op(origin, seq, hlc, K.MSG_COMPLETE, BOX, {
        "id": "m1", "result": result, "note": f"{result} note", "by_session": None,
        "by_agent": "codex", "by_key": "k1", "by_agent_id": "worker", "from_workspace": "ws",
        "from_project": "a", "at_ms": hlc}, 0)


def test_the_first_completion_wins_in_any_order() -> None:
    ops = [send(1, 10), claim(2, 20), done("n2", 1, 40, "blocked"), done("n3", 1, 30, "done")]
    for order in itertools.permutations(ops):
        r = Replica()
        r.apply(list(order), 0)
        view = r.message("m1")
        assert view is not None and view["state"] == "claimed"
        assert view["completion"]["result"] == "done", order
        assert view["claimed_by_key"] == "k1" and view["claimed_by_agent_id"] == "worker"


def test_a_completion_shows_only_while_claimed() -> None:
    r = Replica()
    r.apply([send(1, 10), done("n2", 1, 30, "done")], 0)
    view = r.message("m1")
    assert view is not None and view["state"] == "pending" and view["completion"] is None
    r.apply([claim(2, 20)], 0)
    view = r.message("m1")
    assert view is not None and view["completion"]["result"] == "done"


def test_thread_fields_default_to_the_message_itself() -> None:
    r = Replica()
    r.apply([send(1, 10)], 0)
    view = r.message("m1")
    assert view is not None and view["thread_id"] == "m1" and view["in_reply_to"] is None


async def test_sqlite_keeps_the_same_winner(tmp_path: Path) -> None:
    ops = [send(1, 10, in_reply_to="m0", thread_id="m0"), claim(2, 20),
           done("n2", 1, 40, "blocked"), done("n3", 1, 30, "done")]
    store = await Store.open(tmp_path / "s.db", "n9")
    try:
        for op in reversed(ops):  # the later completion first
            await store.apply_ops([op], 0)
        view = await store.message("m1")
        ref = Replica()
        ref.apply(ops, 0)
        assert view == ref.message("m1")
        assert view is not None and view["completion"]["result"] == "done"
        assert view["thread_id"] == "m0" and view["in_reply_to"] == "m0"
        assert await store.snapshot() == ref.snapshot()
    finally:
        await store.close()
