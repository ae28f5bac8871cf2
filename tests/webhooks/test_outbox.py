"""The outbox and the intake on a real SQLite file: order, retries, dead
letters, the size bound and reopening."""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path

import pytest

from common import ops as K
from common.errors import LimitExceeded
from common.ops import Op
from daemon.webhooks import intake, outbox
from daemon.webhooks.db import WebhookDB
from daemon.webhooks.registry import Registry, Subscription

T0 = 1_777_267_800_000


def mem_put(seq: int, mid: str, ns: str = "team/a", ms: int = T0) -> Op:
    return Op("n1", seq, ms << 16, K.MEM_PUT, f"mem:{mid}",
              {"id": mid, "tier": "mid", "namespace": ns, "created_at_ms": ms,
               "updated_at_ms": ms})


def sub(sid: str, events: tuple[str, ...] = (), ns: str | None = None) -> Subscription:
    return Subscription(sid, f"http://127.0.0.1:9/{sid}", events, ns, "k", T0)


async def registered(db: WebhookDB, *subs: Subscription) -> list[Subscription]:
    reg = Registry(db, cap=100)
    await reg.load()
    for s in subs:
        await reg.add(s)
    return reg.all()


@pytest.fixture
async def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    d = await WebhookDB.open(str(tmp_path / "n.db.webhooks.sqlite"))
    yield d
    await d.close()


async def test_file_is_private(db: WebhookDB) -> None:
    assert stat.S_IMODE(os.stat(db.path).st_mode) == 0o600


async def test_admit_fans_out_in_order(db: WebhookDB) -> None:
    subs = await registered(db, sub("a"), sub("b", ("memory_store",), "team/b"))
    ops = [mem_put(i, f"m{i}", "team/b" if i % 2 else "team/a") for i in range(1, 7)]
    res = await db.call(intake.admit, ops, subs, "node1", T0, 100)
    assert res.enqueued["memory_store"] == 6 + 3
    assert await db.call(outbox.pending_count) == 9
    heads = await db.call(outbox.heads)
    assert {h.sub_id for h in heads} == {"a", "b"}
    for h in heads:
        row = await db.call(outbox.fetch, h.seq)
        assert row is not None
    # deliver "a" head by head: memory ids come out in op order
    seen = []
    while True:
        head = next((h for h in await db.call(outbox.heads) if h.sub_id == "a"), None)
        if head is None:
            break
        row = await db.call(outbox.fetch, head.seq)
        assert row is not None
        seen.append(row.body)
        assert await db.call(outbox.delivered, head.seq)
    assert [b'"memory_id":"m%d"' % i in body for i, body in enumerate(seen, 1)] == [True] * 6


async def test_versions_persist_without_subscribers(db: WebhookDB) -> None:
    res = await db.call(intake.admit, [mem_put(1, "m1")], [], "node1", T0, 100)
    assert not res.enqueued
    promote = Op("n1", 2, (T0 + 5) << 16, K.MEM_PUT, "mem:m1",
                 {"id": "m1", "tier": "long", "namespace": "team/a", "created_at_ms": T0,
                  "updated_at_ms": T0 + 5})
    res = await db.call(intake.admit, [promote], await registered(db, sub("a")), "node1", T0, 100)
    assert dict(res.enqueued) == {"memory_promote": 1}


async def test_bounded_outbox_refuses_and_reports(db: WebhookDB) -> None:
    ops = [mem_put(i, f"m{i}") for i in range(1, 6)]
    res = await db.call(intake.admit, ops, await registered(db, sub("a")), "node1", T0, 3)
    assert sum(res.enqueued.values()) == 3 and sum(res.dropped.values()) == 2
    assert await db.call(outbox.pending_count) == 3


async def test_retry_then_bury_with_dead_letter_cap(db: WebhookDB) -> None:
    ops = [mem_put(i, f"m{i}") for i in range(1, 4)]
    await db.call(intake.admit, ops, await registered(db, sub("a")), "node1", T0, 100)
    (head,) = await db.call(outbox.heads)
    assert await db.call(outbox.reschedule, head.seq, 1, T0 + 5000, "HTTP 500")
    (head2,) = await db.call(outbox.heads)
    assert (head2.seq, head2.attempts, head2.next_at_ms) == (head.seq, 1, T0 + 5000)
    found, purged = await db.call(outbox.bury, head.seq, 8, "HTTP 500", 1)
    assert found and purged == 0
    (head3,) = await db.call(outbox.heads)
    assert head3.seq > head.seq  # the next row becomes the head
    found, purged = await db.call(outbox.bury, head3.seq, 8, "timeout", 1)
    assert found and purged == 1  # over the cap: the oldest dead row goes
    dead = await db.call(outbox.dead_letters, 10)
    assert [d["seq"] for d in dead] == [head3.seq] and dead[0]["last_error"] == "timeout"
    assert await db.call(outbox.pending_count) == 1


def test_backoff_is_capped_exponential_with_jitter() -> None:
    rng = random.Random(7)
    delays = [outbox.retry_delay_secs(n, 1.0, 60.0, rng) for n in range(1, 12)]
    for n, d in enumerate(delays, 1):
        ceiling = min(60.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= d <= ceiling
    assert max(delays) <= 60.0 and delays[-1] >= 30.0


async def test_registry_cap_and_cascade(db: WebhookDB) -> None:
    reg = Registry(db, cap=2)
    await reg.load()
    await reg.add(sub("a"))
    await reg.add(sub("b"))
    with pytest.raises(LimitExceeded):
        await reg.add(sub("c"))
    await db.call(intake.admit, [mem_put(1, "m1")], reg.all(), "node1", T0, 100)
    assert await reg.remove("a") == (1, 0)
    assert await reg.remove("a") is None
    assert [s.id for s in reg.all()] == ["b"]
    assert {h.sub_id for h in await db.call(outbox.heads)} == {"b"}


async def test_rows_for_a_deleted_subscription_are_not_written(db: WebhookDB) -> None:
    stale = await registered(db, sub("a"), sub("b"))
    reg = Registry(db, cap=10)
    await reg.load()
    await reg.remove("a")  # deleted after the intake took its snapshot
    res = await db.call(intake.admit, [mem_put(1, "m1")], stale, "node1", T0, 100)
    assert sum(res.enqueued.values()) == 1
    assert {h.sub_id for h in await db.call(outbox.heads)} == {"b"}


async def test_rows_and_subscriptions_survive_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "x.webhooks.sqlite")
    first = await WebhookDB.open(path)
    reg = Registry(first, cap=10)
    await reg.add(sub("a", ("memory_store",), "team"))
    await first.call(intake.admit, [mem_put(1, "m1")], reg.all(), "node1", T0, 100)
    await first.close()
    again = await WebhookDB.open(path)
    try:
        reg2 = Registry(again, cap=10)
        await reg2.load()
        assert reg2.all() == reg.all()
        assert await again.call(outbox.pending_count) == 1
    finally:
        await again.close()
