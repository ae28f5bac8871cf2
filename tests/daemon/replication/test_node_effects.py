"""The node's effect executor: ordering guarantees the pure core relies on.

The ordering tests hold a persist open (:func:`gate_persists`) and check
that a reader waits for it. "Waits" is observed, not guessed from a sleep:
:class:`BarrierWatch` records each task that waits on a persist barrier
still open, and the test polls for the reader to be there (with a
deadline) before it lets the persist finish. A reader that went ahead
instead never shows up there and the test fails.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pytest
from aiohttp import web

from common.ops import MSG_SEND, Op, mailbox_key
from daemon.node import Node
from daemon.settings import ClusterSettings, Member, Settings, StoreSettings
from daemon.wiring import build_node
from federation.effects import Persist, PersistPromise, SendPromise
from federation.messages import Promise, Replicate

KEY = mailbox_key("default", "p")
WITHIN_S = 5.0


def send_op(seq: int, origin: str = "node9") -> Op:
    return Op(origin, seq, 100 + seq, MSG_SEND, KEY, {
        "id": f"m{seq}", "to_workspace": "default", "to_project": "p", "body": "b",
        "from_workspace": "default", "from_project": "q", "created_at_ms": 1}, 1)


async def until(cond: Callable[[], bool], what: str, within: float = WITHIN_S) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        await asyncio.sleep(0.005)


def gate_persists(node: Node) -> asyncio.Event:
    """Hold every store write of ``node`` until the returned event is set."""
    real = node.store.apply_ops
    gate = asyncio.Event()

    async def gated(ops: Any, now_ms: int) -> Any:
        await gate.wait()
        return await real(ops, now_ms)

    node.store.apply_ops = gated  # type: ignore[method-assign]
    return gate


class BarrierWatch:
    """Records the tasks that wait on a persist barrier still open.

    Every wait on persist barriers in the runner (a list's wait on the
    older lists, a read's ``settle``) goes through ``EffectRunner._after``;
    this wraps it on one runner."""

    def __init__(self, node: Node) -> None:
        self.held: set[asyncio.Task[Any]] = set()
        runner = node.runner
        real = runner._after

        async def after(earlier: Sequence[asyncio.Future[None]]) -> None:
            task = asyncio.current_task()
            if task is not None and any(not b.done() for b in earlier):
                self.held.add(task)
            await real(earlier)

        runner._after = after  # type: ignore[method-assign]

    async def until_held(self, task: asyncio.Task[Any], what: str) -> None:
        await until(lambda: task in self.held or task.done(), what)
        assert task in self.held and not task.done(), what


@dataclass
class QuietPeer:
    """The other two members, one loopback server: it answers every pull
    with no ops (it has nothing to add), once ``answer`` is set."""

    url: str = ""
    pulls: int = 0
    answer: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def three(tmp_path: Path, aiohttp_server: Any) -> AsyncIterator[tuple[Node, QuietPeer]]:
    """node1 of three members whose peers are a :class:`QuietPeer`."""
    peer = QuietPeer()
    peer.answer.set()

    async def pull(_: web.Request) -> web.Response:
        peer.pulls += 1
        await peer.answer.wait()
        return web.Response(body=msgpack.packb([]), content_type="application/msgpack")

    app = web.Application()
    app.router.add_post("/peer/v1/pull", pull)
    server = await aiohttp_server(app)
    peer.url = f"http://127.0.0.1:{server.port}"
    settings = Settings(store=StoreSettings(db_path=str(tmp_path / "n.db")), cluster=ClusterSettings(
        node_id="node1", peers=(Member("node2", peer.url), Member("node3", peer.url)),
        initial_state="new"))
    node = await build_node(settings)
    await node.start()
    try:
        yield node, peer
    finally:
        await node.stop()


async def test_promise_read_waits_for_an_earlier_concurrent_persist(node: Node) -> None:
    """A peer that accepted ops (persist in flight in one request) and then
    promises in another must include them in the promise."""
    gate = gate_persists(node)
    watch = BarrierWatch(node)
    sent: list[Any] = []
    node.runner._send = lambda peer, msg, rp, rs: sent.append(msg)  # type: ignore[method-assign]
    accept = asyncio.create_task(node.run([PersistPromise(KEY, 5), Persist((send_op(1),))]))
    await asyncio.sleep(0)  # the accept's list has registered its barrier
    promise = asyncio.create_task(node.run([SendPromise("node2", KEY, 5, {})]))
    await watch.until_held(promise, "the promise waits for the accepted op's persist")
    assert sent == []
    gate.set()
    await asyncio.gather(accept, promise)
    (msg,) = sent
    assert isinstance(msg, Promise) and [op.seq for op in msg.ops] == [1]


async def test_failed_persist_is_fail_stop(node: Node) -> None:
    stopped = []
    node.runner.on_fatal = lambda: stopped.append(True)

    async def broken(ops, now_ms):  # type: ignore[no-untyped-def]
        raise OSError("disk on fire")

    node.store.apply_ops = broken  # type: ignore[method-assign]
    with pytest.raises(Exception, match="store failure"):
        await node.run([Persist((send_op(1),))])
    assert stopped == [True]


def test_forwarded_errors_keep_class_code_and_details() -> None:
    from common.errors import (
        LimitExceeded,
        NoMajority,
        PayloadTooLarge,
        QuorumNotMet,
    )
    from daemon.replication.forwarding import decode_error, encode_error

    for exc in (LimitExceeded("mailbox full", limit="mailbox_pending_max", cap=256),
                PayloadTooLarge("too big"), NoMajority("reaches 1 of 3", retry_after=2.0),
                QuorumNotMet(1, 2, "timeout")):
        back = decode_error(encode_error(exc))
        assert type(back) is type(exc)
        assert back.status == exc.status and back.to_body() == exc.to_body()


async def test_quorum_read_waits_for_persists_already_counted_in_the_vector(
        three: tuple[Node, QuietPeer]) -> None:
    """An op the core already counts (its persist still in flight) must be on
    disk before a quorum read queries the store: the peer, told the reader
    holds it, sends nothing."""
    node, _ = three
    gate = gate_persists(node)
    watch = BarrierWatch(node)
    persisting = asyncio.create_task(node.run([Persist((send_op(1),))]))
    await asyncio.sleep(0)  # the persist's list has registered its barrier
    reading = asyncio.create_task(node.read_barrier(KEY))
    await watch.until_held(reading, "the read waits for the persist already in flight")
    gate.set()
    await asyncio.gather(persisting, reading)


async def test_read_waits_for_ops_counted_by_a_concurrent_intake(
        three: tuple[Node, QuietPeer]) -> None:
    """An intake of a batch counts its ops in the version vector at once and
    persists them side by side. A quorum read that starts in that window
    sends that vector with its pulls (so the peers send nothing back for
    those ops) and must therefore wait for their commit before the local
    query, even though no persist was in flight when the read began."""
    node, _ = three
    gate = gate_persists(node)
    watch = BarrierWatch(node)
    op1, op2 = (send_op(s, origin="node2") for s in (1, 2))
    # Two messages that do not coalesce: two effect lists run side by side.
    batch = [Replicate(ops=(op1,), ack=True), Replicate(ops=(op2,), ack=False)]
    receiving = asyncio.create_task(node.receive("node2", batch))
    reading = asyncio.create_task(node.read_barrier(KEY))
    await until(lambda: node.core.vv.get("node2") == 2, "the intake counted both ops")
    await watch.until_held(reading, "the read waits for ops the core already counted")
    gate.set()
    await asyncio.gather(receiving, reading)
    assert {r["id"] for r in await node.store.mailbox_pending("default", "p", limit=10)} == {
        "m1", "m2"}


async def test_read_waits_for_an_intake_that_arrived_during_its_pulls(
        three: tuple[Node, QuietPeer]) -> None:
    """The race of issue 12 itself: an intake handed over *after* the read
    began (while its pull was in flight) counts its op at once; the pulled
    answer is then a duplicate, so the local query must still wait for the
    intake's commit (federation.read.barriers_to_wait: every barrier handed
    over until the pulls were applied, not those of the read's start)."""
    node, peer = three
    peer.answer.clear()  # the pulls wait at the peer until the intake is counted
    gate = gate_persists(node)
    watch = BarrierWatch(node)
    reading = asyncio.create_task(node.read_barrier(KEY))
    await until(lambda: peer.pulls >= 1, "the read's pull reached the peer")
    op = send_op(1, origin="node2")
    receiving = asyncio.create_task(node.receive("node2", [Replicate(ops=(op,), ack=False)]))
    await until(lambda: node.core.vv.get("node2") == 1, "the intake counted the op")
    assert not reading.done()
    peer.answer.set()
    await watch.until_held(reading, "the read waits for an op counted during its pulls")
    gate.set()
    await asyncio.gather(receiving, reading)
    assert [r["id"] for r in await node.store.mailbox_pending("default", "p", limit=10)] == [
        "m1"]
