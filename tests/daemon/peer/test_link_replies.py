"""Messages that travel on a peer link: answers to a peer's response, forwards.

A message that arrives in a peer's HTTP response gets its answer too.

A link's request carries messages to a peer; the peer's response carries
messages back (acks, promises, and sometimes an ``Accept``: a member that
becomes a mailbox's owner while it answers a request sends its first
accept round in that response). What the core answers to those is queued
on the link to that peer, not dropped (it was, before issue 10: an owner
then waited for that member's ``Accepted`` until its round timed out).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from common.errors import LimitExceeded, Unavailable
from common.ops import MSG_SEND, Op, mailbox_key
from common.vocab import MESSAGE_FIELDS
from daemon.peer.client import PeerUnreachable
from daemon.replication import forwarding
from daemon.settings import ClusterSettings, Member, Settings, StoreSettings
from daemon.wiring import build_node
from federation.messages import PROTOCOL_VERSION, Accept, Accepted, Forward, ForwardResult
from federation.requests import MailPop


async def test_an_accept_in_a_response_is_answered_on_the_link(tmp_path: Path) -> None:
    settings = Settings(store=StoreSettings(db_path=str(tmp_path / "n.db")), cluster=ClusterSettings(
        node_id="node1",
        peers=(Member("node2", "http://127.0.0.1:9"), Member("node3", "http://127.0.0.1:9")),
        initial_state="new"))
    node = await build_node(settings)  # not started: the links keep what is queued
    try:
        key = mailbox_key("default", "p")
        body = {f: None for f in MESSAGE_FIELDS}
        body.update(id="m-1", to_workspace="default", to_project="p", from_workspace="default",
                    from_project="q", body="hello", created_at_ms=1)
        op = Op("node2", 1, 1000, MSG_SEND, key, body, 0)
        epoch = 1024 + node.core.membership.index_of("node2")  # node2's term
        link = node.links["node2"]
        await link._on_replies("node2", [Accept(key, epoch, (op,))], "")
        queued = [link.queue.get_nowait() for _ in range(link.queue.qsize())]
        assert Accepted(key, epoch, (op.op_id,)) in queued, queued
        assert await node.store.message("m-1") is not None  # held before it said so
    finally:
        await node.store.close()


async def test_a_forward_waits_on_the_channel_for_its_own_answer(tmp_path: Path) -> None:
    """The entry node's side of a forward on the batched channel: the answer
    is matched by forward id and sender, a failed link or shutdown fails the
    waiting forward the way a lost connection did."""
    settings = Settings(store=StoreSettings(db_path=str(tmp_path / "n.db")), cluster=ClusterSettings(
        node_id="node1",
        peers=(Member("node2", "http://127.0.0.1:9"), Member("node3", "http://127.0.0.1:9")),
        initial_state="new"))
    node = await build_node(settings)
    router = node.router
    router.peer_protocols.update(node2=PROTOCOL_VERSION, node3=PROTOCOL_VERSION)
    link = node.links["node2"]
    pop = MailPop(mailbox=mailbox_key("default", "p"), request_id="r-1", sent_at_ms=1)
    try:
        async def forwarded() -> tuple[Forward, asyncio.Task[object]]:
            task = asyncio.ensure_future(router._forward("node2", pop, 0))
            msg = await asyncio.wait_for(link.queue.get(), 5)
            link.queued_ops -= 1
            assert isinstance(msg, Forward) and msg.hops == 1
            assert forwarding.decode_request(msg.req) == pop
            return msg, task

        msg, task = await forwarded()
        answer = {"message": None, "claim": None, "rank": None}
        rest = router.take_forwards("node3", [ForwardResult(msg.fid, {"value": answer}, None)])
        assert rest == [] and not task.done()  # an answer from another member is not its answer
        router.take_forwards("node2", [ForwardResult(msg.fid, {"value": answer}, None)])
        assert await task == (answer, "")

        msg, task = await forwarded()
        err = forwarding.encode_error(LimitExceeded("mailbox full", limit="mailbox_pending_max"))
        router.take_forwards("node2", [ForwardResult(msg.fid, None, err)])
        with pytest.raises(LimitExceeded) as caught:
            await task
        assert caught.value.to_body()["limit"] == "mailbox_pending_max"

        msg, task = await forwarded()
        router.take_forwards("node2", [ForwardResult(msg.fid, None, None)])  # the owner failed
        with pytest.raises(PeerUnreachable):
            await task

        msg, task = await forwarded()
        router.peer_lost("node2")  # a batch to the owner failed
        with pytest.raises(PeerUnreachable):
            await task

        msg, task = await forwarded()
        router.fail_forwards(Unavailable("node shutting down"))
        with pytest.raises(Unavailable):
            await task
        assert router._pending == {}
    finally:
        await node.store.close()
