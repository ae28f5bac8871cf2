"""Completions and purges in both stores (issue 26): a completion of a claim
decided after its mailbox's purge stays; one of a claim the purge took
keeps only its rank and is never rebuilt into an owner's model as a
completion."""

from __future__ import annotations

from pathlib import Path

from common import ops as K
from common.ops import Op
from store.db import Store
from store.in_memory import Replica
from tests.store.test_completion_merge import BOX, claim, done, send


def purge(seq: int, hlc: int) -> Op:
    return Op("n3", seq, hlc, K.MSG_PURGE, BOX,
              {"id": "pg", "workspace": "ws", "project": "b", "scope": "project",
               "by_user": "root", "reason": None, "at_ms": hlc}, 1)


# A purge (or the empty-project cleanup) at hlc 5; then a message is sent,
# claimed without a lease and completed through the quorum path, once as a
# completion written before completions named their claim and once naming it.
OPS = [purge(1, 5), send(1, 10), claim(2, 20), done("n2", 1, 30, "done")]


def _named(op: Op) -> Op:
    """``op`` (a completion) naming the claim of OPS as the one it completes."""
    c = OPS[2]
    return Op(op.origin, op.seq, op.hlc, op.kind, op.key,
              {**op.body, "claim_rank": [c.epoch, c.hlc, c.origin, c.seq],
               "claim_epoch": c.epoch}, op.epoch)


def test_a_completion_naming_a_claim_after_the_purge_is_kept() -> None:
    r = Replica()
    r.apply([*OPS[:3], _named(OPS[3])], 0)
    view = r.message("m1")
    assert view is not None and view["completion"]["result"] == "done"


def test_replica_keeps_a_terminal_claims_completion_after_an_earlier_purge() -> None:
    r = Replica()
    r.apply(OPS, 0)
    view = r.message("m1")
    assert view is not None and view["state"] == "claimed"
    assert view["completion"] is not None, r.snapshot()["completions"]


async def test_sqlite_keeps_a_terminal_claims_completion_after_an_earlier_purge(
        tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db", "n9")
    try:
        await store.apply_ops(OPS, 0)
        view = await store.message("m1")
        assert view is not None and view["state"] == "claimed"
        assert view["completion"] is not None
    finally:
        await store.close()


def test_state_ops_do_not_rebuild_a_purged_completion_stub_as_a_completion() -> None:
    from federation.mailbox import MailboxModel

    s1 = Op("n1", 1, 3, K.MSG_SEND, BOX, send(1, 1).body, 1024)
    claim_ta = Op("n1", 2, 5, K.MSG_CLAIM, BOX, {
        "id": "m1", "claimer_session": "s", "request_id": "r1", "at_ms": 2, "token": "ta",
        "lease_ms": 1000, "lease_until_ms": 100, "delivery": 1}, 1024)
    done_ta = Op("n1", 3, 6, K.MSG_COMPLETE, BOX, {
        "id": "m1", "result": "done", "note": None, "token": "ta", "claim_epoch": 1024,
        "claim_rank": [1024, 5, "n1", 2], "at_ms": 6}, 0)
    pg = Op("n3", 1, 10, K.MSG_PURGE, BOX, {**purge(1, 10).body}, 1024)
    s2 = Op("n2", 1, 20, K.MSG_SEND, BOX, send(1, 1).body, 2049)  # a later term's copy
    r = Replica()
    r.apply([s1, claim_ta, done_ta, pg, s2], 0)
    view = r.message("m1")
    assert view["state"] == "claimed" and view["completion"] is None
    direct, rebuilt = MailboxModel(BOX), MailboxModel(BOX)
    direct.apply([s1, claim_ta, done_ta, pg, s2])
    rebuilt.apply(r.mailbox_state_ops("ws", "b", history_max=100, empty_max=100))
    assert direct.completion_op("m1") is None and direct.lease_until("m1") == 100
    # The rebuilt owner must not take the purged stub (result '') for a
    # completion: the lease would never expire.
    assert rebuilt.completion_op("m1") is None, rebuilt.completion_op("m1")
