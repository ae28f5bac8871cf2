"""Merge laws for leases on random histories (issue 26): leased claims,
renewals, expiries and completions naming their claim, with sends, holds
and purges, in any order: the in-memory replica is order-free, the SQLite
store equals it, and an owner's model (fed the ops, or rebuilt from the
replica's state ops) agrees with it on completions and standing leases."""

from __future__ import annotations

import asyncio
import os
import random
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from common import ops as K
from common.ops import Op
from federation.mailbox import MailboxModel
from store.db import Store
from store.in_memory import Replica

WS, PROJ = "w", "p"
KEY = K.mailbox_key(WS, PROJ)
MIDS = ("m1", "m2")
EPOCHS = (1024, 2049)
NOW = 10_000


def _body(kind: str, mid: str, d: st.DrawFn) -> dict:
    if kind == K.MSG_SEND:
        return {"id": mid, "to_workspace": WS, "to_project": PROJ, "to_agent": None,
                "from_workspace": WS, "from_project": "a", "from_agent": None,
                "from_owner_user": None, "subject": "s", "body": "b", "nature": None,
                "evidence": None, "created_at_ms": 1}
    if kind in (K.MSG_CLAIM, K.MSG_RENEW):
        b = {"id": mid, "claimer_session": "s", "claimer_agent": None, "claimer_key": None,
             "claimer_agent_id": None, "request_id": d(st.sampled_from(["r1", "r2", "r3"])),
             "at_ms": 5}
        if kind == K.MSG_RENEW or d(st.booleans()):
            b.update(token=d(st.sampled_from(["ta", "tb"])), lease_ms=1000,
                     lease_until_ms=d(st.sampled_from([100, 20_000])), delivery=1)
        return b
    if kind == K.MSG_EXPIRE:
        return {"id": mid, "token": d(st.sampled_from(["ta", "tb"])), "at_ms": 7,
                "delivery": 1, "to_agent": None}
    if kind == K.MSG_COMPLETE:
        b = {"id": mid, "result": d(st.sampled_from(["done", "blocked"])), "note": None,
             "by_session": "s", "by_agent": None, "by_key": None, "by_agent_id": None,
             "from_workspace": WS, "from_project": "a", "at_ms": 9}
        if d(st.booleans()):
            epoch = d(st.sampled_from(EPOCHS))
            b.update(token=d(st.sampled_from(["ta", "tb"])), claim_epoch=epoch)
            if d(st.booleans()):  # naming the claim it completes, as written today
                b["claim_rank"] = [epoch, d(st.integers(1, 12)), d(st.sampled_from(["n1", "n2"])),
                                   d(st.integers(1, 12))]
        return b
    if kind == K.MSG_PURGE:
        return {"id": "pg", "workspace": WS, "project": PROJ, "scope": "project",
                "by_user": "root", "reason": None, "at_ms": 3}
    if kind == K.MSG_HOLD:
        return {"id": mid, "holder_session": "e", "holder_agent": None, "holder_user": None,
                "at_ms": 4}
    return {"id": mid, "at_ms": 4, "content": None}  # release


@st.composite
def lease_histories(d: st.DrawFn) -> list[Op]:
    kinds = [K.MSG_SEND] * 3 + [K.MSG_CLAIM] * 3 + [K.MSG_RENEW, K.MSG_EXPIRE, K.MSG_EXPIRE,
             K.MSG_COMPLETE, K.MSG_COMPLETE, K.MSG_HOLD, K.MSG_RELEASE, K.MSG_PURGE]
    seqs = {"n1": 0, "n2": 0, "n3": 0}
    out, hlcs = [], set()
    for _ in range(d(st.integers(2, 12))):
        kind = d(st.sampled_from(kinds))
        origin = d(st.sampled_from(sorted(seqs)))
        seqs[origin] += 1
        hlc = d(st.integers(1, 400).filter(lambda h: h not in hlcs))
        hlcs.add(hlc)
        epoch = 0 if kind == K.MSG_COMPLETE and d(st.booleans()) else d(st.sampled_from(EPOCHS))
        out.append(Op(origin, seqs[origin], hlc, kind, KEY,
                      _body(kind, d(st.sampled_from(MIDS)), d), epoch))
    # every message's send somewhere early enough to matter
    return out


def _replica(ops: list[Op]) -> Replica:
    r = Replica()
    r.apply(ops, NOW)
    return r


def _reads(s) -> dict:
    return {"msgs": {m: s.message(m) for m in MIDS},
            "state_ops": sorted(s.mailbox_state_ops(WS, PROJ, history_max=100, empty_max=100),
                                key=lambda o: (o.kind, o.op_id)),
            "due": s.due_lease_mailboxes(NOW)}


async def _sreads(s) -> dict:
    return {"msgs": {m: await s.message(m) for m in MIDS},
            "state_ops": sorted(await s.mailbox_state_ops(WS, PROJ, history_max=100,
                                                          empty_max=100),
                                key=lambda o: (o.kind, o.op_id)),
            "due": await s.due_lease_mailboxes(NOW)}


LAWS = settings(max_examples=400, deadline=None)


@LAWS
@given(lease_histories(), st.randoms())
def test_replica_is_order_free(ops: list[Op], rnd: random.Random) -> None:
    ref = _replica(ops)
    shuffled = list(ops)
    rnd.shuffle(shuffled)
    other = Replica()
    for op in shuffled:
        other.apply([op], NOW)
    assert other.snapshot() == ref.snapshot()
    assert _reads(other) == _reads(ref)


@settings(max_examples=150, deadline=None)
@given(lease_histories(), st.randoms())
def test_store_equals_replica(ops: list[Op], rnd: random.Random) -> None:
    async def go() -> None:
        ref = _replica(ops)
        shuffled = list(ops)
        rnd.shuffle(shuffled)
        with tempfile.TemporaryDirectory() as tmp:
            store = await Store.open(os.path.join(tmp, "s.db"), "n9")
            try:
                for op in shuffled:
                    await store.apply_ops([op], NOW)
                assert await store.snapshot() == ref.snapshot()
                assert await _sreads(store) == _reads(ref)
            finally:
                await store.close()
    asyncio.run(go())


@LAWS
@given(lease_histories())
def test_owner_model_and_rebuilt_model_agree_with_the_replica_on_leases(ops: list[Op]) -> None:
    ref = _replica(ops)
    model, rebuilt = MailboxModel(KEY), MailboxModel(KEY)
    model.apply(ops)
    rebuilt.apply(ref.mailbox_state_ops(WS, PROJ, history_max=100, empty_max=100))
    for mid in MIDS:
        view = ref.message(mid)
        if view is None or model.state(mid) != view["state"]:
            continue  # the model's request-id rule (a known difference)
        shown = view["completion"] is not None
        assert (model.completion_op(mid) is not None) == shown, (mid, view)
        assert (rebuilt.completion_op(mid) is not None) == shown, (mid, view)
        standing = view["lease_until_ms"]
        assert model.lease_until(mid) == standing, (mid, view)
        assert rebuilt.lease_until(mid) == standing, (mid, view)
