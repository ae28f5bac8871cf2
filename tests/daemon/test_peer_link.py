"""The per-peer link's batching, against a real HTTP peer on loopback.

A peer that holds its first request shows the policy: what is queued while
the link's one request slot is busy leaves together in the next request
(not one request per message), and replies in the response reach the node.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
from aiohttp import web
from aiohttp.test_utils import TestServer

from common.ops import Op
from daemon.metrics import Metrics
from daemon.peer_client import PeerClient
from daemon.peer_link import PeerLink
from daemon.tasks import Background
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
