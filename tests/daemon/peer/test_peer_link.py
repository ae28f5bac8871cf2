"""The per-peer link's batching, against a real HTTP peer on loopback.

A peer that holds its first request shows the policy: what is queued while
the link's one request slot is busy leaves together in the next request
(not one request per message), and replies in the response reach the node.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgpack
from aiohttp import web
from aiohttp.test_utils import TestServer

from common.ops import Op
from daemon.peer.client import PeerClient
from daemon.peer.link import PeerLink
from daemon.peer.pacing import LinkPacer
from daemon.runtime.metrics import Metrics
from daemon.runtime.tasks import Background
from federation.messages import Ack, Replicate, decode_msg


def _op(seq: int) -> Op:
    return Op(origin="node1", seq=seq, hlc=seq, kind="agent.seen", key="agent:a",
              body={"agent_id": "a", "at_ms": seq}, epoch=0)


async def test_messages_queued_while_a_request_is_out_leave_in_one_request() -> None:
    bodies: list[list[Any]] = []
    release = asyncio.Event()
    arrived = asyncio.Event()
    all_acked = asyncio.Event()

    async def msgs(request: web.Request) -> web.Response:
        batch = msgpack.unpackb(await request.read(), raw=False)
        bodies.append(batch)
        arrived.set()
        if len(bodies) == 1:
            await release.wait()  # the first request is held
        acks = [Ack(tuple(op.op_id for op in decode_msg(m).ops)).to_wire() for m in batch]
        return web.Response(body=msgpack.packb(acks), content_type="application/msgpack")

    app = web.Application()
    app.router.add_post("/peer/v1/msgs", msgs)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    client = PeerClient("node1", {"node2": str(server.make_url("")).rstrip("/")}, None,
                        now_s=lambda: 0.0)
    await client.start()
    replies: list[Any] = []
    failed: list[str] = []
    background = Background()

    async def on_replies(peer: str, got: list[Any], incarnation: str) -> None:
        replies.extend(got)
        if len(replies) >= 4:  # the first request's ack and the second's three
            all_acked.set()

    async def on_failed(peer: str) -> None:
        failed.append(peer)

    link = PeerLink("node2", peers=client, metrics=Metrics(), spawn=background.spawn,
                    on_failed=on_failed, on_replies=on_replies, inflight_max=1)
    link.start()
    try:
        link.send(Replicate((_op(1),), ack=True))
        await asyncio.wait_for(arrived.wait(), 5)
        # Sends made while the first request is out: one ack=False push among
        # quorum writes, so the batch holds more than one message.
        # They arrive one by one, the link's loop running in between.
        for seq in range(2, 12):
            link.send(Replicate((_op(seq),), ack=seq != 6))
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert len(bodies) == 1  # nothing else left while the slot was busy
        release.set()
        await asyncio.wait_for(all_acked.wait(), 5)
        await asyncio.sleep(0.1)
        assert len(bodies) == 2, bodies
        second = [decode_msg(m) for m in bodies[1]]
        assert sum(len(m.ops) for m in second) == 10  # every queued op, in one request
        assert len(second) == 3  # runs of quorum writes coalesced: [2-5], [6], [7-11]
        acked = {op_id for r in replies for op_id in r.op_ids}
        assert acked == {("node1", s) for s in range(1, 12)} and not failed
    finally:
        await link.stop()
        await background.stop()
        await client.close()
        await server.close()


async def _until(cond: Any, timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("condition not met")


def _big_op(seq: int, size: int) -> Op:
    return Op(origin="node1", seq=seq, hlc=seq, kind="mem.put", key=f"mem:m{seq}",
              body={"id": f"m{seq}", "content": "x" * size}, epoch=0)


async def _held_peer(fail_part: int | None = None) -> tuple[TestServer, list[bytes],
                                                             asyncio.Event]:
    """A peer that holds its first request until released, and answers
    request ``fail_part`` (counting from 0) with a 500."""
    bodies: list[bytes] = []
    release = asyncio.Event()

    async def msgs(request: web.Request) -> web.Response:
        raw = await request.read()
        bodies.append(raw)
        if len(bodies) == 1:
            await release.wait()
        if fail_part is not None and len(bodies) - 1 == fail_part:
            return web.Response(status=500)
        batch = msgpack.unpackb(raw, raw=False)
        acks = [Ack(tuple(op.op_id for op in decode_msg(m).ops)).to_wire() for m in batch]
        return web.Response(body=msgpack.packb(acks), content_type="application/msgpack")

    app = web.Application()
    app.router.add_post("/peer/v1/msgs", msgs)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server, bodies, release


async def test_a_batch_over_the_byte_budget_goes_in_parts_in_order(monkeypatch: Any) -> None:
    budget = 20_000
    monkeypatch.setattr("common.limits.peer_batch_bytes_max", budget)
    server, bodies, release = await _held_peer()
    client = PeerClient("node1", {"node2": str(server.make_url("")).rstrip("/")}, None,
                        now_s=lambda: 0.0)
    await client.start()
    metrics, background = Metrics(), Background()
    acked: set[Any] = set()
    failed: list[str] = []
    done = asyncio.Event()

    async def on_replies(peer: str, got: list[Any], incarnation: str) -> None:
        acked.update(op_id for r in got for op_id in r.op_ids)
        if len(acked) == 41:
            done.set()

    async def on_failed(peer: str) -> None:
        failed.append(peer)

    link = PeerLink("node2", peers=client, metrics=metrics, spawn=background.spawn,
                    on_failed=on_failed, on_replies=on_replies, inflight_max=1)
    link.start()
    try:
        link.send(Replicate((_op(1),), ack=True))
        await _until(lambda: bodies)
        # 40 quorum writes of 2 KB (a push among them) queue behind it: about
        # 82 KB, four times the budget, one batch once the slot is free.
        for seq in range(2, 42):
            link.send(Replicate((_big_op(seq, 2_000),), ack=seq != 20))
        release.set()
        await asyncio.wait_for(done.wait(), 5)
        parts = bodies[1:]
        assert len(parts) >= 4
        assert all(len(p) <= budget for p in parts), [len(p) for p in parts]
        sent = [op.seq for p in parts for m in msgpack.unpackb(p, raw=False)
                for op in decode_msg(m).ops]
        assert sent == list(range(2, 42))  # every op once, in the order queued
        assert acked == {("node1", s) for s in range(1, 42)} and not failed
        assert metrics.counters["peer_batches_split_total"][(("peer", "node2"),)] >= 3
        assert metrics.counters["peer_batches_total"][(("peer", "node2"),)] == len(bodies)
    finally:
        await link.stop()
        await background.stop()
        await client.close()
        await server.close()


async def test_a_failed_part_reports_the_peer_once_and_sends_no_more(monkeypatch: Any) -> None:
    monkeypatch.setattr("common.limits.peer_batch_bytes_max", 20_000)
    server, bodies, release = await _held_peer(fail_part=2)
    client = PeerClient("node1", {"node2": str(server.make_url("")).rstrip("/")}, None,
                        now_s=lambda: 0.0)
    await client.start()
    background = Background()
    failed: list[str] = []

    async def on_replies(peer: str, got: list[Any], incarnation: str) -> None:
        pass

    async def on_failed(peer: str) -> None:
        failed.append(peer)

    link = PeerLink("node2", peers=client, metrics=Metrics(), spawn=background.spawn,
                    on_failed=on_failed, on_replies=on_replies, inflight_max=1)
    link.start()
    try:
        link.send(Replicate((_op(1),), ack=True))
        await _until(lambda: bodies)
        link.send(Replicate(tuple(_big_op(s, 2_000) for s in range(2, 42)), ack=True))
        release.set()
        await _until(lambda: failed)
        await asyncio.sleep(0.2)
        assert failed == ["node2"]
        assert len(bodies) == 3  # the first request, one part, the part that failed
        # The link is free again: the next message goes out.
        link.send(Replicate((_op(99),), ack=True))
        await _until(lambda: len(bodies) >= 4)
    finally:
        await link.stop()
        await background.stop()
        await client.close()
        await server.close()


async def _link_to(handler: Any, pacer: LinkPacer, *, clock: Any = time.monotonic,
                   channel: Any = None) -> tuple[TestServer, PeerClient, PeerLink,
                                                 Background, Metrics, list[Any]]:
    """A link to a real loopback peer serving ``handler`` (and ``channel`` as
    its /peer/v1/link, else none: plain HTTP)."""
    app = web.Application()
    app.router.add_post("/peer/v1/msgs", handler)
    if channel is not None:
        app.router.add_get("/peer/v1/link", channel)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    client = PeerClient("node1", {"node2": str(server.make_url("")).rstrip("/")}, None,
                        now_s=lambda: 0.0)
    await client.start()
    metrics, background, replies = Metrics(), Background(), []

    async def on_replies(peer: str, got: list[Any], incarnation: str) -> None:
        replies.extend(got)

    async def on_failed(peer: str) -> None:
        raise AssertionError(f"a request to {peer} failed")

    link = PeerLink("node2", peers=client, metrics=metrics, spawn=background.spawn,
                    on_failed=on_failed, on_replies=on_replies, pacer=pacer, clock=clock)
    link.start()
    return server, client, link, background, metrics, replies


async def _close(server: TestServer, client: PeerClient, link: PeerLink,
                 background: Background) -> None:
    await link.stop()
    await background.stop()
    await client.close()
    await server.close()


def _acking(arrived: list[int], hold: dict[int, asyncio.Event], delay_s: float) -> Any:
    """A peer that answers each request after ``delay_s``, request ``i`` (from
    0) only once ``hold[i]`` is set; ``arrived`` counts requests as they come."""
    async def msgs(request: web.Request) -> web.Response:
        batch = msgpack.unpackb(await request.read(), raw=False)
        index = len(arrived)
        arrived.append(index)
        await asyncio.sleep(delay_s)
        if index in hold:
            await hold[index].wait()
        acks = [Ack(tuple(op.op_id for op in decode_msg(m).ops)).to_wire() for m in batch]
        return web.Response(body=msgpack.packb(acks), content_type="application/msgpack")
    return msgs


async def test_to_a_far_peer_a_queued_message_leaves_while_a_request_is_out() -> None:
    """Every request to this peer takes 30 ms, over the 10 ms that makes a
    peer far: once the link measured one, a message queued while a request
    is out goes at once in a second request (not after that one's answer)."""
    arrived: list[int] = []
    held = asyncio.Event()
    server, client, link, background, metrics, replies = await _link_to(
        _acking(arrived, {2: held}, 0.03), LinkPacer(near_max=1, far_max=4, far_ms=10))
    try:
        link.send(Replicate((_op(1),), ack=True))  # opens the channel: not timed
        await _until(lambda: len(replies) == 1)
        assert link.pacer.slots(time.monotonic()) == 1
        link.send(Replicate((_op(2),), ack=True))
        await _until(lambda: len(replies) == 2)  # one 30 ms round trip measured
        assert link.pacer.slots(time.monotonic()) == 4
        link.send(Replicate((_op(3),), ack=True))
        await _until(lambda: len(arrived) == 3)  # request 2 is out, and held
        link.send(Replicate((_op(4),), ack=True))
        await _until(lambda: len(arrived) == 4)  # left beside it
        await _until(lambda: len(replies) == 3)  # ... and came back first
        assert {op_id for r in replies for op_id in r.op_ids} == {("node1", s) for s in (1, 2, 4)}
        assert metrics.counters["peer_batches_overlapped_total"][(("peer", "node2"),)] == 1
        held.set()
        await _until(lambda: len(replies) == 4)
    finally:
        held.set()
        await _close(server, client, link, background)


async def test_to_a_near_peer_a_queued_message_waits_for_the_request_out() -> None:
    """The same peer judged near (its requests are under the link's 1 s
    threshold here): one request at a time, what queues meanwhile waits."""
    arrived: list[int] = []
    held = asyncio.Event()
    server, client, link, background, metrics, replies = await _link_to(
        _acking(arrived, {2: held}, 0.03), LinkPacer(near_max=1, far_max=4, far_ms=1000))
    try:
        for seq in (1, 2):
            link.send(Replicate((_op(seq),), ack=True))
            await _until(lambda n=seq: len(replies) == n)  # type: ignore[misc]
        assert link.pacer.floor() is not None and link.pacer.slots(time.monotonic()) == 1
        link.send(Replicate((_op(3),), ack=True))
        await _until(lambda: len(arrived) == 3)
        link.send(Replicate((_op(4),), ack=True))
        link.send(Replicate((_op(5),), ack=True))
        await asyncio.sleep(0.2)
        assert len(arrived) == 3 and len(replies) == 2
        held.set()
        await _until(lambda: len(replies) == 4)  # request 2's ack, then 4 and 5 in one
        assert len(arrived) == 4
        assert not metrics.counters["peer_batches_overlapped_total"]
    finally:
        held.set()
        await _close(server, client, link, background)


def _acks(batch: list[Any]) -> web.Response:
    acks = [Ack(tuple(op.op_id for op in decode_msg(m).ops)).to_wire() for m in batch]
    return web.Response(body=msgpack.packb(acks), content_type="application/msgpack")


async def test_a_split_batch_that_finds_the_peer_far_frees_a_slot_at_once(
        monkeypatch: Any) -> None:
    """The first part of a split batch measures the peer far while the batch
    keeps its slot for the next part: a message queued meanwhile leaves at
    once in a slot the new count allows (a review found it waiting for the
    whole batch, nothing having woken the link)."""
    monkeypatch.setattr("common.limits.peer_batch_bytes_max", 20_000)
    arrived: list[list[int]] = []
    hold_last = asyncio.Event()

    async def msgs(request: web.Request) -> web.Response:
        batch = msgpack.unpackb(await request.read(), raw=False)
        seqs = [op.seq for m in batch for op in decode_msg(m).ops]
        arrived.append(seqs)
        await asyncio.sleep(0.03)  # every request takes 30 ms: far
        if 12 in seqs:
            await hold_last.wait()  # the batch's last part is held
        return _acks(batch)

    server, client, link, background, _metrics, replies = await _link_to(
        msgs, LinkPacer(near_max=1, far_max=4, far_ms=10))
    try:
        link.send(Replicate((_op(100),), ack=True))  # opens the channel (not timed)
        await _until(lambda: len(replies) == 1)
        for s in range(1, 13):  # about 24 KB: two parts, one after the other in one slot
            link.send(Replicate((_big_op(s, 2_000),), ack=True))
        await _until(lambda: len(arrived) == 2)  # part 1 is out; the link is near
        link.send(Replicate((_op(99),), ack=True))  # the loop waits for a slot
        await _until(lambda: any(12 in a for a in arrived))  # part 1 back: far; part 2 held
        await _until(lambda: any(99 in a for a in arrived), timeout_s=1.0)
    finally:
        hold_last.set()
        await _close(server, client, link, background)


async def test_a_link_made_far_by_a_slow_spell_of_the_peer_comes_back_near() -> None:
    """A loopback peer answers every request in 12 ms for two windows (a slow
    disk, a CPU-starved host): the link turns far. Then the peer is well (1 ms
    a request on its one loop), but far, the link's requests queue behind
    each other there and none is alone to be timed. After a window without
    a sample the link drains to one request, times it and is near again
    (a review found it far for good while the load went on)."""
    offset = [0.0]
    slow = [True]
    busy = asyncio.Lock()  # the peer's one event loop

    async def msgs(request: web.Request) -> web.Response:
        batch = msgpack.unpackb(await request.read(), raw=False)
        async with busy:
            await asyncio.sleep(0.012 if slow[0] else 0.001 + 0.0001 * len(batch))
        return _acks(batch)

    pacer = LinkPacer(near_max=1, far_max=32, far_ms=10, window_s=10)
    server, client, link, background, _metrics, _replies = await _link_to(
        msgs, pacer, clock=lambda: time.monotonic() + offset[0])
    seq = [1]

    async def load(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(2):
                link.send(Replicate((_op(seq[0]),), ack=True))
                seq[0] += 1
            await asyncio.sleep(0.001)

    try:
        for _ in range(3):  # three windows of slow answers
            await load(0.3)
            offset[0] += 10.0
        assert pacer.far()
        slow[0] = False
        for _ in range(3):  # the peer is well; the load goes on
            await load(0.5)
            offset[0] += 10.0
        await load(0.5)
        floor = pacer.floor()
        assert not pacer.far() and floor is not None, floor
    finally:
        await _close(server, client, link, background)


async def test_over_plain_http_a_far_link_keeps_a_few_requests_in_flight() -> None:
    """A peer without the channel (this test peer serves no /peer/v1/link)
    takes each batch as an HTTP request holding one of the pooled
    connections the node's reads and forwards share: a far link keeps at
    most ``limits.peer_link_inflight_http_max`` (4) in flight, not 32."""
    arrived: list[int] = []
    held = asyncio.Event()
    hold = {i: held for i in range(2, 40)}
    server, client, link, background, _metrics, replies = await _link_to(
        _acking(arrived, hold, 0.03), LinkPacer(near_max=1, far_max=32, far_ms=10))
    try:
        for seq in (1, 2):  # the first opens (not timed), the second finds the peer far
            link.send(Replicate((_op(seq),), ack=True))
            await _until(lambda n=seq: len(replies) == n)  # type: ignore[misc]
        assert client.over_http("node2") and link.pacer.slots(time.monotonic()) == 32
        for seq in range(3, 11):
            link.send(Replicate((_op(seq),), ack=True))
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        assert len(arrived) == 2 + 4 and link.inflight == 4
        held.set()
        await _until(lambda: {op_id for r in replies for op_id in r.op_ids}
                     == {("node1", s) for s in range(1, 11)})
    finally:
        held.set()
        await _close(server, client, link, background)


async def test_the_plain_http_cap_holds_while_the_channel_is_tried_again() -> None:
    """Every ``limits.peer_channel_retry_secs`` the link tries the channel
    again; until that try (a WebSocket handshake, a round trip or more)
    answers, the peer is still one without it: a review measured 12 plain
    requests at once in that gap where the cap is 4."""
    state = {"now": 0, "max": 0}

    async def msgs(request: web.Request) -> web.Response:
        batch = msgpack.unpackb(await request.read(), raw=False)
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await asyncio.sleep(0.03)
        state["now"] -= 1
        return _acks(batch)

    async def link_route(request: web.Request) -> web.Response:
        await asyncio.sleep(0.3)  # an older peer across a WAN answers 404, late
        return web.Response(status=404)

    server, client, link, background, _metrics, replies = await _link_to(
        msgs, LinkPacer(near_max=1, far_max=32, far_ms=10), channel=link_route)
    try:
        for seq in (1, 2):
            link.send(Replicate((_op(seq),), ack=True))
            await _until(lambda n=seq: len(replies) == n)  # type: ignore[misc]
        assert client.over_http("node2") and link.pacer.slots(time.monotonic()) == 32
        state["max"] = 0
        assert client.channels is not None
        client.channels._plain_until["node2"] = 0.0  # the retry is due
        for seq in range(3, 15):
            link.send(Replicate((_op(seq),), ack=True))
            await asyncio.sleep(0.01)
        await _until(lambda: {o for r in replies for o in r.op_ids}
                     == {("node1", s) for s in range(1, 15)})
        assert client.over_http("node2")  # the retry found no channel again
        assert state["max"] <= 4, f"{state['max']} plain HTTP requests at once"
    finally:
        await _close(server, client, link, background)
