"""The shared effect driver and the storage contract behind it.

Both stores keep :class:`federation.driver.Store`: the SQLite store as
coroutines, the reference replica (the simulator's disk, the test cluster's
store) as plain calls, with the same names and parameters; what they answer
is held equal by ``tests/store/test_equivalence.py`` (GC and the mailbox
rebuild included).
"""

from __future__ import annotations

import inspect
import random
from typing import Any

import pytest

from common.ops import NOTE_NEW, Op, inbox_key
from federation import driver
from federation.core import NodeCore
from federation.effects import Collect, Persist, Reply, Send
from federation.messages import Ack
from store.db import Store
from store.in_memory import Replica


def _params(fn: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def test_both_stores_keep_the_driver_store_contract() -> None:
    for name in driver.STORE_METHODS:
        want = _params(getattr(driver.Store, name))
        assert _params(getattr(Replica, name))[:len(want)] == want, name
        sqlite = getattr(Store, name)
        assert inspect.iscoroutinefunction(sqlite), name
        assert _params(sqlite)[:len(want)] == want, name


class _Host:
    def __init__(self) -> None:
        self.log: list[Any] = []

    def now_ms(self) -> int:
        return 5

    def transmit(self, peer: str, msg: Any) -> None:
        self.log.append(("send", peer, msg))

    def answer(self, token: Any, value: Any) -> None:
        self.log.append(("reply", token))

    def push_missing(self, peer: str, vv: dict[str, int]) -> None:
        self.log.append(("push", peer))

    def applied(self, new: list[Op]) -> None:
        self.log.append(("applied", [op.op_id for op in new]))

    def report(self, event: str, detail: Any) -> None:
        self.log.append((event, detail))


def test_carry_persists_before_later_effects_and_routes_replies_back() -> None:
    core = NodeCore("a", ["a", "b", "c"], 2, quorum_timeout_ms=100, claim_timeout_ms=100,
                    catchup_interval_ms=100, vv={}, last_hlc=0, own_max_seq=0, promises={},
                    rng=random.Random(1), gc_interval_ms=0, down_after_ms=300)
    op = Op("a", 1, 1, NOTE_NEW, inbox_key("x"), {"id": "n1"})
    host, replies = _Host(), []
    gen = driver.carry(core, host, [Persist((op,)), Send("b", Ack((("a", 1),))),
                                    Send("c", Ack(())), Reply("t", 1), Collect({"a": 1})],
                       reply_peer="b", replies=replies)
    step = next(gen)
    assert step == driver.StoreCall("apply_ops", ([op], 5))
    assert host.log == [] and core.durable_vv == {}  # nothing goes on before the write
    assert isinstance(gen.send([op]), driver.PersistsDone)
    assert core.durable_vv == {"a": 1}
    assert gen.send(None) == driver.StoreCall("gc", ({"a": 1},))
    assert replies == [Ack((("a", 1),))]  # rides back in the response
    assert host.log == [("applied", [("a", 1)]), ("send", "c", Ack(())), ("reply", "t")]
    with pytest.raises(StopIteration):
        gen.send(1)
    assert host.log[-1] == ("collected", 1)


def _op(seq: int) -> Op:
    return Op(origin="node2", seq=seq, hlc=seq << 16, kind=NOTE_NEW, key=inbox_key("a"),
              body={"id": f"n{seq}"})


def test_lists_that_only_persist_and_answer_share_one_persist() -> None:
    from federation.effects import PersistPromise

    a = [Persist((_op(1),)), Send("node2", Ack((("node2", 1),)))]
    b = [Persist((_op(2), _op(3))), Reply("t", None), Send("node2", Ack((("node2", 2),)))]
    promise = [PersistPromise("mbox:w/p", 5), Persist((_op(4),)), Send("node2", Ack(()))]
    bare = [Send("node2", Ack((("node2", 9),)))]
    merged = driver.merge_persists([a, bare, b, promise])
    assert merged[0] == [Persist((_op(1), _op(2), _op(3))), a[1], b[1], b[2]]
    assert merged[1:] == [bare, promise]  # other shapes unchanged, in order
    assert driver.merge_persists([a, bare]) == [a, bare]  # one alone: nothing to merge
    assert driver.merge_persists([]) == []
