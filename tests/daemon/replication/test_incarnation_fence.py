"""A real node holds a member to the incarnation whose recovery it answered.

node2's first disk (incarnation ``disk-a``) is lost; its new process
(``disk-b``) asks node1 what it holds. From that answer on, whatever
``disk-a``'s process still had in flight to node1 (replication, over the
channel or plain HTTP) is dropped and counted, while ``disk-b``'s messages
go through; an envelope that names no incarnation (an older build) is
taken as before. Both ends name their own incarnation: node1's answers say
which disk answered (docs/federation.md, "A member that lost its disk").
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from aiohttp import web

from common.ops import NOTE_NEW, Op
from daemon.api.app import build_app
from daemon.node import Node
from daemon.peer.client import PeerClient
from daemon.settings import ClusterSettings, Member, Settings, StoreSettings
from daemon.wiring import build_node
from federation.messages import RecoveryQuery, RecoveryState, Replicate, decode_msg

SECRET = "s3cret-for-incarnation-tests"
MSGS = "/peer/v1/msgs"


def note(seq: int) -> Op:
    return Op("node2", seq, 1_000 + seq, NOTE_NEW, "inbox:bob",
              {"id": f"n{seq}", "from": "alice", "to": "bob", "title": "t", "payload": "p",
               "created_at_ms": 1}, 0)


@pytest.fixture
async def served(tmp_path: Path):  # type: ignore[no-untyped-def]
    settings = Settings(store=StoreSettings(db_path=str(tmp_path / "n1.db")), cluster=ClusterSettings(
        node_id="node1", secret=SECRET,
        peers=(Member("node2", "http://127.0.0.1:9"), Member("node3", "http://127.0.0.1:9")),
        initial_state="new"))
    node = await build_node(settings)
    await node.start()
    runner = web.AppRunner(build_app(node))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield node, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
        await node.stop()


async def process_of(url: str, incarnation: str, *, channel: bool) -> PeerClient:
    """node2's peer client, as a process on the disk ``incarnation``."""
    pc = PeerClient("node2", {"node1": url}, SECRET, now_s=time.time, incarnation=incarnation)
    if not channel:
        pc.channels = None
    await pc.start()
    return pc


def stale_count(node: Node) -> float:
    return node.metrics.counters["peer_stale_incarnation_total"][(("peer", "node2"),)]


@pytest.mark.parametrize("channel", [True, False], ids=["channel", "http"])
async def test_the_replaced_disks_messages_are_dropped_once_its_successor_asked(
        served, channel: bool) -> None:  # type: ignore[no-untyped-def]
    node, url = served
    old = await process_of(url, "disk-a", channel=channel)
    new = await process_of(url, "disk-b", channel=channel)
    try:
        _, answered_by = await old.call_from("node1", MSGS, [Replicate((note(1),), ack=False).to_wire()])
        assert answered_by == node.core.incarnation != ""
        assert ("node2", 1) in node.core._seen  # before any recovery: taken as ever

        query = RecoveryQuery("disk-b", "round-1", {})
        raw, _ = await new.call_from("node1", MSGS, [query.to_wire()])
        state = [m for m in map(decode_msg, raw) if isinstance(m, RecoveryState)]
        assert state and state[0].vv.get("node2") == 1  # what disk-b will number after

        # disk-a's process had seq 2 in flight: it would share an id with
        # disk-b's own seq 2, so it is dropped...
        await old.call("node1", MSGS, [Replicate((note(2),), ack=True).to_wire()])
        assert ("node2", 2) not in node.core._seen
        assert stale_count(node) == 1
        # ...and disk-b's own op of that id is the one node1 keeps.
        raw, _ = await new.call_from("node1", MSGS, [Replicate((note(2),), ack=True).to_wire()])
        assert ("node2", 2) in node.core._seen
        assert [type(decode_msg(m)).__name__ for m in raw] == ["Ack"]
        assert stale_count(node) == 1
    finally:
        await old.close()
        await new.close()


async def test_a_sender_that_names_no_incarnation_is_taken_as_before(served) -> None:  # type: ignore[no-untyped-def]
    node, url = served
    new = await process_of(url, "disk-b", channel=False)
    older_build = await process_of(url, "", channel=False)
    try:
        await new.call("node1", MSGS, [RecoveryQuery("disk-b", "r", {}).to_wire()])
        await older_build.call("node1", MSGS, [Replicate((note(1),), ack=False).to_wire()])
        assert ("node2", 1) in node.core._seen
        assert stale_count(node) == 0
    finally:
        await new.close()
        await older_build.close()
