"""A message that arrives in a peer's HTTP response gets its answer too.

A link's request carries messages to a peer; the peer's response carries
messages back (acks, promises, and sometimes an ``Accept``: a member that
becomes a mailbox's owner while it answers a request sends its first
accept round in that response). What the core answers to those is queued
on the link to that peer, not dropped (it was, before issue 10: an owner
then waited for that member's ``Accepted`` until its round timed out).
"""

from __future__ import annotations

from pathlib import Path

from common.ops import MSG_SEND, Op, mailbox_key
from common.vocab import MESSAGE_FIELDS
from daemon.settings import ClusterSettings, Member, Settings, StoreSettings
from daemon.wiring import build_node
from federation.messages import Accept, Accepted


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
        await link._on_replies("node2", [Accept(key, epoch, (op,))])
        queued = [link.queue.get_nowait() for _ in range(link.queue.qsize())]
        assert Accepted(key, epoch, (op.op_id,)) in queued, queued
        assert await node.store.message("m-1") is not None  # held before it said so
    finally:
        await node.store.close()
