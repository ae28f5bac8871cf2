"""The node's effect executor: ordering guarantees the pure core relies on."""

from __future__ import annotations

import asyncio

import pytest

from common.ops import MSG_SEND, Op, mailbox_key
from daemon.node import Node
from daemon.wiring import build_node
from federation.effects import Persist, PersistPromise, SendPromise
from federation.messages import Promise

KEY = mailbox_key("default", "p")


def send_op(seq: int) -> Op:
    return Op("node9", seq, 100 + seq, MSG_SEND, KEY, {
        "id": f"m{seq}", "to_workspace": "default", "to_project": "p", "body": "b",
        "from_workspace": "default", "from_project": "q", "created_at_ms": 1}, 1)


async def test_promise_read_waits_for_an_earlier_concurrent_persist(node: Node) -> None:
    """A peer that accepted ops (persist in flight in one request) and then
    promises in another must include them in the promise."""
    real = node.store.apply_ops
    gate = asyncio.Event()

    async def slow_apply(ops, now_ms):  # type: ignore[no-untyped-def]
        await gate.wait()
        return await real(ops, now_ms)

    node.store.apply_ops = slow_apply  # type: ignore[method-assign]
    sent: list = []
    node.runner._send = lambda peer, msg, rp, rs: sent.append(msg)  # type: ignore[method-assign]
    accept = asyncio.create_task(node.run([PersistPromise(KEY, 5), Persist((send_op(1),))]))
    await asyncio.sleep(0)  # the accept's list has registered its barrier
    promise = asyncio.create_task(node.run([SendPromise("node2", KEY, 5, {})]))
    await asyncio.sleep(0.05)
    assert not promise.done(), "the promise read the store before the accepted op was on disk"
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
        tmp_path, aiohttp_server) -> None:  # type: ignore[no-untyped-def]
    """An op the core already counts (its persist still in flight) must be on
    disk before a quorum read queries the store: the peer, told the reader
    holds it, sends nothing."""
    from aiohttp import web

    from daemon.settings import ClusterSettings, Member, Settings, StoreSettings

    async def pull(_: web.Request) -> web.Response:  # a peer that has nothing to add
        import msgpack
        return web.Response(body=msgpack.packb([]), content_type="application/msgpack")

    app = web.Application()
    app.router.add_post("/peer/v1/pull", pull)
    peer = await aiohttp_server(app)
    url = f"http://127.0.0.1:{peer.port}"
    settings = Settings(store=StoreSettings(db_path=str(tmp_path / "r.db")), cluster=ClusterSettings(
        node_id="node1", peers=(Member("node2", url), Member("node3", url)),
        initial_state="new"))
    node = await build_node(settings)
    await node.start()
    try:
        real = node.store.apply_ops
        gate = asyncio.Event()

        async def slow_apply(ops, now_ms):  # type: ignore[no-untyped-def]
            await gate.wait()
            return await real(ops, now_ms)

        node.store.apply_ops = slow_apply  # type: ignore[method-assign]
        persisting = asyncio.create_task(node.run([Persist((send_op(1),))]))
        await asyncio.sleep(0)
        reading = asyncio.create_task(node.read_barrier(KEY))
        await asyncio.sleep(0.1)
        assert not reading.done(), "the read went ahead of a persist already in flight"
        gate.set()
        await asyncio.gather(persisting, reading)
    finally:
        await node.stop()


async def test_read_waits_for_ops_counted_by_a_concurrent_intake(
        tmp_path, aiohttp_server) -> None:  # type: ignore[no-untyped-def]
    """An intake of a batch counts its ops in the version vector at once and
    persists them side by side. A quorum read that starts in that window
    sends that vector with its pulls (so the peers send nothing back for
    those ops) and must therefore wait for their commit before the local
    query, even though no persist was in flight when the read began."""
    from aiohttp import web

    from daemon.settings import ClusterSettings, Member, Settings, StoreSettings
    from federation.messages import Replicate

    async def pull(_: web.Request) -> web.Response:  # a peer that has nothing to add
        import msgpack
        return web.Response(body=msgpack.packb([]), content_type="application/msgpack")

    app = web.Application()
    app.router.add_post("/peer/v1/pull", pull)
    peer = await aiohttp_server(app)
    url = f"http://127.0.0.1:{peer.port}"
    settings = Settings(store=StoreSettings(db_path=str(tmp_path / "i.db")), cluster=ClusterSettings(
        node_id="node1", peers=(Member("node2", url), Member("node3", url)),
        initial_state="new"))
    node = await build_node(settings)
    await node.start()
    try:
        real = node.store.apply_ops
        gate = asyncio.Event()

        async def slow_apply(ops, now_ms):  # type: ignore[no-untyped-def]
            await gate.wait()
            return await real(ops, now_ms)

        node.store.apply_ops = slow_apply  # type: ignore[method-assign]
        op1, op2 = (Op("node2", s, 100 + s, MSG_SEND, KEY, send_op(s).body, 1) for s in (1, 2))
        # Two messages that do not coalesce: two effect lists run side by side.
        batch = [Replicate(ops=(op1,), ack=True), Replicate(ops=(op2,), ack=False)]
        receiving = asyncio.create_task(node.receive("node2", batch))
        reading = asyncio.create_task(node.read_barrier(KEY))
        await asyncio.sleep(0.2)
        assert node.core.vv.get("node2") == 2, "the intake counted both ops"
        assert not reading.done(), "the read went ahead of ops the core already counted"
        gate.set()
        await asyncio.gather(receiving, reading)
        assert {r["id"] for r in await node.store.mailbox_pending("default", "p", limit=10)} == {
            "m1", "m2"}
    finally:
        await node.stop()


async def test_read_waits_for_an_intake_that_arrived_during_its_pulls(
        tmp_path, aiohttp_server) -> None:  # type: ignore[no-untyped-def]
    """The race of issue 12 itself: an intake handed over *after* the read
    began (while its pull was in flight) counts its op at once; the pulled
    answer is then a duplicate, so the local query must still wait for the
    intake's commit (federation.read.barriers_to_wait: every barrier handed
    over until the pulls were applied, not those of the read's start)."""
    from aiohttp import web

    from daemon.settings import ClusterSettings, Member, Settings, StoreSettings
    from federation.messages import Replicate

    answer = asyncio.Event()

    async def pull(_: web.Request) -> web.Response:  # answers once the intake is counted
        import msgpack
        await answer.wait()
        return web.Response(body=msgpack.packb([]), content_type="application/msgpack")

    app = web.Application()
    app.router.add_post("/peer/v1/pull", pull)
    peer = await aiohttp_server(app)
    url = f"http://127.0.0.1:{peer.port}"
    settings = Settings(store=StoreSettings(db_path=str(tmp_path / "d.db")), cluster=ClusterSettings(
        node_id="node1", peers=(Member("node2", url), Member("node3", url)),
        initial_state="new"))
    node = await build_node(settings)
    await node.start()
    try:
        real = node.store.apply_ops
        gate = asyncio.Event()

        async def slow_apply(ops, now_ms):  # type: ignore[no-untyped-def]
            await gate.wait()
            return await real(ops, now_ms)

        node.store.apply_ops = slow_apply  # type: ignore[method-assign]
        reading = asyncio.create_task(node.read_barrier(KEY))
        await asyncio.sleep(0.05)  # the read has begun; its pull waits at the peer
        op = Op("node2", 1, 101, MSG_SEND, KEY, send_op(1).body, 1)
        receiving = asyncio.create_task(node.receive("node2", [Replicate(ops=(op,), ack=False)]))
        await asyncio.sleep(0.05)
        assert node.core.vv.get("node2") == 1, "the intake counted the op"
        answer.set()
        await asyncio.sleep(0.2)
        assert not reading.done(), "the read went ahead of an op counted during its pulls"
        gate.set()
        await asyncio.gather(receiving, reading)
        assert [r["id"] for r in await node.store.mailbox_pending("default", "p", limit=10)] == [
            "m1"]
    finally:
        await node.stop()
